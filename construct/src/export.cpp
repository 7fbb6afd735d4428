// Export of the constructed model to safetensors (F64, through core's one writer) + config.json;
// see export.hpp.
#include "manyadd/export.hpp"

#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/files.hpp"
#include "manyadd/core/safetensors.hpp"

namespace manyadd {

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;  // keeps keys in the order written: the files read top-down

// Eigen stores column-major; safetensors (and torch) expect row-major, so copy element by element.
Tensor matrix_tensor(std::string name, const Eigen::MatrixXd& M) {
  std::vector<double> data;
  data.reserve(std::size_t(M.size()));
  for (Eigen::Index r = 0; r < M.rows(); ++r)
    for (Eigen::Index c = 0; c < M.cols(); ++c) data.push_back(M(r, c));
  return make_tensor(std::move(name), {std::int64_t(M.rows()), std::int64_t(M.cols())}, data, DType::F64);
}

Tensor vector_tensor(std::string name, const Eigen::VectorXd& v) {
  return make_tensor(std::move(name), {std::int64_t(v.size())}, std::vector<double>(v.data(), v.data() + v.size()),
                     DType::F64);
}

// Row p = position part of ID p at one level; the other level is held at 0 (which writes nothing),
// so the two tables have disjoint supports and sum to write_position(L, p1, p2).
Tensor position_table(std::string name, const Layout& L, std::int64_t max_pos, int level) {
  const int d = L.d();
  std::vector<double> data(std::size_t(max_pos + 1) * std::size_t(d), 0.0);
  for (std::int64_t p = 1; p <= max_pos; ++p) {
    const auto id = std::int32_t(p);
    write_position(L, level == 1 ? id : 0, level == 2 ? id : 0, data.data() + std::size_t(p) * std::size_t(d));
  }
  return make_tensor(std::move(name), {max_pos + 1, d}, data, DType::F64);
}

ojson config_json(const ConstructedModel& M, const Shape* shape, std::int64_t max_pos1, std::int64_t max_pos2) {
  const Layout& L = M.layout;
  const auto names = L.names();
  ojson c;
  c["format"] = "manyadd-constructed";
  c["format_version"] = kExportFormatVersion;
  c["model"] = "Theorem 4.1 construction (Cho et al., ICLR 2025, Appendix D): 1-layer 4-head transformer adding many numbers";
  c["weights"] = "model.safetensors";
  c["dtype"] = "float64";
  c["architecture"] = {
      {"layers", 1},
      {"heads", 4},
      {"normalization", "none"},
      {"d_model", L.d()},
      {"d_ffn", M.W1.rows()},
      {"vocab_size", kVocab},
      {"convention",
       "residual stream X is (d, N): one column per token; every matrix acts on columns (row-major tensors, "
       "Q is (d_qk, d) and maps x to Q x)"},
      {"embedding", "X0[:, k] = embed.token[tok_k] + embed.pos1[p1_k] + embed.pos2[p2_k]"},
      {"attention",
       "per head h: score(query j, key i) = (K_h x_i) . (Q_h x_j) for i <= j (causal), A_h[j, :] = softmax over "
       "i of the scores; lambda_h is already folded into Q_h and K_h (sqrt(lambda_h) on each side), no 1/sqrt(d) "
       "scaling"},
      {"attention_output", "Y = X0 + sum_h U_h V_h X0 A_h^T, i.e. Y[:, j] = X0[:, j] + sum_h U_h sum_i A_h[j, i] V_h x_i"},
      {"ffn", "X1 = Y + W2 relu(W1 Y + b1) + b2 (token-wise; ffn.W1, ffn.b1, ffn.W2, ffn.b2)"},
      {"readout", "logits = Wout X1 (readout.Wout); next token = argmax over the 14 logits (lowest id on ties)"},
  };
  c["d"] = L.d();
  c["P1"] = L.P1;
  c["P2"] = L.P2;
  ojson heads = ojson::array();
  ojson lambdas = ojson::array();
  for (std::size_t h = 0; h < M.heads.size(); ++h) {
    const Head& H = M.heads[h];
    ojson reads = ojson::object();  // the residual dims the value reads, with their weights
    for (Eigen::Index k = 0; k < H.V.cols(); ++k)
      if (H.V(0, k) != 0.0) reads[names[std::size_t(k)]] = H.V(0, k);
    heads.push_back({{"index", h + 1},
                     {"name", H.name},
                     {"lambda", H.lambda},
                     {"target", names[std::size_t(H.target)]},
                     {"target_index", H.target},
                     {"d_qk", H.Q.rows()},
                     {"d_v", H.V.rows()},
                     {"value_reads", reads},
                     {"tensors", {fmt::format("heads.{}.Q", h + 1), fmt::format("heads.{}.K", h + 1),
                                  fmt::format("heads.{}.V", h + 1), fmt::format("heads.{}.U", h + 1)}}});
    lambdas.push_back(H.lambda);
  }
  c["lambdas"] = lambdas;
  c["heads"] = heads;
  c["residual_dims"] = names;
  c["hidden_units"] = M.hidden_names;

  ojson vocab = ojson::array();
  for (int t = 0; t < kVocab; ++t) vocab.push_back(std::string(1, token_char(t)));
  c["vocab"] = vocab;
  c["bos_token_id"] = int(kDollar);
  c["eos_token_id"] = int(kDollar);
  c["sequence"] =
      "$ A_1 + A_2 + ... + A_m = B_0 > B_1 > ... > B_m, then EOS '$'. A_i = operand i zero-padded to l digits, most "
      "significant first; B_j = a_1 + ... + a_j zero-padded to l digits and reversed (least significant first); B_0 "
      "is all zeros. The response starts at '='.";

  c["position_ids"] = {
      {"levels", 2},
      {"max_pos1", max_pos1},
      {"max_pos2", max_pos2},
      {"bos_id", 0},
      {"level1",
       "BOS 0; a digit of significance t (1 = least significant .. l) gets s1 + t, in query and response alike; "
       "every separator ('+', '=', '>') gets s1"},
      {"level2",
       "BOS 0; A_i and the '+' after it get s2 + i - 1; '=' and B_0 get s2; the '>' before B_i and B_i get s2 + i"},
      {"offsets", "s1 in [1, max_pos1 - l], s2 in [1, max_pos2 - m]; the paper's example uses s1 = 4, s2 = 2"},
      {"tables", "embed.pos1 row p / embed.pos2 row p = position part for ID p; row 0 is zero"},
      // Rows 1..max_pos use distinct hypercube vectors only while max_pos <= 2^P; beyond, IDs alias.
      {"distinct_level1", max_pos1 <= (std::int64_t(1) << L.P1)},
      {"distinct_level2", max_pos2 <= (std::int64_t(1) << L.P2)},
  };
  c["padding"] = {
      {"rule", shape ? ojson(padding_name(shape->padding)) : ojson(nullptr)},
      {"rules",
       {{"theorem", "l = n + 1 + floor(log10 m)"},
        {"minimal", "l = number of digits of m * (10^n - 1)"}}},
      {"pad", "every operand and partial sum is zero-padded to exactly l digits"},
  };
  if (shape) {
    c["shape"] = {{"n", shape->n}, {"m", shape->m}, {"l", shape->l}, {"N", shape->N()}};
  } else {
    c["shape"] = nullptr;
  }
  return c;
}

}  // namespace

