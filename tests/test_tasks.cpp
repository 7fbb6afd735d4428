// The tasks (learn/include/manyadd/learn/tasks/task.hpp): every format against the papers' own examples
// (Figure 2's parity 0101, Figure 4's 57+48+96, Figure 8b's 37*925 token by token and level by level,
// McLeish et al.'s 98282+3859172), the couplings against what the papers say they couple, a RapidCheck
// property that every written sequence of every task reads back to the right answer (and that a
// changed digit does not), offsets within the model's tables, the model/task compatibility messages.
// The micro training runs of every task are in test_tasks_train.cpp. The Python twin
// (python/manyadd/format.py) is checked against format_ids in test_python_format.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/tasks/hard_data.hpp"
#include "manyadd/learn/tasks/task.hpp"
#include "manyadd/learn/runs/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;

namespace {

const Task& T(TaskKind k) { return task(k); }

// The IDs of one level as the papers print them: one digit per token, BOS left out.
std::string row(const std::vector<std::int32_t>& ids) {
  std::string s;
  for (std::size_t k = 1; k < ids.size(); ++k) s += std::to_string(ids[k]);
  return s;
}
std::vector<std::int32_t> ids(const Written& w, PosMode mode, int level, Offsets s = {1, 1, 1}) {
  std::vector<std::int32_t> pos[kMaxPosLevels];
  position_ids_for(w, mode, s, pos);
  return pos[level];
}
Written write(TaskKind k, const std::string& text) { return T(k).write(T(k).parse(text)); }
PosMode coupling(const Task& t) {
  return t.levels() == 1 ? PosMode::digits : t.levels() == 2 ? PosMode::coupled : PosMode::coupled3;
}

}  // namespace

// Paper 000, Figure 2 (Sec. 3.1): "a 4-bit parity problem (with query 0101) and its scratchpad (0110)
// ... we can assign the same position ID to the k-th query token and k-th scratchpad token, for
// example, 234512345". The figure's nine tokens are 0101=0110 (BOS/EOS left out, footnote 2).
TEST(Tasks, ParityIsFigure2) {
  const Written w = write(TaskKind::parity, "0101");
  EXPECT_EQ(tokens_to_string(w.tokens), "$0101=0110");
  EXPECT_EQ(row(ids(w, PosMode::digits, 0)), "234512345");
  EXPECT_EQ(w.eq, 5);
  EXPECT_EQ(w.answer_begin, 9);  // the answer token is the last scratchpad bit, the token before EOS
  EXPECT_EQ(w.answer_end, 10);
  const Example ex = make_example(T(TaskKind::parity), T(TaskKind::parity).parse("0101"), [] {
    ModelConfig c;
    c.pos_mode = PosMode::digits;
    return c;
  }(), {1, 1, 1});
  EXPECT_EQ(ex.targets, (std::vector<std::int32_t>{-1, -1, -1, -1, -1, 0, 1, 1, 0, kDollar}));
  // Without the scratchpad: the authors' coupled parity, every query bit at s, '=' at s + 1, y at s.
  const Written n = write(TaskKind::parity_noscratch, "0101");
  EXPECT_EQ(tokens_to_string(n.tokens), "$0101=0");
  EXPECT_EQ(row(ids(n, PosMode::digits, 0)), "111121");
}

// Paper 000, Figure 8b (Sec. 5.1): the sequence of 37 x 925 with its two-stage scratchpad and the
// three rows of position IDs exactly as printed (36 tokens, BOS left out).
TEST(Tasks, MultiplicationIsFigure8b) {
  const Written w = write(TaskKind::multiplication, "37*925");
  EXPECT_EQ(tokens_to_string(w.tokens).substr(1), "37*925=581+470+333=58100>52900>52243");
  EXPECT_EQ(row(ids(w, PosMode::coupled3, 0)), "320000123412341234000000000000000000");
  EXPECT_EQ(row(ids(w, PosMode::coupled3, 1)), "000321111122223333111111222222333333");
  EXPECT_EQ(row(ids(w, PosMode::coupled3, 2)), "000000123423453456123456123456123456");
  // Figure 8a's stages: 37 x 5 = 185, 37 x 2 = 74, 37 x 9 = 333; 185, 185 + 740 = 925, 925 + 33300 = 34225.
  EXPECT_EQ(T(TaskKind::multiplication).read(w.tokens).answer, "34225");
  EXPECT_EQ(w.answer_begin, 32);
  // At offsets (5, 2, 7) every used ID moves by its level's offset and the unused stay 0.
  const auto a = ids(w, PosMode::coupled3, 0), b = ids(w, PosMode::coupled3, 0, {5, 2, 7});
  for (std::size_t k = 0; k < a.size(); ++k) EXPECT_EQ(b[k], a[k] == 0 ? 0 : a[k] + 4) << k;
  // Without the scratchpad (the authors' N x M rule): A, B and C digit k of least significance at s + k.
  const Written n = write(TaskKind::multiplication_noscratch, "37*925");
  EXPECT_EQ(tokens_to_string(n.tokens), "$37*925=52243");
  EXPECT_EQ(row(ids(n, PosMode::digits, 0)), "321432123456");
}

