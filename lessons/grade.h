// `mgpu grade [exNN] [--impl mine|reference] [--timeout S]`: runs the graded tests of the
// exercises (the test_grade_exNN_* executables next to the mgpu binary) one test case per child
// process with a wall-clock limit, and prints a score table with the first failing check and a
// hint. An exercise whose executable is missing, or older than the file the student edits (the
// last build failed or was not run), is not graded and says so. Exit 0 only when every graded
// check passes; 2 for bad usage (e.g. an unknown exercise).
#pragma once
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

namespace mgpu::lessons {

int cmd_grade(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The hint `mgpu grade` prints when `check` (a graded case's name) of `exercise` ("ex03") fails:
// the one written for that check, else the exercise's first. Empty for an unknown exercise.
std::string grade_hint(const std::string& exercise, const std::string& check);

// A child process's outcome. exit_code is 128 + signal when it was killed by a signal.
struct ChildResult {
  int exit_code = -1;
  bool timed_out = false;
  int signal = 0;      // the signal that ended it, or 0
  std::string output;  // stdout and stderr together
};

// Runs argv[0] (a path) with the current environment plus `env` overrides; kills it (and its
// process group) after timeout_seconds.
ChildResult run_child(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::string>>& env,
                      double timeout_seconds);

}  // namespace mgpu::lessons
