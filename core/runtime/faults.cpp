// Injected faults: the strict parsers of the option texts, the factors the modeled clock applies,
// and the one-line descriptions the trace and the lessons print.
#include "core/runtime/faults.h"

#include <fmt/format.h>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

namespace mgpu {

namespace {

[[noreturn]] void bad(const char* option, const std::string& text, const char* form) {
  throw std::invalid_argument(fmt::format("{} '{}': expected {}", option, text, form));
}

// The whole of `part` as an integer >= 0, or nothing.
std::optional<int> whole_int(std::string_view part) {
  int value = 0;
  const char* end = part.data() + part.size();
  auto [ptr, ec] = std::from_chars(part.data(), end, value);
  if (part.empty() || ec != std::errc() || ptr != end || value < 0) return std::nullopt;
  return value;
}

// The whole of `part` as a finite number, or nothing.
std::optional<double> whole_number(std::string_view part) {
  if (part.empty() || part.size() > 32) return std::nullopt;
  const std::string copy(part);
  size_t used = 0;
  try {
    const double value = std::stod(copy, &used);
    if (used != copy.size() || !std::isfinite(value)) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// A factor F > 0 (F < 1 is a faster rank or link: allowed, as a what-if).
double factor_of(std::string_view part, const char* option, const std::string& text,
                 const char* form) {
  const std::optional<double> f = whole_number(part);
  if (!f) bad(option, text, form);
  if (*f <= 0 || *f > 1e6)
    throw std::invalid_argument(fmt::format(
        "{} '{}': the factor must be > 0 and at most 1e6 (e.g. 2 = twice as slow)", option, text));
  return *f;
}

// splitmix64: a well-mixed 64-bit value of (seed, rank, kernel), the same on every platform.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string factor_text(double f) {
  return fmt::format("{:g}x", f);
}

}  // namespace

SlowRank parse_slow_rank(const std::string& text) {
  constexpr const char* form =
      "R:F or R:F@S (rank R computes F times slower from step S), e.g. 2:3";
  const std::string_view t = text;
  const size_t colon = t.find(':');
  if (colon == std::string_view::npos) bad("--slow-rank", text, form);
  const size_t at = t.find('@', colon);
  SlowRank s;
  const std::optional<int> rank = whole_int(t.substr(0, colon));
  if (!rank) bad("--slow-rank", text, form);
  s.rank = *rank;
  s.factor = factor_of(t.substr(colon + 1, at == std::string_view::npos ? t.npos : at - colon - 1),
                       "--slow-rank", text, form);
  if (at != std::string_view::npos) {
    const std::optional<int> step = whole_int(t.substr(at + 1));
    if (!step) bad("--slow-rank", text, form);
    s.from_step = *step;
  }
  return s;
}

SlowLink parse_slow_link(const std::string& text) {
  constexpr const char* form = "A-B:F (the link between ranks A and B carries 1/F), e.g. 0-1:4";
  const std::string_view t = text;
  const size_t dash = t.find('-');
  const size_t colon = t.find(':');
  if (dash == std::string_view::npos || colon == std::string_view::npos || colon < dash)
    bad("--slow-link", text, form);
  const std::optional<int> a = whole_int(t.substr(0, dash));
  const std::optional<int> b = whole_int(t.substr(dash + 1, colon - dash - 1));
  if (!a || !b) bad("--slow-link", text, form);
  if (*a == *b)
    throw std::invalid_argument(
        fmt::format("--slow-link '{}': a link joins two different ranks, e.g. 0-1:4", text));
  return {*a, *b, factor_of(t.substr(colon + 1), "--slow-link", text, form)};
}

double parse_jitter(const std::string& text) {
  const std::optional<double> p = whole_number(text);
  if (!p || *p < 0 || *p >= 100)
    throw std::invalid_argument(fmt::format(
        "--jitter '{}': expected a percentage P with 0 <= P < 100 (compute time x (1 +- P%)), "
        "e.g. 5",
        text));
  return *p / 100;
}

FailRank parse_fail_rank(const std::string& text) {
  constexpr const char* form = "R@S (rank R dies as step S begins), e.g. 1@6";
  const std::string_view t = text;
  const size_t at = t.find('@');
  if (at == std::string_view::npos) bad("--fail-rank", text, form);
  const std::optional<int> rank = whole_int(t.substr(0, at));
  const std::optional<int> step = whole_int(t.substr(at + 1));
  if (!rank || !step) bad("--fail-rank", text, form);
  return {*rank, *step};
}

bool FaultPlan::empty() const {
  return slow_ranks.empty() && slow_links.empty() && jitter == 0 && !fail;
}

double FaultPlan::compute_factor(int rank, int step, uint64_t kernel) const {
  double f = 1;
  for (const SlowRank& s : slow_ranks)
    if (s.rank == rank && (s.from_step == 0 || step >= s.from_step)) f *= s.factor;
  if (jitter > 0) {
    const uint64_t draw = mix(seed ^ mix(static_cast<uint64_t>(rank) ^ mix(kernel)));
    const double u = static_cast<double>(draw >> 11) * 0x1.0p-53;  // [0, 1)
    f *= 1 + jitter * (2 * u - 1);
  }
  return f;
}

double FaultPlan::link_factor(int a, int b) const {
  double f = 1;
  for (const SlowLink& l : slow_links)
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) f *= l.factor;
  return f;
}

void FaultPlan::check(int ranks, int steps) const {
  auto rank_ok = [&](int r, const char* option) {
    if (r >= ranks)
      throw std::invalid_argument(
          fmt::format("{}: rank {} does not exist in a run of {} ranks (ranks 0..{})", option, r,
                      ranks, ranks - 1));
  };
  auto step_ok = [&](int s, const char* option) {
    if (s >= steps)
      throw std::invalid_argument(
          fmt::format("{}: step {} is past the end of a run of {} steps (steps 0..{})", option, s,
                      steps, steps - 1));
  };
  for (const SlowRank& s : slow_ranks)
    rank_ok(s.rank, "--slow-rank"), step_ok(s.from_step, "--slow-rank");
  for (const SlowLink& l : slow_links) rank_ok(l.a, "--slow-link"), rank_ok(l.b, "--slow-link");
  if (fail) rank_ok(fail->rank, "--fail-rank"), step_ok(fail->step, "--fail-rank");
}

std::vector<std::string> FaultPlan::describe() const {
  std::vector<std::string> lines;
  for (const SlowRank& s : slow_ranks)
    lines.push_back(fmt::format("rank {} computes {} slower{}", s.rank, factor_text(s.factor),
                                s.from_step > 0 ? fmt::format(" from step {}", s.from_step) : ""));
  for (const SlowLink& l : slow_links)
    lines.push_back(fmt::format("link {}-{} carries 1/{} of its bandwidth", l.a, l.b,
                                fmt::format("{:g}", l.factor)));
  if (jitter > 0)
    lines.push_back(fmt::format("compute time jitters by +-{:g}% (seed {})", jitter * 100, seed));
  if (fail) lines.push_back(fmt::format("rank {} dies at step {}", fail->rank, fail->step));
  return lines;
}

nlohmann::json FaultPlan::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const SlowRank& s : slow_ranks)
    j["slow_ranks"].push_back({{"rank", s.rank}, {"factor", s.factor}, {"from_step", s.from_step}});
  for (const SlowLink& l : slow_links)
    j["slow_links"].push_back({{"a", l.a}, {"b", l.b}, {"factor", l.factor}});
  if (jitter > 0) j["jitter"] = jitter, j["jitter_seed"] = seed;
  if (fail) j["fail"] = {{"rank", fail->rank}, {"step", fail->step}};
  j["injected"] = describe();
  return j;
}

RankLost::RankLost(int rank, int step)
    : std::runtime_error(
          fmt::format("rank {} was lost at step {} (--fail-rank {}@{})", rank, step, rank, step)),
      rank_(rank),
      step_(step) {}

}  // namespace mgpu
