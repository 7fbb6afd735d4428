// Every forward engine of construct/ behind one result type: each adapter runs its engine on one
// teacher-forced sequence and returns the EngineResult that judge() (manyadd/verify.hpp) reads.
//   dense        O(N^2), double or float32: logits of every response position
//   structured   O(N), limit mode: its own margin summary; finite mode: also head intervals at rows
//   cuda         the real softmax on a device (or its CPU twin): predictions only (logits not kept)
//   row          the exact finite-lambda softmax of single rows, O(N) each: logits and head outputs
#pragma once

#include <cstdint>
#include <vector>

#include "manyadd/model.hpp"
#include "manyadd/structured.hpp"
#include "manyadd/verify.hpp"

namespace manyadd {

enum class Precision { float64, float32 };

// "dense" (float64) or "dense-float32".
EngineResult run_dense(const ConstructedModel& M, const std::vector<std::uint8_t>& tokens, const Shape& shape,
                       std::int64_t s1, std::int64_t s2, Precision precision);

// "structured". With `interval_rows` (sorted 0-based query indices), also the finite-lambda head
// intervals at those rows (O(rows) memory).
EngineResult run_structured(const ConstructedModel& M, const CompiledFFN& F, const std::vector<std::uint8_t>& tokens,
                            const Shape& shape, std::int64_t s1, std::int64_t s2,
                            const std::vector<std::int64_t>* interval_rows = nullptr);

// "cuda" on the device (float32 attention), or "cuda-cpu-twin": the same pipeline on the host.
enum class CudaRun { device, cpu_twin };
EngineResult run_cuda(const ConstructedModel& M, const std::vector<std::uint8_t>& tokens, const Shape& shape,
                      std::int64_t s1, std::int64_t s2, CudaRun where);

// "row": the exact row engine at `rows` (any order, duplicates and indices outside the response are
// dropped), batches of kRowBatch rows (one pass over the digits each) on `threads` threads.
inline constexpr std::int64_t kRowBatch = 8;
EngineResult run_rows(const RowEngine& E, const CompiledFFN& F, const Shape& shape, std::vector<std::int64_t> rows,
                      int threads);
// run_rows in pieces, for a caller that schedules the batches itself: the result with its rows
// (logits and heads to fill), the number of batches, one batch (batches write disjoint columns);
// predict_from_logits() when all have run.
EngineResult row_result(const Shape& shape, std::vector<std::int64_t> rows);
std::int64_t row_batches(const EngineResult& r);
void run_row_batch(const RowEngine& E, const CompiledFFN& F, EngineResult& r, std::int64_t batch);

}  // namespace manyadd
