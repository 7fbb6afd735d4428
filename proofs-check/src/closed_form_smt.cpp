// The SMT encoding of part 1 (see closed_form_smt.hpp). One z3 context per check, so checks run
// on several threads; every formula is built from closed::layout(), closed::families() and the
// model's score structure, never typed twice.
#include "manyadd/closed_form_smt.hpp"

#include <chrono>
#include <cmath>
#include <functional>
#include <optional>

#include <fmt/format.h>
#include <z3++.h>

#include "manyadd/core/parallel.hpp"

namespace manyadd {

using namespace closed;

ScoreStructure score_structure(const ConstructedModel& M, int head) {
  const Head& H = M.heads[std::size_t(head)];
  const Layout& L = M.layout;
  if (!(H.lambda > 0)) throw InputError(fmt::format("head {}: lambda must be > 0 for the solver's score structure", head + 1));
  const Eigen::MatrixXd G = H.Q.transpose() * H.K / H.lambda;  // (d, d): score / lambda = x_q^T G x_k
  // Q and K hold sqrt(lambda) (and sqrt(lambda P)): G's entries are integers up to a few ulps of
  // rounding, which part 3's score error (gamma_{d_qk} + 4r) lambda P already covers.
  const double tol = 1e-9;
  auto integer = [&](double v, const char* what) {
    const double r = std::round(v);
    if (std::abs(v - r) > tol * std::max(1.0, std::abs(r)))
      throw InputError(fmt::format("head {}: {} coefficient {} of the score is not an integer", head + 1, what, v));
    return int(r);
  };
  const int start[4] = {L.POS_1(), L.POS_1_NEXT(), L.POS_2(), L.POS_2_NEXT()};
  const int size[4] = {L.P1, L.P1, L.P2, L.P2};
  const int level[4] = {1, 1, 2, 2};
  ScoreStructure S;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      const Eigen::MatrixXd B = G.block(start[a], start[b], size[a], size[b]);
      if (level[a] != level[b]) {
        if (B.cwiseAbs().maxCoeff() > tol)
          throw InputError(fmt::format("head {}: the score mixes the two position levels", head + 1));
        continue;
      }
      const int c = integer(B(0, 0), "a position block");
      if ((B - double(c) * Eigen::MatrixXd::Identity(size[a], size[b])).cwiseAbs().maxCoeff() > tol)
        throw InputError(fmt::format("head {}: a position block of the score is not a multiple of the identity", head + 1));
      S.pos[std::size_t(a)][std::size_t(b)] = c;
    }
  // The constant dimensions of X0: NUM (the digit), IS_BOS, FULL_ONES; a response query is never BOS.
  for (int a = 0; a < 4; ++a)
    for (int c : {int(Layout::NUM), int(Layout::IS_BOS), int(Layout::FULL_ONES)}) {
      if (G.block(start[a], c, size[a], 1).cwiseAbs().maxCoeff() > tol ||
          (c != Layout::IS_BOS && G.block(c, start[a], 1, size[a]).cwiseAbs().maxCoeff() > tol))
        throw InputError(fmt::format("head {}: the score multiplies a position block by a constant dimension", head + 1));
    }
  if (G.row(Layout::NUM).cwiseAbs().maxCoeff() > tol || G.col(Layout::NUM).cwiseAbs().maxCoeff() > tol)
    throw InputError(fmt::format("head {}: the score reads NUM (digits would move attention)", head + 1));
  S.ones_bos = integer(G(Layout::FULL_ONES, Layout::IS_BOS), "the FULL_ONES x IS_BOS");
  S.ones_ones = integer(G(Layout::FULL_ONES, Layout::FULL_ONES), "the FULL_ONES x FULL_ONES");
  return S;
}

namespace {

struct Enc {
  z3::context& c;
  const SmtRange& R;
  std::int64_t C1v, C2v;
  z3::expr l, m, s1, s2, i, t;       // shape, offsets, query (i, t)
  z3::expr kk, kb, ks;               // key: kind, block, significance
  z3::expr qk, qb, qs;               // query token: kind, block, significance (derived)

