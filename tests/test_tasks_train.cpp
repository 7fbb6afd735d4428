// Every task trains on the same trainer (Trainer, the CPU device) and is scored by the same evaluator
// (eval_cell): a micro model (1 layer, 4 heads of 8, d_ff 64, 4000 fixed training instances, batch 16,
// lr 3e-3, 2 threads) on tiny lengths for a few seconds per task, then teacher-forced exact match on
// the in-distribution cells, 200 or 400 samples each (evaluate's seeds). Each threshold is argued
// beside its test against "chance": the accuracy of the best query-blind answer, i.e. the share of the
// most frequent response among the same samples (computed here, printed), and against what the runs
// measured over seeds 1-3 on this machine (the seed used here is 1, not picked).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/tasks/task.hpp"
#include "manyadd/learn/runs/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;

namespace {

struct Cell {
  int i = 0, j = 0;
  double exact = 0, answer = 0, chance = 0;  // whole response, answer tokens, best constant response
};

// Trains the micro model on a task and scores its training cells.
std::vector<Cell> micro_run(TaskKind k, PosMode mode, int train_n, int train_m, std::int64_t steps,
                            std::int64_t samples, int abacus_k = 1, int layers = 1, bool injection = false) {
  const Task& t = task(k);
  ModelConfig mc;
  mc.vocab = t.vocab();
  mc.pos_mode = mode;
  mc.d_model = 32, mc.d_head = 8, mc.d_ff = 64;
  mc.max_pos1 = 8, mc.max_pos2 = 6, mc.max_pos3 = 8;
  mc.abacus_k = abacus_k;
  mc.n_layers = layers, mc.input_injection = injection;
  TrainConfig tc;
  tc.task = t.name();
  tc.train_n = train_n, tc.train_m = train_m, tc.train_size = 4000;
  tc.steps = steps, tc.batch = 16, tc.lr = 3e-3, tc.threads = 2, tc.seed = 1;
  Trainer tr(mc, tc);
  for (std::int64_t s = 0; s < steps; ++s) tr.step();
  std::vector<Cell> out;
  const std::uint64_t seed = 12345;
  for (const auto& [i, j] : t.training_cells(tc)) {
    Cell c;
    c.i = i, c.j = j;
    const CellResult r = eval_cell(tr.view(), t, i, j, samples, seed, 2, EvalMode::teacher);
    EXPECT_TRUE(r.fits);
    c.exact = r.accuracy(), c.answer = r.answer_accuracy();
    Rng rng(cell_seed(seed, i, j));  // the same samples: the most frequent whole response among them
    std::map<std::vector<std::uint8_t>, int> count;
    for (std::int64_t q = 0; q < samples; ++q) {
      const Written w = t.write(t.sample_cell(rng, i, j));
      ++count[std::vector<std::uint8_t>(w.tokens.begin() + w.eq + 1, w.tokens.end())];
    }
    int top = 0;
    for (const auto& [resp, n] : count) top = std::max(top, n);
    c.chance = double(top) / double(samples);
    std::printf("%s cell (%d, %d): exact %.3f, answer tokens %.3f, best constant response %.3f\n", t.name(), i, j,
                c.exact, c.answer, c.chance);
    out.push_back(c);
  }
  return out;
}
double mean(const std::vector<Cell>& cells, double Cell::*f) {
  double s = 0;
  for (const auto& c : cells) s += c.*f;
  return s / double(cells.size());
}

}  // namespace

// Parity with the running-parity scratchpad, lengths 1..4, single-level coupling (3000 steps, ~2 s).
// Measured (seeds 1-3): every cell 100% on both metrics. The paper's metric, the answer token, is a
// fair coin for a query-blind model (chance 0.5): 0.95 over 800 samples is 25 standard deviations of
// a coin above it. The whole response (n + 1 tokens) has chance 2^-n per cell (mean 0.23 over 1..4).
TEST(TasksTrain, ParityLearnsTheRunningParity) {
  const auto cells = micro_run(TaskKind::parity, PosMode::digits, 4, 1, 3000, 200);
  ASSERT_EQ(cells.size(), 4u);
  EXPECT_GE(mean(cells, &Cell::answer), 0.95);
  EXPECT_GE(mean(cells, &Cell::exact), 0.9);
  EXPECT_LE(mean(cells, &Cell::chance), 0.6);
}

