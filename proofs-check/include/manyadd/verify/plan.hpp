// verify_construction, stage 1: the options (each parsed once, strictly, by core/cli.hpp) and the
// validated plan made from them. make_plan() checks every value, every size and every time estimate
// before anything large is allocated; the later stages (verify/stages.hpp) read the plan only.
//
// A new mode adds its fields to Options (one option group in options.cpp), a plan of its own made
// from Options, and a stage function; verify_construction_main dispatches on it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "manyadd/core/progress.hpp"
#include "manyadd/dense.hpp"
#include "manyadd/format.hpp"
#include "manyadd/model.hpp"
#include "manyadd/offset_cases.hpp"
#include "manyadd/verify.hpp"
#include "manyadd/whole_claim.hpp"

namespace manyadd {

// Limits the plan enforces (the help text states them from here).
inline constexpr double kDenseSecondsLimit = 3600;       // estimated dense passes, unless --force
inline constexpr double kExhaustiveSecondsLimit = 600;   // estimated --exhaustive run, unless --force
inline constexpr double kSamplesSecondsLimit = 3600;     // estimated samples stage, unless --force
inline constexpr std::int64_t kExhaustiveMaxTokens = 2000;
inline constexpr double kMemoryLimitBytes = double(std::int64_t(16) << 30);
inline constexpr std::int64_t kMaxOffsetPairs = std::int64_t(1) << 20;
inline constexpr std::int64_t kDumpMaxTokens = 2000;     // --dump attention prints N x N weights
inline constexpr std::int64_t kDimsTableMaxShapes = 4096;
inline constexpr int kWholeClaimMaxSampleShapes = 100000;

// The command line, parsed. Initial values are the defaults --help shows.
struct Options {
  // shape and model
  std::int64_t n = 0, m = 0;
  std::string padding = "theorem";
  std::string dims = "ours";
  int p1 = 0, p2 = 0;
  double lambda = 0;
  std::vector<double> lambdas;  // empty, or one scale per head
  bool allow_aliasing = false;
  // offsets
  std::int64_t s1 = 1, s2 = 1;
  std::string offsets = "first";
  // instances and engines
  std::int64_t samples = 4;
  std::uint64_t seed = 1;
  std::string problem;
  std::string engine = "structured";
  bool certify = true;
  bool certify_cuda = false;
  std::int64_t cross_check = 256;
  // other modes
  bool exhaustive = false;
  std::string dump;
  bool dims_table = false;
  std::int64_t n_max = 0, m_max = 0;
  bool force = false;
  // --whole-claim (whole_claim.hpp)
  bool whole_claim = false, no_non_vacuity = false;
  int sample_shapes = 2;
  std::string windows_table;
  // resources and output
  int threads = 2;
  bool quiet = false;
  std::string json_path;
  std::string export_dir;
  // the options given on the command line, by long name ("--n")
  std::set<std::string> given;
  bool has(const std::string& name) const { return given.count(name) > 0; }
};

// Parses argv into `o`. Returns -1 to go on, 0 after --help (printed to out), 2 on a usage error
// (message on err).
int parse_options(int argc, const char* const* argv, Options& o, std::ostream& out, std::ostream& err);

struct BuiltModel;  // verify/stages.hpp

// One teacher-forced instance as an engine sees it.
struct Instance {
  const std::vector<std::uint8_t>& tokens;
  std::int64_t s1 = 1, s2 = 1;
  const std::vector<std::int64_t>* interval_rows = nullptr;  // finite-lambda intervals wanted here
};

// A sample engine of the plan: its name in the report and how to run it.
struct Engine {
  std::string name;
  std::function<EngineResult(const BuiltModel&, const Shape&, const Instance&)> run;
};

// The verification run, validated.
struct Plan {
  Shape shape;
  Dims dims;
  std::string dims_rule;             // "ours", "paper" or "explicit"
  double lambda = 0;                 // the common scale (reported)
  std::array<double, 4> lambdas{};   // per head, as built
  bool per_head_lambdas = false;
  std::vector<OffsetPair> offsets;          // certified (and enumerated by --exhaustive)
  std::vector<OffsetPair> sample_offsets;   // the samples' offsets (a random 4 when all would be too many)
  std::optional<Problem> problem;
  std::int64_t samples = 0;
  std::uint64_t seed = 1;
  std::vector<Engine> engines;
  bool certify = true;
  bool certify_cuda = false;  // the certificate also proves precision float32-cuda (the CUDA program)
  std::int64_t cross_check = 0;
  std::vector<std::int64_t> cross_check_rows;  // sorted 0-based query indices
  bool exhaustive = false;
  std::string dump;                  // "", "residual" or "attention"
  DenseOptions dump_dense;           // the dump's dense pass
  int threads = 1;
  ProgressOptions progress;  // the long stages' progress lines on stderr (none with --quiet)
  std::string json_path, export_dir;
  bool has_engine(const std::string& name) const;
};
Plan make_plan(const Options& o);

// --dims-table, validated.
struct DimsTablePlan {
  std::int64_t n_max = 0, m_max = 0;
  Padding padding = Padding::theorem;
  std::optional<double> lambda;  // else each shape's default
  std::uint64_t seed = 1;
  ProgressOptions progress;
  std::string json_path;
};
DimsTablePlan make_dims_table_plan(const Options& o);

// --whole-claim, validated: the claim for one model (--p1, --p2, --lambda), or with --windows-table
// the lambda windows for P1 = P2 = A..B. Every option that chooses a shape or an offset is refused.
struct WholeClaimPlan {
  WholeClaimOptions opt;                              // lambda 0: the default of the claimed range
  std::optional<std::pair<int, int>> windows_table;  // --windows-table A:B
  std::string json_path;
};
WholeClaimPlan make_whole_claim_plan(const Options& o);

}  // namespace manyadd
