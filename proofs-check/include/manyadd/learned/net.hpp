// The one place where proofs-check reads learn/'s model files: a trained decoder as verify_learned sees
// it. Everything else in proofs-check/src/learned/ goes through this interface, so the verifier depends
// on learn/ by these few functions alone:
//   * load (learn's strict reader: config.json + model.safetensors, the tensors checked against the
//     configuration before anything is allocated), addition models only;
//   * the position IDs of an addition shape under the model's position mode, at offsets (s1, s2);
//   * the fp32 reference forward (learn's model_forward, --device cpu), teacher-forced, as the logits of
//     every row of one token sequence;
//   * greedy decoding with learn's key/value-cache decoder (what `evaluate --mode greedy` runs);
//   * the weights of a one-layer model in double, laid out for the certificate (OneLayer), refused by
//     name for what the certificate does not cover.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "manyadd/format.hpp"

namespace manyadd::learned {

// Position IDs of one sequence, per level the model reads (empty levels unused).
struct Positions {
  std::vector<std::int32_t> level[3];
};

// A one-layer decoder's weights in double (each the exact value of the stored fp32 number), with the
// fp32 constants of its forward (the score scale, norm_eps) as the fp32 forward rounds them. Row-major
// matrices in nn.Linear's (out, in) layout.
struct OneLayer {
  int V = 0, C = 0, H = 0, dh = 0, F = 0;
  double eps = 0, score_scale = 0;
  std::string pos_mode;      // learn's name of the position mode
  int tables = 0;            // position tables added to the token embedding (0: none, coupled_rel)
  int rel_levels = 0;        // coupled_rel: levels of the relative bias (2), else 0
  int rel_window = 0;        // coupled_rel: the largest |ID difference| with a gain of its own
  bool rel_far = false;      // coupled_rel: one more gain for |d| > rel_window
  bool rel_far_norm = false; // coupled_rel: the far gain less ln(the query's far keys on the level)
  bool rel_far_mask = false; // coupled_rel: keys far on either level not attended (weight exactly 0)
  std::vector<double> wte;   // (V, C)
  std::vector<double> pos[3];  // (rows_lv, C) per table
  int pos_rows[3] = {0, 0, 0};
  std::vector<double> norm1, wq, wk, wv, wo, norm2, norm3, wi, wf, norm4, normf, readout;
  std::vector<double> rel;   // (H, rel_levels, 2 rel_window + 1 + far)
  // model.rel_value: (H, rel_levels, 2 rel_window + 1 + far, dh), each key's relative value per level and
  // bucket (added, weighted as the key, to the head's output); empty without it.
  std::vector<double> rel_value;
  // coupled_rel's bucket of a (query ID, key ID) pair: -1 = no gain (either ID 0, or |d| > window without
  // far), else the index into rel's last axis (learn's coupled_rel_bucket).
  int rel_bucket(std::int32_t query_id, std::int32_t key_id) const;
  // rel_far_norm: the shift ln N of the query ids[n - 1] on one level, N = the keys ids[0 .. n) far from it
  // (0 below 2): a constant of the forward, the float learn computes (coupled_rel_far_shift), exact in double.
  double rel_far_shift(const std::int32_t* ids, int n) const;
  // rel_far_mask: whether query i masks key j (learn's coupled_rel_masked), ids the rel_levels levels.
  bool rel_masked(const std::int32_t* const* ids, std::int64_t i, std::int64_t j) const;
};

// The generator seed of `evaluate`'s cell TA(n, m) (learn's cell_seed): samples drawn from Rng(this) with
// sample_TA are the instances evaluate scores in that cell.
std::uint64_t evaluate_cell_seed(std::uint64_t seed, int n, int m);

class Net {
 public:
  // learn's reader; InputError for a missing or malformed directory or a task other than addition.
  static Net load(const std::string& dir);
  Net(Net&&) noexcept;
  Net& operator=(Net&&) noexcept;
  ~Net();

  const std::string& dir() const;
  int n_layers() const;
  std::string pos_mode() const;
  // "1L4H d64 dff256 coupled_rel (window 2, far)" and the like.
  std::string describe() const;
  int vocab() const;
  // The shape (minimal padding, as every learned model writes a problem) and its position IDs at offsets
  // (s1, s2); InputError when they exceed the model's tables or the offsets are out of range.
  Positions positions(const Shape& shape, std::int64_t s1, std::int64_t s2) const;
  // Largest offsets admissible for the shape (< 1: the shape does not fit the model).
  std::int64_t max_offset1(const Shape& shape) const;
  std::int64_t max_offset2(const Shape& shape) const;
  // The fp32 reference forward of one sequence, teacher-forced: logits (T x V, row-major). Thread-safe
  // (each thread its own activations).
  void logits(const std::vector<std::uint8_t>& tokens, const Positions& pos, std::vector<float>& out) const;
  // Greedy decoding from the prefix (BOS .. '='), at most max_new tokens, stopping after EOS.
  std::vector<std::uint8_t> greedy(const std::vector<std::uint8_t>& prefix, const Positions& pos, int max_new) const;
  // The one-layer weights; InputError naming what the certificate does not cover (depth, position mode,
  // a LayerNorm final norm).
  OneLayer one_layer() const;

 private:
  struct Impl;
  explicit Net(std::unique_ptr<Impl> p);
  std::unique_ptr<Impl> p_;
};

}  // namespace manyadd::learned
