// Reading a graded test: the points in its name, and from Catch2's compact report the first
// failing check in full (its values, context and exception), or why the run ended.
#include <cstring>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "lessons/grade.h"
#include "lessons/grade_internal.h"

namespace mgpu::lessons {

namespace detail {

// "ex01 sum on 2 ranks (2 pts)" -> 2; a graded case without points counts 1.
int points_in(const std::string& name) {
  static const std::regex pts(R"(\((\d+) pts?\)\s*$)");
  std::smatch m;
  return std::regex_search(name, m, pts) ? std::stoi(m[1]) : 1;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line.find_first_not_of(" \t\r") != std::string::npos)
      lines.push_back(line);
  return lines;
}

}  // namespace detail

using detail::lines_of;

namespace {

// The first failure in Catch2's compact report, without the file:line prefix and in full: the
// check with its expanded values, then each INFO context ("ranks=2 length=1 op=sum") and an
// exception's message on lines of their own. A message may span lines (CommError's "who waits for
// whom" table), so the failure runs until the next report line or the summary.
std::string failure_text(const std::string& report) {
  std::vector<std::string> lines;
  bool inside = false;
  std::istringstream in(report);
  for (std::string line; std::getline(in, line);) {
    bool report_line = line.find(": failed: ") != std::string::npos ||
                       line.find(": passed: ") != std::string::npos ||
                       line.rfind("Failed ", 0) == 0 || line.rfind("Passed ", 0) == 0;
    if (inside && report_line) break;
    if (!inside && line.find(": failed: ") != std::string::npos) {
      inside = true;
      line = line.substr(line.find(": failed: ") + 2);
    }
    if (inside) lines.push_back(line);
  }
  std::string text;
  for (auto& line : lines) text += (text.empty() ? "" : "\n") + line;
  // "failed: a == b for: 3 == 4 with 2 messages: 'P=2 M=4' and 'stage 1'" -> one item a line.
  static const std::regex with_messages(R"( with (\d+ )?messages?: ')");
  text = std::regex_replace(text, with_messages, "\ncontext: '");
  static const std::regex and_next(R"(' and ')");
  text = std::regex_replace(text, and_next, "'\ncontext: '");
  // An exception's message, or an explicit FAIL's (a graded check's own diagnosis), is the last.
  const bool exception = text.rfind("failed: unexpected exception", 0) == 0;
  if (exception || text.rfind("failed: explicitly", 0) == 0) {
    auto last = text.rfind("\ncontext: '");
    if (last != std::string::npos)
      text.replace(last, 11, exception ? "\nexception: '" : "\nmessage: '");
  }
  static const std::regex expanded(R"( for: )");
  return std::regex_replace(text, expanded,
                            "\n  values: ", std::regex_constants::format_first_only);
}

}  // namespace

namespace detail {

std::string first_failure(const ChildResult& run, double timeout) {
  if (run.timed_out)
    return fmt::format("TIMEOUT after {:g} s (an infinite loop, or a wait that never ends?)",
                       timeout);
  if (run.signal)
    return fmt::format("CRASHED with signal {} ({})", run.signal, strsignal(run.signal));
  std::string failure = failure_text(run.output);
  if (!failure.empty()) return failure;
  auto lines = lines_of(run.output);
  return lines.empty() ? fmt::format("exit code {}", run.exit_code) : lines.back();
}

}  // namespace detail

}  // namespace mgpu::lessons
