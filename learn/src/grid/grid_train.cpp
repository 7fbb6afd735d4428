// Data, loss, training and evaluation of the grid universal transformer: see grid_train.hpp.
#include "manyadd/learn/grid/grid_train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <fmt/format.h>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/core/parallel.hpp"
#include "manyadd/core/safetensors.hpp"
#include "manyadd/learn/devices/batch.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/runs/run_files.hpp"

namespace manyadd::learn::grid {


// ---- configuration -------------------------------------------------------------------------------------------

LossOptions GridTrainConfig::loss_options() const {
  LossOptions o;
  o.reg = regularizer == "kl" ? Regularizer::kl : Regularizer::er;
  o.beta = beta, o.kl_lambda_p = kl_lambda_p, o.pad_weight = pad_weight;
  return o;
}

void GridTrainConfig::validate() const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw InputError("train." + msg);
  };
  const Instance ti = Instance::parse(train_instance);
  Instance::parse(eval_instance);
  need(term_groups >= 1 && term_groups <= 64, fmt::format("term_groups must be in [1, 64] (got {})", term_groups));
  training_groups(ti, term_groups);
  need(batch >= term_groups && batch <= 100000, fmt::format("batch must be in [term_groups, 100000] (got {})", batch));
  need(extra_rows >= 0 && extra_rows <= 1000 && extra_cols >= 0 && extra_cols <= 1000,
       "extra_rows and extra_cols must be in [0, 1000]");
  need(rand_rows >= 0 && rand_rows <= 1000 && rand_cols >= 0 && rand_cols <= 1000,
       "rand_rows and rand_cols must be in [0, 1000]");
  need(pad_weight >= 0 && pad_weight <= 1, fmt::format("pad_weight must be in [0, 1] (got {})", pad_weight));
  need(regularizer == "er" || regularizer == "kl", fmt::format("regularizer '{}' unknown (er|kl)", regularizer));
  need(beta >= 0 && beta <= 1000, fmt::format("beta must be in [0, 1000] (got {})", beta));
  need(kl_lambda_p > 0 && kl_lambda_p < 1, fmt::format("kl_lambda_p must be in (0, 1) (got {})", kl_lambda_p));
  need(epochs >= 1 && epochs <= 1'000'000, fmt::format("epochs must be in [1, 1e6] (got {})", epochs));
  need(steps_per_epoch >= 1 && steps_per_epoch <= 1'000'000, "steps_per_epoch must be in [1, 1e6]");
  need(lr > 0 && lr < 10 && min_lr >= 0 && min_lr <= lr, "lr must be in (0, 10) and min_lr in [0, lr]");
  need(lr_period_epochs >= 1, "lr_period_epochs must be >= 1");
  need(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "beta1 and beta2 must be in [0, 1)");
  need(adam_eps > 0, "adam_eps must be > 0");
  need(weight_decay >= 0 && weight_decay < 100, "weight_decay must be in [0, 100)");
  need(grad_clip >= 0, "grad_clip must be >= 0 (0: no clipping)");
  need(threads >= 1 && threads <= 256, fmt::format("threads must be in [1, 256] (got {})", threads));
  need(log_every >= 1, "log_every must be >= 1");
  need(checkpoint_every >= 0 && eval_every >= 0, "checkpoint_every and eval_every must be >= 0");
  need(eval_samples >= 1 && eval_samples <= 10'000'000, "eval_samples must be in [1, 1e7]");
  need(cache_mb >= 0 && cache_mb <= 1'000'000, "cache_mb must be in [0, 1e6]");
}

