// The grid's batches, the loss of a group and evaluation-mode runs: see grid_loss.hpp.
#include "manyadd/learn/grid/grid_loss.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "manyadd/core/error.hpp"
#include "manyadd/core/parallel.hpp"
#include "manyadd/learn/tasks/data.hpp"  // seed_mix

namespace manyadd::learn::grid {

std::vector<std::uint8_t> problem_tokens(const Problem& p) {
  std::vector<std::uint8_t> t;
  for (std::size_t i = 0; i < p.operands.size(); ++i) {
    if (i) t.push_back(kPlus);
    for (char ch : p.operands[i]) t.push_back(std::uint8_t(ch - '0'));
  }
  t.push_back(kEq);
  return t;
}

std::pair<int, int> draw_grid_size(const Instance& inst, const GridSizeRule& r, Rng& rng) {
  const int H = inst.terms_hi + r.extra_rows + int(rng.uniform(0, std::uint64_t(r.rand_rows)));
  const int W = inst.digits_hi + r.extra_cols + int(rng.uniform(0, std::uint64_t(r.rand_cols)));
  return {H, W};
}

GridInput GridBatch::input(int b) const {
  GridInput in;
  in.tokens = tokens.data() + std::size_t(b) * std::size_t(S);
  in.S = S, in.H = H, in.W = W;
  in.target = targets.empty() ? nullptr : targets.data() + std::size_t(b) * std::size_t(W);
  return in;
}

GridBatch make_batch(std::vector<Problem> problems, int H, int W) {
  if (problems.empty()) throw InputError("make_batch: no problems");
  if (H < 1 || W < 1) throw InputError(fmt::format("grid {} x {} is empty", H, W));
  GridBatch b;
  b.B = int(problems.size()), b.H = H, b.W = W;
  std::vector<std::vector<std::uint8_t>> toks;
  for (const Problem& p : problems) {
    toks.push_back(problem_tokens(p));
    b.S = std::max(b.S, int(toks.back().size()));
  }
  b.tokens.assign(std::size_t(b.B) * std::size_t(b.S), kPad);
  b.targets.assign(std::size_t(b.B) * std::size_t(W), kPad);
  for (int i = 0; i < b.B; ++i) {
    std::copy(toks[std::size_t(i)].begin(), toks[std::size_t(i)].end(), b.tokens.begin() + std::int64_t(i) * b.S);
    const std::string sum = problem_sum(problems[std::size_t(i)]);
    if (int(sum.size()) > W)
      throw InputError(fmt::format("the sum of {} has {} digits, the grid {} columns", problems[std::size_t(i)].to_string(),
                                   sum.size(), W));
    for (std::size_t k = 0; k < sum.size(); ++k)
      b.targets[std::size_t(i) * std::size_t(W) + std::size_t(W) - sum.size() + k] = std::int32_t(sum[k] - '0');
  }
  b.problems = std::move(problems);
  return b;
}

std::vector<Instance> training_groups(const Instance& train, int groups) {
  // _get_ranges((N1, N2 + 1), groups): slice = (N2 + 1 - N1) / groups, group i covers
  // [N1 + int(i slice), N1 + int((i + 1) slice)), which must hold a term count at least.
  const double slice = double(train.terms_hi + 1 - train.terms_lo) / double(groups);
  if (groups < 1 || slice < 1)
    throw InputError(fmt::format("{} term-count groups need at least as many term counts (the instance {} has {})",
                                 groups, train.name(), train.terms_hi + 1 - train.terms_lo));
  std::vector<Instance> out;
  for (int i = 0; i < groups; ++i) {
    Instance g = train;
    g.terms_lo = train.terms_lo + int(i * slice);
    g.terms_hi = train.terms_lo + int((i + 1) * slice) - 1;
    out.push_back(g);
  }
  return out;
}

// ---- the loss of a group ------------------------------------------------------------------------------------

namespace {
}

template <class S>
GroupResult group_loss(S* grads, const GridView<S>& m, const GridBatch& batch, const std::vector<double>& acc,
                       const LossOptions& o, std::uint64_t key, S scale, int threads, Workspaces<S>& ws) {
  const int B = batch.B;
  const bool ponder = m.cfg.halting == Halting::ponder;
  MANYADD_INVARIANT(int(acc.size()) == B, "group_loss: one accuracy per sample");
  threads = std::max(1, std::min(threads, B));
  if (int(ws.acts.size()) < threads) ws.acts.resize(std::size_t(threads));
  auto options = [&](int b, bool keep) {
    RunOptions ro;
    ro.mode = RunMode::train;
    ro.key = seed_mix(key, std::uint64_t(b));
    ro.keep = keep;
    ro.pad_weight = o.pad_weight;
    return ro;
  };
  // Pass 1: every sample's run for its halting step, p and read-out losses: the normalizers D_n couple
  // the samples, so the backward waits for all of them. With a gradient to compute, each run keeps its
  // activations for the backward while they fit in ws.cache_bytes; the others run again in pass 2.
  GroupResult r;
  r.steps.assign(std::size_t(B), 0);
  std::vector<std::vector<S>> ce(static_cast<std::size_t>(B)), p(static_cast<std::size_t>(B));
  std::vector<char> kept(std::size_t(B), 0);
  if (grads && int(ws.kept.size()) < B) ws.kept.resize(std::size_t(B));
  std::mutex mu;
  double cached = 0;
  parallel_for(
      threads, B,
      [&](int w, std::int64_t b) {
        SampleActs<S>& a = grads ? ws.kept[std::size_t(b)] : ws.acts[std::size_t(w)];
        sample_forward(a, m, batch.input(int(b)), options(int(b), grads != nullptr));
        r.steps[std::size_t(b)] = a.N;
        ce[std::size_t(b)] = a.ce;
        p[std::size_t(b)] = a.p;
        if (!grads) return;
        const double bytes = double(a.bytes());
        const std::lock_guard<std::mutex> lock(mu);
        if (cached + bytes <= ws.cache_bytes) {
          cached += bytes, kept[std::size_t(b)] = 1;
        } else {
          a.release();
        }
      },
      Schedule::dynamic);
  int Nmax = 0;
  std::vector<S> wsum(std::size_t(B), S(0));
  for (int b = 0; b < B; ++b) {
    Nmax = std::max(Nmax, r.steps[std::size_t(b)]);
    for (int w = 0; w < batch.W; ++w)
      wsum[std::size_t(b)] += batch.targets[std::size_t(b) * std::size_t(batch.W) + std::size_t(w)] == kPad ? S(o.pad_weight) : S(1);
    r.cell_steps += std::int64_t(batch.H) * batch.W * (r.steps[std::size_t(b)] + 1);
  }
  // D_n = sum over the samples still running at step n of their targets' weights (SampleWeightedLoss
  // with normalize_with_weights False: the mean over the samples the step's loss is computed on)
  std::vector<S> D(std::size_t(Nmax) + 1, S(0));
  for (int n = 0; n <= Nmax; ++n)
    for (int b = 0; b < B; ++b)
      if (r.steps[std::size_t(b)] >= n) D[std::size_t(n)] += wsum[std::size_t(b)];
  const S lp = S(o.kl_lambda_p);
  if (ponder) {
    for (int n = 0; n <= Nmax; ++n) {
      double num = 0;
      for (int b = 0; b < B; ++b)
        if (r.steps[std::size_t(b)] >= n) num += double(p[std::size_t(b)][std::size_t(n)]) * double(ce[std::size_t(b)][std::size_t(n)]);
      r.task += num / double(D[std::size_t(n)]);
    }
    double reg = 0;
    for (int b = 0; b < B; ++b)
      reg += double(halting_regularizer<S>(nullptr, p[std::size_t(b)].data(), r.steps[std::size_t(b)], o.reg,
                                           S(acc[std::size_t(b)]), lp, S(1)));
    r.reg = o.beta * reg / B;
  } else {
    double num = 0;
    for (int b = 0; b < B; ++b) num += double(ce[std::size_t(b)][std::size_t(r.steps[std::size_t(b)])]);
    r.task = num / double(D[std::size_t(Nmax)]);  // every sample runs the same steps
  }
  if (!grads) return r;
  // Pass 2: each sample again, keeping its activations, and its backward into its block's buffer.
  const std::int64_t P = m.L.lay.total;
  const int blocks = (B + kBlock - 1) / kBlock;
  if (int(ws.block_grads.size()) < blocks) ws.block_grads.resize(std::size_t(blocks));
  parallel_for(
      threads, blocks,
      [&](int w, std::int64_t k) {
        std::vector<S>& G = ws.block_grads[std::size_t(k)];
        G.assign(std::size_t(P), S(0));
        SampleActs<S>& a_run = ws.acts[std::size_t(w)];
        for (int b = int(k) * kBlock; b < std::min(B, int(k + 1) * kBlock); ++b) {
          const GridInput in = batch.input(b);
          SampleActs<S>& a = kept[std::size_t(b)] ? ws.kept[std::size_t(b)] : a_run;
          if (!kept[std::size_t(b)]) sample_forward(a, m, in, options(b, true));
          MANYADD_INVARIANT(a.N == r.steps[std::size_t(b)], "group_loss: a sample's second run halted elsewhere");
          const int N = a.N;
          std::vector<S> cce(std::size_t(N) + 1, S(0)), cp(std::size_t(N) + 1, S(0));
          if (ponder) {
            for (int n = 0; n <= N; ++n) {
              cce[std::size_t(n)] = scale * a.p[std::size_t(n)] / D[std::size_t(n)];
              cp[std::size_t(n)] = scale * a.ce[std::size_t(n)] / D[std::size_t(n)];
            }
            halting_regularizer(cp.data(), a.p.data(), N, o.reg, S(acc[std::size_t(b)]), lp, scale * S(o.beta) / S(B));
          } else {
            cce[std::size_t(N)] = scale / D[std::size_t(N)];
          }
          sample_backward(G.data(), a, m, in, cce.data(), ponder ? cp.data() : nullptr);
        }
      },
      Schedule::dynamic);
  for (int k = 0; k < blocks; ++k) {
    const S* G = ws.block_grads[std::size_t(k)].data();
    for (std::int64_t i = 0; i < P; ++i) grads[i] += G[i];
  }
  return r;
}

template GroupResult group_loss<float>(float*, const GridView<float>&, const GridBatch&, const std::vector<double>&,
                                       const LossOptions&, std::uint64_t, float, int, Workspaces<float>&);
template GroupResult group_loss<double>(double*, const GridView<double>&, const GridBatch&, const std::vector<double>&,
                                        const LossOptions&, std::uint64_t, double, int, Workspaces<double>&);

BatchEval eval_batch(const GridView<float>& m, const GridBatch& batch, std::uint64_t key, bool greedy, int max_steps,
                     int threads, std::vector<SampleActs<float>>& ws, Progress* progress, Interventions iv) {
  const int B = batch.B;
  threads = std::max(1, std::min(threads, B));
  if (int(ws.size()) < threads) ws.resize(std::size_t(threads));
  BatchEval e;
  e.matches.assign(std::size_t(B), {0, 0});
  e.steps.assign(std::size_t(B), 0);
  e.preds.assign(std::size_t(B), {});
  e.argmax_weight.assign(std::size_t(B), 1.0);
  parallel_for(
      threads, B,
      [&](int w, std::int64_t b) {
        SampleActs<float>& a = ws[std::size_t(w)];
        RunOptions ro;
        ro.mode = RunMode::eval;
        ro.key = seed_mix(key, std::uint64_t(b));
        ro.greedy_halt = greedy;
        ro.max_steps = max_steps;
        ro.test = iv;
        const GridInput in = batch.input(int(b));
        sample_forward(a, m, in, ro);
        e.steps[std::size_t(b)] = a.N;
        e.preds[std::size_t(b)] = a.pred;
        double log_w = 0;
        for (std::size_t t = 0; t + 2 < a.act.size(); t += 3)
          log_w += std::log(double(std::max({a.act[t], a.act[t + 1], a.act[t + 2]})));
        e.argmax_weight[std::size_t(b)] = std::exp(log_w);
        if (in.target) e.matches[std::size_t(b)] = matches(a.pred.data(), in.target, in.W);
        if (progress) progress->add(1);
      },
      Schedule::dynamic);
  for (int b = 0; b < B; ++b) e.cell_steps += std::int64_t(batch.H) * batch.W * (e.steps[std::size_t(b)] + 1);
  return e;
}

}  // namespace manyadd::learn::grid
