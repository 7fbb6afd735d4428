// Shared pieces of the learn/ CLIs: the table of configuration fields that `train` exposes both as
// JSON keys and as flags, and the options built from it. The table holds names and help texts only:
// each flag's type and the default its help states come from the config structs themselves
// (to_json(ModelConfig{}), to_json(TrainConfig{})), so the help cannot drift from the code.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace manyadd::learn {

struct ModelConfig;
struct TrainConfig;
class Task;
class TrainDevice;
enum class Precision;

// The device `--device NAME` names: nullptr for cpu (the reference CPU trainer, which the trainer and
// the evaluation make themselves), the fast CPU device (cpu_fast.hpp) for cpu-fast with `threads`, the
// CUDA device for cuda (InputError without one, or for what a device does not run).
std::shared_ptr<TrainDevice> make_named_device(const std::string& name, const ModelConfig& mc, int threads, Precision p);
// --device auto (the tools' default): the fast CPU device where it runs the model (its kernels load and it
// takes the model's options: the device's own refusals decide), else the reference; never a GPU. `name`
// becomes the device chosen and `why` says why the reference was taken ("" when it was not). Other names:
// make_named_device.
std::shared_ptr<TrainDevice> make_device_auto(std::string& name, const ModelConfig& mc, int threads, Precision p,
                                              std::string& why);
// The same choice for the tools that run the fast products without a TrainDevice (the grid model's):
// cpu-fast where oneDNN loads, else cpu with `why`.
std::string resolve_device_auto(const std::string& name, std::string& why);
// A line for the progress output on what a device runs on this machine ("" for the reference CPU
// device): the fast CPU device's kernel build and oneDNN's instruction set.
std::string device_note(const std::string& name, Precision p);

// Memory of work sized by options, estimated before it starts and checked against the machine
// (core/cli.hpp's check_fits_memory; InputError naming `what`, the options to reduce).
//   problems_bytes  `count` problems of at most m operands of at most n digits held at once (an
//                   evaluation cell's samples, a training set) -- an upper bound
//   check_run_fits  a training run on the host: its data set, weights, Adam moments and one gradient
//                   buffer per thread, one step's activations, and an evaluation cell's samples; with
//                   on_device (the steps run on a GPU) the host holds no gradients and no activations
double problems_bytes(std::int64_t count, std::int64_t n, std::int64_t m);
void check_samples_fit(std::int64_t samples, std::int64_t n, std::int64_t m, const std::string& what);
// A task's cell (i, j): its instances' most digits per operand and operands (problems_bytes' n, m),
// and the check of `samples` of them.
std::pair<std::int64_t, std::int64_t> problem_bound(const Task& t, int i, int j);
void check_samples_fit(std::int64_t samples, const Task& t, int i, int j, const std::string& what);
void check_run_fits(const ModelConfig& mc, const TrainConfig& tc, bool on_device = false);

// A tool's configuration from its sources in order (config.json on --resume, --config, the flags): the
// "model" and "train" sections of src merged into cfg field by field, later sources winning; other
// sections (config.json's descriptions) ignored. InputError naming `what` when src or a section is not
// an object.
void merge_config_sections(nlohmann::json& cfg, const nlohmann::json& src, const std::string& what);

struct FieldDoc {
  const char* section;  // "model" or "train"
  const char* name;     // JSON key; the flag is --<name with '_' -> '-'>
  const char* help;
};
const std::vector<FieldDoc>& config_fields();
std::string config_flag(const FieldDoc& f);  // "--d-model" for model.d_model

// One strict option per field (core/cli.hpp: integers, unsigned integers, finite reals, non-empty
// strings, as the field's default value is typed), help "section.name: help (default V)" with V the
// struct's default. given() returns the fields set on the command line, {"model": {...}, "train": {...}}.
// The one-argument form is train's (config_fields(), ModelConfig and TrainConfig); another tool passes
// its own table (it must outlive the options) and defaults {"model": {...}, "train": {...}}.
class ConfigOptions {
 public:
  explicit ConfigOptions(CLI::App& app);
  ConfigOptions(CLI::App& app, const std::vector<FieldDoc>& fields, const nlohmann::json& defaults);
  nlohmann::json given() const;

 private:
  struct Field {
    const FieldDoc* doc = nullptr;
    CLI::Option* opt = nullptr;
    nlohmann::json::value_t type{};
    std::int64_t i = 0;
    std::uint64_t u = 0;
    double r = 0;
    std::string s;
  };
  std::deque<Field> fields_;  // stable addresses: the options write into them
};

}  // namespace manyadd::learn
