// mgpu's fields in a checkpoint header's __metadata__: format and version, step, config, the
// optimizer's hyper-parameters and loss scaler, model, precision, and the checksum's place.
#include <set>
#include <string>

#include <fmt/format.h>

#include "core/model/checkpoint.h"
#include "core/model/checkpoint_internal.h"

namespace mgpu {

using checkpoint_detail::error;
using checkpoint_detail::get_step;
using checkpoint_detail::kFormatName;
using checkpoint_detail::Layout;
using nlohmann::json;

namespace {

std::string meta_string(const std::string& path, const json& meta, const std::string& key) {
  if (!meta.contains(key) || !meta[key].is_string())
    throw error(path, fmt::format("has a corrupt header: __metadata__ has no string '{}'", key));
  return meta[key].get<std::string>();
}

json meta_json(const std::string& path, const json& meta, const std::string& key) {
  try {
    return json::parse(meta_string(path, meta, key));
  } catch (const json::exception&) {
    throw error(path, fmt::format("has a corrupt header: __metadata__.{} is not JSON", key));
  }
}

// The optimizer entry's hyper-parameters: the numeric ones numbers, any other a string (e.g.
// mixed precision's "master_weights": "fp32").
void check_hyperparameters(const std::string& path, const json& optimizer) {
  static const std::set<std::string> numeric = {"lr",    "weight_decay", "momentum",
                                                "beta1", "beta2",        "eps"};
  for (const auto& [key, value] : optimizer.items()) {
    if (key == "name" || key == "step_count" || key == "loss_scaler") continue;
    const bool number = numeric.count(key) > 0;
    if (number ? !value.is_number() : !(value.is_number() || value.is_string()))
      throw error(path, fmt::format("has a corrupt header: the optimizer's field '{}' is not a {}",
                                    key.substr(0, 40), number ? "number" : "number or string"));
  }
}

// The fp16 loss scaler's state: {"scale" > 0, "good_steps" >= 0, "skipped_steps" in [0, step]}.
void check_loss_scaler(const std::string& path, const json& scaler, int64_t step) {
  if (!scaler.is_object() || !scaler.contains("scale") || !scaler["scale"].is_number() ||
      !(scaler["scale"].get<double>() > 0) || !scaler.contains("good_steps"))
    throw error(path,
                "has a corrupt header: the loss scaler's state needs a number 'scale' > 0 "
                "and an integer 'good_steps'");
  get_step(path, scaler["good_steps"], "the loss scaler's good_steps");
  if (scaler.contains("skipped_steps") &&
      get_step(path, scaler["skipped_steps"], "the loss scaler's skipped_steps") > step)
    throw error(path, fmt::format("has a corrupt header: the loss scaler skipped {} steps of {}",
                                  scaler["skipped_steps"].get<int64_t>(), step));
}

// The optimizer entry, null (parameters only) or its hyper-parameters, each of the type it is:
// a name, numbers, a step count no larger than the step (skipped fp16 steps make it smaller).
void check_optimizer(const std::string& path, const json& optimizer, int64_t step) {
  if (optimizer.is_null()) return;
  if (!optimizer.is_object())
    throw error(path, "has a corrupt header: the optimizer entry is not an object");
  if (!optimizer.contains("name") || !optimizer["name"].is_string())
    throw error(path, "has a corrupt header: the optimizer entry has no name");
  check_hyperparameters(path, optimizer);
  if (optimizer.contains("step_count")) {
    const int64_t count = get_step(path, optimizer["step_count"], "the optimizer's step count");
    if (count > step)
      throw error(path, fmt::format("has a corrupt header: the optimizer's step count {} is more "
                                    "than the {} steps trained",
                                    count, step));
  }
  if (optimizer.contains("loss_scaler")) check_loss_scaler(path, optimizer["loss_scaler"], step);
}

// Where the checksum's digits sit: the one `"crc32":"<digits>"` in the header text.
size_t checksum_position(const std::string& path, const std::string& bytes, size_t header_end,
                         const std::string& digits) {
  const std::string token = "\"crc32\":\"" + digits + "\"";
  const size_t at = bytes.find(token, 8);
  if (at == std::string::npos || at + token.size() > header_end ||
      bytes.find("\"crc32\"", 8) != at || bytes.find("\"crc32\"", at + 1) < header_end)
    throw error(path,
                "has a corrupt header: __metadata__.crc32 is not written once as "
                "\"crc32\":\"<8 hex digits>\"");
  return at + token.size() - 1 - digits.size();
}

}  // namespace

namespace checkpoint_detail {

// mgpu's fields of __metadata__ into layout.info (and the checksum into layout); returns the
// tensors' kinds.
json read_metadata(const std::string& path, const std::string& bytes, size_t header_end,
                   const json& meta, Layout& layout) {
  const std::string format = meta_string(path, meta, "format");
  if (format != kFormatName)
    throw error(path, fmt::format("is a safetensors file but not an mgpu checkpoint "
                                  "(__metadata__.format is '{}', expected '{}')",
                                  format.substr(0, 40), kFormatName));
  const std::string version = meta_string(path, meta, "version");
  if (version == "2")
    throw error(path, fmt::format("has format version 2, whose checksum does not cover its "
                                  "header; this build reads version {} only: train again with "
                                  "--checkpoint to write one",
                                  kCheckpointVersion));
  if (version != std::to_string(kCheckpointVersion))
    throw error(path, fmt::format("has format version {}; this build reads version {}",
                                  version.substr(0, 20), kCheckpointVersion));
  const json step = meta_json(path, meta, "step");
  layout.info.step = get_step(path, step, "step");
  layout.info.config = meta_json(path, meta, "config");
  layout.info.optimizer = meta_json(path, meta, "optimizer");
  check_optimizer(path, layout.info.optimizer, layout.info.step);
  layout.info.model = meta_json(path, meta, "model");
  if (!layout.info.model.is_null() && !layout.info.model.is_object())
    throw error(path, "has a corrupt header: __metadata__.model is not an object");
  layout.info.precision = meta_string(path, meta, "precision");
  const std::string crc = meta_string(path, meta, "crc32");
  if (crc.size() != 8 || crc.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw error(path, "has a corrupt header: __metadata__.crc32 is not 8 hex digits");
  layout.crc = static_cast<uint32_t>(std::stoul(crc, nullptr, 16));
  layout.crc_at = checksum_position(path, bytes, header_end, crc);
  return meta_json(path, meta, "kinds");
}

}  // namespace checkpoint_detail

}  // namespace mgpu
