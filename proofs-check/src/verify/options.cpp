// verify_construction's options, in groups, each parsed once by core/cli.hpp's strict parsers; every
// default in --help is the Options field's initial value.
#include <ostream>

#include <fmt/format.h>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/verify/plan.hpp"

namespace manyadd {

namespace {

std::string with_default(const std::string& help, const std::string& value) {
  return fmt::format("{} (default {})", help, value);
}

// An output file checked while parsing (core's check_output_path), refused with the option's name.
CLI::Option* add_output_file(CLI::App& app, const std::string& name, std::string& v, const std::string& help) {
  return cli::add_string(app, name, v, help)
      ->check(CLI::Validator(
          [name](std::string& path) {
            try {
              check_output_path(path);
            } catch (const InputError& e) {
              return fmt::format("cannot write {} file '{}': {}", name, path, e.what());
            }
            return std::string();
          },
          ""))
      ->type_name("FILE");
}

void add_shape_options(CLI::App& app, Options& o) {
  auto* g = app.add_option_group("Shape and model");
  cli::add_int(*g, "--n", o.n, "digits per operand (>= 1; with --problem: its longest operand)",
               std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), false);
  cli::add_int(*g, "--m", o.m, "number of operands (>= 1; with --problem: its operand count)",
               std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), false);
  cli::add_string(*g, "--padding", o.padding,
                  with_default("zero-padding rule: theorem (l = n+1+floor(log10 m)) or minimal (digits of m(10^n - 1))",
                               o.padding));
  cli::add_string(*g, "--dims", o.dims,
                  with_default("dimension rule: ours (P1 = ceil(log2(l+2)), P2 = ceil(log2(m+1))) or paper "
                               "(P1 = ceil(log2 l))",
                               o.dims));
  cli::add_int(*g, "--p1", o.p1, "hypercube dimension of level-1 positions (default: from --dims)", 1, 30, false);
  cli::add_int(*g, "--p2", o.p2, "hypercube dimension of level-2 positions (default: from --dims)", 1, 30, false);
  cli::add_real(*g, "--lambda", o.lambda,
                "attention scale of every head, > 0 (default: ln(N / 1e-4) / 2 rounded up to a multiple of 1/2, "
                "sufficient for N tokens)",
                -std::numeric_limits<double>::max(), std::numeric_limits<double>::max(), false);
  g->add_option_function<std::vector<std::string>>(
       "--lambdas",
       [&o](const std::vector<std::string>& v) {
         o.lambdas.clear();
         for (const auto& s : v) {
           try {
             o.lambdas.push_back(cli::parse_real(s, "--lambdas", -std::numeric_limits<double>::max(),
                                                 std::numeric_limits<double>::max()));
           } catch (const InputError& e) {
             throw CLI::ValidationError(e.what());
           }
         }
       },
       "per-head scales L1,L2,L3,L4 (>= 0; 0 switches a head's selection off; excludes --lambda)")
      ->delimiter(',')
      ->expected(4)
      ->type_name("REAL");
  g->add_flag("--allow-aliasing", o.allow_aliasing,
              "accept offsets whose position IDs exceed 2^P (their hypercube vectors alias): undersized models");
}

void add_offset_options(CLI::App& app, Options& o) {
  auto* g = app.add_option_group("Position-ID offsets");
  cli::add_int(*g, "--s1", o.s1, "level-1 offset, in [1, 2^P1 - l]");
  cli::add_int(*g, "--s2", o.s2, "level-2 offset, in [1, 2^P2 - m]");
  cli::add_string(*g, "--offsets", o.offsets,
                  with_default(fmt::format("first (s1 = s2 = 1), all (at most {} pairs), or random:K", kMaxOffsetPairs),
                               o.offsets));
}

void add_instance_options(CLI::App& app, Options& o) {
  auto* g = app.add_option_group("Certificate, instances and engines");
  g->add_flag("--certify,!--no-certify", o.certify,
              with_default("prove the shape for every digit input at every offset pair", o.certify ? "on" : "off"));
  g->add_flag("--certify-cuda", o.certify_cuda,
              "the certificate also proves the CUDA program (precision float32-cuda: the tensor-core attention "
              "kernel's float32 rounding, the host's double FFN); needs no device, and is not implied by "
              "--engine cuda");
  cli::add_int(*g, "--samples", o.samples, "random instances of exactly m operands of exactly n digits (with --problem: that one)", 1);
  cli::add_seed(*g, o.seed, "seed of the instance and offset samplers");
  cli::add_string(*g, "--problem", o.problem, "one explicit instance instead of samples, e.g. 57+48+96");
  cli::add_string(*g, "--engine", o.engine,
                  with_default("structured (O(N)) | dense (O(N^2), N <= 20000, float64 and float32) | cuda | all "
                               "(every engine that can run)",
                               o.engine));
  cli::add_int(*g, "--cross-check", o.cross_check,
               "random response rows of the first sample recomputed by the exact softmax (0 = off)", 0);
}