  Enc(z3::context& ctx, const SmtRange& r)
      : c(ctx), R(r), C1v(std::int64_t(1) << r.P1), C2v(std::int64_t(1) << r.P2), l(c.int_const("l")),
        m(c.int_const("m")), s1(c.int_const("s1")), s2(c.int_const("s2")), i(c.int_const("i")), t(c.int_const("t")),
        kk(c.int_const("key_kind")), kb(c.int_const("key_blk")), ks(c.int_const("key_sig")), qk(c.int_val(0)),
        qb(c.int_val(0)), qs(c.int_val(0)) {
    const z3::expr eq = i == 0 && t == 0;
    qk = z3::ite(t >= 1, num(int(TokKind::BDIG)), z3::ite(eq, num(int(TokKind::EQ)), num(int(TokKind::BSEP))));
    qb = z3::ite(eq, m, i);
    qs = z3::ite(t >= 1, t, num(0));
  }
  z3::expr num(std::int64_t v) { return c.int_val(v); }

  // A linear expression; BLK and SIG are the given token's.
  z3::expr lin(const Lin& e, const z3::expr& blk, const z3::expr& sig) {
    const z3::expr* var[kSyms] = {&l, &m, &s1, &s2, &i, &t, nullptr, nullptr, &blk, &sig, nullptr};
    z3::expr r = num(e.c[C1] * C1v + e.c[C2] * C2v + e.c[ONE]);
    for (int s = 0; s < kSyms; ++s)
      if (var[s] && e.c[std::size_t(s)] != 0) r = r + num(e.c[std::size_t(s)]) * *var[s];
    return r;
  }
  z3::expr atom(const Atom& a, const z3::expr& blk, const z3::expr& sig) {
    const z3::expr e = lin(a.e, blk, sig);
    return a.eq ? e == 0 : e >= 0;
  }
  z3::expr all(const std::vector<Atom>& as, const z3::expr& blk, const z3::expr& sig) {
    z3::expr r = c.bool_val(true);
    for (const Atom& a : as) r = r && atom(a, blk, sig);
    return r;
  }
  // A per-kind quantity of token (kind, blk, sig) from the layout table.
  z3::expr by_kind(const z3::expr& kind, const z3::expr& blk, const z3::expr& sig, const std::function<Lin(const KindLayout&)>& get) {
    const auto& Ls = layout();
    z3::expr r = lin(get(Ls.back()), blk, sig);
    for (int k = int(Ls.size()) - 2; k >= 0; --k) r = z3::ite(kind == int(Ls[std::size_t(k)].kind), lin(get(Ls[std::size_t(k)]), blk, sig), r);
    return r;
  }
  z3::expr valid(const z3::expr& kind, const z3::expr& blk, const z3::expr& sig) {
    z3::expr r = c.bool_val(false);
    for (const auto& K : layout()) r = r || (kind == int(K.kind) && all(K.valid, blk, sig));
    return r;
  }
  z3::expr p1(const z3::expr& k, const z3::expr& b, const z3::expr& s) { return by_kind(k, b, s, [](const KindLayout& K) { return K.p1; }); }
  z3::expr p2(const z3::expr& k, const z3::expr& b, const z3::expr& s) { return by_kind(k, b, s, [](const KindLayout& K) { return K.p2; }); }
  z3::expr sec(const z3::expr& k, const z3::expr& b, const z3::expr& s) {
    return by_kind(k, b, s, [](const KindLayout& K) { return konst(K.sec); });
  }
  z3::expr lexb(const z3::expr& k, const z3::expr& b, const z3::expr& s) { return by_kind(k, b, s, [](const KindLayout& K) { return K.blk; }); }
  z3::expr lexp(const z3::expr& k, const z3::expr& b, const z3::expr& s) { return by_kind(k, b, s, [](const KindLayout& K) { return K.pos; }); }

