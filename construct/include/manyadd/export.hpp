// Export of the constructed model as `model.safetensors` + `config.json` (docs/design.md, Formats), so
// that PyTorch (or anything that reads safetensors and JSON) can load and run it without this
// project. bench/load_constructed.py is such a reader.
#pragma once

#include <cstdint>
#include <string>

#include "manyadd/format.hpp"
#include "manyadd/model.hpp"

namespace manyadd {

// Version of the exported layout (tensor names, config keys); bump on any incompatible change.
inline constexpr int kExportFormatVersion = 1;

// Writes `dir/model.safetensors` and `dir/config.json` (creating `dir` if needed), each through a
// temporary file that is fsynced and renamed, so a reader never sees half a file.
//
// Tensors (all F64, row-major, matrices act on residual columns x of length d):
//   heads.{1..4}.{Q,K,V,U}   (d_qk, d), (d_qk, d), (1, d), (d, 1)   lambda already folded into Q, K
//   ffn.W1 (82, d), ffn.b1 (82), ffn.W2 (d, 82), ffn.b2 (d)
//   readout.Wout (14, d)
//   embed.token (14, d), embed.pos1 (max_pos1 + 1, d), embed.pos2 (max_pos2 + 1, d)
// Row p of embed.pos{1,2} is the position part of a token whose level-{1,2} ID is p (row 0, the
// BOS ID, is zero), so X0[:, k] = embed.token[tok_k] + embed.pos1[p1_k] + embed.pos2[p2_k].
//
// `shape` may be null (the model is then exported without a task shape); when given, max_pos1 must
// be >= l + 1 and max_pos2 >= m + 1 (else no offset s >= 1 fits). Throws InputError on bad
// arguments or when `dir` cannot be created or written.
void export_model(const ConstructedModel& model, const Shape* shape, std::int64_t max_pos1, std::int64_t max_pos2,
                  const std::string& dir);

}  // namespace manyadd
