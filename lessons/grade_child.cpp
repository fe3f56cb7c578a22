// Running one child process for `mgpu grade`: its own process group, its output through a pipe,
// killed with everything it started when the wall-clock limit passes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "lessons/grade.h"

extern char** environ;

namespace mgpu::lessons {

namespace {

// ---- child processes ----

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The current environment with `overrides` replacing (or adding) their variables.
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry(*e);
    bool replaced = std::any_of(overrides.begin(), overrides.end(),
                                [&](auto& kv) { return entry.rfind(kv.first + "=", 0) == 0; });
    if (!replaced) env.push_back(entry);
  }
  for (auto& [key, value] : overrides) env.push_back(key + "=" + value);
  return env;
}

// Reads the child's output until it closes the pipe or the deadline passes; true on timeout.
bool drain_until(int fd, std::chrono::steady_clock::time_point deadline, std::string& output) {
  char buffer[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return true;
    pollfd p{fd, POLLIN, 0};
    int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // EOF: the child (and anything it started) closed its output
    output.append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace

ChildResult run_child(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::string>>& env,
                      double timeout_seconds) {
  std::vector<std::string> args = argv, envs = environment_with(env);
  std::vector<char*> c_args = c_strings(args), c_env = c_strings(envs);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("mgpu grade: pipe failed");

  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("mgpu grade: fork failed");
  if (pid == 0) {  // child: own process group (so a timeout kills all of it), output to the pipe
    setpgid(0, 0);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execve(c_args[0], c_args.data(), c_env.data());
    _exit(127);
  }
  close(fds[1]);

  ChildResult result;
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  result.timed_out = drain_until(fds[0], deadline, result.output);
  if (result.timed_out) kill(-pid, SIGKILL);
  close(fds[0]);

  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
    result.exit_code = 128 + result.signal;
  }
  return result;
}

}  // namespace mgpu::lessons