// Paper 000, Figure 4 (Sec. 4.1) through the task interface: the addition task writes construct's format.
TEST(Tasks, AdditionIsFigure4AndItsVariants) {
  const Written w = write(TaskKind::addition, "57+48+96");
  EXPECT_EQ(tokens_to_string(w.tokens), "$057+048+096=000>750>501>102");
  EXPECT_EQ(row(ids(w, PosMode::coupled, 0)), "432143214321234123412341234");
  EXPECT_EQ(row(ids(w, PosMode::coupled, 1)), "111122223331111222233334444");
  EXPECT_EQ(T(TaskKind::addition).read(w.tokens).answer, "201");
  // Without the scratchpad (Figure 1's top row, Sec. 4.3: "a simple single-level Position Coupling that
  // matches the position IDs for digits at the same significance in all numbers"): Figure 4's level 1
  // on the query, the sum reversed at the IDs of its significance.
  const Written n = write(TaskKind::addition_noscratch, "57+48+96");
  EXPECT_EQ(tokens_to_string(n.tokens), "$057+048+096=102");
  EXPECT_EQ(row(ids(n, PosMode::digits, 0)), "432143214321234");
  // McLeish et al. (Sec. 2): "inputs are formatted least significant digit first, e.g. 98282 + 3859172
  // = 2787472"; Abacus: the digits of each number at consecutive IDs from the offset (Sec. 3.1), every
  // other token 0 (their abacus.py).
  const Written m = write(TaskKind::addition_2op, "28289+2719583");
  EXPECT_EQ(tokens_to_string(m.tokens), "$98282+3859172=2787472");
  EXPECT_EQ(row(ids(m, PosMode::digits, 0)), "12345012345670" "1234567");
}

