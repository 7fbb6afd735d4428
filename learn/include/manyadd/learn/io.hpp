// Model files of learn/: parameters <-> safetensors tensors (core/safetensors.hpp is the one reader
// and writer) and model directories (config.json + model.safetensors).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "manyadd/core/files.hpp"
#include "manyadd/core/safetensors.hpp"
#include "manyadd/learn/model.hpp"

namespace manyadd::learn {

// Parameters <-> tensors of a layout (F32, named prefix + layout name).
std::vector<Tensor> params_to_tensors(const Layout& lay, const std::vector<float>& p, const std::string& prefix = "");
// Fills p (size lay.total) from the tensors named prefix + layout names; shapes must match exactly.
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

// Creates an output directory (and its parents); InputError with the OS message when it cannot be
// (a file in the way, no permission): the user's to correct.
void make_output_dir(const std::string& dir);

}  // namespace manyadd::learn