// Parity without scratchpad, lengths 1..4 (3000 steps, ~2 s): measured 100% (seeds 1-3); the response
// is the answer and EOS, so both metrics coincide; chance 0.5 (a coin), threshold 0.95 as above.
TEST(TasksTrain, ParityWithoutScratchpadLearnsShortQueries) {
  const auto cells = micro_run(TaskKind::parity_noscratch, PosMode::digits, 4, 1, 3000, 200);
  EXPECT_GE(mean(cells, &Cell::answer), 0.95);
  EXPECT_GE(mean(cells, &Cell::exact), 0.95);
}

// Addition without scratchpad on SA(2, 3) (4000 steps, ~5 s): measured mean exact match 0.97-0.99 over
// the 4 cells (seeds 1-3). Chance: the most frequent sum's share, 0.1 for two digits and below 0.08
// elsewhere. 0.8 leaves 0.17 below the worst seed and is 0.7 above chance.
TEST(TasksTrain, AdditionWithoutScratchpadLearnsSA23) {
  const auto cells = micro_run(TaskKind::addition_noscratch, PosMode::digits, 2, 3, 4000, 200);
  ASSERT_EQ(cells.size(), 4u);
  EXPECT_GE(mean(cells, &Cell::exact), 0.8);
  EXPECT_GE(mean(cells, &Cell::exact), mean(cells, &Cell::chance) + 0.6);
}

// McLeish et al.'s two-operand format (Abacus IDs), operands of 1-2 digits (4000 steps, ~3 s):
// measured mean exact match 0.96-0.99 (seeds 1-3); chance at most 0.1 per cell (9 + 0 .. 9 + 9).
TEST(TasksTrain, TwoOperandAdditionLearnsShortOperands) {
  const auto cells = micro_run(TaskKind::addition_2op, PosMode::digits, 2, 2, 4000, 200);
  ASSERT_EQ(cells.size(), 4u);
  EXPECT_GE(mean(cells, &Cell::exact), 0.8);
  EXPECT_GE(mean(cells, &Cell::exact), mean(cells, &Cell::chance) + 0.6);
}

// The same with Abacus Embeddings (McLeish et al., Sec. 3.1): IDs from the tokens, one offset per
// batch in [1, 5] (the largest a 3-digit sum leaves in max_pos1 8), evaluation at offset 1 (4000
// steps, ~4 s): measured mean exact match 0.974 (seed 1, threads 2), 0.998 and 0.996 (seeds 2, 3, the
// train CLI, threads 1); chance as above.
TEST(TasksTrain, TwoOperandAdditionLearnsShortOperandsWithAbacus) {
  const auto cells = micro_run(TaskKind::addition_2op, PosMode::abacus, 2, 2, 4000, 200, 5);
  ASSERT_EQ(cells.size(), 4u);
  EXPECT_GE(mean(cells, &Cell::exact), 0.8);
  EXPECT_GE(mean(cells, &Cell::exact), mean(cells, &Cell::chance) + 0.6);
}

// Multiplication with the two-stage scratchpad and tri-level coupling on SM(2, 1) (4000 steps, ~5 s):
// measured TM(1, 1) 100% and TM(2, 1) 0.53-0.73 (seeds 1-3, 400 samples). Chance: a product 0 is the
// most frequent response (0.19 of the 1 x 1 products, 0.10 of the 2 x 1 ones). The thresholds:
// TM(1, 1) >= 0.9 (0.7 above chance), TM(2, 1) >= 0.35 (3.5 times chance; 0.18 below the worst seed,
// 7 standard deviations of a 400-sample estimate). Its answer tokens alone score 1.0 at TM(2, 1): with
// one digit in B, C_1 is S_1 copied, which teacher forcing hands to the model (see learn/README.md on
// the two metrics).
TEST(TasksTrain, MultiplicationLearnsSM21) {
  const auto cells = micro_run(TaskKind::multiplication, PosMode::coupled3, 2, 1, 4000, 400);
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_GE(cells[0].exact, 0.9);
  EXPECT_GE(cells[1].exact, 0.35);
  for (const auto& c : cells) EXPECT_LE(c.chance, 0.25);
}