// What the papers say each level couples, checked on random instances with the tokens' meanings
// computed here from the layout: equal IDs exactly where the papers couple.
RC_GTEST_PROP(TasksProperty, CouplingsAreThePapers, ()) {
  Rng rng(*rc::gen::arbitrary<std::uint64_t>());
  const int M = *rc::gen::inRange(1, 7), N = *rc::gen::inRange(1, 7);
  const Offsets s = {*rc::gen::inRange(1, 9), *rc::gen::inRange(1, 9), *rc::gen::inRange(1, 9)};
  {  // multiplication: Sec. 5.1 (i) A's k-th LSD with the k-th LSD of every stage-1 number, (ii) B's j-th
     // LSD with every digit of the j-th stage-1 number; level 3: a stage-1 digit of S_j at place d
     // has significance j - 1 + d in stage 2, coupled with C's digit of that significance; level 2
     // distinguishes the numbers of both stages.
    const Task& t = T(TaskKind::multiplication);
    const Problem p = t.sample_cell(rng, M, N);
    const Written w = t.write(p);
    std::vector<std::int32_t> pos[kMaxPosLevels];
    position_ids_for(w, PosMode::coupled3, s, pos);
    const std::int64_t a0 = 1, b0 = M + 2, s0 = M + N + 3;  // first index of A, B, S_1
    auto S = [&](int j, int d) { return s0 + std::int64_t(j - 1) * (M + 2) + (d - 1); };  // digit d of S_j
    const std::int64_t c0 = s0 + std::int64_t(N) * (M + 2);                               // C_1's first digit
    auto C = [&](int j, int k) { return c0 + std::int64_t(j - 1) * (M + N + 1) + (k - 1); };
    for (int j = 1; j <= N; ++j) {
      for (int d = 1; d <= M + 1; ++d) {
        if (d <= M) RC_ASSERT(pos[0][std::size_t(S(j, d))] == pos[0][std::size_t(a0 + M - d)]);  // A's d-th LSD
        RC_ASSERT(pos[1][std::size_t(S(j, d))] == pos[1][std::size_t(b0 + N - j)]);               // B's j-th LSD
        RC_ASSERT(pos[2][std::size_t(S(j, d))] == pos[2][std::size_t(C(1, j - 1 + d))]);          // significance
      }
      for (int k = 1; k <= M + N; ++k) {
        RC_ASSERT(pos[1][std::size_t(C(j, k))] == pos[1][std::size_t(S(j, 1))]);
        RC_ASSERT(pos[2][std::size_t(C(j, k))] == pos[2][std::size_t(C(1, k))]);
        RC_ASSERT(pos[0][std::size_t(C(j, k))] == 0);
      }
    }
    for (std::int64_t k = 1; k <= M; ++k) RC_ASSERT(pos[1][std::size_t(k)] == 0 && pos[2][std::size_t(k)] == 0);
  }
  {  // parity: the k-th query bit and the k-th scratchpad bit (Sec. 3.1)
    const Task& t = T(TaskKind::parity);
    const Written w = t.write(t.sample_cell(rng, M + N, 1));
    const auto p = ids(w, PosMode::digits, 0, s);
    for (int k = 1; k <= M + N; ++k) RC_ASSERT(p[std::size_t(k)] == p[std::size_t(M + N + 1 + k)]);
  }
  {  // addition-2op: digits of the same significance in a, b and the sum (Abacus)
    const Task& t = T(TaskKind::addition_2op);
    const Problem pr = t.sample_cell(rng, M, N);
    const Written w = t.write(pr);
    const auto p = ids(w, PosMode::digits, 0, s);
    const std::size_t c = std::size_t(M + N + 3);  // first digit of the sum
    for (int k = 0; k < std::max(M, N); ++k) {
      if (k < M) RC_ASSERT(p[std::size_t(1 + k)] == p[c + std::size_t(k)]);
      if (k < N) RC_ASSERT(p[std::size_t(M + 2 + k)] == p[c + std::size_t(k)]);
    }
    RC_ASSERT(p[std::size_t(M + 1)] == 0 && p[c - 1] == 0);  // '+' and '='
  }
}

// Every task: a written instance has the task's tokens and levels, its relative IDs within its spans,
// the extent of its cell bounds it (and the cell's largest instance reaches it), and it reads back to
// the reference answer with a consistent scratchpad; one changed response digit is caught.
RC_GTEST_PROP(TasksProperty, EverySequenceReadsBackToTheAnswer, ()) {
  const TaskKind k = *rc::gen::elementOf(all_tasks());
  const Task& t = task(k);
  Rng rng(*rc::gen::arbitrary<std::uint64_t>());
  const int i = *rc::gen::inRange(t.axis(0).min_value, 13);
  const int j = t.two_axes() ? *rc::gen::inRange(t.axis(1).min_value, 9) : 1;
  const Problem p = t.sample_cell(rng, i, j);
  const Written w = t.write(p);
  RC_ASSERT(w.levels == t.levels());
  for (auto tok : w.tokens) RC_ASSERT(int(tok) < t.vocab());
  RC_ASSERT(w.tokens[0] == kDollar);
  RC_ASSERT(w.eq >= 1 && w.tokens[std::size_t(w.eq)] == kEq);
  RC_ASSERT(w.eq < w.answer_begin && w.answer_begin < w.answer_end && w.answer_end == w.T());
  const Task::Extent e = t.extent(i, j);
  RC_ASSERT(w.T() <= e.T);
  for (int lv = 0; lv < w.levels; ++lv) {
    RC_ASSERT(std::int64_t(w.rel[lv].size()) == w.T());
    RC_ASSERT(w.rel[lv][0] == -1);  // BOS: ID 0
    RC_ASSERT(*std::max_element(w.rel[lv].begin(), w.rel[lv].end()) <= w.span[std::size_t(lv)]);
    RC_ASSERT(w.span[std::size_t(lv)] <= e.span[std::size_t(lv)]);
  }
  const Written big = t.write(t.largest(i, j));
  RC_ASSERT(big.T() == e.T);
  RC_ASSERT(longest_digit_run(w.tokens) <= e.digit_run);  // abacus IDs of the cell fit where its extent does
  RC_ASSERT(longest_digit_run(big.tokens) == e.digit_run);
  for (int lv = 0; lv < w.levels; ++lv) RC_ASSERT(big.span[std::size_t(lv)] == e.span[std::size_t(lv)]);
  const Reading r = t.read(w.tokens);
  RC_ASSERT(r.consistent);
  RC_ASSERT(r.answer == t.reference_answer(p));
  RC_ASSERT(t.to_string(t.parse(t.to_string(p))) == t.to_string(p));
  // One response digit changed (to another digit of its alphabet): the reader notices.
  std::vector<std::int64_t> digits;
  const int base = k == TaskKind::parity || k == TaskKind::parity_noscratch ? 2 : 10;
  for (std::int64_t q = w.eq + 1; q < w.T(); ++q)
    if (w.tokens[std::size_t(q)] < base) digits.push_back(q);
  RC_ASSERT(!digits.empty());
  std::vector<std::uint8_t> bad = w.tokens;
  const std::int64_t q = digits[std::size_t(*rc::gen::inRange<std::size_t>(0, digits.size()))];
  bad[std::size_t(q)] = std::uint8_t((bad[std::size_t(q)] + *rc::gen::inRange(1, base)) % base);
  const Reading rb = t.read(bad);
  RC_ASSERT(!rb.consistent || rb.answer != t.reference_answer(p));
}

