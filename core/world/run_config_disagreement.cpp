// The table an mpirun job prints when its processes were started with different options: one row
// per option that differs, one column per rank (WorldOptions::run_config).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/world/world.h"

namespace mgpu {

namespace {

// A value as a table cell: what the user typed may be long.
std::string cell(const std::string& value) {
  constexpr size_t kWidth = 40;
  return value.size() <= kWidth ? value : value.substr(0, kWidth - 3) + "...";
}

}  // namespace

std::string describe_run_config_disagreement(const std::vector<RunConfig>& per_rank) {
  const auto value_of = [](const RunConfig& config, const std::string& option) {
    for (const auto& [name, value] : config)
      if (name == option) return cell(value);
    return std::string("(none)");
  };
  // Columns: rank 0, then each rank that differs from it (at most 7: the rest are counted).
  constexpr size_t kMaxColumns = 8;
  std::vector<size_t> columns = {0};
  size_t differing = 0;
  for (size_t r = 1; r < per_rank.size(); ++r)
    if (per_rank[r] != per_rank[0] && ++differing && columns.size() < kMaxColumns)
      columns.push_back(r);
  // Rows: every option some rank (rank 0's order first) has with another value than rank 0.
  std::vector<std::string> options;
  for (const RunConfig& config : per_rank)
    for (const auto& [name, value] : config)
      if (std::find(options.begin(), options.end(), name) == options.end()) options.push_back(name);
  std::vector<std::vector<std::string>> rows = {{"option"}};
  for (size_t r : columns) rows[0].push_back(fmt::format("rank {}", r));
  for (const std::string& option : options) {
    std::vector<std::string> row = {option};
    for (size_t r : columns) row.push_back(value_of(per_rank[r], option));
    const std::string first = value_of(per_rank[0], option);
    if (std::any_of(per_rank.begin(), per_rank.end(),
                    [&](const RunConfig& c) { return value_of(c, option) != first; }))
      rows.push_back(std::move(row));
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  std::string table = fmt::format(
      "the {} processes of this MPI job were started with different options, and every rank must "
      "run the same configuration ({} differ{} from rank 0); start every process with the same "
      "command line:",
      per_rank.size(), differing == 1 ? "1 rank" : fmt::format("{} ranks", differing),
      differing == 1 ? "s" : "");
  for (const auto& row : rows) {
    table += "\n";
    for (size_t c = 0; c < row.size(); ++c) table += fmt::format("  {:<{}}", row[c], widths[c]);
    while (table.back() == ' ') table.pop_back();
  }
  if (differing + 1 > columns.size())
    table += fmt::format("\n  (and {} more ranks that differ)", differing + 1 - columns.size());
  return table;
}

}  // namespace mgpu
