// Model files of learn/: see io.hpp.
#include "manyadd/learn/io.hpp"

#include <filesystem>
#include <system_error>

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

void tensors_to_params(const Layout& lay, const SafetensorsFile& f, std::vector<float>& p, const std::string& prefix) {
  p.assign(std::size_t(lay.total), 0.f);
  for (auto& spec : lay.tensors) {
    const Tensor* found = f.find(prefix + spec.name);
    if (!found) throw InputError(fmt::format("tensor '{}' is missing from the file", prefix + spec.name));
    if (found->shape != spec.shape)
      throw InputError(fmt::format("tensor '{}' has shape [{}], config.json implies [{}]", found->name,
                                   fmt::join(found->shape, ", "), fmt::join(spec.shape, ", ")));
    const std::vector<float> v = found->to_f32();
    std::copy(v.begin(), v.end(), p.begin() + spec.offset);
  }
}

void make_output_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw InputError(fmt::format("cannot create the directory '{}': {}", dir, ec ? ec.message() : "not a directory"));
}

LoadedModel load_model_dir(const std::string& dir) {
  LoadedModel m;
  m.config_json = read_json_file(dir + "/config.json");
  if (!m.config_json.is_object() || !m.config_json.contains("model"))
    throw InputError(fmt::format("'{}/config.json' has no \"model\" section", dir));
  try {
    from_json(m.config_json["model"], m.cfg);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("'{}/config.json': {}", dir, e.what()));
  }
  m.lay = Layout::make(m.cfg);
  tensors_to_params(m.lay, read_safetensors(dir + "/model.safetensors"), m.params);
  return m;
}

}  // namespace manyadd::learn