void to_json(nlohmann::json& j, const GridTrainConfig& c) {
  j = nlohmann::json{{"train_instance", c.train_instance},
                     {"term_groups", c.term_groups},
                     {"batch", c.batch},
                     {"extra_rows", c.extra_rows},
                     {"extra_cols", c.extra_cols},
                     {"rand_rows", c.rand_rows},
                     {"rand_cols", c.rand_cols},
                     {"pad_weight", c.pad_weight},
                     {"regularizer", c.regularizer},
                     {"beta", c.beta},
                     {"kl_lambda_p", c.kl_lambda_p},
                     {"epochs", c.epochs},
                     {"steps_per_epoch", c.steps_per_epoch},
                     {"lr", c.lr},
                     {"min_lr", c.min_lr},
                     {"lr_period_epochs", c.lr_period_epochs},
                     {"beta1", c.beta1},
                     {"beta2", c.beta2},
                     {"adam_eps", c.adam_eps},
                     {"weight_decay", c.weight_decay},
                     {"grad_clip", c.grad_clip},
                     {"seed", c.seed},
                     {"threads", c.threads},
                     {"log_every", c.log_every},
                     {"checkpoint_every", c.checkpoint_every},
                     {"eval_every", c.eval_every},
                     {"eval_instance", c.eval_instance},
                     {"eval_samples", c.eval_samples},
                     {"cache_mb", c.cache_mb}};
}

void from_json(const nlohmann::json& j, GridTrainConfig& c) {
  check_config_fields(j, GridTrainConfig{}, "train");
  auto gets = [&](const char* k, std::string& v) {
    if (j.contains(k)) v = j[k].get<std::string>();
  };
  auto geti = [&](const char* k, auto& v) {
    if (j.contains(k)) v = std::decay_t<decltype(v)>(j[k].get<std::int64_t>());
  };
  auto getd = [&](const char* k, double& v) {
    if (j.contains(k)) v = j[k].get<double>();
  };
  gets("train_instance", c.train_instance);
  geti("term_groups", c.term_groups);
  geti("batch", c.batch);
  geti("extra_rows", c.extra_rows);
  geti("extra_cols", c.extra_cols);
  geti("rand_rows", c.rand_rows);
  geti("rand_cols", c.rand_cols);
  getd("pad_weight", c.pad_weight);
  gets("regularizer", c.regularizer);
  getd("beta", c.beta);
  getd("kl_lambda_p", c.kl_lambda_p);
  geti("epochs", c.epochs);
  geti("steps_per_epoch", c.steps_per_epoch);
  getd("lr", c.lr);
  getd("min_lr", c.min_lr);
  geti("lr_period_epochs", c.lr_period_epochs);
  getd("beta1", c.beta1);
  getd("beta2", c.beta2);
  getd("adam_eps", c.adam_eps);
  getd("weight_decay", c.weight_decay);
  getd("grad_clip", c.grad_clip);
  if (j.contains("seed")) c.seed = j["seed"].get<std::uint64_t>();
  geti("threads", c.threads);
  geti("log_every", c.log_every);
  geti("checkpoint_every", c.checkpoint_every);
  geti("eval_every", c.eval_every);
  gets("eval_instance", c.eval_instance);
  geti("eval_samples", c.eval_samples);
  geti("cache_mb", c.cache_mb);
  c.validate();
}


double grid_lr_at(const GridTrainConfig& c, std::int64_t t) {
  const std::int64_t e = (t - 1) / c.steps_per_epoch;
  const double x = double(e % c.lr_period_epochs) / double(c.lr_period_epochs);
  return c.min_lr + (c.lr - c.min_lr) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * x));
}

// ---- the trainer ---------------------------------------------------------------------------------------------

namespace {
// The run's streams: initialization; the data, the training runs and the evaluation-mode runs of step t,
// group g; the validation set.
enum Stream : std::uint64_t { kInit = 0x6A1D, kData = 0xDA7A00, kTrainRun = 0x7A1400, kEvalRun = 0xE7A100, kValid = 0x7A11D };

nlohmann::json model_section(const nlohmann::json& cfg, const std::string& what, GridConfig& c) {
  if (!cfg.is_object() || !cfg.contains("model")) throw InputError(fmt::format("'{}' has no \"model\" section", what));
  try {
    from_json(cfg["model"], c);
  } catch (const InputError& e) {
    throw InputError(fmt::format("'{}': {}", what, e.what()));
  }
  return cfg["model"];
}
}  // namespace

