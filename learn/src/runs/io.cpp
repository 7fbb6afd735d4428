// Model files of learn/: see io.hpp.
#include "manyadd/learn/runs/io.hpp"

#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace manyadd::learn {

std::vector<Tensor> params_to_tensors(const Layout& lay, const std::vector<float>& p, const std::string& prefix) {
  std::vector<Tensor> ts;
  for (auto& t : lay.tensors)
    ts.push_back(make_tensor(prefix + t.name, t.shape,
                             std::vector<float>(p.begin() + t.offset, p.begin() + t.offset + t.size)));
  return ts;
}

void check_tensor_set(const Layout& lay, const SafetensorsFile& f, const std::vector<std::string>& prefixes) {
  std::map<std::string, const TensorSpec*> want;
  for (const auto& prefix : prefixes)
    for (const auto& spec : lay.tensors) want[prefix + spec.name] = &spec;
  std::map<std::string, const Tensor*> have;
  for (const Tensor& t : f.tensors) {
    const auto w = want.find(t.name);
    if (w == want.end())
      throw InputError(fmt::format("'{}': tensor '{}' is not part of the model its configuration describes (a "
                                   "configuration and weights that disagree, e.g. fewer layers or another pos_mode)",
                                   f.path, t.name));
    if (t.shape != w->second->shape)
      throw InputError(fmt::format("'{}': tensor '{}' has shape [{}], the configuration implies [{}]", f.path, t.name,
                                   fmt::join(t.shape, ", "), fmt::join(w->second->shape, ", ")));
    if (!dtype_is_float(t.dtype))
      throw InputError(fmt::format("'{}': tensor '{}' is {}, weights are floating point", f.path, t.name,
                                   dtype_name(t.dtype)));
    have[t.name] = &t;
  }
  for (const auto& [name, spec] : want)
    if (!have.count(name))
      throw InputError(fmt::format("'{}': tensor '{}' (shape [{}]) is missing: the configuration implies it", f.path,
                                   name, fmt::join(spec->shape, ", ")));
}

void tensors_to_params(const Layout& lay, const SafetensorsFile& f, std::vector<float>& p, const std::string& prefix) {
  p.assign(std::size_t(lay.total), 0.f);
  for (auto& spec : lay.tensors) {
    const Tensor* found = f.find(prefix + spec.name);
    if (!found) throw InputError(fmt::format("'{}': tensor '{}' is missing", f.path, prefix + spec.name));
    if (found->shape != spec.shape)
      throw InputError(fmt::format("'{}': tensor '{}' has shape [{}], the configuration implies [{}]", f.path,
                                   found->name, fmt::join(found->shape, ", "), fmt::join(spec.shape, ", ")));
    const std::vector<float> v = found->to_f32();
    std::copy(v.begin(), v.end(), p.begin() + spec.offset);
  }
}

namespace {
ModelConfig model_section(const nlohmann::json& config_json, const std::string& what) {
  if (!config_json.is_object() || !config_json.contains("model"))
    throw InputError(fmt::format("'{}' has no \"model\" section", what));
  ModelConfig c;
  try {
    from_json(config_json["model"], c);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("'{}': {}", what, e.what()));
  } catch (const InputError& e) {
    throw InputError(fmt::format("'{}': {}", what, e.what()));
  }
  return c;
}
}  // namespace

LoadedModel load_model(const nlohmann::json& config_json, const SafetensorsFile& weights, const std::string& config_what) {
  LoadedModel m;
  m.cfg = model_section(config_json, config_what);
  m.lay = Layout::make(m.cfg);
  check_tensor_set(m.lay, weights, {""});  // before the parameters are allocated
  tensors_to_params(m.lay, weights, m.params);
  m.config_json = config_json;
  return m;
}

LoadedModel load_model_dir(const std::string& dir) {
  const nlohmann::json config_json = read_json_file(dir + "/config.json");
  model_section(config_json, dir + "/config.json");  // a bad configuration is reported before the weights are read
  return load_model(config_json, read_safetensors(dir + "/model.safetensors"), dir + "/config.json");
}

}  // namespace manyadd::learn