// Training examples: offsets drawn per level within [1, max_pos - span], every ID within the model's
// tables, the answer span copied; at offsets 1 the IDs are the written ones plus one.
RC_GTEST_PROP(TasksProperty, TrainingOffsetsFitTheTables, ()) {
  const TaskKind k = *rc::gen::elementOf(all_tasks());
  const Task& t = task(k);
  Rng rng(*rc::gen::arbitrary<std::uint64_t>());
  const int i = *rc::gen::inRange(t.axis(0).min_value, 8);
  const int j = t.two_axes() ? *rc::gen::inRange(t.axis(1).min_value, 6) : 1;
  const Problem p = t.sample_cell(rng, i, j);
  const Written w = t.write(p);
  ModelConfig c;
  c.vocab = t.vocab();
  c.pos_mode = *rc::gen::element(coupling(t), PosMode::digits, PosMode::absolute, PosMode::none);
  c.max_pos1 = int(std::max<std::int64_t>(2, (c.pos_mode == PosMode::absolute ? w.T() - 2 : w.span[0]) + 1 +
                                                 *rc::gen::inRange(0, 5)));
  c.max_pos2 = int(std::max<std::int64_t>(2, w.span[1] + 1 + *rc::gen::inRange(0, 5)));
  c.max_pos3 = int(std::max<std::int64_t>(2, w.span[2] + 1 + *rc::gen::inRange(0, 5)));
  const Example ex = make_train_example(t, p, c, rng);
  RC_ASSERT(ex.tokens == w.tokens);
  RC_ASSERT(ex.answer_begin == w.answer_begin && ex.answer_end == w.answer_end);
  for (int lv = 0; lv < pos_levels(c.pos_mode); ++lv)
    for (auto id : ex.pos[lv]) RC_ASSERT(id >= 0 && id <= c.max_pos(lv));
  if (c.pos_mode == coupling(t) || c.pos_mode == PosMode::digits) {
    const Example one = make_example(t, p, c, {1, 1, 1});
    for (int lv = 0; lv < pos_levels(c.pos_mode); ++lv)
      for (std::size_t q = 0; q < one.pos[lv].size(); ++q) RC_ASSERT(one.pos[lv][q] == w.rel[lv][q] + 1);
  }
}