GridTrainer::GridTrainer(const GridConfig& mc, const GridTrainConfig& tc)
    : mc_(mc), tc_(tc), lay_(GridLayout::make(mc)) {
  tc_.validate();
  groups_ = training_groups(Instance::parse(tc_.train_instance), tc_.term_groups);
  segs_ = lay_.lay.trainable_segments();
  ws_.cache_bytes = double(tc_.cache_mb) * 1048576.0;
  params_ = grid_init_params<float>(mc_, lay_, seed_mix(tc_.seed, kInit));
  m_.assign(params_.size(), 0.f);
  v_.assign(params_.size(), 0.f);
}

std::vector<GridBatch> GridTrainer::batches(std::int64_t t) const {
  std::vector<GridBatch> out;
  int left = tc_.batch, groups_left = tc_.term_groups;
  for (int g = 0; g < tc_.term_groups; ++g) {
    const int count = left / groups_left;  // generators.py: tot_bsize // tot_groups, in turn
    left -= count, --groups_left;
    Rng rng(seed_mix(tc_.seed, std::uint64_t(t), kData + std::uint64_t(g)));
    const auto [H, W] = draw_grid_size(groups_[std::size_t(g)], tc_.grid_rule(), rng);
    std::vector<Problem> ps;
    for (int i = 0; i < count; ++i) ps.push_back(sample_problem(rng, groups_[std::size_t(g)]));
    out.push_back(make_batch(std::move(ps), H, W));
  }
  return out;
}

GridStepStats GridTrainer::step() {
  const std::int64_t t = step_ + 1;
  const std::vector<GridBatch> bs = batches(t);
  grads_.assign(params_.size(), 0.f);
  GridStepStats st;
  st.lr = grid_lr_at(tc_, t);
  const GridView<float> m = view();
  const float scale = 1.f / float(tc_.term_groups);
  double acc_sum = 0, train_steps = 0, eval_steps = 0;
  int samples = 0;
  for (int g = 0; g < tc_.term_groups; ++g) {
    const GridBatch& b = bs[std::size_t(g)];
    // a_b: the character accuracy of an evaluation-mode run on the same batch (train.py runs net.eval()
    // on it with train_max_steps before the regularizer)
    const BatchEval ev = eval_batch(m, b, seed_mix(tc_.seed, std::uint64_t(t), kEvalRun + std::uint64_t(g)), false,
                                    mc_.max_steps_train, tc_.threads, ws_.acts);
    std::vector<double> acc(static_cast<std::size_t>(b.B));
    for (int i = 0; i < b.B; ++i) {
      const auto [c, v] = ev.matches[std::size_t(i)];
      acc[std::size_t(i)] = double(c) / double(v);
      acc_sum += acc[std::size_t(i)], eval_steps += ev.steps[std::size_t(i)];
    }
    const GroupResult r = group_loss(grads_.data(), m, b, acc, tc_.loss_options(),
                                     seed_mix(tc_.seed, std::uint64_t(t), kTrainRun + std::uint64_t(g)), scale,
                                     tc_.threads, ws_);
    st.task += r.task / tc_.term_groups, st.reg += r.reg / tc_.term_groups;
    for (int n : r.steps) train_steps += n;
    st.cell_steps += r.cell_steps;
    samples += b.B;
  }
  st.loss = st.task + st.reg;
  st.train_acc = acc_sum / samples, st.steps_train = train_steps / samples, st.steps_eval = eval_steps / samples;
  double ss = 0;
  for (float g : grads_) ss += double(g) * double(g);
  st.grad_norm = std::sqrt(ss);
  const AdamScalars s =
      adam_scalars(st.lr, tc_.beta1, tc_.beta2, tc_.adam_eps, tc_.weight_decay, tc_.grad_clip, t, st.grad_norm);
  adamw_segments(params_.data(), m_.data(), v_.data(), grads_.data(), segs_, s);
  step_ = t;
  return st;
}

