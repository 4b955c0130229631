// Test helper: copies of a fixture checkpoint with config.json's quantization_config and the safetensors tensors edited (corrupt-metadata tests of the pre-quantized readers).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/model.h"

namespace loom {
namespace testutil {

// A safetensors file rewritten with edits (raw dtypes kept): name → (dtype, shape, bytes).
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
using RawFile = std::map<std::string, RawTensor>;

inline RawFile ReadRaw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string data = ss.str();
  auto infos = ParseSafetensors(reinterpret_cast<const uint8_t*>(data.data()), data.size(), path, nullptr);
  EXPECT_TRUE(infos.ok()) << infos.status().ToString();
  RawFile out;
  if (!infos.ok()) return out;
  for (const TensorInfo& t : *infos) {
    out[t.name] = {t.dtype_name, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)};
  }
  return out;
}

inline void WriteRaw(const std::string& path, const RawFile& file) {
  nlohmann::json header = nlohmann::json::object();
  std::string body;
  for (const auto& [name, t] : file) {
    header[name] = {{"dtype", t.dtype},
                    {"shape", t.shape},
                    {"data_offsets", {body.size(), body.size() + t.bytes.size()}}};
    body += t.bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << h << body;
}

// A copy of `models_dir`/`name` in the test temp folder (named `tag` + name) with its
// quantization_config and its model.safetensors edited.
inline std::string EditedCheckpointCopy(const std::string& models_dir, const std::string& tag,
                                        const std::string& name,
                                        const std::function<void(nlohmann::json&)>& edit_config,
                                        const std::function<void(RawFile&)>& edit_tensors) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / (tag + name);
  fs::remove_all(dir);
  fs::copy(models_dir + name, dir);
  std::ifstream in(dir / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  in.close();
  edit_config(config["quantization_config"]);
  std::ofstream(dir / "config.json") << config.dump(1);
  RawFile raw = ReadRaw((dir / "model.safetensors").string());
  edit_tensors(raw);
  WriteRaw((dir / "model.safetensors").string(), raw);
  return dir.string();
}

// Model::Load's error message, or "" when it loads.
inline std::string LoadError(const std::string& dir) {
  auto m = Model::Load(dir);
  return m.ok() ? "" : m.status().message();
}

}  // namespace testutil
}  // namespace loom
