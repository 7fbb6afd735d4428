// Evaluation: see eval.hpp.
#include "manyadd/learn/runs/eval.hpp"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>

#include "manyadd/learn/devices/batch.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/tasks/grid_problems.hpp"

namespace manyadd::learn {

bool teacher_forced_correct(Acts<float>& a, const ModelView<float>& model, const Example& ex,
                            std::vector<std::uint8_t>* pred, bool* answer_ok) {
  const ModelConfig& c = model.cfg;
  model_forward(a, model, batch_of(ex));
  std::vector<std::uint8_t> am(std::size_t(ex.T()));
  for (int t = 0; t < ex.T(); ++t) {
    const float* z = a.logits.data() + std::size_t(t) * std::size_t(c.vocab);
    am[std::size_t(t)] = std::uint8_t(std::max_element(z, z + c.vocab) - z);
  }
  if (pred) {
    pred->clear();
    for (int t = 0; t < ex.T(); ++t)
      if (ex.targets[std::size_t(t)] >= 0) pred->push_back(am[std::size_t(t)]);
  }
  return argmax_correct(am.data(), ex, answer_ok);
}

bool argmax_correct(const std::uint8_t* argmax, const Example& ex, bool* answer_ok) {
  bool ok = true;
  for (int t = 0; t < ex.T(); ++t)
    if (ex.targets[std::size_t(t)] >= 0 && argmax[t] != ex.targets[std::size_t(t)]) ok = false;
  if (answer_ok) {
    if (ex.answer_begin < 1 || ex.answer_end <= ex.answer_begin || ex.answer_end > ex.T())
      throw InvariantError("argmax_correct: the example has no answer span");
    bool a = true;
    for (int k = ex.answer_begin; k < ex.answer_end; ++k)  // token k is predicted at row k - 1
      if (argmax[k - 1] != ex.tokens[std::size_t(k)]) a = false;
    *answer_ok = a;
  }
  return ok;
}

namespace {
// The counted targets start at the '=' index and run to the end.
int first_target(const Example& ex) {
  int eq = 0;
  while (eq < ex.T() && ex.targets[std::size_t(eq)] < 0) ++eq;
  return eq;
}
}  // namespace

bool greedy_correct(const ModelView<float>& model, const Example& ex, std::vector<std::uint8_t>* out) {
  const int eq = first_target(ex);
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
  return eval_cell(model, task(TaskKind::addition), n, m, samples, seed, threads, mode, dev);
}

CellResult eval_cell(const ModelView<float>& model, const Task& task, int ci, int cj, std::int64_t samples,
                     std::uint64_t seed, int threads, EvalMode mode, TrainDevice* dev) {
  const ModelConfig& c = model.cfg;
  task.check_model(c);
  CellResult r;
  const Task::Extent ext = task.extent(ci, cj);
  if (!fits(c, ext)) {
    r.fits = false;
    return r;
  }
  Rng rng(cell_seed(seed, ci, cj));
  std::vector<Problem> probs;
  probs.reserve(std::size_t(samples));
  for (std::int64_t i = 0; i < samples; ++i) probs.push_back(task.sample_cell(rng, ci, cj));
  const Offsets ones{1, 1, 1};
  std::vector<char> ok(std::size_t(samples), 0), dis(std::size_t(samples), 0), ans(std::size_t(samples), 0);
  if (dev) {
    if (mode != EvalMode::teacher)
      throw InputError("evaluation on a device is teacher-forced only (greedy decoding runs on the CPU: --device cpu)");
    // Sequences per packed batch: every instance of a cell has the same length N, and a device holds
    // ~22k floats of activations per row at d_model 512, so about 2^17 rows (~12 GB) per batch.
    const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t(1) << 17) / ext.T);
    std::vector<std::uint8_t> am;
    for (std::int64_t lo = 0; lo < samples; lo += chunk) {
      const std::int64_t hi = std::min(samples, lo + chunk);
      std::vector<Example> exs;
      for (std::int64_t i = lo; i < hi; ++i) exs.push_back(make_example(task, probs[std::size_t(i)], c, ones));
      const PackedBatch pb = pack_batch(exs, c);
      dev->predict(pb, am);
      for (std::int64_t i = lo; i < hi; ++i) {  // every counted target predicted, as teacher_forced_correct
        bool a = false;
        ok[std::size_t(i)] = argmax_correct(am.data() + pb.offsets[std::size_t(i - lo)], exs[std::size_t(i - lo)], &a);
        ans[std::size_t(i)] = a;
      }
    }
  } else {
    std::vector<Acts<float>> acts(std::size_t(std::max(1, threads)));
    parallel_for(threads, samples, [&](int t, std::int64_t i) {
      const Example ex = make_example(task, probs[std::size_t(i)], c, ones);
      if (mode == EvalMode::greedy) {  // the answer's tokens among the generated ones
        std::vector<std::uint8_t> gen;
        ok[std::size_t(i)] = greedy_correct(model, ex, &gen);
        bool a = true;
        for (std::int64_t k = ex.answer_begin; k < ex.answer_end; ++k) {
          const std::int64_t g = k - first_target(ex) - 1;  // gen[0] is token eq + 1
          a = a && g >= 0 && g < std::int64_t(gen.size()) && gen[std::size_t(g)] == ex.tokens[std::size_t(k)];
        }
        ans[std::size_t(i)] = a;
        return;
      }
      bool a = false;
      ok[std::size_t(i)] = teacher_forced_correct(acts[std::size_t(t)], model, ex, nullptr, &a);
      ans[std::size_t(i)] = a;
      if (mode == EvalMode::both) dis[std::size_t(i)] = char(greedy_correct(model, ex)) != ok[std::size_t(i)];
    });
  }
  r.samples = samples;
  for (char v : ok) r.exact += v;
  for (char v : dis) r.disagree += v;
  for (char v : ans) r.answer_exact += v;  // teacher-forced verdicts (greedy mode: the generated answer)
  return r;
}