// Abacus Embeddings (McLeish et al., Sec. 3.1): every digit's index within its number from 1, other
// tokens 0, from the tokens alone. On their own example 98282 + 3859172 = 2787472 (reversed by
// addition-2op) they are the task's significance IDs; on a task that writes numbers most significant
// first (multiplication-noscratch's query) they number from the leading digit.
TEST(Tasks, AbacusIdsNumberEachRunOfDigits) {
  const Written w = write(TaskKind::addition_2op, "28289+2719583");
  EXPECT_EQ(tokens_to_string(w.tokens), "$98282+3859172=2787472");
  EXPECT_EQ(ids(w, PosMode::abacus, 0), ids(w, PosMode::digits, 0));
  EXPECT_EQ(ids(w, PosMode::abacus, 0),
            (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7}));
  // beta shifts every digit's ID, never a separator's
  const auto shifted = ids(w, PosMode::abacus, 0, {40, 1, 1});
  for (std::size_t k = 0; k < shifted.size(); ++k)
    EXPECT_EQ(shifted[k], w.tokens[k] <= 9 ? ids(w, PosMode::abacus, 0)[k] + 39 : 0);
  const Written mul = write(TaskKind::multiplication_noscratch, "37*925");
  EXPECT_EQ(row(ids(mul, PosMode::abacus, 0)).substr(0, 6), "120123");  // 3 7 * 9 2 5 =
  EXPECT_EQ(longest_digit_run(w.tokens), 7);
  std::vector<std::int32_t> p;
  EXPECT_THROW(abacus_ids(w.tokens, 0, p), InputError);
}

// Abacus training offsets: one beta per batch (their "the same for all numbers in a batch"), uniform in
// [1, abacus_k]; every ID within the table; the trainer refuses a table too small for beta = abacus_k.
TEST(Tasks, AbacusDrawsOneOffsetPerBatch) {
  ModelConfig mc;
  mc.pos_mode = PosMode::abacus;
  mc.abacus_k = 5, mc.max_pos1 = 8;  // numbers of up to 4 digits (3-digit operands, their sum)
  TrainConfig tc;
  tc.task = "addition-2op";
  tc.train_n = 3, tc.train_m = 3, tc.train_size = 200, tc.batch = 16;
  Trainer tr(mc, tc);
  std::map<std::int32_t, int> betas;
  for (std::int64_t t = 1; t <= 60; ++t) {
    const auto exs = tr.batch_examples(t);
    const std::int32_t beta = exs[0].pos[0][1];  // the first digit of the first operand
    for (const auto& ex : exs) {
      EXPECT_EQ(ex.pos[0][1], beta);
      for (auto id : ex.pos[0]) EXPECT_LE(id, mc.max_pos1);
    }
    ++betas[beta];
  }
  EXPECT_EQ(betas.size(), 5u);  // 60 draws from 5 values: all appear (each misses with p = 0.8^60)
  EXPECT_EQ(betas.begin()->first, 1);
  EXPECT_EQ(betas.rbegin()->first, 5);
  mc.abacus_k = 6;  // 6 + 4 - 1 > 8
  EXPECT_THROW(Trainer(mc, tc), InputError);
  mc.abacus_k = 8;  // not below max_pos1
  EXPECT_THROW(mc.validate(), InputError);
}

