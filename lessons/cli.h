// The `mgpu` command line: list, run LESSON, profiles, viz. Callable in-process (tests pass
// their own streams); returns the exit code: 0 ok, 1 a failure while running, 2 bad input.
#pragma once
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mgpu::lessons {

class Lesson;
struct CommonOptions;

int mgpu_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Parses a command's arguments with CLI11: --help prints the help (done, 0); a parse error prints
// one line "mgpu WHERE: error: ..." (done, 2); otherwise returns 0 with done false.
int parse_command(CLI::App& app, std::vector<std::string> args, std::ostream& out,
                  std::ostream& err, const std::string& where, bool& done);
// Checks a parsed `mgpu run` before the lesson runs, and may adjust its options: the web page
// refuses what a browser cannot do and has the trace handed over (web/lessons_page.cpp). Returns
// the one line of a refusal (`mgpu run LESSON: error: LINE`, exit 2), or nothing.
using RunAdjust = std::function<std::optional<std::string>(const CLI::App&, CommonOptions&)>;
// `mgpu run LESSON [options]` over these lessons (natively all_lessons()): the lesson's report on
// `out`, a bad option or a failure as one line on `err`; returns the exit code.
int run_lesson_command(const std::vector<std::unique_ptr<Lesson>>& lessons,
                       const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                       const RunAdjust& adjust = {});

// The exit code of bad input (a usage error).
inline constexpr int kExitUsage = 2;

// "mgpu WHERE: error: WHAT" on `err`; returns 2, the exit code of bad input.
int usage_error(std::ostream& err, const std::string& where, const std::string& what);

}  // namespace mgpu::lessons
