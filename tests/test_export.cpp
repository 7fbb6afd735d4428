// export_model: re-reads model.safetensors with a minimal parser written here (not the writer's
// code), checks the container (header, dtypes, contiguous in-bounds offsets) and every tensor bit for
// bit against the model, config.json against the model, and that the exported tables and the
// forward pass the config describes reproduce embed() and dense_forward on the worked example.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "manyadd/dense.hpp"
#include "manyadd/export.hpp"
#include "manyadd/format.hpp"
#include "manyadd/model.hpp"

namespace fs = std::filesystem;
using namespace manyadd;
using nlohmann::json;

namespace {

// ---- minimal independent safetensors reader ----
struct StTensor {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;
};
struct StFile {
  std::uint64_t header_len = 0;
  std::string header_text;
  std::map<std::string, StTensor> tensors;
  json metadata;
  std::string data;  // the byte buffer after the header
};

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::uint64_t u64_le(const char* b) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::uint64_t(static_cast<unsigned char>(b[i]));
  return v;
}

StFile parse_safetensors(const fs::path& p) {
  const std::string bytes = read_bytes(p);
  if (bytes.size() < 8) throw std::runtime_error("file shorter than 8 bytes");
  StFile f;
  f.header_len = u64_le(bytes.data());
  if (f.header_len > bytes.size() - 8) throw std::runtime_error("header length beyond end of file");
  f.header_text = bytes.substr(8, f.header_len);
  const json h = json::parse(f.header_text);  // throws on malformed JSON
  f.data = bytes.substr(8 + f.header_len);
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      f.metadata = it.value();
      continue;
    }
    StTensor t;
    t.dtype = it.value().at("dtype").get<std::string>();
    t.shape = it.value().at("shape").get<std::vector<std::int64_t>>();
    const auto off = it.value().at("data_offsets").get<std::vector<std::uint64_t>>();
    if (off.size() != 2) throw std::runtime_error("data_offsets of " + it.key() + " is not [begin, end]");
    t.begin = off[0];
    t.end = off[1];
    f.tensors[it.key()] = t;
  }
  return f;
}

std::vector<std::uint64_t> tensor_bits(const StFile& f, const StTensor& t) {
  std::vector<std::uint64_t> v;
  for (std::uint64_t o = t.begin; o + 8 <= t.end; o += 8) v.push_back(u64_le(f.data.data() + o));
  return v;
}

