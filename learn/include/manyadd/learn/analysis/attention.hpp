// Attention maps of the learned and the constructed model on the same TA(n, m) instances, and the
// scores that say how much a learned head attends where a constructed head does (the paper's Figure 7
// claim, that a trained 1-layer 4-head model attends like the construction, made measurable).
//
// Definitions (also in learn/README.md, "compare_attention"). For a shape and offsets (s1, s2), rows
// j are the response query indices (j >= index of '='). For constructed head h (1 digit_sum, 2 carry,
// 3 arrow, 4 eos) the matched keys M_h(j) are the non-BOS keys i <= j whose score equals the top score
// of the row: the construction's attention is, as lambda -> infinity, uniform over BOS + M_h(j)
// (unmatched keys are >= 2 lambda below, Eq. 4). Rows with an empty M_h(j) (the head only looks at
// BOS there) are left out of that head's scores. For an attention map A (rows sum to 1):
//   share(A, h)  = sum_j sum_{i in M_h(j)} A[j][i]  /  sum_j (1 - A[j][0])     (over rows with M_h(j) != {})
//                  the fraction of the non-BOS attention mass that lands on the matched keys;
//   bos(A)       = mean over response rows of A[j][0]   (BOS is counted separately, here);
//   js(A, h)     = mean over rows of the Jensen-Shannon divergence, in bits (0 = same, 1 = disjoint),
//                  between A's non-BOS row renormalized and the uniform distribution on M_h(j);
//   chance(h)    = share of uniform causal attention (A[j][i] = 1 / (j + 1)), computed from M_h;
//   matching     = the one-to-one assignment of heads with the smallest summed js (see best_matching).
// Every score is computed on the map averaged over the samples (the map the PNGs show); share is
// linear in A, so it also equals the per-sample ratio of summed masses.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "manyadd/format.hpp"
#include "manyadd/learn/runs/io.hpp"