void export_model(const ConstructedModel& M, const Shape* shape, std::int64_t max_pos1, std::int64_t max_pos2,
                  const std::string& dir) {
  const Layout& L = M.layout;
  if (max_pos1 < 1 || max_pos2 < 1)
    throw InputError(fmt::format("export: max positions must be >= 1 (got max_pos1={}, max_pos2={})", max_pos1, max_pos2));
  if (shape && (max_pos1 < std::int64_t(shape->l) + 1 || max_pos2 < std::int64_t(shape->m) + 1))
    throw InputError(fmt::format(
        "export: for l = {}, m = {} the position tables need max_pos1 >= {} and max_pos2 >= {} (got {}, {}), "
        "else no offset s >= 1 fits",
        shape->l, shape->m, shape->l + 1, shape->m + 1, max_pos1, max_pos2));
  // The tables grow with max_pos; refuse before allocating anything absurd.
  const double table_bytes = double(max_pos1 + max_pos2 + 2) * L.d() * 8.0;
  if (table_bytes > double(std::int64_t(1) << 30))
    throw InputError(fmt::format("export: position tables for max_pos1={}, max_pos2={} would take {:.1f} GiB (limit 1)",
                                 max_pos1, max_pos2, table_bytes / double(1 << 30)));
  if (dir.empty()) throw InputError("export: empty output directory");

  std::vector<Tensor> tensors;
  for (std::size_t h = 0; h < M.heads.size(); ++h) {
    const Head& H = M.heads[h];
    tensors.push_back(matrix_tensor(fmt::format("heads.{}.Q", h + 1), H.Q));
    tensors.push_back(matrix_tensor(fmt::format("heads.{}.K", h + 1), H.K));
    tensors.push_back(matrix_tensor(fmt::format("heads.{}.V", h + 1), H.V));
    tensors.push_back(matrix_tensor(fmt::format("heads.{}.U", h + 1), H.U));
  }
  tensors.push_back(matrix_tensor("ffn.W1", M.W1));
  tensors.push_back(vector_tensor("ffn.b1", M.b1));
  tensors.push_back(matrix_tensor("ffn.W2", M.W2));
  tensors.push_back(vector_tensor("ffn.b2", M.b2));
  tensors.push_back(matrix_tensor("readout.Wout", M.Wout));
  tensors.push_back(matrix_tensor("embed.token", M.tok_emb));
  tensors.push_back(position_table("embed.pos1", L, max_pos1, 1));
  tensors.push_back(position_table("embed.pos2", L, max_pos2, 2));

  // safetensors metadata is string -> string only.
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"manyadd_format_version", std::to_string(kExportFormatVersion)}, {"config", "config.json"}};
  const std::string config = config_json(M, shape, max_pos1, max_pos2).dump(2) + "\n";

  const fs::path out(dir);
  make_output_dir(dir);
  // Weights first: a config.json present means its weights were complete when it was written.
  write_safetensors((out / "model.safetensors").string(), tensors, meta);
  atomic_write((out / "config.json").string(), config);
}

}  // namespace manyadd