std::uint64_t bits_of(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

double from_bits(std::uint64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// A row-major F64 tensor of rank 1 or 2 as an Eigen matrix (rank 1 -> column vector).
Eigen::MatrixXd as_matrix(const StFile& f, const std::string& name) {
  const StTensor& t = f.tensors.at(name);
  const auto bits = tensor_bits(f, t);
  const Eigen::Index rows = t.shape.at(0), cols = t.shape.size() == 2 ? t.shape[1] : 1;
  Eigen::MatrixXd M(rows, cols);
  for (Eigen::Index r = 0; r < rows; ++r)
    for (Eigen::Index c = 0; c < cols; ++c) M(r, c) = from_bits(bits.at(std::size_t(r * cols + c)));
  return M;
}

// Expects tensor `name` to have shape (rows, cols) (or (rows) for vectors) and the bits of M.
void expect_tensor_equals(const StFile& f, const std::string& name, const Eigen::MatrixXd& M, bool vector = false) {
  SCOPED_TRACE(name);
  ASSERT_EQ(f.tensors.count(name), 1u);
  const StTensor& t = f.tensors.at(name);
  EXPECT_EQ(t.dtype, "F64");
  const std::vector<std::int64_t> want =
      vector ? std::vector<std::int64_t>{std::int64_t(M.size())} : std::vector<std::int64_t>{M.rows(), M.cols()};
  ASSERT_EQ(t.shape, want);
  const auto bits = tensor_bits(f, t);
  ASSERT_EQ(bits.size(), std::size_t(M.size()));
  std::size_t bad = 0;
  for (Eigen::Index r = 0; r < M.rows(); ++r)
    for (Eigen::Index c = 0; c < M.cols(); ++c)
      if (bits[std::size_t(r * M.cols() + c)] != bits_of(M(r, c))) ++bad;
  EXPECT_EQ(bad, 0u) << "elements differ from the model (row-major order expected)";
}

// A fresh directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("manyadd_test_export_" + std::to_string(::getpid()) + "_" + tag);
    fs::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// The worked example of the paper (Tables 4-26).
struct Worked {
  Shape shape = Shape::make(2, 3);
  Problem problem = parse_problem("57+48+96");
  std::int64_t s1 = 4, s2 = 2;
  int P1 = 3, P2 = 3;
};

}  // namespace

TEST(Export, ContainerIsWellFormedAndEveryTensorIsBitExact) {
  const Worked w;
  // Distinct lambdas per head, so a head written under the wrong index would show.
  const auto M = build_model(w.P1, w.P2, {9.5, 10.0, 10.5, 11.25});
  TempDir tmp("bits");
  export_model(M, &w.shape, 8, 8, tmp.path.string());
  const StFile f = parse_safetensors(tmp.path / "model.safetensors");

  ASSERT_FALSE(f.header_text.empty());
  EXPECT_EQ(f.header_text.front(), '{');
  EXPECT_EQ((8 + f.header_len) % 8, 0u) << "data should start 8-byte aligned";

  // Exactly the documented tensor names, all F64.
  std::vector<std::string> want = {"ffn.W1", "ffn.W2", "ffn.b1", "ffn.b2", "readout.Wout",
                                   "embed.token", "embed.pos1", "embed.pos2"};
  for (int h = 1; h <= 4; ++h)
    for (const char* m : {"Q", "K", "V", "U"}) want.push_back("heads." + std::to_string(h) + "." + m);
  std::sort(want.begin(), want.end());
  std::vector<std::string> got;
  for (const auto& kv : f.tensors) got.push_back(kv.first);
  EXPECT_EQ(got, want);

  // Offsets: sorted by begin they tile [0, data size) with no hole or overlap, and each span is
  // exactly 8 bytes per element of its shape.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (const auto& kv : f.tensors) {
    SCOPED_TRACE(kv.first);
    const StTensor& t = kv.second;
    EXPECT_EQ(t.dtype, "F64");
    ASSERT_LE(t.begin, t.end);
    ASSERT_LE(t.end, f.data.size());
    std::uint64_t n = 1;
    for (auto s : t.shape) n *= std::uint64_t(s);
    EXPECT_EQ(t.end - t.begin, 8 * n);
    spans.emplace_back(t.begin, t.end);
  }
  std::sort(spans.begin(), spans.end());
  std::uint64_t at = 0;
  for (const auto& s : spans) {
    EXPECT_EQ(s.first, at) << "hole or overlap in the byte buffer";
    at = s.second;
  }
  EXPECT_EQ(at, f.data.size()) << "byte buffer not entirely indexed";

  // Metadata is string -> string (the format allows nothing else).
  ASSERT_TRUE(f.metadata.is_object());
  for (auto it = f.metadata.begin(); it != f.metadata.end(); ++it) EXPECT_TRUE(it.value().is_string()) << it.key();

  for (std::size_t h = 0; h < 4; ++h) {
    const std::string p = "heads." + std::to_string(h + 1) + ".";
    expect_tensor_equals(f, p + "Q", M.heads[h].Q);
    expect_tensor_equals(f, p + "K", M.heads[h].K);
    expect_tensor_equals(f, p + "V", M.heads[h].V);
    expect_tensor_equals(f, p + "U", M.heads[h].U);
  }
  expect_tensor_equals(f, "ffn.W1", M.W1);
  expect_tensor_equals(f, "ffn.b1", M.b1, true);
  expect_tensor_equals(f, "ffn.W2", M.W2);
  expect_tensor_equals(f, "ffn.b2", M.b2, true);
  expect_tensor_equals(f, "readout.Wout", M.Wout);
  expect_tensor_equals(f, "embed.token", M.tok_emb);

  // Position tables: row p is write_position at that level (the other level at BOS = 0).
  Eigen::MatrixXd pos1 = Eigen::MatrixXd::Zero(9, M.d()), pos2 = Eigen::MatrixXd::Zero(9, M.d());
  for (int p = 0; p <= 8; ++p) {
    Eigen::VectorXd c = Eigen::VectorXd::Zero(M.d());
    write_position(M.layout, p, 0, c.data());
    pos1.row(p) = c.transpose();
    c.setZero();
    write_position(M.layout, 0, p, c.data());
    pos2.row(p) = c.transpose();
  }
  expect_tensor_equals(f, "embed.pos1", pos1);
  expect_tensor_equals(f, "embed.pos2", pos2);
  EXPECT_EQ(pos1.row(0).squaredNorm(), 0.0);
  EXPECT_EQ(pos1.row(3).squaredNorm(), 2.0 * w.P1) << "a level-1 row holds [v_p ; v_{p+1}]";

  // Nothing but the two files is left behind (no temporaries).
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(tmp.path)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"config.json", "model.safetensors"}));
}

