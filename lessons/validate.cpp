#include "lessons/validate.h"

#include <cmath>
#include <cstdlib>
#include <regex>
#include <stdexcept>

#include <fmt/format.h>

#include "core/runtime/output_file.h"

namespace mgpu::lessons {

namespace {

// Shown as typed, cut short (a user may paste anything).
std::string shown(const std::string& s) {
  return s.size() > 24 ? s.substr(0, 21) + "..." : s;
}

// The number in `s`, or a message why it is not a finite one.
std::string read_finite(const std::string& s, double& value) {
  char* end = nullptr;
  errno = 0;
  value = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size())
    return fmt::format("'{}' is not a number", shown(s));
  if (!std::isfinite(value) || errno == ERANGE)
    return fmt::format("'{}' is not a finite number", shown(s));
  return "";
}

}  // namespace

const CLI::Validator Positive(
    [](std::string& s) {
      double v = 0;
      std::string bad = read_finite(s, v);
      if (!bad.empty()) return bad;
      return v > 0 ? std::string() : fmt::format("{} must be greater than 0", shown(s));
    },
    "POSITIVE", "Positive");

const CLI::Validator NonNegative(
    [](std::string& s) {
      double v = 0;
      std::string bad = read_finite(s, v);
      if (!bad.empty()) return bad;
      return v >= 0 ? std::string() : fmt::format("{} must be 0 or more", shown(s));
    },
    "NONNEGATIVE", "NonNegative");

CLI::Validator AtMost(double max) {
  return CLI::Validator(
      [max](std::string& s) {
        double v = 0;
        std::string bad = read_finite(s, v);
        if (!bad.empty()) return bad;
        return v <= max ? std::string() : fmt::format("{} is above {}", shown(s), max);
      },
      "", "AtMost");
}

const CLI::Validator Unsigned(
    [](std::string& s) {
      const size_t first = s.find_first_not_of(" \t");
      if (first != std::string::npos && s[first] == '-')
        return fmt::format("{} must be 0 or more", shown(s));
      return std::string();
    },
    "UINT", "Unsigned");

const CLI::Validator OutputFile(
    [](std::string& path) {
      try {
        check_output_path(path, "");
        return std::string();
      } catch (const std::invalid_argument& e) {
        std::string what = e.what();
        return what.substr(what.find_first_not_of(' '));
      }
    },
    "FILE", "OutputFile");

int64_t parse_size(const std::string& text) {
  static const std::regex re(R"(^\s*([0-9]*\.?[0-9]+(?:[eE][+]?[0-9]+)?)\s*([KMGT]i?B|B)?\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, re))
    throw std::invalid_argument(
        fmt::format("cannot read '{}' as a size: use e.g. 512MiB, 2GiB or 1e9", shown(text)));
  double value = std::strtod(m[1].str().c_str(), nullptr);  // HUGE_VAL on overflow, no throw
  const std::string unit = m[2];
  if (!unit.empty() && unit != "B") {
    const double base = unit.size() == 3 ? 1024 : 1000;
    value *= std::pow(base, static_cast<double>(std::string("KMGT").find(unit[0]) + 1));
  }
  constexpr double kMax = 4.611686018427387904e18;  // 2^62 bytes
  if (!std::isfinite(value) || value > kMax)
    throw std::invalid_argument(
        fmt::format("size '{}' is beyond 4 EiB: use e.g. 512MiB, 2GiB or 1e9", shown(text)));
  return static_cast<int64_t>(value);
}

}  // namespace mgpu::lessons
