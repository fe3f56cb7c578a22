#include "lessons/validate.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <regex>
#include <stdexcept>

#include <fmt/format.h>

#include "core/runtime/input_file.h"
#include "core/runtime/output_file.h"

namespace mgpu::lessons {

namespace {

// Shown as typed, cut short (a user may paste anything).
std::string shown(const std::string& s) {
  return s.size() > 24 ? s.substr(0, 21) + "..." : s;
}

// A range's bound as a reader wants it: whole numbers in full (1048576, not 1.04858e+06), others
// short (1e-06, 0.1).
std::string bound(double v) {
  return v == std::floor(v) && std::fabs(v) < 1e15 ? fmt::format("{:.0f}", v)
                                                   : fmt::format("{:g}", v);
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

// A file check's one line without the option name (CLI11 puts "--data: " in front), or "".
template <class Check>
std::string refusal(const Check& check) {
  try {
    check();
    return "";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    return what.substr(std::min(what.size(), what.find_first_not_of(' ')));
  }
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

CLI::Validator AtLeastOne(const std::string& unit) {
  return CLI::Validator(
      [unit](std::string& s) {
        double v = 0;
        const std::string bad = read_finite(s, v);
        if (!bad.empty()) return fmt::format("{}: give 1 {} or more", bad, unit);
        return v >= 1 ? std::string() : fmt::format("{} must be at least 1 {}", shown(s), unit);
      },
      "", "AtLeastOne");
}

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

CLI::Validator InRange(double lo, double hi, const std::string& unit) {
  return CLI::Validator(
      [lo, hi, unit](std::string& s) {
        double v = 0;
        const std::string bad = read_finite(s, v);
        if (!bad.empty())
          return fmt::format("{}: give {} to {} {}", bad, bound(lo), bound(hi), unit);
        return v >= lo && v <= hi ? std::string()
                                  : fmt::format("{} must be from {} to {} {}", shown(s), bound(lo),
                                                bound(hi), unit);
      },
      "", "InRange");
}

CLI::Validator SizeAtLeast(int64_t lo, const std::string& lo_text) {
  return CLI::Validator(
      [lo, lo_text](std::string& s) {
        try {
          return parse_size(s) >= lo ? std::string()
                                     : fmt::format(
                                           "'{}' is below {}: a size in bytes such as "
                                           "512MiB or 2GiB",
                                           shown(s), lo_text);
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      },
      "SIZE", "SizeAtLeast");
}

const CLI::Validator Unsigned(
    [](std::string& s) {
      const size_t first = s.find_first_not_of(" \t");
      if (first != std::string::npos && s[first] == '-')
        return fmt::format("{} must be 0 or more", shown(s));
      // strtoull saturates at 2^64 - 1 and says so only in errno: refused, not read as that.
      errno = 0;
      std::strtoull(s.c_str(), nullptr, 0);
      if (errno == ERANGE)
        return fmt::format("{} is above {}", shown(s), std::numeric_limits<uint64_t>::max());
      return std::string();
    },
    "UINT", "Unsigned");

const CLI::Validator FloatRange(
    [](std::string& s) {
      double v = 0;
      const std::string bad = read_finite(s, v);
      if (!bad.empty()) return bad;
      return std::fabs(v) <= std::numeric_limits<float>::max()
                 ? std::string()
                 : fmt::format("{} is beyond a float's range ({:g})", shown(s),
                               double(std::numeric_limits<float>::max()));
    },
    "", "FloatRange");

const CLI::Validator Switch(
    [](std::string& s) {
      for (const char* word : {"on", "off", "true", "false", "yes", "no", "1", "0"})
        if (s == word) return std::string();
      return fmt::format("'{}' is not on or off", shown(s));
    },
    "on|off", "Switch");

const CLI::Validator OutputFile(
    [](std::string& path) { return refusal([&] { check_output_path(path, ""); }); }, "FILE",
    "OutputFile");

CLI::Validator InputFile(int64_t max_bytes) {
  return CLI::Validator(
      [max_bytes](std::string& path) {
        return refusal([&] { check_input_file(path, "", max_bytes); });
      },
      "FILE", "InputFile");
}

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
