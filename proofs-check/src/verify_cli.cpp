// verify_construction: builds the Theorem 4.1 model for a shape and verifies it on instances
// (one teacher-forced forward pass each), with every engine asked for, at the offsets asked for.
#include "manyadd/verify_cli.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <ostream>
#include <set>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include "manyadd/dense.hpp"
#include "manyadd/model.hpp"
#include "manyadd/verify.hpp"

namespace manyadd {
namespace {

using json = nlohmann::json;

struct Options {
  std::int64_t n = 0, m = 0;
  int p1 = 0, p2 = 0;
  std::string dims = "ours";
  std::string padding = "theorem";
  double lambda = 0;
  std::int64_t s1 = 0, s2 = 0;
  std::string offsets = "first";
  std::int64_t samples = -1;
  std::uint64_t seed = 1;
  std::string problem;
  std::string dump;
  std::string engine = "dense";
  bool certify = false, exhaustive = false, force = false;
  std::string json_path;
};

// Print a value as a small fraction when it is one (the paper's tables write 1/4, 1/3, ...).
std::string pretty(double v) {
  if (std::abs(v) < 5e-10) return "0";
  for (int q = 1; q <= 12; ++q) {
    const double p = std::round(v * q);
    if (std::abs(v - p / q) < 5e-4) {  // within the 3 digits shown
      if (q == 1) return fmt::format("{}", std::int64_t(p));
      if (std::gcd(std::int64_t(std::abs(p)), std::int64_t(q)) == 1) return fmt::format("{}/{}", std::int64_t(p), q);
    }
  }
  return fmt::format("{:.3g}", v);
}

std::vector<std::pair<std::int64_t, std::int64_t>> choose_offsets(const Options& o, const Shape& shape, const Dims& dm,
                                                                  bool s1_given, bool s2_given) {
  const std::int64_t hi1 = max_s1(shape, dm.P1), hi2 = max_s2(shape, dm.P2);
  auto need_range = [&] {
    if (hi1 < 1)
      throw InputError(fmt::format("P1 = {} gives max_pos1 = 2^P1 = {} < l + 1 = {}: no valid level-1 offset exists "
                                   "(the hypercube cannot hold the position IDs; raise --p1)",
                                   dm.P1, std::int64_t(1) << dm.P1, shape.l + 1));
    if (hi2 < 1)
      throw InputError(fmt::format("P2 = {} gives max_pos2 = 2^P2 = {} < m + 1 = {}: no valid level-2 offset exists "
                                   "(raise --p2)",
                                   dm.P2, std::int64_t(1) << dm.P2, shape.m + 1));
  };
  need_range();
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  if (s1_given || s2_given) {
    const std::int64_t s1 = s1_given ? o.s1 : 1, s2 = s2_given ? o.s2 : 1;
    if (s1 < 1 || s1 > hi1)
      throw InputError(fmt::format("--s1 {} outside its range [1, {}] (= [1, 2^P1 - l] with P1 = {}, l = {})", s1, hi1,
                                   dm.P1, shape.l));
    if (s2 < 1 || s2 > hi2)
      throw InputError(fmt::format("--s2 {} outside its range [1, {}] (= [1, 2^P2 - m] with P2 = {}, m = {})", s2, hi2,
                                   dm.P2, shape.m));
    if (o.offsets != "first") throw InputError("--s1/--s2 choose one offset pair; do not combine them with --offsets");
    out.push_back({s1, s2});
    return out;
  }
  if (o.offsets == "first") {
    out.push_back({1, 1});
  } else if (o.offsets == "all") {
    for (std::int64_t a = 1; a <= hi1; ++a)
      for (std::int64_t b = 1; b <= hi2; ++b) out.push_back({a, b});
  } else if (o.offsets.rfind("random:", 0) == 0) {
    std::int64_t K = 0;
    try {
      std::size_t used = 0;
      K = std::stoll(o.offsets.substr(7), &used);
      if (used != o.offsets.size() - 7) K = -1;
    } catch (...) {
      K = -1;
    }
    if (K < 1) throw InputError(fmt::format("--offsets {}: expected random:K with K >= 1", o.offsets));
    Rng rng(o.seed ^ 0x5eed0ff5e7ULL);
    for (std::int64_t i = 0; i < K; ++i)
      out.push_back({std::int64_t(rng.uniform(1, std::uint64_t(hi1))), std::int64_t(rng.uniform(1, std::uint64_t(hi2)))});
  } else {
    throw InputError(fmt::format("--offsets '{}': expected first, all or random:K", o.offsets));
  }
  return out;
}

void dump_residual(std::ostream& out, const ConstructedModel& M, const std::vector<std::uint8_t>& seq,
                   const PositionIds& ids, const Eigen::MatrixXd& X1, json& report) {
  const auto names = M.layout.names();
  const auto N = std::int64_t(seq.size());
  auto row = [&](const std::string& name, auto cell) {
    out << fmt::format("{:>12}", name);
    for (std::int64_t k = 0; k < N; ++k) out << fmt::format(" {:>7}", cell(k));
    out << '\n';
  };
  out << "residual stream after the layer (X1; paper Tables 21-23 layout, all tokens)\n";
  row("I", [&](std::int64_t k) { return std::string(1, token_char(seq[std::size_t(k)])); });
  row("p1", [&](std::int64_t k) { return std::to_string(ids.p1[std::size_t(k)]); });
  row("p2", [&](std::int64_t k) { return std::to_string(ids.p2[std::size_t(k)]); });
  json rows = json::object();
  for (int r = 0; r < 19; ++r) {
    row(fmt::format("{}:{}", r + 1, names[std::size_t(r)]), [&](std::int64_t k) { return pretty(X1(r, k)); });
  }
  // Position blocks as the paper writes them: v_p (0 for BOS).
  row("POS_1", [&](std::int64_t k) { return ids.p1[std::size_t(k)] ? fmt::format("v{}", ids.p1[std::size_t(k)]) : std::string("0"); });
  row("POS_1_NEXT", [&](std::int64_t k) { return ids.p1[std::size_t(k)] ? fmt::format("v{}", ids.p1[std::size_t(k)] + 1) : std::string("0"); });
  row("POS_2", [&](std::int64_t k) { return ids.p2[std::size_t(k)] ? fmt::format("v{}", ids.p2[std::size_t(k)]) : std::string("0"); });
  row("POS_2_NEXT", [&](std::int64_t k) { return ids.p2[std::size_t(k)] ? fmt::format("v{}", ids.p2[std::size_t(k)] + 1) : std::string("0"); });
  for (int r = 0; r < M.d(); ++r) {
    std::vector<double> v(static_cast<std::size_t>(N));
    for (std::int64_t k = 0; k < N; ++k) v[std::size_t(k)] = X1(r, k);
    rows[names[std::size_t(r)]] = v;
  }
  json toks = json::array();
  for (auto t : seq) toks.push_back(std::string(1, token_char(t)));
  report["residual"] = {{"tokens", toks}, {"p1", ids.p1}, {"p2", ids.p2}, {"rows", rows}};
}

void dump_attention(std::ostream& out, const ConstructedModel& M, const std::vector<std::uint8_t>& seq,
                    const std::array<Eigen::MatrixXd, 4>& A, const Shape& shape, json& report) {
  const auto N = std::int64_t(seq.size());
  json att = json::object();
  for (int h = 0; h < 4; ++h) {
    out << fmt::format("head {} ({}): keys with weight >= 0.01 for each response query, as index:token=weight\n",
                       h + 1, M.heads[std::size_t(h)].name);
    for (std::int64_t j = shape.eq_index(); j < N; ++j) {
      out << fmt::format("  q{:>4}:{}  ", j + 1, token_char(seq[std::size_t(j)]));
      for (std::int64_t i = 0; i <= j; ++i) {
        const double a = A[std::size_t(h)](j, i);
        if (a >= 0.01) out << fmt::format(" {}:{}={}", i + 1, token_char(seq[std::size_t(i)]), pretty(a));
      }
      out << '\n';
    }
    std::vector<std::vector<double>> rows(static_cast<std::size_t>(N));
    for (std::int64_t j = 0; j < N; ++j) {
      rows[std::size_t(j)].resize(std::size_t(N));
      for (std::int64_t i = 0; i < N; ++i) rows[std::size_t(j)][std::size_t(i)] = A[std::size_t(h)](j, i);
    }
    att[fmt::format("head{}", h + 1)] = rows;
  }
  report["attention"] = att;
}

int run(const Options& o, const CLI::App& app, std::ostream& out, std::ostream& err) {
  const auto t0 = std::chrono::steady_clock::now();
  // ---- validate everything before allocating anything large
  if (o.engine != "dense") {
    if (o.engine == "structured" || o.engine == "cuda" || o.engine == "all")
      throw InputError(fmt::format("--engine {}: not available in this build yet (only the dense engine exists)", o.engine));
    throw InputError(fmt::format("--engine '{}': expected structured, dense, cuda or all", o.engine));
  }
  if (o.certify) throw InputError("--certify: the certificate is not available in this build yet");
  if (o.exhaustive) throw InputError("--exhaustive: not available in this build yet");
  if (!o.dump.empty() && o.dump != "residual" && o.dump != "attention")
    throw InputError(fmt::format("--dump '{}': expected residual or attention", o.dump));
  if (!o.dump.empty() && o.problem.empty()) throw InputError("--dump needs one explicit --problem");
  if (o.dims != "ours" && o.dims != "paper") throw InputError(fmt::format("--dims '{}': expected ours or paper", o.dims));
  const bool n_given = app.count("--n") > 0, m_given = app.count("--m") > 0;
  const Padding padding = parse_padding(o.padding);

  std::optional<Problem> problem;
  std::int64_t n = o.n, m = o.m;
  if (!o.problem.empty()) {
    problem = parse_problem(o.problem);
    if (!n_given) n = problem->max_digits();
    if (!m_given) m = std::int64_t(problem->operands.size());
    if (std::int64_t(problem->operands.size()) != m)
      throw InputError(fmt::format("--problem has {} operands but --m is {}", problem->operands.size(), m));
    if (problem->max_digits() > n)
      throw InputError(fmt::format("--problem has an operand of {} digits but --n is {}", problem->max_digits(), n));
    if (o.samples > 0) throw InputError("--problem and --samples are exclusive");
  } else if (!n_given || !m_given) {
    throw InputError("give the shape with --n N --m M (or one instance with --problem)");
  }
  const Shape shape = Shape::make(n, m, padding);
  Dims dm = o.dims == "paper" ? dims_paper(shape) : dims_ours(shape);
  if (app.count("--p1")) dm.P1 = o.p1;
  if (app.count("--p2")) dm.P2 = o.p2;
  if (dm.P1 < 1 || dm.P1 > 30 || dm.P2 < 1 || dm.P2 > 30)
    throw InputError(fmt::format("--p1/--p2 must be in [1, 30] (got {}, {})", dm.P1, dm.P2));
  const std::int64_t N = shape.N();
  const double lambda = app.count("--lambda") ? o.lambda : default_lambda(N);
  if (!(lambda > 0) || !std::isfinite(lambda)) throw InputError(fmt::format("--lambda must be > 0 (got {})", lambda));
  const auto offsets = choose_offsets(o, shape, dm, app.count("--s1") > 0, app.count("--s2") > 0);
  const std::int64_t samples = problem ? 1 : (o.samples < 0 ? 8 : o.samples);
  if (samples < 1) throw InputError("--samples must be >= 1");
  DenseOptions dopt;
  dopt.keep_attention = o.dump == "attention";
  if (o.dump == "attention") dopt.max_tokens = 2000;  // the printed matrix is N x N
  check_dense_fits(N, 19 + 2 * (dm.P1 + dm.P2), dopt, 8);
  const double passes = double(samples) * double(offsets.size());
  const double est = passes * estimate_dense(N, 19 + 2 * (dm.P1 + dm.P2), false, 8).seconds * 1.5;
  if (est > 3600 && !o.force)
    throw InputError(fmt::format("{} dense passes of N = {} would take ~{:.0f} s; reduce --samples/--offsets or add --force",
                                 passes, N, est));

  // ---- build and run
  const ConstructedModel M = build_model(dm.P1, dm.P2, lambda);
  json report;
  report["n"] = shape.n;
  report["m"] = shape.m;
  report["l"] = shape.l;
  report["padding"] = padding_name(padding);
  report["P1"] = dm.P1;
  report["P2"] = dm.P2;
  report["dims_rule"] = app.count("--p1") || app.count("--p2") ? "explicit" : o.dims;
  report["d"] = M.d();
  report["lambda"] = lambda;
  report["N"] = N;
  json offs = json::array();
  for (auto& [a, b] : offsets) offs.push_back({a, b});
  report["offsets_checked"] = offs;
  report["certificate"] = {{"status", "not_run"}, {"min_margin", nullptr}, {"lambda_min", nullptr}};
  report["engines"] = {"dense"};
  report["precisions"] = {"float64", "float32"};

  Rng rng(o.seed);
  std::int64_t checked = 0, exact = 0, exact32 = 0;
  bool agree = true;
  double min_margin = std::numeric_limits<double>::infinity(), min_margin32 = min_margin;
  json counterexample = nullptr;
  for (std::int64_t s = 0; s < samples; ++s) {
    const Problem p = problem ? *problem : sample_TA(rng, shape.n, shape.m);
    const auto seq = build_sequence(p, shape);
    const std::string reference = reference_sum(p).str();
    for (auto& [s1, s2] : offsets) {
      const auto ids = position_ids(shape, s1, s2);
      const Eigen::MatrixXd X0 = embed(M, seq, ids);
      const auto R64 = dense_forward<double>(M, X0, dopt);
      const auto R32 = dense_forward<float>(M, X0, DenseOptions{false, dopt.max_tokens, dopt.max_bytes});
      const auto c64 = check_instance(seq, shape, R64.logits);
      const auto c32 = check_instance(seq, shape, R32.logits);
      ++checked;
      // Exact = every response prediction right AND the answer read off them equals the
      // Boost.Multiprecision sum (an independent check of the sequence builder).
      const bool ok64 = c64.ok && c64.answer == reference, ok32 = c32.ok && c32.answer == reference;
      exact += ok64;
      exact32 += ok32;
      min_margin = std::min(min_margin, c64.min_margin);
      min_margin32 = std::min(min_margin32, c32.min_margin);
      // Agreement is judged where predictions matter: the response positions ('=' onwards).
      if (!std::equal(R64.pred.begin() + shape.eq_index(), R64.pred.end(), R32.pred.begin() + shape.eq_index()))
        agree = false;
      if (!ok64 && counterexample.is_null()) {
        json ce = {{"problem", p.to_string()}, {"s1", s1}, {"s2", s2}, {"engine", "dense"}, {"precision", "float64"},
                   {"reference", reference}, {"answer", c64.answer}};
        if (c64.mismatch) {
          ce["position"] = c64.mismatch->position;
          ce["expected"] = std::string(1, token_char(c64.mismatch->expected));
          ce["got"] = std::string(1, token_char(c64.mismatch->got));
        }
        counterexample = ce;
      }
      if (o.dump == "residual") dump_residual(out, M, seq, ids, R64.X1, report);
      if (o.dump == "attention") dump_attention(out, M, seq, R64.attention, shape, report);
    }
  }
  report["samples"] = {{"checked", checked}, {"exact", exact}, {"exact_float32", exact32},
                       {"min_margin", min_margin}, {"min_margin_float32", min_margin32}};
  report["engines_agree"] = agree;
  report["counterexample"] = counterexample;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report["seconds"] = secs;

  const bool pass = exact == checked && exact32 == checked && agree;
  out << fmt::format("verify_construction  n={} m={} l={} ({} padding)  P1={} P2={} d={}  lambda={}  N={}\n", shape.n,
                     shape.m, shape.l, padding_name(padding), dm.P1, dm.P2, M.d(), lambda, N);
  out << fmt::format("  offsets   {} pair(s){}\n", offsets.size(),
                     offsets.size() == 1 ? fmt::format(" (s1={}, s2={})", offsets[0].first, offsets[0].second) : "");
  out << fmt::format("  instances {} checked, {} exact (float64), {} exact (float32); min margin {:.4g} / {:.4g}\n",
                     checked, exact, exact32, min_margin, min_margin32);
  out << fmt::format("  engines   dense float64 vs float32: predictions {}\n", agree ? "agree" : "DISAGREE");
  out << "  certificate not run (not available in this build)\n";
  if (!counterexample.is_null()) {
    out << fmt::format("  COUNTEREXAMPLE {} at s1={} s2={}", counterexample["problem"].get<std::string>(),
                       counterexample["s1"].get<std::int64_t>(), counterexample["s2"].get<std::int64_t>());
    if (counterexample.contains("position"))
      out << fmt::format(": token {} predicts '{}', expected '{}'", counterexample["position"].get<std::int64_t>(),
                         counterexample["got"].get<std::string>(), counterexample["expected"].get<std::string>());
    out << '\n';
  }
  out << fmt::format("  result    {}  ({:.2f} s)\n", pass ? "VERIFIED" : "FAILED", secs);
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    if (!f) throw InputError(fmt::format("cannot write --json file '{}'", o.json_path));
    f << report.dump(2) << '\n';
  }
  (void)err;
  return pass ? 0 : 1;
}

}  // namespace

