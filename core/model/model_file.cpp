#include "core/model/model_file.h"

#include <initializer_list>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/runtime/input_file.h"

namespace mgpu {

namespace {

constexpr const char* kShapeHint =
    "a model file is {\"layers\": 12, \"dim\": 768, \"heads\": 12, \"seq\": 1024, \"vocab\": "
    "50257, \"tie_embeddings\": true} (vocab and tie_embeddings optional; with experts also "
    "\"experts\": 8, \"top_k\": 2, \"moe_every\", \"expert_hidden\", \"capacity_factor\" "
    "(a number or \"dropless\"), \"aux_loss_coef\"; a Llama block: \"norm\": \"rmsnorm\", "
    "\"mlp\": \"swiglu\", \"ffn_dim\", \"positions\": \"rope\", \"rope_theta\", \"kv_heads\", "
    "\"bias\": false)";

// The field as an int: an integer JSON number (not a bool, not 2.9, not 2.0) within its range.
int integer_field(const nlohmann::json& j, const ModelFieldRange& range, bool optional,
                  const std::string& source, int absent) {
  if (!j.contains(range.key)) {
    if (optional) return absent;
    throw std::invalid_argument(
        fmt::format("{}: not a model file ('{}' is missing); {}", source, range.key, kShapeHint));
  }
  const nlohmann::json& v = j.at(range.key);
  // is_number_integer is false for booleans and for 2.9 or 2.0; an unsigned value beyond
  // INT64_MAX must not be read as a signed one.
  bool in_range = false;
  if (v.is_number_unsigned())
    in_range = v.get<uint64_t>() >= static_cast<uint64_t>(range.lo) &&
               v.get<uint64_t>() <= static_cast<uint64_t>(range.hi);
  else if (v.is_number_integer())
    in_range = v.get<int64_t>() >= range.lo && v.get<int64_t>() <= range.hi;
  if (!in_range)
    throw std::invalid_argument(fmt::format("{}: '{}' must be a whole number from {} to {}, got {}",
                                            source, range.key, range.lo, range.hi,
                                            echo_input(v.dump(), 40)));
  return static_cast<int>(v.get<int64_t>());
}

// A number field of a mixture of experts (capacity_factor also "dropless", read as 0).
void moe_number_fields(const nlohmann::json& j, ModelShape& shape, const std::string& source) {
  if (j.contains("capacity_factor")) {
    const nlohmann::json& v = j.at("capacity_factor");
    const bool dropless = v.is_string() && v.get<std::string>() == "dropless";
    if (!dropless && !(v.is_number() && !v.is_boolean() && v.get<double>() > 0))
      throw std::invalid_argument(
          fmt::format("{}: 'capacity_factor' must be a number > 0 (e.g. 1.25) or \"dropless\", "
                      "got {}",
                      source, echo_input(v.dump(), 40)));
    shape.capacity_factor = dropless ? 0.0 : v.get<double>();
  }
  if (j.contains("aux_loss_coef")) {
    const nlohmann::json& v = j.at("aux_loss_coef");
    if (!(v.is_number() && !v.is_boolean() && v.get<double>() >= 0))
      throw std::invalid_argument(
          fmt::format("{}: 'aux_loss_coef' must be a number >= 0 (e.g. 0.01), got {}", source,
                      echo_input(v.dump(), 40)));
    shape.aux_loss_coef = v.get<float>();
  }
}

// One of a style field's names ("norm": "layernorm" | "rmsnorm"), as its enum.
template <class Enum>
void choice_field(const nlohmann::json& j, const char* key, Enum& value,
                  std::initializer_list<std::pair<const char*, Enum>> choices,
                  const std::string& source) {
  if (!j.contains(key)) return;
  const nlohmann::json& v = j.at(key);
  std::string names;
  for (const auto& [name, e] : choices) {
    if (v.is_string() && v.get<std::string>() == name) {
      value = e;
      return;
    }
    names += (names.empty() ? "\"" : " or \"") + std::string(name) + "\"";
  }
  throw std::invalid_argument(
      fmt::format("{}: '{}' must be {}, got {}", source, key, names, echo_input(v.dump(), 40)));
}

// The block's style fields other than the two integers (ffn_dim, kv_heads).
void style_fields(const nlohmann::json& j, BlockStyle& style, const std::string& source) {
  choice_field(j, "norm", style.norm, {{"layernorm", Norm::layernorm}, {"rmsnorm", Norm::rmsnorm}},
               source);
  choice_field(j, "mlp", style.mlp, {{"gelu", MlpKind::gelu}, {"swiglu", MlpKind::swiglu}}, source);
  choice_field(j, "positions", style.positions,
               {{"learned", Positions::learned}, {"rope", Positions::rope}}, source);
  if (j.contains("rope_theta")) {
    const nlohmann::json& v = j.at("rope_theta");
    if (!(v.is_number() && !v.is_boolean() && v.get<double>() > 1 && v.get<double>() <= 1e9))
      throw std::invalid_argument(fmt::format(
          "{}: 'rope_theta' must be a number above 1 and at most 1e9 (e.g. 500000), got {}", source,
          echo_input(v.dump(), 40)));
    style.rope_theta = v.get<float>();
  }
  if (j.contains("bias")) {
    const nlohmann::json& v = j.at("bias");
    if (!v.is_boolean())
      throw std::invalid_argument(fmt::format("{}: 'bias' must be true or false, got {}", source,
                                              echo_input(v.dump(), 40)));
    style.bias = v.get<bool>();
  }
}

}  // namespace

ModelShape parse_model_json(const std::string& text, const std::string& source) {
  // Parsed without exceptions: any text that is not one JSON object is the same one line.
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::invalid_argument(
        fmt::format("{}: not a model file (not a JSON object); {}", source, kShapeHint));
  for (const auto& [key, value] : j.items()) {
    bool known = key == "tie_embeddings" || key == "capacity_factor" || key == "aux_loss_coef" ||
                 key == "norm" || key == "mlp" || key == "positions" || key == "rope_theta" ||
                 key == "bias";
    for (const ModelFieldRange& r : kModelFieldRanges) known = known || key == r.key;
    if (!known)
      throw std::invalid_argument(
          fmt::format("{}: unknown field '{}'; {}", source, echo_input(key, 40), kShapeHint));
  }
  ModelShape shape;
  int* fields[] = {&shape.layers,        &shape.dim,           &shape.heads,
                   &shape.seq,           &shape.vocab,         &shape.experts,
                   &shape.top_k,         &shape.moe_every,     &shape.expert_hidden,
                   &shape.style.ffn_dim, &shape.style.kv_heads};
  static_assert(std::size(fields) == std::size(kModelFieldRanges));
  for (size_t i = 0; i < std::size(kModelFieldRanges); ++i)  // vocab on: optional
    *fields[i] = integer_field(j, kModelFieldRanges[i], i >= 4, source, *fields[i]);
  moe_number_fields(j, shape, source);
  style_fields(j, shape.style, source);
  if (j.contains("tie_embeddings")) {
    const nlohmann::json& tie = j.at("tie_embeddings");
    if (!tie.is_boolean())
      throw std::invalid_argument(fmt::format("{}: 'tie_embeddings' must be true or false, got {}",
                                              source, echo_input(tie.dump(), 40)));
    shape.tie_embeddings = tie.get<bool>();
  }
  return shape;
}

ModelShape read_model_file(const std::string& path) {
  const std::string source = "--model " + echo_input(path, 120);
  return parse_model_json(read_input_file(path, "--model", kMaxModelFileBytes), source);
}

}  // namespace mgpu
