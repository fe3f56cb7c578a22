// The `mgpu` command line: list, run LESSON, profiles, viz. Callable in-process (tests pass
// their own streams); returns the exit code: 0 ok, 1 a failure while running, 2 bad input.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mgpu::lessons {

int mgpu_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Parses a command's arguments with CLI11: --help prints the help (done, 0); a parse error prints
// one line "mgpu WHERE: error: ..." (done, 2); otherwise returns 0 with done false.
int parse_command(CLI::App& app, std::vector<std::string> args, std::ostream& out,
                  std::ostream& err, const std::string& where, bool& done);
// The exit code of bad input (a usage error).
inline constexpr int kExitUsage = 2;

// "mgpu WHERE: error: WHAT" on `err`; returns 2, the exit code of bad input.
int usage_error(std::ostream& err, const std::string& where, const std::string& what);

}  // namespace mgpu::lessons
