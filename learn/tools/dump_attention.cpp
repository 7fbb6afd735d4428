// dump_attention: post-softmax attention of a trained model averaged over K samples of TA(n, m) at
// fixed offsets (the paper's Figure 7 uses TA(11, 11), 1000 samples), per layer and head; written as
// OUT/attention.safetensors (tensors "layers.<l>.head.<h>", shape (N, N)) and one PNG per head
// (values below 0.01 black). Exit codes: 0 done, 2 bad usage or input.
#include <cstdio>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/learn/cli_common.hpp"
#include "manyadd/learn/data.hpp"
#include "manyadd/learn/eval.hpp"
#include "manyadd/learn/io.hpp"

using namespace manyadd;
using namespace manyadd::learn;

int main(int argc, char** argv) {
  CLI::App app{"Average post-softmax attention maps of a trained model over TA(n, m) samples."};
  std::string model, out, json_path;
  int n = 11, m = 11, threads = 2;
  std::int64_t samples = 1000, s1 = 1, s2 = 1;
  std::uint64_t seed = 12345;
  app.add_option("--model", model, "model directory (config.json + model.safetensors)")->required();
  app.add_option("--out", out, "output directory (created if missing)")->required();
  app.add_option("--n", n, "digits per operand (default 11, as Figure 7)");
  app.add_option("--m", m, "operand count (default 11)");
  app.add_option("--samples", samples, "samples averaged (default 1000)");
  app.add_option("--s1", s1, "level-1 position offset (default 1)");
  app.add_option("--s2", s2, "level-2 position offset (default 1)");
  app.add_option("--seed", seed, "seed of the samples");
  app.add_option("--threads", threads, "worker threads (default 2)");
  app.add_option("--json", json_path, "JSON report");
  if (const int rc = parse_cli(app, argc, argv); rc >= 0) return rc;
  try {
    if (samples < 1) throw InputError("--samples must be >= 1");
    if (threads < 1 || threads > 256) throw InputError("--threads must be in [1, 256]");
    if (n < 1 || m < 2) throw InputError("need --n >= 1 and --m >= 2");
    const LoadedModel lm = load_model_dir(model);
    const auto& c = lm.cfg;
    const Shape shape = Shape::make(n, m, Padding::minimal);
    Rng rng(cell_seed(seed, n, m));
    std::vector<Problem> probs;
    for (std::int64_t i = 0; i < samples; ++i) probs.push_back(sample_TA(rng, n, m));
    const Example first = make_example(probs[0], c, s1, s2);  // validates the offsets against max_pos
    const int T = first.T(), H = c.n_layers * c.n_heads;
    const std::size_t TT = std::size_t(T) * std::size_t(T);
    // Per-thread sums in double, reduced in thread order.
    std::vector<std::vector<double>> sums(std::size_t(threads), std::vector<double>(std::size_t(H) * TT, 0.0));
    std::vector<Acts<float>> acts(static_cast<std::size_t>(threads));
    parallel_for(threads, samples, [&](int t, std::int64_t i) {
      const Example ex = make_example(probs[std::size_t(i)], c, s1, s2);
      model_forward(acts[std::size_t(t)], c, lm.lay, lm.params.data(), ex);
      auto& s = sums[std::size_t(t)];
      for (int l = 0; l < c.n_layers; ++l) {
        const auto& att = acts[std::size_t(t)].blocks[std::size_t(l)].att;
        for (std::size_t k = 0; k < std::size_t(c.n_heads) * TT; ++k) s[std::size_t(l) * c.n_heads * TT + k] += att[k];
      }
    });
    std::filesystem::create_directories(out);
    std::vector<NamedTensor> ts;
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_heads; ++h) {
        NamedTensor nt;
        nt.name = fmt::format("layers.{}.head.{}", l, h);
        nt.shape = {T, T};
        nt.data.resize(TT);
        const std::size_t base = (std::size_t(l) * std::size_t(c.n_heads) + std::size_t(h)) * TT;
        for (std::size_t k = 0; k < TT; ++k) {
          double v = 0;
          for (auto& s : sums) v += s[base + k];
          nt.data[k] = float(v / double(samples));
        }
        write_attention_png(fmt::format("{}/layer{}_head{}.png", out, l, h), nt.data, T);
        ts.push_back(std::move(nt));
      }
    nlohmann::json p1 = first.pos[0], p2 = first.pos[1];
    write_safetensors(out + "/attention.safetensors", ts,
                      {{"n", std::to_string(n)}, {"m", std::to_string(m)}, {"l", std::to_string(shape.l)},
                       {"s1", std::to_string(s1)}, {"s2", std::to_string(s2)}, {"samples", std::to_string(samples)},
                       {"example_tokens", tokens_to_string(first.tokens)}, {"pos1", p1.dump()}, {"pos2", p2.dump()}});
    if (!json_path.empty()) {
      nlohmann::json rep = {{"model", model}, {"n", n}, {"m", m}, {"l", shape.l}, {"N", T}, {"s1", s1}, {"s2", s2},
                            {"samples", samples}, {"heads", H}, {"out", out}};
      atomic_write(json_path, rep.dump(2) + "\n");
    }
    std::printf("averaged attention over %lld samples of TA(%d, %d) (N = %d): %s/attention.safetensors + %d PNGs\n",
                static_cast<long long>(samples), n, m, T, out.c_str(), H);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dump_attention: %s\n", e.what());
    return 2;
  }
}
