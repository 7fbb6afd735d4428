// learned/verify_learned.hpp: problems through the model, the structured starts, the search and the
// shrinking of what it finds.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>

#include <fmt/format.h>

#include "manyadd/core/error.hpp"
#include "manyadd/core/parallel.hpp"
#include "manyadd/learned/verify_learned.hpp"

namespace manyadd::learned {

Instance::Instance(const Net& net, const Shape& shape, std::int64_t s1, std::int64_t s2)
    : net_(net), shape_(shape), s1_(s1), s2_(s2), pos_(net.positions(shape, s1, s2)) {}

Instance::Probe Instance::probe(const Problem& p) const {
  const std::vector<std::uint8_t> toks = build_sequence(p, shape_);
  std::vector<float> lg;
  net_.logits(toks, pos_, lg);
  const int V = net_.vocab();
  const std::int64_t N = shape_.N(), eq = shape_.eq_index();
  Probe r;
  r.min_margin = std::numeric_limits<double>::infinity();
  for (std::int64_t i = eq; i < N; ++i) {
    const int target = i + 1 < N ? int(toks[std::size_t(i + 1)]) : int(kDollar);
    const float* z = &lg[std::size_t(i * V)];
    float other = -std::numeric_limits<float>::infinity();
    for (int o = 0; o < V; ++o)
      if (o != target) other = std::max(other, z[o]);
    const double mg = double(z[target]) - double(other);
    r.margins.push_back(mg);
    if (mg < r.min_margin) r.min_margin = mg, r.row = i;
  }
  return r;
}

Instance::Greedy Instance::greedy(const Problem& p) const {
  const std::vector<std::uint8_t> toks = build_sequence(p, shape_);
  const std::int64_t eq = shape_.eq_index();
  const std::vector<std::uint8_t> prefix(toks.begin(), toks.begin() + eq + 1);
  Greedy g;
  g.expected.assign(toks.begin() + eq + 1, toks.end());
  g.expected.push_back(kDollar);
  g.got = net_.greedy(prefix, pos_, int(g.expected.size()));
  for (std::size_t k = 0; k < g.expected.size(); ++k)
    if (k >= g.got.size() || g.got[k] != g.expected[k]) {
      g.first_wrong = std::int64_t(k);
      break;
    }
  g.exact = g.first_wrong < 0 && g.got.size() == g.expected.size();
  return g;
}

Problem padded_problem(const Shape& shape, const std::vector<std::string>& operands) {
  Problem p;
  for (const auto& o : operands) {
    if (int(o.size()) > shape.n) throw InputError(fmt::format("operand '{}' has more than {} digits", o, shape.n));
    p.operands.push_back(std::string(std::size_t(shape.n) - o.size(), '0') + o);
  }
  return p;
}

namespace {
// v (< 10^n) as n digits, leading zeros kept.
std::string digits_of(const boost::multiprecision::cpp_int& v, int n) {
  const std::string s = v.str();
  return std::string(std::size_t(n) - s.size(), '0') + s;
}
}  // namespace

std::vector<Problem> structured_starts(const Shape& shape) {
  const int n = shape.n, m = shape.m;
  const std::string zeros(std::size_t(n), '0'), nines(std::size_t(n), '9');
  std::vector<Problem> out;
  auto add = [&](std::vector<std::string> ops) { out.push_back(padded_problem(shape, ops)); };
  add(std::vector<std::string>(std::size_t(m), zeros));
  add(std::vector<std::string>(std::size_t(m), nines));
  for (int k : {0, m - 1}) {  // one operand of nines among zeros: first, last
    std::vector<std::string> ops(static_cast<std::size_t>(m), zeros);
    ops[std::size_t(k)] = nines;
    add(ops);
  }
  {  // a partial sum of nines, then a one: the longest carry cascade at every later step
    std::vector<std::string> ops(static_cast<std::size_t>(m), zeros);
    ops[0] = nines;
    if (m > 1) ops[1] = std::string(std::size_t(n - 1), '0') + "1";
    add(ops);
  }
  {  // every partial sum 10^n - 1 or 10^n: alternating nines and ones
    std::vector<std::string> ops(static_cast<std::size_t>(m), zeros);
    for (int k = 0; k < m; ++k) ops[std::size_t(k)] = k % 2 == 0 ? nines : std::string(std::size_t(n - 1), '0') + "1";
    add(ops);
  }
  {  // columns summing to 9 (no carry, every digit of the final sum 9): 9 = 5 + 4 + 0 ... spread
    std::vector<std::string> ops(static_cast<std::size_t>(m), zeros);
    ops[0] = std::string(std::size_t(n), '5');
    if (m > 1) ops[1] = std::string(std::size_t(n), '4');
    add(ops);
  }
  {  // alternating 0/9 digits, and their complement
    std::string a, b;
    for (int t = 0; t < n; ++t) a.push_back(t % 2 ? '9' : '0'), b.push_back(t % 2 ? '0' : '9');
    std::vector<std::string> ops(static_cast<std::size_t>(m));
    for (int k = 0; k < m; ++k) ops[std::size_t(k)] = k % 2 ? b : a;
    add(ops);
  }
  {  // the operands summing to 10^n - 1 (every column's sum 9 at the end, partial sums growing evenly):
     // (10^n - 1) / m each, the last one the rest
    std::vector<std::string> ops(static_cast<std::size_t>(m));
    boost::multiprecision::cpp_int target = 1;
    for (int t = 0; t < n; ++t) target *= 10;
    target -= 1;
    const boost::multiprecision::cpp_int part = target / m;
    boost::multiprecision::cpp_int rest = target;
    for (int k = 0; k < m; ++k) {
      const boost::multiprecision::cpp_int v = k + 1 < m ? part : rest;
      ops[std::size_t(k)] = digits_of(v, n);
      rest -= v;
    }
    add(ops);
  }
  return out;
}

namespace {

using clock_type = std::chrono::steady_clock;

struct Search {
  const Instance& inst;
  const AttackOptions& opt;
  std::atomic<std::int64_t> evals{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  double best_margin = std::numeric_limits<double>::infinity();
  Problem best;
  std::int64_t best_row = 0;
  std::atomic<bool> found{false};
  Problem found_problem;
  double found_margin = 0;
  int found_thread = std::numeric_limits<int>::max();

  Search(const Instance& i, const AttackOptions& o) : inst(i), opt(o) {}

  Instance::Probe eval(const Problem& p) {
    ++evals;
    return inst.probe(p);
  }
  // A teacher-forced failure is confirmed by greedy decoding before it counts.
  void offer(int thread, const Problem& p, const Instance::Probe& pr) {
    bool wrong = false;
    if (pr.min_margin <= 0) wrong = !inst.greedy(p).exact;
    std::lock_guard<std::mutex> g(mu);
    if (pr.min_margin < best_margin) best_margin = pr.min_margin, best = p, best_row = pr.row;
    if (wrong && (!found || pr.min_margin < found_margin || (pr.min_margin == found_margin && thread < found_thread))) {
      found = true;
      found_problem = p, found_margin = pr.min_margin, found_thread = thread;
    }
  }
};

// The operand index and significance of a digit variable near a row: the row's query predicts B_k[t]
// (or '>' / '$' after B_k); the digits that decide it are A_k[t], A_k[t - 1] and B_{k-1}'s, i.e. every
// A_i[t'] with i <= k and t' <= t.
void row_focus(const Shape& s, std::int64_t row, int& k, int& t) {
  const std::int64_t eq = s.eq_index(), L = s.l + 1;
  const std::int64_t off = row + 1 - eq;  // position of the predicted token after '='
  k = int(std::min<std::int64_t>(s.m, std::max<std::int64_t>(1, off / L)));
  t = int(std::max<std::int64_t>(1, std::min<std::int64_t>(s.n, off % L == 0 ? s.n : off % L)));
}

}  // namespace

AttackResult attack(const Instance& inst, const AttackOptions& opt) {
  const auto t0 = clock_type::now();
  const Shape& s = inst.shape();
  const int n = s.n, m = s.m;
  Search S(inst, opt);
  std::vector<Problem> starts = structured_starts(s);
  starts.insert(starts.end(), opt.starts.begin(), opt.starts.end());
  std::vector<std::pair<double, std::size_t>> ranked(starts.size());
  parallel_for(
      opt.threads, std::int64_t(starts.size()),
      [&](int th, std::int64_t k) {
        const auto pr = S.eval(starts[std::size_t(k)]);
        ranked[std::size_t(k)] = {pr.min_margin, std::size_t(k)};
        S.offer(th, starts[std::size_t(k)], pr);
      },
      Schedule::dynamic);
  std::sort(ranked.begin(), ranked.end());
  const auto deadline = t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(opt.seconds));
  // Local search: one walk per thread from the t-th best start; moves: a digit near the current worst row
  // swept through its ten values (the best kept), or one to three random digits changed (kept when the
  // margin does not rise); a walk that stalls for 200 evaluations restarts from the best input so far.
  parallel_for(opt.threads, opt.threads, [&](int th, std::int64_t) {
    if (S.found || opt.seconds <= 0) return;
    Mt64 rng(opt.seed * 0x9E3779B97F4A7C15ull + std::uint64_t(th) + 1);
    auto uni = [&](int lo, int hi) { return lo + int(rng() % std::uint64_t(hi - lo + 1)); };
    Problem cur = starts[ranked[std::size_t(th) % ranked.size()].second];
    Instance::Probe cp = S.eval(cur);
    int stall = 0;
    while (!S.stop && clock_type::now() < deadline) {
      if (stall > 200) {
        std::lock_guard<std::mutex> g(S.mu);
        cur = S.best;
        stall = 0;
        cp = inst.probe(cur);
      }
      Problem cand = cur;
      Instance::Probe cpr;
      if (uni(0, 1) == 0) {
        int k = 1, t = 1;
        row_focus(s, cp.row, k, t);
        const int i = uni(1, k), tt = std::max(1, std::min(n, t - uni(0, 1)));
        char& digit = cand.operands[std::size_t(i - 1)][std::size_t(n - tt)];
        double bm = std::numeric_limits<double>::infinity();
        char bd = digit;
        for (char d = '0'; d <= '9' && !S.stop; ++d) {
          digit = d;
          const auto pr = S.eval(cand);
          if (pr.min_margin < bm) bm = pr.min_margin, bd = d, cpr = pr;
        }
        digit = bd;
      } else {
        const int flips = uni(1, 3);
        for (int f = 0; f < flips; ++f)
          cand.operands[std::size_t(uni(0, m - 1))][std::size_t(uni(0, n - 1))] = char('0' + uni(0, 9));
        cpr = S.eval(cand);
      }
      if (cpr.margins.empty()) continue;
      if (cpr.min_margin <= cp.min_margin) {
        stall = cpr.min_margin < cp.min_margin ? 0 : stall + 1;
        cur = cand, cp = cpr;
        S.offer(th, cur, cp);
        if (S.found) S.stop = true;
      } else {
        ++stall;
      }
    }
  });
  AttackResult r;
  r.evaluations = S.evals.load();
  r.best_margin = S.best_margin, r.best = S.best, r.best_row = S.best_row;
  if (S.found) {
    r.found = true;
    r.cex.found = S.found_problem;
    r.cex.problem = opt.shrink ? shrink(inst, S.found_problem) : S.found_problem;
    const auto pr = inst.probe(r.cex.problem);
    r.cex.margin = pr.min_margin, r.cex.row = pr.row;
    r.cex.greedy = inst.greedy(r.cex.problem);
  }
  r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return r;
}

Problem shrink(const Instance& inst, const Problem& p) {
  if (inst.greedy(p).exact) throw InvariantError("shrink: the problem is not wrong under greedy decoding");
  Problem cur = p;
  // The most significant digits: zeroing the last nonzero one would leave a problem that `evaluate
  // --problem` (which drops leading zeros) writes in a smaller shape, so that one is kept.
  auto leading = [&]() {
    int k = 0;
    for (const auto& op : cur.operands) k += op[0] != '0';
    return k;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& op : cur.operands)
      for (std::size_t t = 0; t < op.size(); ++t) {
        char& d = op[t];
        if (d == '0' || (t == 0 && leading() == 1)) continue;
        const char keep = d;
        d = '0';
        // a teacher-forced wrong row is a greedy wrong token (greedy decoding follows the right sequence up to
        // the first wrong row, and there computes that row's prediction): one forward per try instead of a
        // decoding; the result is confirmed by greedy decoding below
        if (inst.probe(cur).min_margin > 0) d = keep;
        else changed = true;
      }
  }
  return inst.greedy(cur).exact ? p : cur;  // the rounding of the two forwards disagreed at a near-tie: keep p
}

}  // namespace manyadd::learned