// A model must read the task's coupling and cover its tokens; the messages name the fix.
TEST(Tasks, ModelCompatibilityIsCheckedWithTheFix) {
  auto msg = [](TaskKind k, const ModelConfig& c) {
    try {
      task(k).check_model(c);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  ModelConfig c;  // coupled, vocab 14
  EXPECT_EQ(msg(TaskKind::addition, c), "");
  EXPECT_NE(msg(TaskKind::parity, c).find("use pos_mode digits"), std::string::npos) << msg(TaskKind::parity, c);
  c.vocab = kVocabTasks;
  EXPECT_NE(msg(TaskKind::multiplication, c).find("use pos_mode coupled3"), std::string::npos);
  c.vocab = kVocab;
  c.pos_mode = PosMode::coupled3;
  EXPECT_NE(msg(TaskKind::multiplication, c).find("set model.vocab 15"), std::string::npos);
  EXPECT_NE(msg(TaskKind::addition, c).find("use pos_mode coupled"), std::string::npos);
  for (PosMode m : {PosMode::digits, PosMode::absolute, PosMode::none}) {
    c.pos_mode = m;
    c.vocab = kVocabTasks;
    for (TaskKind k : all_tasks()) EXPECT_EQ(msg(k, c), "") << task_name(k) << " " << pos_mode_name(m);
  }
  EXPECT_THROW(parse_task("division"), InputError);
  for (TaskKind k : all_tasks()) EXPECT_EQ(parse_task(task_name(k)), k);
}

// The training sets: the sizes asked for, every instance inside the training region's extent.
TEST(Tasks, TrainingSetsLieInTheirRegion) {
  for (TaskKind k : all_tasks()) {
    const Task& t = task(k);
    TrainConfig tc;
    tc.task = task_name(k);
    tc.train_n = 4, tc.train_m = 3, tc.train_size = 300;
    tc.validate();
    Rng rng(7);
    const auto data = t.sample_train(rng, tc);
    ASSERT_EQ(std::int64_t(data.size()), tc.train_size) << t.name();
    const Task::Extent e = t.extent(tc.train_n, tc.train_m);
    std::map<std::int64_t, int> lengths;
    for (const auto& p : data) {
      const Written w = t.write(p);
      EXPECT_LE(w.T(), e.T) << t.name() << " " << t.to_string(p);
      for (int lv = 0; lv < w.levels; ++lv) EXPECT_LE(w.span[std::size_t(lv)], e.span[std::size_t(lv)]);
      ++lengths[w.T()];
    }
    EXPECT_GT(lengths.size(), 2u) << t.name() << ": the training set should mix lengths";
    EXPECT_EQ(t.training_cells(tc).size(), t.two_axes() ? (k == TaskKind::addition || k == TaskKind::addition_noscratch
                                                               ? 4u * 2u
                                                               : 4u * 3u)
                                                        : 4u)
        << t.name();
  }
  TrainConfig bad;
  bad.train_m = 1;  // addition needs two operands
  EXPECT_THROW(bad.validate(), InputError);
  bad.task = "multiplication";
  EXPECT_NO_THROW(bad.validate());
}

// Every task and position mode has its position-ID rule in words (config.json's format.position_ids).
TEST(Tasks, PositionRuleInWordsForEveryTaskAndMode) {
  std::string names = task_names() + "|";
  for (std::size_t a = 0, b; (b = names.find('|', a)) != std::string::npos; a = b + 1) {
    const Task& t = task_named(names.substr(a, b - a));
    const std::string coupling = t.describe().value("position_ids", std::string());
    EXPECT_FALSE(coupling.empty()) << t.name();
    for (PosMode m : kPosModes) {
      const std::string r = position_rule(t, m);
      EXPECT_EQ(r.rfind(std::string("pos_mode ") + pos_mode_name(m) + ":", 0), 0u) << t.name() << ": " << r;
      if (m == PosMode::absolute) {
        EXPECT_NE(r.find("-> s + k - 1"), std::string::npos) << t.name() << ": " << r;
      } else if (m == PosMode::abacus) {
        EXPECT_NE(r.find("beta"), std::string::npos) << t.name() << ": " << r;
      } else if (m == PosMode::fire || m == PosMode::rope) {
        EXPECT_NE(r.find("token ind"), std::string::npos) << t.name() << ": " << r;
        EXPECT_NE(r.find(m == PosMode::fire ? "Li et al." : "Su et al."), std::string::npos) << t.name() << ": " << r;
      } else if (m != PosMode::none) {
        EXPECT_NE(r.find(coupling), std::string::npos) << t.name() << ": " << r;
      }
    }
  }
}

// ---- hard training data (train.hard_fraction, hard_data.hpp) ------------------------------------------

// Every hard problem is a valid SA(n, m) problem (2..m operands of one length in [1, n], no leading zero);
// each cascade carries through every column of its operand at its step unless its partial sum's lowest
// digit is 0 or the top column was fixed against a leading zero; near_max digits are 5-9. Random SA has
// long carry runs rarely: the hard problems' median run is far above SA's.
TEST(HardData, CascadesAndMaximalSumsOfTheShape) {
  Rng rng(11);
  const int n = 10, m = 10;
  std::vector<int> runs_hard, runs_sa;
  int full = 0, cascades = 0, near_max = 0;
  for (int k = 0; k < 3000; ++k) {
    HardKind kind;
    int step = 0;
    const Problem p = sample_hard_addition(rng, n, m, &kind, &step);
    const int ops = int(p.operands.size()), L = int(p.operands[0].size());
    ASSERT_TRUE(ops >= 2 && ops <= m && L >= 1 && L <= n) << p.to_string();
    for (const auto& s : p.operands) {
      ASSERT_EQ(int(s.size()), L) << p.to_string();
      ASSERT_TRUE(L == 1 || s[0] != '0') << p.to_string();
      for (char ch : s) ASSERT_TRUE(ch >= '0' && ch <= '9');
    }
    ASSERT_NO_THROW(task(TaskKind::addition).write(p)) << p.to_string();
    if (kind == HardKind::near_max) {
      ++near_max;
      EXPECT_EQ(step, -1);
      for (const auto& s : p.operands)
        for (char ch : s) EXPECT_GE(ch, '5') << p.to_string();
      continue;
    }
    ++cascades;
    ASSERT_TRUE(step >= 1 && step < ops);
    const int run = longest_carry_run(p);
    runs_hard.push_back(run);
    full += L >= 3 && run >= L - 2;
  }
  EXPECT_GT(cascades, 1700);  // two in three of 3000
  EXPECT_GT(near_max, 800);
  Rng r2(12);
  for (const Problem& p : sample_SA(r2, n, m, 3000)) runs_sa.push_back(longest_carry_run(p));
  auto median = [](std::vector<int> v) {
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  EXPECT_GE(median(runs_hard), 4) << "cascades";
  EXPECT_LE(median(runs_sa), 1) << "random SA";
  EXPECT_GT(full, cascades / 2) << "cascades through (nearly) every column";
  // the measure itself, on hand-written cases: 1 + 9999 carries through 4 columns (run 3 after the first);
  // 45 + 54 never carries; 8 + 7 + 85 (15 + 85) carries at step 2 into one column summing to 9
  EXPECT_EQ(longest_carry_run(Problem{{"0001", "9999"}}), 3);
  EXPECT_EQ(longest_carry_run(Problem{{"45", "54"}}), 0);
  EXPECT_EQ(longest_carry_run(Problem{{"8", "7", "85"}}), 1);
}

// train.hard_fraction: the training set with it is the plain one with about that fraction replaced (the
// others identical, in place), deterministic in the data seed; 0 changes nothing; bad values and other
// tasks are refused; the field round-trips through config.json.
TEST(HardData, FractionReplacesInPlaceAndIsChecked) {
  TrainConfig tc;
  tc.train_n = 10, tc.train_m = 10, tc.train_size = 20000, tc.seed = 3;
  const Task& add = task(TaskKind::addition);
  Rng a(seed_mix(3, 0xDA7A));
  const auto plain = add.sample_train(a, tc);
  tc.hard_fraction = 0.25;
  tc.validate();
  Rng b(seed_mix(3, 0xDA7A)), c(seed_mix(3, 0xDA7A));
  const auto mixed = add.sample_train(b, tc), again = add.sample_train(c, tc);
  ASSERT_EQ(mixed.size(), plain.size());
  std::int64_t differ = 0;
  for (std::size_t k = 0; k < plain.size(); ++k) {
    differ += mixed[k].operands != plain[k].operands;
    ASSERT_EQ(mixed[k].operands, again[k].operands);
  }
  EXPECT_NEAR(double(differ) / double(plain.size()), 0.25, 0.02);
  nlohmann::json j = tc;
  EXPECT_EQ(j.at("hard_fraction"), 0.25);
  TrainConfig back;
  from_json(j, back);
  EXPECT_EQ(back.hard_fraction, 0.25);
  for (double bad : {-0.1, 1.5}) {
    TrainConfig t2 = tc;
    t2.hard_fraction = bad;
    EXPECT_THROW(t2.validate(), InputError) << bad;
  }
  // train.attn_entropy: in [0, 100], fp32 only; round-trips
  TrainConfig te = tc;
  te.attn_entropy = 0.05;
  EXPECT_NO_THROW(te.validate());
  nlohmann::json je = te;
  TrainConfig te2;
  from_json(je, te2);
  EXPECT_EQ(te2.attn_entropy, 0.05);
  for (double bad : {-0.1, 101.0, std::nan("")}) {
    TrainConfig t3 = te;
    t3.attn_entropy = bad;
    EXPECT_THROW(t3.validate(), InputError) << bad;
  }
  te.precision = "bf16";
  EXPECT_THROW(te.validate(), InputError);
  TrainConfig parity = tc;
  parity.task = "parity", parity.train_n = 10;
  EXPECT_THROW(parity.validate(), InputError);
  parity.hard_fraction = 0;
  EXPECT_NO_THROW(parity.validate());
}