TEST(Export, ConfigDescribesTheModel) {
  const Worked w;
  const auto M = build_model(w.P1, w.P2, {9.5, 10.0, 10.5, 11.25});
  TempDir tmp("config");
  export_model(M, &w.shape, 8, 9, tmp.path.string());
  const json c = json::parse(read_bytes(tmp.path / "config.json"));

  EXPECT_EQ(c.at("format_version").get<int>(), kExportFormatVersion);
  EXPECT_EQ(c.at("d").get<int>(), M.d());
  EXPECT_EQ(c.at("P1").get<int>(), 3);
  EXPECT_EQ(c.at("P2").get<int>(), 3);
  EXPECT_EQ(c.at("architecture").at("layers").get<int>(), 1);
  EXPECT_EQ(c.at("architecture").at("heads").get<int>(), 4);
  EXPECT_EQ(c.at("architecture").at("normalization").get<std::string>(), "none");
  EXPECT_EQ(c.at("architecture").at("d_ffn").get<int>(), 82);
  EXPECT_EQ(c.at("lambdas").get<std::vector<double>>(), (std::vector<double>{9.5, 10.0, 10.5, 11.25}));
  // The paper's names for what each head writes (Eqs. 10, 14, 18, 22).
  const std::vector<std::string> targets = {"PRE_SUM", "PRE_CARRY", "PRE_ARROW", "PRE_EOS"};
  ASSERT_EQ(c.at("heads").size(), 4u);
  for (std::size_t h = 0; h < 4; ++h) {
    const json& H = c.at("heads")[h];
    EXPECT_EQ(H.at("name").get<std::string>(), M.heads[h].name);
    EXPECT_EQ(H.at("target").get<std::string>(), targets[h]);
    EXPECT_EQ(H.at("target_index").get<int>(), M.heads[h].target);
    EXPECT_EQ(H.at("lambda").get<double>(), M.heads[h].lambda);
    EXPECT_EQ(H.at("d_qk").get<int>(), M.heads[h].Q.rows());
  }
  EXPECT_EQ(c.at("residual_dims").get<std::vector<std::string>>(), M.layout.names());
  EXPECT_EQ(c.at("residual_dims").size(), std::size_t(M.d()));
  EXPECT_EQ(c.at("hidden_units").get<std::vector<std::string>>(), M.hidden_names);
  EXPECT_EQ(c.at("vocab").get<std::vector<std::string>>(),
            (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "+", "=", ">", "$"}));
  EXPECT_EQ(c.at("bos_token_id").get<int>(), 13);
  EXPECT_EQ(c.at("eos_token_id").get<int>(), 13);
  EXPECT_EQ(c.at("position_ids").at("levels").get<int>(), 2);
  EXPECT_EQ(c.at("position_ids").at("max_pos1").get<int>(), 8);
  EXPECT_EQ(c.at("position_ids").at("max_pos2").get<int>(), 9);
  EXPECT_TRUE(c.at("position_ids").at("distinct_level1").get<bool>());
  EXPECT_FALSE(c.at("position_ids").at("distinct_level2").get<bool>()) << "9 IDs cannot be distinct in 2^3";
  EXPECT_EQ(c.at("padding").at("rule").get<std::string>(), "theorem");
  EXPECT_EQ(c.at("shape").at("n").get<int>(), 2);
  EXPECT_EQ(c.at("shape").at("m").get<int>(), 3);
  EXPECT_EQ(c.at("shape").at("l").get<int>(), 3);
  EXPECT_EQ(c.at("shape").at("N").get<int>(), 28);

  // Without a shape the config says so instead of inventing one.
  TempDir tmp2("noshape");
  export_model(M, nullptr, 8, 8, tmp2.path.string());
  const json c2 = json::parse(read_bytes(tmp2.path / "config.json"));
  EXPECT_TRUE(c2.at("shape").is_null());
  EXPECT_TRUE(c2.at("padding").at("rule").is_null());
}

