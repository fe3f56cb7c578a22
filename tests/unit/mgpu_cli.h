// Running the `mgpu` program in-process from tests: its exit code, what it printed, and helpers
// for the tiny model sizes that keep lesson tests fast.
#pragma once
#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "lessons/cli.h"

namespace mgpu::testing {

struct CliResult {
  int code;
  std::string out, err;
};

inline CliResult run_mgpu(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int code = lessons::mgpu_main(args, out, err);
  return {code, out.str(), err.str()};
}

// A scratch file name under the system temp folder, unique to this test process.
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("mgpu_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

inline int count_lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// `args` followed by options for a tiny model trained for two steps.
inline std::vector<std::string> with_tiny_model(std::vector<std::string> args) {
  for (const char* a : {"--steps", "2", "--dim", "16", "--heads", "2", "--seq", "8"})
    args.push_back(a);
  return args;
}

}  // namespace mgpu::testing
