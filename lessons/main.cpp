#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "lessons/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const int rc = mgpu::lessons::mgpu_main(args, std::cout, std::cerr);
  // What was printed must have arrived: `mgpu validate --json > /dev/full` (or a closed standard
  // output) loses the output, so it is an error, not exit 0.
  errno = 0;
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::cerr << "mgpu: error: cannot write standard output ("
              << (errno ? std::strerror(errno) : "write failed")
              << "): what this command printed was lost\n";
    return rc != 0 ? rc : 1;
  }
  return rc;
}