void count_answer_chars(const std::string& answer, const std::string& sum, std::int64_t& correct, std::int64_t& valid) {
  const std::size_t la = answer.size(), ls = sum.size(), w = std::max(la, ls);
  valid += std::int64_t(w);
  for (std::size_t k = 0; k < std::min(la, ls); ++k)  // k-th column from the right: both have a digit
    correct += answer[la - 1 - k] == sum[ls - 1 - k];
}

InstanceCounts eval_decoder_instance(const ModelView<float>& model, int terms_lo, int terms_hi, int digits_lo,
                                     int digits_hi, std::int64_t samples, std::uint64_t seed, int threads) {
  const Task& tk = task(TaskKind::addition);
  tk.check_model(model.cfg);
  grid::Instance inst{terms_lo, terms_hi, digits_lo, digits_hi};
  inst.validate();
  InstanceCounts r;
  if (!fits(model.cfg, tk.extent(digits_hi, std::max(2, terms_hi)))) {
    r.fits = false;
    return r;
  }
  Rng rng(cell_seed(cell_seed(seed, terms_lo, terms_hi), digits_lo, digits_hi));  // a function of (seed, instance)
  std::vector<Problem> probs;
  probs.reserve(std::size_t(samples));
  for (std::int64_t i = 0; i < samples; ++i) probs.push_back(grid::sample_problem(rng, inst));
  std::vector<char> ok(std::size_t(samples), 0), ans(std::size_t(samples), 0);
  std::vector<std::int64_t> cc(std::size_t(samples), 0), cv(std::size_t(samples), 0);
  parallel_for(threads, samples, [&](int, std::int64_t i) {
    const Problem& p = probs[std::size_t(i)];
    const Example ex = make_example(tk, p, model.cfg, Offsets{1, 1, 1});
    std::vector<std::uint8_t> gen;
    ok[std::size_t(i)] = greedy_correct(model, ex, &gen);
    // The answer span, as eval_cell's greedy verdict reads it: the sum C, zero-padded to l and written
    // least significant digit first (task_addition.cpp); a missing or non-digit token is a wrong character.
    const int eq = first_target(ex);
    std::string answer;
    for (int k = ex.answer_end - 1; k >= ex.answer_begin; --k) {
      const int g = k - eq - 1;  // gen[0] is token eq + 1
      answer.push_back(g >= 0 && g < int(gen.size()) && gen[std::size_t(g)] <= 9 ? char('0' + gen[std::size_t(g)]) : 'x');
    }
    const std::size_t nz = answer.find_first_not_of('0');
    answer = nz == std::string::npos ? "0" : answer.substr(nz);
    const std::string sum = grid::problem_sum(p);
    ans[std::size_t(i)] = answer == sum;
    count_answer_chars(answer, sum, cc[std::size_t(i)], cv[std::size_t(i)]);
  });
  r.samples = samples;
  for (std::size_t i = 0; i < std::size_t(samples); ++i) {
    r.exact += ok[i];
    r.answer_exact += ans[i];
    r.char_correct += cc[i];
    r.char_valid += cv[i];
  }
  return r;
}

}  // namespace manyadd::learn