  // Every (l, m, s1, s2) of the range and every response query (i, t).
  z3::expr domain() {
    return l >= num(R.l_lo) && l <= num(R.l_hi) && m >= num(R.m_lo) && m <= num(R.m_hi) && s1 >= 1 && s1 + l <= num(C1v) &&
           s2 >= 1 && s2 + m <= num(C2v) && i >= 0 && i <= m && t >= 0 && t <= l;
  }
  z3::expr key_valid() { return kk >= 0 && kk < int(TokKind::kCount) && valid(kk, kb, ks); }
  // key index <= query index, as the lexicographic order of (sec, blk, pos)
  z3::expr causal() {
    const z3::expr a = sec(kk, kb, ks), b = sec(qk, qb, qs), ab = lexb(kk, kb, ks), bb = lexb(qk, qb, qs);
    return a < b || (a == b && (ab < bb || (ab == bb && lexp(kk, kb, ks) <= lexp(qk, qb, qs))));
  }

  // The hypercube code of block `blk` (0..3 = POS_1, POS_1_NEXT, POS_2, POS_2_NEXT) of a token
  // with IDs (p1, p2): v_p = v_{code + 1} with code = (p - 1) mod 2^P (the wrap rule; p = 0 is BOS,
  // whose blocks are zero and never compared).
  z3::expr code(const std::string& who, int blk, const z3::expr& p1v, const z3::expr& p2v, z3::solver& s) {
    const std::int64_t C = blk < 2 ? C1v : C2v;
    const z3::expr id = (blk < 2 ? p1v : p2v) + (blk % 2 == 1 ? 1 : 0);
    const z3::expr cd = c.int_const((who + "_code" + std::to_string(blk)).c_str());
    const z3::expr w = c.int_const((who + "_wrap" + std::to_string(blk)).c_str());
    s.add(id - 1 == num(C) * w + cd && cd >= 0 && cd < num(C));
    return cd;
  }

  // The key's blocks equal the query's at every pair the score reads: by the lemma obligation,
  // exactly when a non-BOS key scores the top score.
  z3::expr codes_match(const ScoreStructure& S, z3::solver& s) {
    const z3::expr qp1 = p1(qk, qb, qs), qp2 = p2(qk, qb, qs), kp1 = p1(kk, kb, ks), kp2 = p2(kk, kb, ks);
    std::vector<std::optional<z3::expr>> qc(4), kc(4);
    z3::expr all_eq = c.bool_val(true);
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b) {
        if (S.pos[std::size_t(a)][std::size_t(b)] == 0) continue;
        if (!qc[std::size_t(a)]) qc[std::size_t(a)] = code("q", a, qp1, qp2, s);
        if (!kc[std::size_t(b)]) kc[std::size_t(b)] = code("k", b, kp1, kp2, s);
        all_eq = all_eq && *qc[std::size_t(a)] == *kc[std::size_t(b)];
      }
    return kk == int(TokKind::BOS) || all_eq;
  }

  z3::expr member(const Family& f) {
    z3::expr r = all(f.when, kb, ks) && kk == int(f.kind) && kb >= lin(f.lo, kb, ks) && kb <= lin(f.hi, kb, ks);
    return r && (f.has_sig ? ks == lin(f.sig, kb, ks) : ks == 0);  // a separator is named by its block
  }
  z3::expr closed(const std::vector<const Family*>& fs) {
    z3::expr r = kk == int(TokKind::BOS);
    for (const Family* f : fs) r = r || member(*f);
    return r;
  }
};

std::string model_text(z3::context& c, const z3::model& mdl) {
  std::string s;
  const char* names[] = {"l", "m", "s1", "s2", "i", "t", "key_kind", "key_blk", "key_sig", "score"};
  for (const char* n : names) {
    const z3::expr v = mdl.eval(c.int_const(n), true);
    std::string txt = v.to_string();
    if (std::string(n) == "key_kind") {
      const int k = v.is_numeral() ? v.get_numeral_int() : -1;
      txt = tok_name(TokKind(k));
    }
    s += fmt::format("{}{}={}", s.empty() ? "" : " ", n, txt);
  }
  return s;
}