TEST(Export, TablesAndDescribedForwardReproduceTheWorkedExample) {
  const Worked w;
  const auto M = build_model(w.P1, w.P2, default_lambda(w.shape.N()));
  TempDir tmp("worked");
  export_model(M, &w.shape, 8, 8, tmp.path.string());
  const StFile f = parse_safetensors(tmp.path / "model.safetensors");

  const auto toks = build_sequence(w.problem, w.shape);
  ASSERT_EQ(tokens_to_string(toks), "$057+048+096=000>750>501>102");
  const auto ids = position_ids(w.shape, w.s1, w.s2);
  const Eigen::MatrixXd X0 = embed(M, toks, ids);

  // X0[:, k] = embed.token[tok] + embed.pos1[p1] + embed.pos2[p2], exactly.
  const Eigen::MatrixXd tok = as_matrix(f, "embed.token"), pos1 = as_matrix(f, "embed.pos1"),
                        pos2 = as_matrix(f, "embed.pos2");
  const Eigen::Index N = Eigen::Index(toks.size());
  Eigen::MatrixXd T(N, M.d());  // tokens as rows, the way a PyTorch reader holds them
  for (Eigen::Index k = 0; k < N; ++k)
    T.row(k) = tok.row(toks[std::size_t(k)]) + pos1.row(ids.p1[std::size_t(k)]) + pos2.row(ids.p2[std::size_t(k)]);
  std::size_t bad = 0;
  for (Eigen::Index k = 0; k < N; ++k)
    for (Eigen::Index r = 0; r < M.d(); ++r)
      if (bits_of(T(k, r)) != bits_of(X0(r, k))) ++bad;
  EXPECT_EQ(bad, 0u) << "embedding from the exported tables differs from embed()";

  // The forward pass exactly as config.json describes it, from the exported tensors only, in the
  // row-per-token form bench/load_constructed.py uses. It must give dense_forward's predictions
  // (the paper's output 000>750>501>102$ in the response) and its logits up to rounding.
  Eigen::MatrixXd Y = T;
  for (int h = 1; h <= 4; ++h) {
    const std::string p = "heads." + std::to_string(h) + ".";
    const Eigen::MatrixXd Q = as_matrix(f, p + "Q"), K = as_matrix(f, p + "K"), V = as_matrix(f, p + "V"),
                          U = as_matrix(f, p + "U");
    const Eigen::MatrixXd q = T * Q.transpose(), k = T * K.transpose(), v = T * V.transpose();  // (N, *)
    const Eigen::MatrixXd S = q * k.transpose();  // S(j, i) = (K x_i).(Q x_j)
    Eigen::MatrixXd out = Eigen::MatrixXd::Zero(N, 1);
    for (Eigen::Index j = 0; j < N; ++j) {
      const double mx = S.row(j).head(j + 1).maxCoeff();
      double z = 0, acc = 0;
      for (Eigen::Index i = 0; i <= j; ++i) {
        const double e = std::exp(S(j, i) - mx);
        z += e;
        acc += e * v(i, 0);
      }
      out(j, 0) = acc / z;
    }
    Y += out * U.transpose();
  }
  const Eigen::MatrixXd W1 = as_matrix(f, "ffn.W1"), b1 = as_matrix(f, "ffn.b1"), W2 = as_matrix(f, "ffn.W2"),
                        b2 = as_matrix(f, "ffn.b2"), Wout = as_matrix(f, "readout.Wout");
  Eigen::MatrixXd hidden = (Y * W1.transpose()).rowwise() + b1.col(0).transpose();
  hidden = hidden.cwiseMax(0.0);
  Eigen::MatrixXd X1 = Y + hidden * W2.transpose();
  X1.rowwise() += b2.col(0).transpose();
  const Eigen::MatrixXd logits = X1 * Wout.transpose();  // (N, 14)

  const auto R = dense_forward<double>(M, X0);
  // Both sum the same products in possibly different orders; logits are O(100) (EOS weight), so
  // 1e-9 is ~1e5 ulps of room for reassociation and far below the >= 0.5 margins of the argmax.
  EXPECT_LT((logits - R.logits.transpose()).cwiseAbs().maxCoeff(), 1e-9);
  std::string response;
  for (Eigen::Index k = w.shape.eq_index(); k < N; ++k) {
    Eigen::Index best;
    logits.row(k).maxCoeff(&best);
    EXPECT_EQ(std::uint8_t(best), R.pred[std::size_t(k)]) << "position " << k;
    response.push_back(token_char(int(best)));
  }
  EXPECT_EQ(response, "000>750>501>102$");
}

TEST(Export, RefusesBadArgumentsAndUnwritableDirectories) {
  const Worked w;
  const auto M = build_model(w.P1, w.P2, 10.0);
  TempDir tmp("errors");
  fs::create_directories(tmp.path);
  // A regular file where the directory should be: fails for every user, root included.
  const fs::path file = tmp.path / "not_a_dir";
  std::ofstream(file) << "x";
  EXPECT_THROW(export_model(M, &w.shape, 8, 8, file.string()), InputError);
  EXPECT_THROW(export_model(M, &w.shape, 8, 8, (file / "sub").string()), InputError);
  // max_pos1 = l leaves no room for an offset s1 >= 1; max_pos2 = m likewise.
  EXPECT_THROW(export_model(M, &w.shape, w.shape.l, 8, (tmp.path / "a").string()), InputError);
  EXPECT_THROW(export_model(M, &w.shape, 8, w.shape.m, (tmp.path / "b").string()), InputError);
  EXPECT_THROW(export_model(M, nullptr, 0, 8, (tmp.path / "c").string()), InputError);
  EXPECT_FALSE(fs::exists(tmp.path / "a"));
  // The smallest admissible tables are accepted.
  EXPECT_NO_THROW(export_model(M, &w.shape, w.shape.l + 1, w.shape.m + 1, (tmp.path / "d").string()));
  EXPECT_TRUE(fs::exists(tmp.path / "d" / "model.safetensors"));
}
