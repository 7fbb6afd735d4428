// make_plan(): every check before anything large is allocated (see verify/plan.hpp).
#include "manyadd/verify/plan.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "manyadd/core/cli.hpp"
#include "manyadd/cuda_engine.hpp"
#include "manyadd/structured.hpp"
#include "manyadd/verify/engines.hpp"
#include "manyadd/verify/stages.hpp"

namespace manyadd {

namespace {

// Progress of the stages that can take long (samples, certificates of many offset pairs,
// --exhaustive, --dims-table) on stderr: periodic lines in a pipe, a live line on a terminal; a stage
// done within a second prints nothing, so the usual run's output is unchanged.
ProgressOptions stage_progress(const Options& o) {
  ProgressOptions p;
  p.quiet = o.quiet;
  p.final_after_s = 1;
  return p;
}

// The offset pairs asked for: --s1/--s2, or --offsets first | all | random:K.
std::vector<OffsetPair> choose_offsets(const Options& o, const Shape& shape, const Dims& dm) {
  std::int64_t hi1 = max_s1(shape, dm.P1), hi2 = max_s2(shape, dm.P2);
  if (o.allow_aliasing) {  // IDs may exceed 2^P: their hypercube vectors wrap (v_{k + 2^P} = v_k)
    hi1 = std::max<std::int64_t>(hi1, std::int64_t(1) << dm.P1);
    hi2 = std::max<std::int64_t>(hi2, std::int64_t(1) << dm.P2);
  }
  if (hi1 < 1)
    throw InputError(fmt::format("P1 = {} gives max_pos1 = 2^P1 = {} < l + 1 = {}: no valid level-1 offset exists "
                                 "(the hypercube cannot hold the position IDs; raise --p1)",
                                 dm.P1, std::int64_t(1) << dm.P1, shape.l + 1));
  if (hi2 < 1)
    throw InputError(fmt::format("P2 = {} gives max_pos2 = 2^P2 = {} < m + 1 = {}: no valid level-2 offset exists "
                                 "(raise --p2)",
                                 dm.P2, std::int64_t(1) << dm.P2, shape.m + 1));
  std::vector<OffsetPair> out;
  if (o.has("--s1") || o.has("--s2")) {
    if (o.s1 < 1 || o.s1 > hi1)
      throw InputError(fmt::format("--s1 {} outside its range [1, {}] (= [1, 2^P1 - l] with P1 = {}, l = {})", o.s1, hi1,
                                   dm.P1, shape.l));
    if (o.s2 < 1 || o.s2 > hi2)
      throw InputError(fmt::format("--s2 {} outside its range [1, {}] (= [1, 2^P2 - m] with P2 = {}, m = {})", o.s2, hi2,
                                   dm.P2, shape.m));
    if (o.offsets != "first") throw InputError("--s1/--s2 choose one offset pair; do not combine them with --offsets");
    out.push_back({o.s1, o.s2});
    return out;
  }
  if (o.offsets == "first") {
    out.push_back({1, 1});
  } else if (o.offsets == "all") {
    if (double(hi1) * double(hi2) > double(kMaxOffsetPairs))
      throw InputError(fmt::format("--offsets all: {} x {} offset pairs; at most {} (use random:K)", hi1, hi2,
                                   kMaxOffsetPairs));
    for (std::int64_t a = 1; a <= hi1; ++a)
      for (std::int64_t b = 1; b <= hi2; ++b) out.push_back({a, b});
  } else if (o.offsets.rfind("random:", 0) == 0) {
    std::int64_t K = 0;
    try {
      K = cli::parse_int(o.offsets.substr(7), "--offsets", 1, kMaxOffsetPairs);
    } catch (const InputError&) {
      throw InputError(
          fmt::format("--offsets {}: expected random:K with K >= 1 (and at most {})", o.offsets, kMaxOffsetPairs));
    }
    Rng rng(o.seed ^ 0x5eed0ff5e7ULL);
    for (std::int64_t i = 0; i < K; ++i)
      out.push_back({std::int64_t(rng.uniform(1, std::uint64_t(hi1))), std::int64_t(rng.uniform(1, std::uint64_t(hi2)))});
  } else {
    throw InputError(fmt::format("--offsets '{}': expected first, all or random:K", o.offsets));
  }
  return out;
}

// The samples' offsets: all of them, or 4 drawn at random when samples x offsets x N is large.
std::vector<OffsetPair> choose_sample_offsets(const std::vector<OffsetPair>& offsets, std::int64_t samples,
                                              std::int64_t N, std::uint64_t seed) {
  if (!(double(offsets.size()) * double(samples) * double(N) > 4e7 && offsets.size() > 4)) return offsets;
  Rng pick(seed ^ 0xabcdefULL);
  std::vector<OffsetPair> sub;
  for (int i = 0; i < 4; ++i) sub.push_back(offsets[std::size_t(pick.uniform(0, offsets.size() - 1))]);
  return sub;
}

// The response rows the cross-check recomputes (all of them when there are at most `count`).
std::vector<std::int64_t> choose_cross_check_rows(const Shape& shape, std::int64_t count, std::uint64_t seed) {
  const std::int64_t eq = shape.eq_index(), N = shape.N();
  std::vector<std::int64_t> rows;
  Rng pick(seed ^ 0x70c5ULL);
  const std::int64_t k = std::min<std::int64_t>(count, N - eq);
  if (k == N - eq)
    for (std::int64_t j = eq; j < N; ++j) rows.push_back(j);
  else
    for (std::int64_t i = 0; i < k; ++i) rows.push_back(std::int64_t(pick.uniform(std::uint64_t(eq), std::uint64_t(N - 1))));
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

// The whole claim's own options, refused outside it.
void refuse_whole_claim_options(const Options& o) {
  if (o.has("--windows-table") || o.has("--sample-shapes") || o.has("--no-non-vacuity"))
    throw InputError("--windows-table, --sample-shapes and --no-non-vacuity go with --whole-claim");
}

Engine structured_engine() {
  return {"structured", [](const BuiltModel& b, const Shape& s, const Instance& in) {
            return run_structured(b.M, b.F, in.tokens, s, in.s1, in.s2, in.interval_rows);
          }};
}
Engine dense_engine(Precision p) {
  return {p == Precision::float64 ? "dense" : "dense-float32", [p](const BuiltModel& b, const Shape& s, const Instance& in) {
            return run_dense(b.M, in.tokens, s, in.s1, in.s2, p);
          }};
}
Engine cuda_engine() {
  return {"cuda", [](const BuiltModel& b, const Shape& s, const Instance& in) {
            return run_cuda(b.M, in.tokens, s, in.s1, in.s2, CudaRun::device);
          }};
}

}  // namespace

bool Plan::has_engine(const std::string& name) const {
  return std::any_of(engines.begin(), engines.end(), [&](const Engine& e) { return e.name == name; });
}

Plan make_plan(const Options& o) {
  refuse_whole_claim_options(o);
  Plan p;
  if (o.engine != "structured" && o.engine != "dense" && o.engine != "cuda" && o.engine != "all")
    throw InputError(fmt::format("--engine '{}': expected structured, dense, cuda or all", o.engine));
  std::string cuda_why;
  const bool cuda_ok = (o.engine == "cuda" || o.engine == "all") && cuda_available(&cuda_why);
  if (o.engine == "cuda" && !cuda_ok) throw InputError("--engine cuda: no CUDA device: " + cuda_why);
  if (!o.dump.empty() && o.dump != "residual" && o.dump != "attention")
    throw InputError(fmt::format("--dump '{}': expected residual or attention", o.dump));
  if (!o.dump.empty() && o.problem.empty()) throw InputError("--dump needs one explicit --problem");
  if (o.dims != "ours" && o.dims != "paper") throw InputError(fmt::format("--dims '{}': expected ours or paper", o.dims));
  const Padding padding = parse_padding(o.padding);

  // the shape: --n --m, or the instance's
  std::int64_t n = o.n, m = o.m;
  if (!o.problem.empty()) {
    p.problem = parse_problem(o.problem);
    if (!o.has("--n")) n = p.problem->max_digits();
    if (!o.has("--m")) m = std::int64_t(p.problem->operands.size());
    if (std::int64_t(p.problem->operands.size()) != m)
      throw InputError(fmt::format("--problem has {} operands but --m is {}", p.problem->operands.size(), m));
    if (p.problem->max_digits() > n)
      throw InputError(fmt::format("--problem has an operand of {} digits but --n is {}", p.problem->max_digits(), n));
    if (o.has("--samples")) throw InputError("--problem and --samples are exclusive");
  } else if (!o.has("--n") || !o.has("--m")) {
    throw InputError("give the shape with --n N --m M (or one instance with --problem)");
  }
  p.shape = Shape::make(n, m, padding);
  const Shape& shape = p.shape;
  const std::int64_t N = shape.N();

  // the model
  p.dims = o.dims == "paper" ? dims_paper(shape) : dims_ours(shape);
  if (o.has("--p1")) p.dims.P1 = o.p1;
  if (o.has("--p2")) p.dims.P2 = o.p2;
  if (p.dims.P1 < 1 || p.dims.P1 > 30 || p.dims.P2 < 1 || p.dims.P2 > 30)
    throw InputError(fmt::format("--p1/--p2 must be in [1, 30] (got {}, {})", p.dims.P1, p.dims.P2));
  p.dims_rule = o.has("--p1") || o.has("--p2") ? "explicit" : o.dims;
  const int d = 19 + 2 * (p.dims.P1 + p.dims.P2);
  p.lambda = o.has("--lambda") ? o.lambda : default_lambda(N);
  if (!(p.lambda > 0) || !std::isfinite(p.lambda)) throw InputError(fmt::format("--lambda must be > 0 (got {})", p.lambda));
  p.lambdas = {p.lambda, p.lambda, p.lambda, p.lambda};
  if (!o.lambdas.empty()) {
    if (o.has("--lambda")) throw InputError("--lambda and --lambdas are exclusive");
    p.per_head_lambdas = true;
    for (int h = 0; h < 4; ++h) {
      p.lambdas[std::size_t(h)] = o.lambdas[std::size_t(h)];
      if (!(p.lambdas[std::size_t(h)] >= 0) || !std::isfinite(p.lambdas[std::size_t(h)]))
        throw InputError(fmt::format("--lambdas: scale {} of head {} must be >= 0", p.lambdas[std::size_t(h)], h + 1));
    }
  }

  // offsets and instances
  p.offsets = choose_offsets(o, shape, p.dims);
  p.seed = o.seed;
  p.samples = p.problem ? 1 : o.samples;
  if (p.samples < 1) throw InputError("--samples must be >= 1");
  p.exhaustive = o.exhaustive;
  if (p.exhaustive) {
    if (p.problem) throw InputError("--exhaustive and --problem are exclusive");
    // cost: instances x offsets x (response rows x N x 2 + FFN)
    const double inst = std::pow(10.0, double(shape.n) * double(shape.m));
    const double resp = double(N - shape.eq_index());
    const double est = inst * double(p.offsets.size()) * (resp * double(N) * 2.0 + resp * 300.0) / 1.5e9 / o.threads;
    if (N > kExhaustiveMaxTokens || (est > kExhaustiveSecondsLimit && !o.force))
      throw InputError(fmt::format("--exhaustive: {:.3g} instances x {} offset pair(s), ~{:.0f} s estimated; "
                                   "the limit is {:.0f} s (add --force) and N <= {}",
                                   inst, p.offsets.size(), est, kExhaustiveSecondsLimit, kExhaustiveMaxTokens));
  }

  // engines
  if (o.engine == "structured" || o.engine == "all") p.engines.push_back(structured_engine());
  if (o.engine == "dense" || (o.engine == "all" && N <= DenseOptions{}.max_tokens)) {
    p.engines.push_back(dense_engine(Precision::float64));
    p.engines.push_back(dense_engine(Precision::float32));
  }
  if (o.engine == "cuda" || (o.engine == "all" && cuda_ok)) p.engines.push_back(cuda_engine());
  const bool use_dense = p.has_engine("dense");
  p.dump = o.dump;
  p.dump_dense.keep_attention = p.dump == "attention";
  if (p.dump == "attention") p.dump_dense.max_tokens = kDumpMaxTokens;  // the printed matrix is N x N
  if (use_dense) check_dense_fits(N, d, DenseOptions{}, 8);
  if (!p.dump.empty()) check_dense_fits(N, d, p.dump_dense, 8);
  // memory: per worker the structured pass, the sequence (N) and the predictions (N/2); besides, as
  // the cross-check runs beside the samples (run_pooled), the row engine's copy of the tokens and
  // their values, the first sequence and the problems being drawn: 10 N bounds them (measured at
  // N = 2e8, 2 threads: 1.67 GB peak of the 3.0 GB estimated)
  const double bytes = double(o.threads) * (StructuredStream::estimate_bytes(shape) + 1.5 * double(N)) + 10.0 * double(N);
  if (bytes > kMemoryLimitBytes)
    throw InputError(fmt::format("n={} m={} needs ~{:.1f} GiB (N = {} tokens); the limit is {:.0f} GiB", shape.n, shape.m,
                                 bytes / double(1 << 30), N, kMemoryLimitBytes / double(1 << 30)));
  if (use_dense) {
    const double passes = double(p.samples) * double(p.offsets.size());
    const double est = passes * estimate_dense(N, d, false, 8).seconds * 1.5;
    if (est > kDenseSecondsLimit && !o.force)
      throw InputError(fmt::format("{} dense passes of N = {} would take ~{:.0f} s; reduce --samples/--offsets or add --force",
                                   passes, N, est));
  }
  p.sample_offsets = choose_sample_offsets(p.offsets, p.samples, N, p.seed);
  {
    // The samples stage runs every (instance, offset pair) job through the engines; a structured job
    // costs about 4e-5 s + 8e-7 s per token on one core of the development machine (measured from
    // N = 20 to N = 21063), the dense ones are estimated above.
    const double jobs = double(p.samples) * double(p.sample_offsets.size());
    const double est = jobs * (4e-5 + 8e-7 * double(N)) / double(o.threads);
    if (est > kSamplesSecondsLimit && !o.force)
      throw InputError(fmt::format("--samples {} x {} offset pair(s) of N = {} would take ~{:.0f} s (limit {:.0f} s); "
                                   "reduce --samples/--offsets or add --force",
                                   p.samples, p.sample_offsets.size(), N, est, kSamplesSecondsLimit));
  }
  p.certify = o.certify;
  if (o.certify_cuda && !o.certify) throw InputError("--certify-cuda needs the certificate (drop --no-certify)");
  // asked for, not implied by --engine cuda: the kernel's rounding model is wider than the dense
  // float32 one and fails on the largest shapes (README, "What proven covers")
  p.certify_cuda = o.certify_cuda;
  p.cross_check = o.cross_check;
  p.cross_check_rows = choose_cross_check_rows(shape, p.cross_check, p.seed);
  p.threads = o.threads;
  p.progress = stage_progress(o);
  p.json_path = o.json_path;
  p.export_dir = o.export_dir;
  return p;
}

DimsTablePlan make_dims_table_plan(const Options& o) {
  refuse_whole_claim_options(o);
  DimsTablePlan p;
  if (o.n_max < 1 || o.m_max < 1) throw InputError("--dims-table needs --n-max A --m-max B (both >= 1)");
  if (double(o.n_max) * double(o.m_max) > double(kDimsTableMaxShapes))
    throw InputError(fmt::format("--dims-table: at most {} shapes (n-max x m-max)", kDimsTableMaxShapes));
  p.n_max = o.n_max;
  p.m_max = o.m_max;
  p.padding = parse_padding(o.padding);
  if (o.has("--lambda")) {
    if (!(o.lambda > 0)) throw InputError("--lambda must be > 0");
    p.lambda = o.lambda;
  }
  p.seed = o.seed;
  p.progress = stage_progress(o);
  p.json_path = o.json_path;
  return p;
}

WholeClaimPlan make_whole_claim_plan(const Options& o) {
  static const std::set<std::string> applies = {"--whole-claim", "--sample-shapes", "--no-non-vacuity", "--windows-table",
                                                "--p1", "--p2", "--lambda", "--threads", "--json", "--seed", "--quiet"};
  for (const std::string& name : o.given)
    if (!applies.count(name))
      throw InputError(fmt::format("--whole-claim covers every shape and offset: {} does not apply",
                                   name.substr(0, name.find_first_of(",{"))));
  if (o.has("--lambda") && !(o.lambda > 0 && std::isfinite(o.lambda)))
    throw InputError(fmt::format("--lambda must be > 0 and finite (got {})", o.lambda));
  WholeClaimPlan p;
  p.opt.P1 = o.p1;
  p.opt.P2 = o.p2;
  p.opt.lambda = o.has("--lambda") ? o.lambda : 0;
  p.opt.threads = o.threads;
  p.opt.seed = o.seed;
  p.opt.sample_shapes = o.sample_shapes;
  p.opt.non_vacuity = !o.no_non_vacuity;
  p.json_path = o.json_path;
  if (o.has("--windows-table")) {
    const auto colon = o.windows_table.find(':');
    std::pair<int, int> ab;
    try {
      if (colon == std::string::npos) throw InputError("no colon");
      ab = {int(cli::parse_int(o.windows_table.substr(0, colon), "--windows-table", -1000, 1000)),
            int(cli::parse_int(o.windows_table.substr(colon + 1), "--windows-table", -1000, 1000))};
    } catch (const InputError&) {
      throw InputError(fmt::format("--windows-table '{}': expected A:B (P1 = P2 from A to B)", o.windows_table));
    }
    check_window_table_range(ab.first, ab.second);
    if (o.has("--p1") || o.has("--p2") || o.has("--lambda"))
      throw InputError("--windows-table takes no --p1, --p2 or --lambda (it scans P1 = P2)");
    p.windows_table = ab;
    return p;
  }
  if (!o.has("--p1") || !o.has("--p2"))
    throw InputError("--whole-claim needs --p1 P1 --p2 P2 (the model's hypercube dimensions)");
  check_whole_claim_options(p.opt);
  return p;
}

}  // namespace manyadd
