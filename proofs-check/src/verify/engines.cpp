// The engine adapters: see verify/engines.hpp.
#include "manyadd/verify/engines.hpp"

#include <algorithm>

#include "manyadd/core/parallel.hpp"
#include "manyadd/cuda_engine.hpp"
#include "manyadd/dense.hpp"

namespace manyadd {

EngineResult run_dense(const ConstructedModel& M, const std::vector<std::uint8_t>& tokens, const Shape& shape,
                       std::int64_t s1, std::int64_t s2, Precision precision) {
  const Eigen::MatrixXd X0 = embed(M, tokens, position_ids(shape, s1, s2));
  if (precision == Precision::float32) return result_from_logits("dense-float32", dense_forward<float>(M, X0).logits, shape.eq_index());
  return result_from_logits("dense", dense_forward<double>(M, X0).logits, shape.eq_index());
}

EngineResult run_structured(const ConstructedModel& M, const CompiledFFN& F, const std::vector<std::uint8_t>& tokens,
                            const Shape& shape, std::int64_t s1, std::int64_t s2,
                            const std::vector<std::int64_t>* interval_rows) {
  StructuredOptions so;
  if (interval_rows) {
    so.finite = true;
    so.rows = *interval_rows;
  }
  StructuredResult S = structured_forward(M, F, tokens, shape, s1, s2, so);
  EngineResult r;
  r.engine = "structured";
  r.first = shape.eq_index();
  r.pred = std::move(S.pred);
  r.margins = MarginSummary{S.min_margin, S.first_mismatch};
  if (interval_rows) {
    r.interval_rows = std::move(so.rows);
    r.intervals = std::move(S.iv);
  }
  return r;
}

EngineResult run_cuda(const ConstructedModel& M, const std::vector<std::uint8_t>& tokens, const Shape& shape,
                      std::int64_t s1, std::int64_t s2, CudaRun where) {
  CudaForwardResult C = where == CudaRun::device ? cuda_forward(M, tokens, shape, s1, s2, false, false)
                                                 : cuda_forward_cpu_twin(M, tokens, shape, s1, s2, false, false);
  EngineResult r;
  r.engine = where == CudaRun::device ? "cuda" : "cuda-cpu-twin";
  r.first = C.first;
  r.pred = std::move(C.pred);
  return r;
}

EngineResult row_result(const Shape& shape, std::vector<std::int64_t> rows) {
  const std::int64_t eq = shape.eq_index(), N = shape.N();
  rows.erase(std::remove_if(rows.begin(), rows.end(), [&](std::int64_t j) { return j < eq || j >= N; }), rows.end());
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  EngineResult r;
  r.engine = "row";
  r.first = eq;
  r.logits.resize(kVocab, Eigen::Index(rows.size()));
  r.heads.resize(rows.size());
  r.rows = std::move(rows);
  return r;
}

std::int64_t row_batches(const EngineResult& r) { return (std::int64_t(r.rows.size()) + kRowBatch - 1) / kRowBatch; }

void run_row_batch(const RowEngine& E, const CompiledFFN& F, EngineResult& r, std::int64_t batch) {
  const std::int64_t i0 = batch * kRowBatch, i1 = std::min(std::int64_t(r.rows.size()), i0 + kRowBatch);
  const std::vector<RowResult> rr = E.rows(std::vector<std::int64_t>(r.rows.begin() + i0, r.rows.begin() + i1), F);
  for (std::int64_t i = i0; i < i1; ++i) {
    r.heads[std::size_t(i)] = rr[std::size_t(i - i0)].out;
    for (int t = 0; t < kVocab; ++t) r.logits(t, Eigen::Index(i)) = rr[std::size_t(i - i0)].logits[std::size_t(t)];
  }
}

EngineResult run_rows(const RowEngine& E, const CompiledFFN& F, const Shape& shape, std::vector<std::int64_t> rows,
                      int threads) {
  EngineResult r = row_result(shape, std::move(rows));
  parallel_for(threads, row_batches(r), [&](int, std::int64_t b) { run_row_batch(E, F, r, b); }, Schedule::dynamic);
  predict_from_logits(r);
  return r;
}

}  // namespace manyadd