namespace manyadd::learn {

// A set of (T, T) attention maps (row = query, column = key), one per head, row-major.
struct AttentionMaps {
  int T = 0;
  std::vector<std::string> names;       // "layers.<l>.head.<h>" (the safetensors names)
  std::vector<std::vector<float>> maps;  // one T*T map per head
  int heads() const { return int(maps.size()); }
};

// Averaged post-softmax attention of a learned model over problems of one shape at offsets (s1, s2).
// If acc_exact is given, it receives how many instances the model answers exactly (teacher-forced).
AttentionMaps learned_attention(const LoadedModel& lm, const std::vector<Problem>& problems, std::int64_t s1,
                                std::int64_t s2, int threads, std::int64_t* acc_exact = nullptr);
// The same over `count` examples of one length made by example(i) (any task), in parallel.
AttentionMaps learned_attention(const LoadedModel& lm, std::int64_t count,
                                const std::function<Example(std::int64_t)>& example, int threads,
                                std::int64_t* acc_exact = nullptr);

// The constructed model (construct/) for TA(n, m) with minimal padding (the learned models' format),
// hypercube dims = the smallest valid ones for the offsets (dims_ours, grown if s1 or s2 need it).
struct ConstructedSetup {
  Shape shape;
  int P1 = 0, P2 = 0;
  double lambda = 0;
};
// lambda <= 0 picks construct's default_lambda(N). Throws InputError for impossible offsets.
ConstructedSetup constructed_setup(int n, int m, std::int64_t s1, std::int64_t s2, double lambda);
// Post-softmax attention of the constructed model (dense engine, double) on one problem. Its scores
// read only position dimensions, so the map is the same for every problem of the shape (tested).
AttentionMaps constructed_attention(const ConstructedSetup& cs, const Problem& p, std::int64_t s1, std::int64_t s2);
// Teacher-forced logits at every index of one problem's sequence, (T, vocab) row-major in double: the
// learned model's (fp32 forward, vocab = its config's) and the constructed model's (dense engine in
// double, the 14 tokens).
std::vector<double> learned_logits(const LoadedModel& lm, const Problem& p, std::int64_t s1, std::int64_t s2);
std::vector<double> constructed_logits(const ConstructedSetup& cs, const Problem& p, std::int64_t s1, std::int64_t s2);
// M_h(j) for every constructed head and every response row j (index j - eq_index), from the scores
// of the model built with lambda = 1 (the top score and the next one differ by >= 2; checked: throws
// std::logic_error if a row's gap is below 1).
using MatchedKeys = std::array<std::vector<std::vector<std::int32_t>>, 4>;
MatchedKeys constructed_matches(const ConstructedSetup& cs, std::int64_t s1, std::int64_t s2);
extern const std::array<const char*, 4> kConstructedHeadNames;  // digit_sum, carry, arrow, eos

// Scores of one map against one constructed head (definitions above).
struct PairScore {
  double share = 0, js = 0;
  std::vector<double> row_share;  // per response row (NaN where M_h(j) is empty or no non-BOS mass)
  std::vector<double> row_on, row_mass;  // per response row: mass on M_h(j), non-BOS mass (0, 0 if M empty)
};
PairScore score_pair(const std::vector<float>& A, int T, std::int64_t eq_index, const std::vector<std::vector<std::int32_t>>& M);
double bos_mass(const std::vector<float>& A, int T, std::int64_t eq_index);
double chance_share(std::int64_t eq_index, const std::vector<std::vector<std::int32_t>>& M);

// A one-to-one matching between learned heads (rows) and constructed heads (columns) maximizing the
// summed score: min(G, 4) pairs, exhaustive over assignments, ties broken by the lowest head indices.
// compare_maps scores a pair by 1 - JS (the symmetric divergence), not by the share: the share only
// asks that the learned attention lie inside M_h(j), so a head that follows the digit-sum keys also
// scores high against the arrow head, whose matched set contains them; the divergence also asks
// that it cover M_h(j) the way the construction does.
std::vector<std::pair<int, int>> best_matching(const std::vector<std::array<double, 4>>& score);

struct Comparison {
  std::int64_t eq_index = 0;
  std::vector<std::array<double, 4>> share, js;  // [learned head][constructed head]
  std::vector<double> bos_learned;               // per learned head
  std::array<double, 4> bos_constructed{}, chance{};
  std::array<std::int64_t, 4> rows{};            // response rows with a non-empty M_h(j)
  std::vector<std::pair<int, int>> matching;     // (learned head, constructed head), by minimum summed JS
  double mean_matched_share = 0;                 // mean share over the matching's pairs
  std::vector<std::vector<double>> matched_row_share;  // per pair of the matching, per response row
  // Per pair of the matching, the share over the rows of each response block k = 0..m ('=' or '>'
  // then the l digits of B_k; block k = rows k (l + 1) .. k (l + 1) + l): where along the partial
  // sums the alignment holds. NaN for a block without rows that have matched keys.
  std::vector<std::vector<double>> matched_block_share;
};
// block_len = l + 1 (the rows of one partial sum); 0 leaves matched_block_share empty.
Comparison compare_maps(const AttentionMaps& learned, const AttentionMaps& constructed, std::int64_t eq_index,
                        const MatchedKeys& M, int block_len = 0);

// The maps in dump_attention's format: OUT/attention.safetensors (tensors "layers.<l>.head.<h>",
// shape (T, T); metadata n, m, l, s1, s2, samples, example_tokens, pos1, pos2 (the IDs the model
// read; empty for NoPE) + `extra`) and one PNG
// per head (values below 0.01 black).
void write_attention_dir(const std::string& out, const AttentionMaps& a, const Shape& shape, std::int64_t s1,
                         std::int64_t s2, std::int64_t samples, const std::vector<std::uint8_t>& example_tokens,
                         const std::vector<std::int32_t>& pos1, const std::vector<std::int32_t>& pos2,
                         const std::map<std::string, std::string>& extra = {});
// The same files with the metadata given (dump_attention's other tasks: task, n, m, T, the offsets,
// example_tokens, pos1..pos3).
void write_attention_dir(const std::string& out, const AttentionMaps& a, const std::map<std::string, std::string>& meta);

}  // namespace manyadd::learn
