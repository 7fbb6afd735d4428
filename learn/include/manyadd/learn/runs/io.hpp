// Model files of learn/: parameters <-> safetensors tensors (core/safetensors.hpp is the one reader
// and writer) and model directories (config.json + model.safetensors). A file's tensors must be
// exactly those its configuration implies -- no tensor missing, none extra, every shape equal, a
// floating-point dtype -- and that is checked before the parameters are allocated: a configuration
// cannot make a reader allocate more than the file holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "manyadd/core/files.hpp"
#include "manyadd/core/safetensors.hpp"
#include "manyadd/learn/decoder/model.hpp"

namespace manyadd::learn {

// Parameters <-> tensors of a layout (F32, named prefix + layout name).
std::vector<Tensor> params_to_tensors(const Layout& lay, const std::vector<float>& p, const std::string& prefix = "");
// InputError naming the file and the tensor unless f holds exactly the tensors prefix + name for every
// prefix and every tensor of the layout, with the layout's shapes and floating-point dtypes.
void check_tensor_set(const Layout& lay, const SafetensorsFile& f, const std::vector<std::string>& prefixes);
// Fills p (size lay.total) from the tensors named prefix + layout names; shapes must match exactly
// (call check_tensor_set first: this checks each tensor it reads, not the whole file).
void tensors_to_params(const Layout& lay, const SafetensorsFile& f, std::vector<float>& p, const std::string& prefix = "");

// A model directory: config.json ({"model": ModelConfig, ...}) + model.safetensors.
struct LoadedModel {
  ModelConfig cfg;
  Layout lay;
  std::vector<float> params;
  nlohmann::json config_json;  // the whole config.json
  ModelView<float> view() const { return {cfg, lay, params.data()}; }
};
LoadedModel load_model_dir(const std::string& dir);  // throws InputError
// The same from a parsed config.json and weights already read (`config_what` names the config in
// messages): the model section parsed, the weights checked against it, then the parameters filled.
LoadedModel load_model(const nlohmann::json& config_json, const SafetensorsFile& weights, const std::string& config_what);

// Output directories: core/files.hpp's make_output_dir.

}  // namespace manyadd::learn