void add_mode_options(CLI::App& app, Options& o) {
  auto* g = app.add_option_group("Other modes");
  g->add_flag("--exhaustive", o.exhaustive,
              fmt::format("also every instance of the shape at every offset pair asked for (N <= {}; refused when "
                          "estimated above {:.0f} s unless --force)",
                          kExhaustiveMaxTokens, kExhaustiveSecondsLimit));
  cli::add_string(*g, "--dump", o.dump, "residual or attention: print that of the --problem instance");
  g->add_flag("--dims-table", o.dims_table,
              "instead: the smallest (P1, P2) proven over all offsets for every n <= --n-max, m <= --m-max");
  cli::add_int(*g, "--n-max", o.n_max, "--dims-table: largest n", 1, std::numeric_limits<std::int64_t>::max(), false);
  cli::add_int(*g, "--m-max", o.m_max, "--dims-table: largest m", 1, std::numeric_limits<std::int64_t>::max(), false);
  g->add_flag("--force", o.force,
              fmt::format("run even when the estimated time is above the limit ({:.0f} s of dense passes, {:.0f} s "
                          "of samples, {:.0f} s for --exhaustive)",
                          kDenseSecondsLimit, kSamplesSecondsLimit, kExhaustiveSecondsLimit));
}

void add_whole_claim_options(CLI::App& app, Options& o) {
  auto* g = app.add_option_group("Whole claim", "Theorem 4.1's whole claim for the model with --p1, --p2 (and --lambda)");
  g->add_flag("--whole-claim", o.whole_claim,
              "instead: prove every shape the model with --p1, --p2 (and --lambda) serves, at every offset pair, for "
              "every input (part 1 by z3), and report the admitted shapes that fail; takes only --p1 --p2 --lambda "
              "--threads --seed --json and the options below");
  cli::add_int(*g, "--sample-shapes", o.sample_shapes,
               "--whole-claim: random per-shape certificates besides the boundary ones", 0, kWholeClaimMaxSampleShapes);
  g->add_flag("--no-non-vacuity", o.no_non_vacuity, "--whole-claim: skip the solver's witnesses and wrong key lists");
  cli::add_string(*g, "--windows-table", o.windows_table,
                  "--whole-claim: lambda_min and the lambda windows for P1 = P2 = A..B instead (A:B, 2 <= A <= B <= 30)")
      ->type_name("A:B");
}

void add_output_options(CLI::App& app, Options& o) {
  auto* g = app.add_option_group("Resources and output");
  cli::add_threads(*g, o.threads);
  cli::add_quiet(*g, o.quiet);
  add_output_file(*g, "--json", o.json_path, "write the machine-readable report to FILE");
  cli::add_string(*g, "--export", o.export_dir, "also write the built model to DIR (model.safetensors + config.json)")
      ->type_name("DIR");
}

void record_given(const CLI::App& app, Options& o) {
  for (const CLI::Option* opt : app.get_options())
    if (opt->count() > 0) o.given.insert(opt->get_name(false, true));
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) record_given(*sub, o);
}

}  // namespace

int parse_options(int argc, const char* const* argv, Options& o, std::ostream& out, std::ostream& err) {
  CLI::App app{"Build the Theorem 4.1 transformer (Cho et al., ICLR 2025, Appendix D) for a shape and verify it: "
               "a certificate for every digit input, samples through the engines, a cross-check by the exact "
               "softmax.",
               "verify_construction"};
  add_shape_options(app, o);
  add_offset_options(app, o);
  add_instance_options(app, o);
  add_mode_options(app, o);
  add_whole_claim_options(app, o);
  add_output_options(app, o);
  app.footer(cli::exit_codes_footer(true));
  if (const int rc = cli::parse(app, argc, argv, out, err); rc >= 0) return rc;
  record_given(app, o);
  return -1;
}

}  // namespace manyadd
