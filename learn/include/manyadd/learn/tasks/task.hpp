// Tasks: what a learned model is trained and evaluated on. A task defines its vocabulary, how an
// instance is written as one token sequence (query, '=', scratchpad and answer), its Position Coupling
// (1, 2 or 3 levels of position IDs, each a relative ID plus the level's offset), its samplers (the
// fixed training set, a test cell), its grid of test cells, and how to read the answer back. The
// trainer (train.hpp), the evaluator (eval.hpp), dump_attention and format_ids take a task; addition
// (construct/'s format, the constructed model's) is the default and is written exactly as before.
//
// The tasks (learn/README.md "Tasks" has each with its example, IDs and source):
//   addition                  paper 000 Sec. 4: $ A_1+..+A_m = B_0>B_1>..>B_m, bi-level coupling (Figure 4)
//   addition-noscratch        paper 000 Figure 1 "(-Scratchpad)": $ A_1+..+A_m = C, single-level coupling
//   addition-2op              McLeish et al. (Abacus): $ rev(a)+rev(b) = rev(a+b), no padding, digit
//                             IDs within each number, other tokens 0
//   parity                    paper 000 Sec. 3, Figure 2: $ x_1..x_n = y_1..y_n, y_k = x_1 xor .. xor x_k
//   parity-noscratch          $ x_1..x_n = y (the authors' coupled no-scratchpad parity)
//   multiplication            paper 000 Sec. 5, Figure 8b: two-stage scratchpad, tri-level coupling
//   multiplication-noscratch  $ A*B = C (C reversed), single-level coupling (the authors' N x M rule)
// Every sequence starts with BOS '$'; EOS '$' is the last target, never a token of the sequence.
// Position IDs: level lv of token k is 0 where the task leaves it unused (BOS always) and s_lv +
// rel_lv(k) elsewhere, s_lv >= 1 the level's offset (training: uniform in [1, max_pos_lv - span_lv]
// per sample; test: 1).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "manyadd/format.hpp"
#include "manyadd/learn/decoder/model.hpp"

namespace manyadd::learn {

struct TrainConfig;  // train_config.hpp

enum class TaskKind {
  addition,
  addition_noscratch,
  addition_2op,
  parity,
  parity_noscratch,
  multiplication,
  multiplication_noscratch
};
TaskKind parse_task(const std::string& s);  // throws InputError naming the tasks
const char* task_name(TaskKind k);
const std::vector<TaskKind>& all_tasks();
std::string task_names();  // "addition|addition-noscratch|..."

// One instance written in a task's format.
struct Written {
  std::vector<std::uint8_t> tokens;  // BOS first, the last response token last (EOS follows as a target)
  std::int64_t eq = 0;               // index of the query's last token '=': targets start there
  std::int64_t answer_begin = 0, answer_end = 0;  // the final answer's tokens [begin, end)
  int levels = 0;                                  // the task's coupling levels
  std::vector<std::int32_t> rel[kMaxPosLevels];    // per level, per token: ID - offset, or -1 (ID 0)
  std::array<std::int32_t, kMaxPosLevels> span{};  // per level: offsets are drawn in [1, max_pos - span]
  std::int64_t T() const { return std::int64_t(tokens.size()); }
};

// An answer read back from a whole sequence (BOS .. last response token).
struct Reading {
  std::string answer;       // decimal digits without leading zeros (parity: "0" or "1")
  bool consistent = true;   // every scratchpad step follows from the query (checked in exact arithmetic)
  std::string why;          // the first inconsistent step, when not consistent
};

// One axis of a task's test grid (evaluate): the CSV column, the plot's title, the paper's range.
struct GridAxis {
  const char* csv;    // "n" or "m"
  const char* title;  // heatmap axis title (upper case, the plot font)
  int lo, hi, step;   // default range and step
  int min_value;      // smallest admissible value
  int max_value;      // largest admissible value (sequences stay below ~10^8 tokens)
};

class Task {
 public:
  virtual ~Task() = default;
  virtual TaskKind kind() const = 0;
  const char* name() const { return task_name(kind()); }
  virtual int vocab() const { return kVocab; }  // tokens it uses are below this (14, or 15 with '*')
  virtual int levels() const = 0;               // Position Coupling levels: 1, 2 or 3
  // config.json's "format" section: the sequence in words, the IDs, the source.
  virtual nlohmann::json describe() const = 0;