// One check: a fresh context and solver; builds the formula with `build`, returns the verdict.
SmtCheck run_check(const std::string& name, const std::string& role, bool expect_sat, unsigned timeout_ms,
                   const std::function<void(Enc&, z3::solver&)>& build, const SmtRange& R) {
  const auto t0 = std::chrono::steady_clock::now();
  SmtCheck ck;
  ck.name = name;
  ck.role = role;
  ck.expect_sat = expect_sat;
  z3::context c;
  z3::solver s(c, "QF_LIA");
  z3::params p(c);
  if (timeout_ms) p.set("timeout", timeout_ms);
  s.set(p);
  Enc e(c, R);
  build(e, s);
  const z3::check_result r = s.check();
  ck.result = r == z3::sat ? "sat" : r == z3::unsat ? "unsat" : "unknown";
  if (r == z3::sat) ck.model = model_text(c, s.get_model());
  ck.ok = r != z3::unknown && (r == z3::sat) == expect_sat;
  ck.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ck;
}

std::vector<const Family*> of_head(const std::vector<Family>& fams, int h) {
  std::vector<const Family*> out;
  for (const Family& f : fams)
    if (f.head == h) out.push_back(&f);
  return out;
}

// The proof obligations of one head for a family list; each must be unsat.
struct Obligation {
  std::string what;
  std::function<void(Enc&, z3::solver&)> build;
};
std::vector<Obligation> obligations(const ScoreStructure& S, std::vector<Family> fams, int h) {
  auto fs = [fams, h] { return fams; };
  std::vector<Obligation> ob;
  // (lemma) for any hypercube codes of the blocks the score reads (free bits: no shape needed), a
  // non-BOS key scores the top score (BOS's) iff its codes equal the query's at every read pair,
  // never more, and otherwise at least 2 less (Eq. 4, from the head's own coefficients).
  ob.push_back({"lemma", [S](Enc& e, z3::solver& s) {
                  const int top = S.ones_bos + S.ones_ones;
                  z3::expr sc = e.num(S.ones_ones), all_eq = e.c.bool_val(true);
                  std::vector<std::vector<z3::expr>> qb(4), kb(4);
                  auto bits = [&](std::vector<std::vector<z3::expr>>& v, const char* who, int blk) {
                    if (!v[std::size_t(blk)].empty()) return;
                    for (int x = 0; x < (blk < 2 ? e.R.P1 : e.R.P2); ++x)
                      v[std::size_t(blk)].push_back(e.c.bool_const(fmt::format("{}_bit{}_{}", who, blk, x).c_str()));
                  };
                  for (int a = 0; a < 4; ++a)
                    for (int b = 0; b < 4; ++b) {
                      const int coef = S.pos[std::size_t(a)][std::size_t(b)];
                      if (coef == 0) continue;
                      bits(qb, "q", a);
                      bits(kb, "k", b);
                      z3::expr ham = e.num(0);
                      z3::expr same = e.c.bool_val(true);
                      for (std::size_t x = 0; x < qb[std::size_t(a)].size(); ++x) {
                        const z3::expr d = qb[std::size_t(a)][x] != kb[std::size_t(b)][x];
                        ham = ham + z3::ite(d, e.num(1), e.num(0));
                        same = same && !d;
                      }
                      sc = sc + e.num(coef) * (e.num(std::int64_t(qb[std::size_t(a)].size())) - 2 * ham);  // <v, w> = D - 2 ham
                      all_eq = all_eq && same;
                    }
                  s.add(e.c.int_const("score") == sc);
                  s.add(sc > top || ((sc == top) != all_eq) || (sc < top && sc > top - 2));
                }});
  // (exact) a causal key matches (BOS, or codes equal) iff it is BOS or in a family
  ob.push_back({"exact", [S, fs, h](Enc& e, z3::solver& s) {
                  const auto all = fs();
                  s.add(e.domain() && e.key_valid() && e.causal());
                  s.add(e.codes_match(S, s) != e.closed(of_head(all, h)));
                }});
  // (families) every family member is a real, causal, non-BOS token
  ob.push_back({"families", [fs, h](Enc& e, z3::solver& s) {
                  const auto all = fs();
                  z3::expr any = e.c.bool_val(false);
                  for (const Family* f : of_head(all, h)) any = any || e.member(*f);
                  s.add(e.domain() && any && !(e.key_valid() && e.causal() && e.kk != int(TokKind::BOS)));
                }});
  // (disjoint) no key lies in two families
  ob.push_back({"disjoint", [fs, h](Enc& e, z3::solver& s) {
                  const auto all = fs();
                  z3::expr cnt = e.num(0);
                  for (const Family* f : of_head(all, h)) cnt = cnt + z3::ite(e.member(*f), e.num(1), e.num(0));
                  s.add(e.domain() && cnt >= 2);
                }});
  return ob;
}

