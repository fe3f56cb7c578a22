// `mgpu run LESSON [options]`: finds the lesson, parses its command line with CLI11, and runs it,
// every failure one line and an exit code. Also the parsing and the one-line errors every `mgpu`
// command shares. The native program runs every lesson (cli.cpp); the web page its own few, with
// what a browser cannot do refused (web/lessons_page.cpp).
#include <algorithm>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "core/comm/comm.h"
#include "core/runtime/allocator.h"
#include "core/runtime/input_file.h"
#include "exercises/selection.h"
#include "lessons/cli.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

namespace {

// Above the lesson's header, when any exercise runs the student's code: which ones, so a student
// knows what the figures below measure. Nothing for the default (every exercise the reference).
void print_student_code_line(std::ostream& out) {
  std::string mine;
  for (auto& choice : ex::installed_exercises())
    if (choice.installed == "mine") mine += (mine.empty() ? "" : ", ") + choice.name;
  bool asked = std::any_of(ex::installed_exercises().begin(), ex::installed_exercises().end(),
                           [](auto& c) { return c.installed == "mine" || c.fell_back; });
  if (asked)
    fmt::print(out, "your code (exercises/) runs: {}; every other exercise is the reference\n",
               mine.empty() ? "none yet" : mine);
}

// Runs a parsed lesson: the model preset, the run configuration, the exercises chosen, then the
// lesson itself; what it throws becomes one line (2: bad input) or a failure (1).
int run_parsed(Lesson& lesson, const CLI::App& app, CommonOptions& common, std::ostream& out,
               std::ostream& err) {
  try {
    const CLI::Option* ranks = app.get_option_no_throw("--ranks");
    apply_mpi_world_size(common, ranks && ranks->count() > 0);
    std::vector<std::string> given;
    for (const char* name : kModelShapeOptions)
      if (const CLI::Option* o = app.get_option_no_throw(name); o && o->count() > 0)
        given.emplace_back(name);
    apply_model_preset(common, given);
    common.run_config = resolved_run_config(lesson.name(), app, common);
    (void)common.fault_plan();  // an injected fault on a rank or step the run lacks: refused
    ex::select_impl(common.impl, out);
    print_student_code_line(out);
    return lesson.run(common, out);
  } catch (const UsageError& e) {
    return usage_error(err, "run " + lesson.name(), e.what());
  } catch (const RunConfigMismatch& e) {  // every process knows; rank 0 alone prints the table
    return e.reported() ? usage_error(err, "run " + lesson.name(), e.what()) : kExitUsage;
  } catch (const std::invalid_argument& e) {  // bad configs found by core (model, data, profile)
    return usage_error(err, "run " + lesson.name(), e.what());
  } catch (const OutOfMemory& e) {
    fmt::print(err, "mgpu run {}: error: {}\n", lesson.name(), e.what());
    fmt::print(err,
               "  (raise --capacity, pick a larger --profile, or shrink --batch/--dim/--layers)\n");
    return kExitUsage;
  } catch (const RankError& e) {
    // Re-classify by the original exception: a config problem found on a rank is still bad input.
    try {
      if (e.cause()) std::rethrow_exception(e.cause());
    } catch (const OutOfMemory& oom) {
      fmt::print(err, "mgpu run {}: error on rank {}: {}\n", lesson.name(), e.rank(), oom.what());
      fmt::print(
          err, "  (raise --capacity, pick a larger --profile, or shrink --batch/--dim/--layers)\n");
      return kExitUsage;
    } catch (const std::invalid_argument& bad) {
      return usage_error(err, "run " + lesson.name(),
                         fmt::format("rank {}: {}", e.rank(), bad.what()));
    } catch (...) {
    }
    fmt::print(err, "mgpu run {}: failed: {}\n", lesson.name(), e.what());
    return 1;
  } catch (const comm::CommError& e) {
    fmt::print(err, "mgpu run {}: communication error:\n{}\n", lesson.name(), e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(err, "mgpu run {}: failed: {}\n", lesson.name(), e.what());
    return 1;
  }
}

// Under mpirun every process of one program (an "app context": `mpirun -n 2 A : -n 2 B` has two)
// gets the same arguments, so bad input is reported once, by the first process of each program,
// not once per rank. Open MPI names the context and the sizes of all contexts.
bool reports_bad_input() {
  const char* app = std::getenv("OMPI_MCA_orte_app_num");
  const char* sizes = std::getenv("OMPI_APP_CTX_NUM_PROCS");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) return root_process();  // not Open MPI: only world rank 0 (PMI) narrates
  if (!app || !sizes) return std::string(rank) == "0";
  const int app_num = std::atoi(app);
  int first = 0;  // the world rank of this context's first process: the sizes before it
  std::istringstream list(sizes);
  int size = 0;
  for (int i = 0; i < app_num && list >> size; ++i) first += size;
  return std::atoi(rank) == first;
}

}  // namespace

int run_lesson_command(const std::vector<std::unique_ptr<Lesson>>& lessons,
                       const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                       const RunAdjust& adjust) {
  auto names = [&] {
    std::vector<std::string> n;
    for (auto& l : lessons) n.push_back(l->name());
    return fmt::format("{}", fmt::join(n, ", "));
  };
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    fmt::print(out, "usage: mgpu run LESSON [options]   (lessons: {})\n", names());
    return args.empty() ? kExitUsage : 0;
  }
  auto it =
      std::find_if(lessons.begin(), lessons.end(), [&](auto& l) { return l->name() == args[0]; });
  if (it == lessons.end())
    return usage_error(
        err, "run",
        fmt::format("unknown lesson '{}' (available: {})", echo_input(args[0], 80), names()));
  Lesson& lesson = **it;

  CLI::App app(lesson.summary(), "mgpu run " + lesson.name());
  app.footer(
      "The words the output uses (bubble, idle, modeled clock, MFU, busbw, ...): "
      "docs/glossary.md");
  app.option_defaults()->always_capture_default();
  CommonOptions common;
  add_common_options(app, common, lesson.defaults());
  lesson.add_options(app);
  bool done = false;
  int rc =
      parse_command(app, {args.begin() + 1, args.end()}, out, err, "run " + lesson.name(), done);
  if (done) return rc;
  if (adjust)
    if (std::optional<std::string> refused = adjust(app, common))
      return usage_error(err, "run " + lesson.name(), *refused);
  return run_parsed(lesson, app, common, out, err);
}

int usage_error(std::ostream& err, const std::string& where, const std::string& what) {
  // One line of bounded length whatever the user typed (a message quotes at most ~200 characters
  // of any one input; this is the net for one that did not).
  constexpr size_t kMaxLine = 600;
  if (reports_bad_input())
    fmt::print(err, "mgpu{}: error: {}\n", where.empty() ? "" : " " + where,
               what.size() > kMaxLine ? what.substr(0, kMaxLine - 3) + "..." : what);
  return 2;
}

// CLI11 reports problems as exceptions; turn them into one line + exit 2 (help is exit 0).
int parse_command(CLI::App& app, std::vector<std::string> args, std::ostream& out,
                  std::ostream& err, const std::string& where, bool& done) {
  done = false;
  std::reverse(args.begin(), args.end());  // CLI11 consumes a reversed vector
  try {
    app.parse(args);
    return 0;
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    done = true;
    return 0;
  } catch (const CLI::ParseError& e) {
    done = true;
    return usage_error(err, where,
                       fmt::format("{} (see `mgpu {} --help`)", echo_input(e.what(), 300), where));
  }
}

}  // namespace mgpu::lessons