  // Instances are Problems (construct's type): the operands as digit strings, or the bit string.
  virtual Problem parse(const std::string& text) const = 0;  // "57+48+96", "57+48", "0101", "37*925"
  virtual std::string to_string(const Problem& p) const = 0;
  virtual Written write(const Problem& p) const = 0;  // throws InputError for an instance it cannot write
  // Reads a whole sequence back (its layout checked, InputError if malformed) and checks its
  // scratchpad step by step with arbitrary-precision arithmetic.
  virtual Reading read(const std::vector<std::uint8_t>& tokens) const = 0;
  // The answer computed from the problem alone (Boost.Multiprecision, or counting bits).
  virtual std::string reference_answer(const Problem& p) const = 0;
  // Words for the instance in messages ("shape (n=2, m=3, l=3)").
  virtual std::string shape_words(const Problem& p) const = 0;

  // The training distribution: train_n / train_m checked (InputError), train_size problems drawn.
  virtual void check_train(const TrainConfig& tc) const = 0;
  // Whether sample_train mixes in hard problems (train.hard_fraction, hard_data.hpp): the addition tasks.
  virtual bool has_hard_data() const { return false; }
  virtual std::vector<Problem> sample_train(Rng& rng, const TrainConfig& tc) const = 0;
  // Test cell (i, j) of the grid (one-axis tasks: j = 1): one instance.
  virtual Problem sample_cell(Rng& rng, int i, int j) const = 0;
  // The longest sequence and the largest span of every level over the instances of cell (i, j),
  // computed without writing one (a cell fits a model iff its extent does; the training set fits iff
  // extent(train_n, train_m) does, every training instance lying in a cell at most that large).
  // digit_run: the longest run of consecutive digit tokens (pos_mode abacus numbers each run).
  struct Extent {
    std::int64_t T = 0;
    std::array<std::int64_t, kMaxPosLevels> span{};
    std::int64_t digit_run = 0;
  };
  // The task's T and spans (cell_extent), and digit_run measured on the written largest(i, j).
  Extent extent(int i, int j) const;
  virtual Extent cell_extent(int i, int j) const = 0;
  // An instance of cell (i, j) that reaches the extent (all digits 9, all bits 1).
  virtual Problem largest(int i, int j) const = 0;

  // The test grid: axis 0 (rows), axis 1 (columns; one-axis tasks have none).
  virtual bool two_axes() const { return true; }
  virtual GridAxis axis(int a) const = 0;
  // The training region: cells (i, j) of the training distribution.
  virtual bool in_training_region(const TrainConfig& tc, int i, int j) const = 0;
  // Its cells, rows then columns (one-axis tasks: (i, 1)), for the evaluation during training.
  std::vector<std::pair<int, int>> training_cells(const TrainConfig& tc) const;

  // The model can run the task: its vocabulary covers the task's tokens and its pos_mode reads the
  // task's coupling (coupled: 2 levels, coupled3: 3; digits, absolute, none, abacus: any). InputError with the fix.
  void check_model(const ModelConfig& c) const;
};

// The tasks (static instances).
const Task& task(TaskKind k);
const Task& task_named(const std::string& name);  // throws InputError

// The position-ID rule a model with this pos_mode reads for the task, in words (config.json's
// format.position_ids): the task's coupling (coupled, coupled3), its level 1 alone (digits), token
// indices (absolute) or none. The offsets s, s1, s2, s3 are drawn per sample in training, 1 at
// evaluation unless given.
std::string position_rule(const Task& t, PosMode mode);

// The task a model directory was trained on: config.json's train.task, addition when absent (the
// files written before tasks existed). `requested` (a tool's --task; empty = not given) must name the
// same task: a model reads only the format it learned. InputError otherwise, naming both.
const Task& task_of_model(const nlohmann::json& config_json, const std::string& requested, const std::string& dir);

}  // namespace manyadd::learn