// Does some (l, m, s1, s2, i, t) of the range give family f a member? Evaluated with closed::
// on the boundary values every condition of the closed form distinguishes (an independent
// expectation for the solver's witness).
bool family_occurs(const Family& f, const SmtRange& R) {
  const std::int64_t C1v = std::int64_t(1) << R.P1, C2v = std::int64_t(1) << R.P2;
  auto around = [](std::int64_t lo, std::int64_t hi, std::vector<std::int64_t> extra) {
    std::vector<std::int64_t> v;
    for (std::int64_t x = lo; x <= std::min(hi, lo + 3); ++x) v.push_back(x);
    for (std::int64_t x = std::max(lo, hi - 3); x <= hi; ++x) v.push_back(x);
    for (auto x : extra)
      if (x >= lo && x <= hi) v.push_back(x);
    return v;
  };
  for (std::int64_t l : around(R.l_lo, R.l_hi, {C1v - 1, C1v - 2}))
    for (std::int64_t m : around(R.m_lo, R.m_hi, {}))
      for (std::int64_t s1 : around(1, C1v - l, {}))
        for (std::int64_t s2 : around(1, C2v - m, {})) {
          Values v = shape_values(l, m, s1, s2, R.P1, R.P2);
          for (std::int64_t i : around(0, m, {}))
            for (std::int64_t t : around(0, l, {})) {
              v[I] = i;
              v[T] = t;
              if (family_count(f, v) > 0) return true;
            }
        }
  return false;
}

// Deliberately wrong closed forms: each must fail some obligation.
struct Mutant {
  std::string what;
  int head;
  std::vector<Family> fams;
};
// (Only families that occur in the range: changing one that never occurs changes nothing.)
std::vector<Mutant> mutants(const std::vector<Family>& fams, const SmtRange& R) {
  std::vector<Mutant> out;
  for (std::size_t k = 0; k < fams.size(); ++k) {
    if (!family_occurs(fams[k], R)) continue;
    const int h = fams[k].head;
    auto drop = fams;
    drop.erase(drop.begin() + std::ptrdiff_t(k));
    out.push_back({fams[k].name + " dropped", h, drop});
    auto wider = fams;
    wider[k].hi = wider[k].hi + 1;
    out.push_back({fams[k].name + " block range + 1", h, wider});
    if (fams[k].has_sig) {
      auto shifted = fams;
      shifted[k].sig = shifted[k].sig + 1;
      out.push_back({fams[k].name + " significance + 1", h, shifted});
    }
    for (std::size_t a = 0; a < fams[k].when.size(); ++a) {
      auto loose = fams;
      loose[k].when.erase(loose[k].when.begin() + std::ptrdiff_t(a));
      out.push_back({fmt::format("{} without '{}'", fams[k].name, fams[k].when[a].str()), h, loose});
    }
  }
  return out;
}

}  // namespace