void GridTrainer::save(const std::string& dir, const std::map<std::string, std::string>& run_state) const {
  make_output_dir(dir);
  nlohmann::json cfg;
  cfg["model"] = mc_;
  cfg["train"] = tc_;
  cfg["step"] = step_;
  // where the run's pieces ran and the settings a resume changed (run_state: "devices", "train_changes")
  nlohmann::json run = nlohmann::json::object();
  for (const char* k : {"devices", "train_changes"})
    if (run_state.count(k)) run[k] = run_state.at(k);
  if (!run.empty()) cfg["run"] = run;
  cfg["family"] = "grid-ut";
  cfg["architecture"] = grid_architecture_description(mc_);
  cfg["format"] = {{"vocabulary", "0123456789+=_ (token 12, '_', is PAD)"},
                   {"input", "'a+b+...=' then PAD to the batch's longest"},
                   {"output", "the top row's W columns: the sum right-aligned, PAD before it"}};
  atomic_write(dir + "/config.json", cfg.dump(2) + "\n");
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : run_state) meta["run." + k] = v;
  meta["model_config"] = nlohmann::json(mc_).dump();
  write_run_checkpoint(dir, lay_.lay, params_, m_, v_, step_, meta);
}

void GridTrainer::load_checkpoint(const std::string& dir) {
  auto check = [&](const std::map<std::string, std::string>& meta) {
    if (!checkpoint_config_is(meta, mc_))
      throw InputError(fmt::format("'{}/checkpoint.safetensors' was written for another model configuration", dir));
  };
  RunCheckpoint c = read_run_checkpoint(dir, lay_.lay, params_, m_, v_, check);
  step_ = c.step;
  run_state_ = std::move(c.run_state);
}

// ---- evaluation ---------------------------------------------------------------------------------------------

double InstanceResult::mean_steps() const {
  double s = 0;
  for (std::size_t k = 0; k < steps_hist.size(); ++k) s += double(k) * double(steps_hist[k]);
  return samples ? s / double(samples) : 0.0;
}

nlohmann::json InstanceResult::to_json() const {
  return {{"instance", inst.name()},      {"samples", samples},         {"char_acc", char_acc()},
          {"seq_acc", seq_acc()},         {"char_correct", char_correct}, {"char_valid", char_valid},
          {"seq_correct", seq_correct},   {"mean_steps", mean_steps()}, {"steps_hist", steps_hist},
          {"cell_steps", cell_steps},     {"seconds", seconds}};
}

