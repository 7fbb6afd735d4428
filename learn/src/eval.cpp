// Evaluation: see eval.hpp.
#include "manyadd/learn/eval.hpp"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>

#include "manyadd/learn/batch.hpp"
#include "manyadd/learn/data.hpp"

namespace manyadd::learn {

bool teacher_forced_correct(Acts<float>& a, const ModelView<float>& model, const Example& ex,
                            std::vector<std::uint8_t>* pred) {
  const ModelConfig& c = model.cfg;
  model_forward(a, model, batch_of(ex));
  bool ok = true;
  if (pred) pred->clear();
  for (int t = 0; t < ex.T(); ++t) {
    if (ex.targets[std::size_t(t)] < 0) continue;
    const float* z = a.logits.data() + std::size_t(t) * std::size_t(c.vocab);
    const int best = int(std::max_element(z, z + c.vocab) - z);
    if (pred) pred->push_back(std::uint8_t(best));
    ok = ok && best == ex.targets[std::size_t(t)];
  }
  return ok;
}

bool greedy_correct(const ModelView<float>& model, const Example& ex, std::vector<std::uint8_t>* out) {
  // The counted targets start at the '=' index and run to the end.
  int eq = 0;
  while (eq < ex.T() && ex.targets[std::size_t(eq)] < 0) ++eq;
  const std::vector<std::uint8_t> prefix(ex.tokens.begin(), ex.tokens.begin() + eq + 1);
  const int n_new = ex.T() - eq;
  KvDecoder dec(model);
  auto gen = dec.greedy(prefix, ex.pos, n_new);
  bool ok = int(gen.size()) == n_new;
  for (std::size_t i = 0; ok && i < gen.size(); ++i) ok = gen[i] == ex.targets[std::size_t(eq) + i];
  if (out) *out = std::move(gen);
  return ok;
}

std::uint64_t cell_seed(std::uint64_t seed, int n, int m) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + std::uint64_t(n) * 1000003ull + std::uint64_t(m);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

CellResult eval_cell(const ModelView<float>& model, int n, int m, std::int64_t samples, std::uint64_t seed,
                     int threads, EvalMode mode, TrainDevice* dev) {
  const ModelConfig& c = model.cfg;
  CellResult r;
  const Shape shape = Shape::make(n, m, Padding::minimal);
  if (!shape_fits(c, shape)) {
    r.fits = false;
    return r;
  }
  Rng rng(cell_seed(seed, n, m));
  std::vector<Problem> probs;
  probs.reserve(std::size_t(samples));
  for (std::int64_t i = 0; i < samples; ++i) probs.push_back(sample_TA(rng, n, m));
  std::vector<char> ok(std::size_t(samples), 0), dis(std::size_t(samples), 0);
  if (dev) {
    if (mode != EvalMode::teacher)
      throw InputError("evaluation on a device is teacher-forced only (greedy decoding runs on the CPU: --device cpu)");
    // Sequences per packed batch: every instance of a cell has the same length N, and a device holds
    // ~22k floats of activations per row at d_model 512, so about 2^17 rows (~12 GB) per batch.
    const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t(1) << 17) / shape.N());
    std::vector<std::uint8_t> am;
    for (std::int64_t lo = 0; lo < samples; lo += chunk) {
      const std::int64_t hi = std::min(samples, lo + chunk);
      std::vector<Example> exs;
      for (std::int64_t i = lo; i < hi; ++i) exs.push_back(make_example(probs[std::size_t(i)], c, 1, 1));
      const PackedBatch pb = pack_batch(exs, c);
      dev->predict(pb, am);
      for (std::int64_t i = lo; i < hi; ++i) {
        bool good = true;  // every counted target predicted, as teacher_forced_correct
        const std::int64_t o = (i - lo) * pb.T;
        for (int t = 0; t < pb.lengths[std::size_t(i - lo)]; ++t) {
          const auto tg = pb.targets[std::size_t(o + t)];
          if (tg >= 0 && am[std::size_t(o + t)] != tg) good = false;
        }
        ok[std::size_t(i)] = good;
      }
    }
    r.samples = samples;
    for (char v : ok) r.exact += v;
    return r;
  }
  std::vector<Acts<float>> acts(std::size_t(std::max(1, threads)));
  parallel_for(threads, samples, [&](int t, std::int64_t i) {
    const Example ex = make_example(probs[std::size_t(i)], c, 1, 1);
    if (mode == EvalMode::greedy) {
      ok[std::size_t(i)] = greedy_correct(model, ex);
      return;
    }
    ok[std::size_t(i)] = teacher_forced_correct(acts[std::size_t(t)], model, ex);
    if (mode == EvalMode::both) dis[std::size_t(i)] = char(greedy_correct(model, ex)) != ok[std::size_t(i)];
  });
  r.samples = samples;
  for (char v : ok) r.exact += v;
  for (char v : dis) r.disagree += v;
  return r;
}

}  // namespace manyadd::learn