SmtReport prove_closed_form(const ConstructedModel& M, const SmtRange& R, const std::vector<Family>& fams, const SmtOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  if (R.P1 != M.layout.P1 || R.P2 != M.layout.P2) throw InputError("prove_closed_form: the range's P1, P2 differ from the model's");
  if (R.l_lo < 1 || R.l_hi > (std::int64_t(1) << R.P1) - 1 || R.m_lo < 1 || R.m_hi > (std::int64_t(1) << R.P2) - 1 ||
      R.l_lo > R.l_hi || R.m_lo > R.m_hi)
    throw InputError("prove_closed_form: the range must lie in 1 <= l <= 2^P1 - 1, 1 <= m <= 2^P2 - 1 (valid offsets exist)");
  std::array<ScoreStructure, 4> S;
  for (int h = 0; h < 4; ++h) S[std::size_t(h)] = score_structure(M, h);

  // Every check as a job; run them on opt.threads threads (one z3 context each).
  struct Job {
    std::string name, role;
    std::function<SmtCheck()> run;
  };
  std::vector<Job> jobs;
  const unsigned to = opt.timeout_ms;
  for (int h = 0; h < 4; ++h)
    for (auto& ob : obligations(S[std::size_t(h)], fams, h)) {
      const std::string name = fmt::format("head {} {}", h + 1, ob.what);
      jobs.push_back({name, "proof", [=] { return run_check(name, "proof", false, to, ob.build, R); }});
    }
  if (opt.witnesses) {
    jobs.push_back({"domain", "witness", [=] {
                      return run_check("domain not empty", "witness", true, to, [](Enc& e, z3::solver& s) { s.add(e.domain()); }, R);
                    }});
    for (const Family& f : fams) {
      const bool expect = family_occurs(f, R);
      const std::string name = fmt::format("family {} occurs{}", f.name, f.wrap ? " (wrap)" : "");
      jobs.push_back({name, "witness", [=] {
                        return run_check(name, "witness", expect, to,
                                         [f, &S](Enc& e, z3::solver& s) {
                                           s.add(e.domain() && e.member(f) && e.key_valid() && e.causal() &&
                                                 e.codes_match(S[std::size_t(f.head)], s));
                                         },
                                         R);
                      }});
    }
  }
  if (opt.mutants) {
    for (const Mutant& mu : mutants(fams, R)) {
      const std::string name = "wrong key list: " + mu.what;
      const auto obs = obligations(S[std::size_t(mu.head)], mu.fams, mu.head);
      jobs.push_back({name, "mutant", [=] {
                        SmtCheck last;
                        for (const auto& ob : obs) {  // refuted as soon as one obligation fails
                          last = run_check(name, "mutant", true, to, ob.build, R);
                          if (last.result == "sat") {
                            last.name = name + " (fails '" + ob.what + "')";
                            return last;
                          }
                        }
                        last.ok = false;
                        return last;
                      }});
    }
    // Wrong models: each head with its key's level-1 block swapped (POS_1 <-> POS_1_NEXT) must no
    // longer match the closed form.
    for (int h = 0; h < 4; ++h) {
      ScoreStructure W = S[std::size_t(h)];
      for (int a = 0; a < 4; ++a) std::swap(W.pos[std::size_t(a)][0], W.pos[std::size_t(a)][1]);
      const std::string name = fmt::format("wrong model: head {} key reads POS_1_NEXT for POS_1", h + 1);
      const auto ob = obligations(W, fams, h)[1];  // "exact"
      jobs.push_back({name, "mutant", [=] { return run_check(name, "mutant", true, to, ob.build, R); }});
    }
  }

  SmtReport rep;
  rep.checks.resize(jobs.size());
  parallel_for(
      std::max(1, opt.threads), std::int64_t(jobs.size()),
      [&](int, std::int64_t k) {
        try {
          rep.checks[std::size_t(k)] = jobs[std::size_t(k)].run();
        } catch (const z3::exception& e) {
          throw InputError(std::string("z3: ") + e.msg());
        }
      },
      Schedule::dynamic);
  rep.proven = true;
  rep.non_vacuous = true;
  for (const auto& ck : rep.checks) {
    if (ck.role == "proof") {
      ++rep.proofs;
      rep.proven = rep.proven && ck.ok;
    } else {
      (ck.role == "witness" ? rep.witnesses : rep.mutants)++;
      rep.non_vacuous = rep.non_vacuous && ck.ok;
    }
  }
  unsigned major = 0, minor = 0, build = 0, rev = 0;
  Z3_get_version(&major, &minor, &build, &rev);
  rep.solver = fmt::format("z3 {}.{}.{}", major, minor, build);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace manyadd