// Multiplication without scratchpad on SM(2, 1) (4000 steps, ~3 s): measured TM(1, 1) 100% and TM(2,
// 1) 0.29-0.30 (seeds 1-3, 400 samples; the paper's Figure 9 shows this format failing even in
// distribution at full scale). Thresholds: TM(1, 1) >= 0.9; TM(2, 1) above its chance (0.105, the
// products 0) by 0.1, i.e. about 0.2: the worst seed is 0.085 above that, 3.7 standard deviations
// (0.023) of a 400-sample estimate; twice the chance level.
TEST(TasksTrain, MultiplicationWithoutScratchpadLearnsSM21) {
  const auto cells = micro_run(TaskKind::multiplication_noscratch, PosMode::digits, 2, 1, 4000, 400);
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_GE(cells[0].exact, 0.9);
  EXPECT_GE(cells[1].exact, cells[1].chance + 0.1);
}

// The baselines' positions (learn/README.md, "Baselines"), each on the micro model and seed 1. Measured
// over seeds 1-3 (the train CLI, the same trainer, threads 2):
// FIRE (Li et al. 2024) on parity with the scratchpad, lengths 1..4 (3000 steps, ~3 s): 100% on both
// metrics for every seed; thresholds and chance as ParityLearnsTheRunningParity.
TEST(TasksTrain, ParityLearnsTheRunningParityWithFire) {
  const auto cells = micro_run(TaskKind::parity, PosMode::fire, 4, 1, 3000, 200);
  ASSERT_EQ(cells.size(), 4u);
  EXPECT_GE(mean(cells, &Cell::answer), 0.95);
  EXPECT_GE(mean(cells, &Cell::exact), 0.9);
}

// FIRE on two-operand addition, operands of 1-2 digits (4000 steps, ~4 s): mean exact match 0.46-0.49
// (seeds 1-3), far below coupling's 0.96-0.99 at this size (a smooth function of log distance cannot
// single out the aligned digit as sharply) and far above chance (at most 0.14 per cell). Threshold 0.3:
// 0.16 below the worst seed (9 standard deviations of an 800-sample mean), 0.2 above chance.
TEST(TasksTrain, TwoOperandAdditionTrainsWithFire) {
  const auto cells = micro_run(TaskKind::addition_2op, PosMode::fire, 2, 2, 4000, 200);
  ASSERT_EQ(cells.size(), 4u);
  EXPECT_GE(mean(cells, &Cell::exact), 0.3);
  EXPECT_GE(mean(cells, &Cell::exact), mean(cells, &Cell::chance) + 0.2);
}

// RoPE (Su et al. 2021) on the same task (4000 steps, ~4 s): mean exact match 0.956-0.998 (seeds 1-3);
// thresholds as TwoOperandAdditionLearnsShortOperands.
TEST(TasksTrain, TwoOperandAdditionLearnsShortOperandsWithRope) {
  const auto cells = micro_run(TaskKind::addition_2op, PosMode::rope, 2, 2, 4000, 200);
  ASSERT_EQ(cells.size(), 4u);
  EXPECT_GE(mean(cells, &Cell::exact), 0.8);
  EXPECT_GE(mean(cells, &Cell::exact), mean(cells, &Cell::chance) + 0.6);
}

// Input injection (McLeish et al. 2024) on two layers, the same task with its single-level coupling
// (4000 steps, ~8 s): mean exact match 0.999-1.0 (seeds 1-3); thresholds as above.
TEST(TasksTrain, TwoOperandAdditionLearnsWithInputInjection) {
  const auto cells = micro_run(TaskKind::addition_2op, PosMode::digits, 2, 2, 4000, 200, 1, 2, true);
  ASSERT_EQ(cells.size(), 4u);
  EXPECT_GE(mean(cells, &Cell::exact), 0.8);
  EXPECT_GE(mean(cells, &Cell::exact), mean(cells, &Cell::chance) + 0.6);
}