int verify_construction_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  Options o;
  CLI::App app{"Build the Theorem 4.1 transformer (paper 000, Appendix D) for a shape and verify it.\n"
               "Exit codes: 0 verified, 1 counterexample (printed), 2 bad usage or input.",
               "verify_construction"};
  app.add_option("--n", o.n, "digits per operand (>= 1)");
  app.add_option("--m", o.m, "number of operands (>= 1)");
  app.add_option("--p1", o.p1, "hypercube dimension of level-1 positions (default: ceil(log2(l+2)))");
  app.add_option("--p2", o.p2, "hypercube dimension of level-2 positions (default: ceil(log2(m+1)))");
  app.add_option("--dims", o.dims, "dimension rule: ours (default) or paper (P1 = ceil(log2 l))");
  app.add_option("--padding", o.padding, "zero-padding rule: theorem (l = n+1+floor(log10 m), default) or minimal");
  app.add_option("--lambda", o.lambda, "attention scale of every head (default: sufficient for N, see README)");
  app.add_option("--s1", o.s1, "level-1 offset, in [1, 2^P1 - l]");
  app.add_option("--s2", o.s2, "level-2 offset, in [1, 2^P2 - m]");
  app.add_option("--offsets", o.offsets, "first (s1=s2=1), all, or random:K");
  app.add_option("--samples", o.samples, "random instances of exactly m operands of exactly n digits (default 8)");
  app.add_option("--seed", o.seed, "seed of the instance and offset samplers");
  app.add_option("--problem", o.problem, "one explicit instance, e.g. 57+48+96 (n, m default to its shape)");
  app.add_option("--dump", o.dump, "residual or attention: print that of the --problem instance");
  app.add_option("--engine", o.engine, "structured|dense|cuda|all (this build: dense)");
  app.add_flag("--certify", o.certify, "prove the shape for every digit input (not in this build)");
  app.add_flag("--exhaustive", o.exhaustive, "every digit string of the shape (not in this build)");
  app.add_flag("--force", o.force, "run even when the estimated time is above an hour");
  app.add_option("--json", o.json_path, "write the machine-readable report to FILE");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    out << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    err << "verify_construction: " << e.what() << "\n(run with --help for usage)\n";
    return 2;
  }
  try {
    return run(o, app, out, err);
  } catch (const InputError& e) {
    err << "verify_construction: " << e.what() << '\n';
    return 2;
  } catch (const std::bad_alloc&) {
    err << "verify_construction: out of memory\n";
    return 2;
  }
}

}  // namespace manyadd
