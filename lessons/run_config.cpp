// The run configuration every process of an MPI job must share: each option's resolved value in
// a canonical form, so equal values typed differently (`--lr 0.1`, `--lr 1e-1`) compare equal.
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "lessons/lesson.h"

namespace mgpu::lessons {

namespace {
// One typed word as the processes compare it: converted as CLI11 converts it for the option's type
// and printed in shortest round-trip form, so `--lr 0.1` and `--lr 1e-1` agree while
// `--seed 010` (octal, 8) and `--seed 10` do not; any other word as typed.
std::string canonical_word(const std::string& type, const std::string& word) {
  auto as = [&word](auto value) {
    return CLI::detail::lexical_cast(word, value) ? fmt::format("{}", value) : word;
  };
  if (type.starts_with("UINT")) return as(uint64_t{});
  if (type.starts_with("INT")) return as(int64_t{});
  if (type.starts_with("FLOAT")) return as(double{});
  return word;
}

std::string canonical_words(const CLI::Option& option, const std::vector<std::string>& words) {
  std::vector<std::string> out;
  for (const std::string& word : words) out.push_back(canonical_word(option.get_type_name(), word));
  return fmt::format("{}", fmt::join(out, " "));
}
}  // namespace

RunConfig resolved_run_config(const std::string& lesson, const CLI::App& app,
                              const CommonOptions& common) {
  RunConfig config = {{"lesson", lesson}};
  const std::map<std::string, int> resolved = {{"--ranks", common.ranks},
                                               {"--layers", common.layers},
                                               {"--dim", common.dim},
                                               {"--heads", common.heads},
                                               {"--seq", common.seq},
                                               {"--vocab", common.vocab},
                                               {"--experts", common.experts},
                                               {"--top-k", common.top_k},
                                               {"--moe-every", common.moe_every}};
  for (const CLI::Option* option : app.get_options()) {
    const std::string name = option->get_name();
    if (name == "--help" || name.empty()) continue;
    std::string value;
    if (auto it = resolved.find(name); it != resolved.end())
      value = std::to_string(it->second);
    else if (option->count() > 0)
      value = canonical_words(*option, option->results());
    else
      value = canonical_words(*option, {option->get_default_str()});
    config.emplace_back(name, value);
  }
  return config;
}

}  // namespace mgpu::lessons
