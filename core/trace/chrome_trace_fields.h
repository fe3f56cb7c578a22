// The checked field accessors the Chrome trace reader is built on: a missing or mistyped field
// throws TraceFormatError with "<source>: <where>: <what>".
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/trace/chrome_trace.h"

namespace mgpu::trace::chrome_detail {

using nlohmann::json;

class FieldReader {
 public:
  explicit FieldReader(std::string_view source) : source_(source) {}

  [[noreturn]] void fail(std::string_view what) const {
    throw TraceFormatError(fmt::format("{}: {}", source_, what));
  }

 protected:
  // Field accessors: `where` names the enclosing object for the message.
  const json& required(const json& obj, const char* key, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end()) fail(fmt::format("{} has no \"{}\"", where, key));
    return *it;
  }

  std::string required_string(const json& obj, const char* key, const std::string& where) {
    const json& v = required(obj, key, where);
    if (!v.is_string()) fail(type_error(where, key, "a string", v));
    return v.get<std::string>();
  }

  std::string optional_string(const json& obj, const char* key, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end()) return {};
    if (!it->is_string()) fail(type_error(where, key, "a string", *it));
    return it->get<std::string>();
  }

  double required_number(const json& obj, const char* key, const std::string& where) {
    const json& v = required(obj, key, where);
    if (!v.is_number()) fail(type_error(where, key, "a number", v));
    return v.get<double>();
  }

  double optional_number(const json& obj, const char* key, const std::string& where,
                         double absent) {
    auto it = obj.find(key);
    if (it == obj.end()) return absent;
    if (!it->is_number()) fail(type_error(where, key, "a number", *it));
    return it->get<double>();
  }

  int64_t as_int(const json& v, const char* key, const std::string& where) {
    if (!v.is_number_integer()) fail(type_error(where, key, "an integer", v));
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      fail(fmt::format("{}.{} is too large", where, key));
    }
    return v.get<int64_t>();
  }

  int64_t required_int(const json& obj, const char* key, const std::string& where) {
    return as_int(required(obj, key, where), key, where);
  }

  int64_t optional_int(const json& obj, const char* key, const std::string& where, int64_t absent) {
    auto it = obj.find(key);
    return it == obj.end() ? absent : as_int(*it, key, where);
  }

  int optional_int32(const json& obj, const char* key, const std::string& where, int absent) {
    const int64_t v = optional_int(obj, key, where, absent);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      fail(fmt::format("{}.{} = {} does not fit an int", where, key, v));
    }
    return static_cast<int>(v);
  }

  static std::string type_error(const std::string& where, const char* key, const char* expected,
                                const json& got) {
    return fmt::format("{}.{} must be {}, got {}", where, key, expected, got.type_name());
  }

 private:
  std::string source_;
};

}  // namespace mgpu::trace::chrome_detail