InstanceResult evaluate_instance(const GridView<float>& m, const Instance& inst, std::int64_t samples,
                                 std::uint64_t seed, const GridSizeRule& rule, int batch, bool greedy, int max_steps,
                                 int threads, Progress* progress,
                                 const std::function<void(const GridBatch&, const BatchEval&)>& each_batch,
                                 Interventions iv) {
  inst.validate();
  if (samples < 1 || batch < 1) throw InputError("evaluation needs samples >= 1 and batch >= 1");
  const auto t0 = std::chrono::steady_clock::now();
  InstanceResult r;
  r.inst = inst;
  const std::string name = inst.name();
  const std::uint64_t si = seed_mix(seed, fnv1a64(name.data(), name.size()));
  std::vector<SampleActs<float>> ws;
  for (std::int64_t j = 0; j * batch < samples; ++j) {
    Rng rng(seed_mix(si, std::uint64_t(j)));
    const auto [H, W] = draw_grid_size(inst, rule, rng);
    std::vector<Problem> ps;
    for (std::int64_t i = j * batch; i < std::min(samples, (j + 1) * batch); ++i) ps.push_back(sample_problem(rng, inst));
    const GridBatch b = make_batch(std::move(ps), H, W);
    const BatchEval e =
        eval_batch(m, b, seed_mix(si, std::uint64_t(j), 0xB3), greedy, max_steps, threads, ws, progress, iv);
    for (int i = 0; i < b.B; ++i) {
      const auto [c, v] = e.matches[std::size_t(i)];
      r.char_correct += c, r.char_valid += v, r.seq_correct += c == v;
      const std::size_t k = std::size_t(e.steps[std::size_t(i)]);
      if (r.steps_hist.size() <= k) r.steps_hist.resize(k + 1, 0);
      ++r.steps_hist[k];
    }
    r.samples += b.B;
    r.cell_steps += e.cell_steps;
    if (each_batch) each_batch(b, e);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

double grid_sample_bytes(const GridConfig& c, int S, int H, int W, bool keep, int steps) {
  const double C = c.d_emb, D = c.d_s2g, F = c.d_ffn, HW = double(H) * W, KK = double(c.kernel) * c.kernel,
               SC = c.context_len, n = keep ? double(steps) : 1.0;
  const double front = double(S) * (C + 2 * D + 6) + (keep ? double(S) + 1 : 1.0) * HW * C;
  const double grids = (keep ? n + 1 : 2.0) * HW * C;
  const double ut = HW * (9 * C + double(c.heads) * KK + 6 * F + 4);  // ut_forward's buffers
  const double ctx = c.halting == Halting::ponder ? HW * 2 * C + c.context_heads * SC * HW + SC * (12 * C + 3 * c.d_ctx_ffn) : 0.0;
  const double dec = double(W) * (2 * C + 3 * c.vocab);
  const double back = keep ? HW * (8 * C + 4 * F) + HW * C * 3 : HW * F;  // the backward's (and forward's) scratch
  return 4.0 * (front + grids + n * (ut + ctx + dec) + back);
}

void check_grid_run_fits(const GridConfig& mc, const GridTrainConfig& tc) {
  const Instance ti = Instance::parse(tc.train_instance);
  const GridSizeRule r = tc.grid_rule();
  const int H = ti.terms_hi + r.extra_rows + r.rand_rows, W = ti.digits_hi + r.extra_cols + r.rand_cols;
  const int S = ti.terms_hi * (ti.digits_hi + 1);
  const double params = double(GridLayout::make(mc).lay.total) * 4.0;
  const double blocks = double((tc.batch / std::max(1, tc.term_groups) + kBlock - 1) / kBlock);
  const double bytes = params * (4.0 + blocks) + double(tc.cache_mb) * 1048576.0 +
                       double(tc.threads) * grid_sample_bytes(mc, S, H, W, true, std::max(mc.max_steps_train, 1)) +
                       double(tc.batch) * (double(S) + double(W) * 4.0 + 64.0 + 8.0 * mc.max_steps_train);
  cli::check_fits_memory(bytes, "this training run (reduce --threads, --batch, --max-steps-train or the grid)");
  const Instance vi = Instance::parse(tc.eval_instance);
  check_grid_eval_fits(mc, vi.terms_hi * (vi.digits_hi + 1), vi.terms_hi + r.extra_rows + r.rand_rows,
                       vi.digits_hi + r.extra_cols + r.rand_cols, tc.threads);
}

void check_grid_eval_fits(const GridConfig& mc, int S, int H, int W, int threads) {
  const double bytes = double(threads) * grid_sample_bytes(mc, S, H, W, false, 1);
  cli::check_fits_memory(bytes, fmt::format("evaluating on {} x {} grids (reduce --threads or the instance)", H, W));
}

LoadedGridModel load_grid_model(const std::string& dir) {
  LoadedGridModel m;
  m.config_json = read_json_file(dir + "/config.json");
  model_section(m.config_json, dir + "/config.json", m.cfg);
  m.lay = GridLayout::make(m.cfg);
  const SafetensorsFile f = read_safetensors(dir + "/model.safetensors");
  check_tensor_set(m.lay.lay, f, {""});
  tensors_to_params(m.lay.lay, f, m.params);
  return m;
}

// ---- the training loop ------------------------------------------------------------------------------------------

namespace {
const char kGridLogHeader[] =
    "step,epoch,lr,loss,task_loss,reg_loss,grad_norm,train_char_acc,steps_train,steps_eval,cell_steps_per_s,elapsed_s";
const char kGridEvalHeader[] = "step,char_acc,seq_acc,mean_steps,elapsed_s";
// The log window's sums (restored from a checkpoint, so the rows after a resume are the uninterrupted run's).
const char* const kWindow[] = {"loss", "task", "reg", "train_acc", "steps_train", "steps_eval"};
}  // namespace

nlohmann::json run_grid_training(const GridConfig& mc, const GridTrainConfig& tc, const std::string& dir, bool resume,
                                 std::int64_t stop_after, double max_seconds, const ProgressOptions& progress,
                                 bool fast) {
  check_output_dir_name(dir);  // before the progress line starts and anything is read
  if (!resume && path_exists(dir + "/checkpoint.safetensors"))
    throw InputError(
        fmt::format("'{}' already holds a run (checkpoint.safetensors); pass --resume or choose another --out", dir));
  if (fast) require_fast_products();
  GridTrainer tr(mc, tc);
  tr.set_fast(fast);
  if (resume) tr.load_checkpoint(dir);
  // Which device ran which steps ("cpu@0 cpu-fast@1753": from step 1753 on cpu-fast): the two give the
  // same run up to fp32 rounding, each bit for bit at any thread count.
  const std::string device = fast ? "cpu-fast" : "cpu";
  std::string devices = resume && tr.run_state().count("devices") ? tr.run_state().at("devices") : "";
  if (devices.empty() && resume && tr.steps_done() > 0) devices = "cpu@0";  // runs from before the option
  if (devices.empty() || devices.substr(devices.rfind(' ') + 1, device.size() + 1) != device + "@")
    devices += (devices.empty() ? "" : " ") + device + "@" + std::to_string(tr.steps_done());
  const Instance valid = Instance::parse(tc.eval_instance);
  const std::int64_t total = tc.steps();
  const RunPiece piece = begin_run_piece(dir, resume, total, tr.steps_done(), stop_after, max_seconds, progress);
  const std::int64_t end = piece.end;
  Progress prog("train_grid", end, "steps", piece.progress);
  if (end < total) prog.note(fmt::format("stopping at step {} of {}", end, total));
  std::int64_t win_n = 0;
  double win[6] = {0, 0, 0, 0, 0, 0}, last_gnorm = NAN;
  // The train settings a resume changed, and at which step (the first piece's settings are those of
  // the checkpoint's run.train_config before the first change).
  std::string train_changes =
      resume && tr.run_state().count("train_changes") ? tr.run_state().at("train_changes") : "";
  if (resume) {
    const auto& rs = tr.run_state();
    const std::string what = dir + "/checkpoint.safetensors";
    try {
      if (rs.count("log_window_steps"))
        win_n = cli::parse_int(rs.at("log_window_steps"), "run.log_window_steps", 0, tr.steps_done());
      for (int k = 0; k < 6; ++k) {
        const std::string key = std::string("log_window_") + kWindow[k];
        if (rs.count(key)) win[k] = from_bits(rs.at(key), "run." + key);
      }
      if (rs.count("last_grad_norm")) last_gnorm = from_bits(rs.at("last_grad_norm"), "run.last_grad_norm");
    } catch (const InputError& e) {
      throw InputError(fmt::format("'{}': {}", what, e.what()));
    }
    // threads and cache_mb do not change the run (the trainer's results do not depend on them)
    const std::string diff = resumed_train_changes(rs, what, tc, {"threads", "cache_mb"});
    if (!diff.empty()) {
      prog.message("resuming with train settings other than the checkpoint's:" + diff +
                       " the steps from here differ from the run's",
                   true);
      train_changes = add_train_change(train_changes, tr.steps_done(), diff);
    }
  }
  RunLogs logs;
  open_run_logs(logs, dir, kGridLogHeader, 12, kGridEvalHeader, 5, tr.steps_done(), resume);
  const std::int64_t last_eval = logs.last_eval;
  std::ofstream &csv = logs.log, &ecsv = logs.eval;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto last = t0;
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  std::int64_t win_cells = 0, total_cells = 0;
  nlohmann::json evals = nlohmann::json::array();
  InstanceResult last_valid;
  auto do_eval = [&] {
    last_valid = evaluate_instance(tr.view(), valid, tc.eval_samples, seed_mix(tc.seed, kValid), tc.grid_rule(), 128,
                                   false, mc.max_steps_eval, tc.threads);
    if (tr.steps_done() > last_eval)
      ecsv << fmt::format("{},{:.6f},{:.6f},{:.4f},{:.1f}\n", tr.steps_done(), last_valid.char_acc(),
                          last_valid.seq_acc(), last_valid.mean_steps(), elapsed())
           << std::flush;
    prog.message(fmt::format("eval step {}: {} char {:.4f} seq {:.4f} mean steps {:.2f} ({} samples)", tr.steps_done(),
                             valid.name(), last_valid.char_acc(), last_valid.seq_acc(), last_valid.mean_steps(),
                             tc.eval_samples));
    evals.push_back({{"step", tr.steps_done()}, {"char_acc", last_valid.char_acc()}, {"seq_acc", last_valid.seq_acc()},
                     {"mean_steps", last_valid.mean_steps()}});
  };
  auto save = [&] {
    std::map<std::string, std::string> rs = {{"log_window_steps", std::to_string(win_n)},
                                             {"last_grad_norm", double_bits(last_gnorm)},
                                             {"train_config", nlohmann::json(tc).dump()},
                                             {"devices", devices},
                                             {"train_changes", train_changes}};
    for (int k = 0; k < 6; ++k) rs[std::string("log_window_") + kWindow[k]] = double_bits(win[k]);
    tr.save(dir, rs);
  };
  GridStepStats last_st;
  while (tr.steps_done() < end) {
    const GridStepStats st = tr.step();
    last_st = st;
    const std::int64_t s = tr.steps_done();
    const double vals[6] = {st.loss, st.task, st.reg, st.train_acc, st.steps_train, st.steps_eval};
    for (int k = 0; k < 6; ++k) win[k] += vals[k];
    win_n += 1, last_gnorm = st.grad_norm;
    win_cells += st.cell_steps, total_cells += st.cell_steps;
    const bool log_now = s % tc.log_every == 0 || s == total;
    const bool eval_now = tc.eval_every > 0 && s % tc.eval_every == 0 && s != total;
    const bool save_now = tc.checkpoint_every > 0 && s % tc.checkpoint_every == 0;
    if (log_now) {
      const auto now = clock::now();
      const double dt = std::chrono::duration<double>(now - last).count();
      const double cps = dt > 0 ? double(win_cells) / dt : 0;
      const double n = double(win_n);
      prog.note(fmt::format("loss {:.4f} (reg {:.4f}) acc {:.3f} steps {:.1f}/{:.1f} lr {:.2e} | {:.0f} cell-steps/s{}",
                            win[0] / n, win[2] / n, win[3] / n, win[4] / n, win[5] / n, st.lr, cps,
                            end < total ? fmt::format(" | stopping at step {} of {}", end, total) : ""));
      csv << fmt::format("{},{},{:.6e},{:.6f},{:.6f},{:.6f},{:.4f},{:.4f},{:.3f},{:.3f},{:.0f},{:.1f}\n", s,
                         (s - 1) / tc.steps_per_epoch, st.lr, win[0] / n, win[1] / n, win[2] / n, st.grad_norm,
                         win[3] / n, win[4] / n, win[5] / n, cps, elapsed())
          << std::flush;
      last = now, win_n = 0, win_cells = 0;
      for (double& w : win) w = 0;
    }
    prog.set(s);
    if (eval_now) do_eval();
    if (save_now) save();
    if (max_seconds > 0 && elapsed() >= max_seconds) {
      prog.message(fmt::format("stopping at step {}: --max-seconds {} reached (resume with --resume)", s, max_seconds));
      break;
    }
  }
  save();
  prog.finish();
  nlohmann::json out;
  const double secs = elapsed();
  out["steps"] = tr.steps_done();
  out["finished"] = tr.steps_done() >= total;
  out["final_loss"] = last_st.loss;
  out["seconds"] = secs;
  out["cell_steps_per_s"] = secs > 0 ? double(total_cells) / secs : 0;
  out["device"] = device;
  out["devices"] = devices;
  out["train_changes"] = train_changes;
  out["parameters"] = tr.layout().lay.total;
  if (tr.steps_done() >= total) {
    do_eval();
    out["validation"] = last_valid.to_json();
  }
  out["evals"] = evals;
  return out;
}

}  // namespace manyadd::learn::grid
