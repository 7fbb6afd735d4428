// dump_attention: post-softmax attention of a trained model averaged over K samples of TA(n, m) at
// fixed offsets (the paper's Figure 7 uses TA(11, 11), 1000 samples), per layer and head; written as
// OUT/attention.safetensors (tensors "layers.<l>.head.<h>", shape (N, N)) and one PNG per head
// (values below 0.01 black). `--constructed` dumps the constructed model of Theorem 4.1 (construct/,
// built for TA(n, m) with minimal padding, dense engine) on the same instances in the same format.
// Exit codes: 0 done, 2 bad usage or input, 3 internal error.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/cli.hpp"
#include "manyadd/learn/cli_common.hpp"
#include "manyadd/learn/data.hpp"
#include "manyadd/learn/eval.hpp"
#include "manyadd/learn/attention.hpp"
#include "manyadd/learn/io.hpp"
#include "manyadd/learn/plot.hpp"

using namespace manyadd;
using namespace manyadd::learn;

int main(int argc, char** argv) {
  CLI::App app{"Average post-softmax attention maps of a trained (or the constructed) model over TA(n, m) samples.",
               "dump_attention"};
  std::string model, out, json_path;
  bool constructed = false;
  int n = 11, m = 11, threads = 2;
  double lambda = 0;
  std::int64_t samples = 1000, s1 = 1, s2 = 1;
  std::uint64_t seed = 12345;
  auto* o_model = cli::add_string(app, "--model", model, "model directory (config.json + model.safetensors)");
  auto* o_cons = app.add_flag("--constructed", constructed,
                              "dump the constructed model (Theorem 4.1, dims for TA(n, m)) instead of --model");
  o_model->excludes(o_cons);
  cli::add_real(app, "--lambda", lambda, "attention scale of the constructed model; 0 = construct's default for N", 0);
  cli::add_string(app, "--out", out, "output directory (created if missing)")->required();
  cli::add_int(app, "--n", n, "digits per operand (Figure 7: 11)");
  cli::add_int(app, "--m", m, "operand count");
  cli::add_int(app, "--samples", samples, "samples averaged", 1, 100'000'000);
  cli::add_int(app, "--s1", s1, "level-1 position offset");
  cli::add_int(app, "--s2", s2, "level-2 position offset");
  cli::add_seed(app, seed, "seed of the samples");
  cli::add_threads(app, threads);
  cli::add_json(app, json_path, "JSON report");
  app.footer(cli::exit_codes_footer(false));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("dump_attention", std::cerr, [&] {
    if (!constructed && model.empty()) throw InputError("give --model DIR or --constructed");
    if (n < 1 || m < 2 || n > 1000 || m > 1000) throw InputError("need 1 <= --n <= 1000 and 2 <= --m <= 1000");
    const Shape shape = Shape::make(n, m, Padding::minimal);
    if (shape.N() > 20000) throw InputError(fmt::format("TA({}, {}) has N = {} tokens: above the 20,000 a dense (N, N) "
                                                        "map per head allows", n, m, shape.N()));
    check_samples_fit(samples, n, m, fmt::format("--samples {} of TA({}, {})", samples, n, m));
    Rng rng(cell_seed(seed, n, m));
    std::vector<Problem> probs;
    for (std::int64_t i = 0; i < samples; ++i) probs.push_back(sample_TA(rng, n, m));
    AttentionMaps maps;
    std::vector<std::int32_t> p1, p2;
    std::map<std::string, std::string> extra;
    if (constructed) {
      const ConstructedSetup cs = constructed_setup(n, m, s1, s2, lambda);
      // The constructed scores read positions only: one instance gives the map of every instance.
      maps = constructed_attention(cs, probs[0], s1, s2);
      position_ids_for(shape, PosMode::coupled, s1, s2, p1, p2);
      extra = {{"model", "constructed"}, {"P1", std::to_string(cs.P1)}, {"P2", std::to_string(cs.P2)},
               {"lambda", fmt::format("{}", cs.lambda)}};
    } else {
      const LoadedModel lm = load_model_dir(model);
      maps = learned_attention(lm, probs, s1, s2, threads);
      const Example first = make_example(probs[0], lm.cfg, s1, s2);
      p1 = first.pos[0], p2 = first.pos[1];
      extra = {{"model", model}};
    }
    write_attention_dir(out, maps, shape, s1, s2, samples, build_sequence(probs[0], shape), p1, p2, extra);
    if (!json_path.empty()) {
      nlohmann::json rep = {{"model", constructed ? std::string("constructed") : model}, {"n", n}, {"m", m},
                            {"l", shape.l}, {"N", maps.T}, {"s1", s1}, {"s2", s2}, {"samples", samples},
                            {"heads", maps.heads()}, {"out", out}};
      atomic_write(json_path, rep.dump(2) + "\n");
    }
    std::printf("averaged attention over %lld samples of TA(%d, %d) (N = %d): %s/attention.safetensors + %d PNGs\n",
                static_cast<long long>(samples), n, m, maps.T, out.c_str(), maps.heads());
    return 0;
  });
}
