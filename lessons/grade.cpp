// `mgpu grade`: finds each exercise's graded executable, runs its cases one child process each,
// and prints the score table (or, with --list, the exercise table the docs show).
#include "lessons/grade.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "core/runtime/input_file.h"
#include "lessons/cli.h"
#include "lessons/grade_exercises.h"
#include "lessons/grade_internal.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

using detail::first_failure;
using detail::lines_of;
using detail::points_in;

namespace fs = std::filesystem;

namespace {

constexpr int kExitFailed = 1;

// ---- one exercise ----

struct CaseResult {
  std::string name;
  int points = 0;
  bool passed = false;
  std::string failure;  // the first failing check, one line
};

// Why an exercise was not graded: its executable is missing, or older than the exercise's source
// (the last build failed, or was not run since the edit: grading it would grade old code).
enum class NotGraded { no, not_built, out_of_date };

struct ExerciseResult {
  const ExerciseInfo* info = nullptr;
  NotGraded not_graded = NotGraded::not_built;
  std::string exe_name;  // when out of date
  std::vector<CaseResult> cases;
  bool graded() const { return not_graded == NotGraded::no; }
  int earned() const {
    int sum = 0;
    for (auto& c : cases) sum += c.passed ? c.points : 0;
    return sum;
  }
  int possible() const {
    int sum = 0;
    for (auto& c : cases) sum += c.points;
    return sum;
  }
  bool all_passed() const {
    return graded() && std::all_of(cases.begin(), cases.end(), [](auto& c) { return c.passed; });
  }
};

// Where the graded executables live: next to this program (build/), or $MGPU_GRADE_DIR.
fs::path graded_tests_dir() {
  if (const char* dir = std::getenv("MGPU_GRADE_DIR")) return dir;
  return fs::read_symlink("/proc/self/exe").parent_path();
}

std::optional<fs::path> find_graded_executable(const std::string& id) {
  std::error_code ec;
  for (auto& entry : fs::directory_iterator(graded_tests_dir(), ec)) {
    std::string file = entry.path().filename().string();
    if (entry.is_regular_file() && file.rfind("test_grade_" + id + "_", 0) == 0 &&
        access(entry.path().c_str(), X_OK) == 0)
      return entry.path();
  }
  return std::nullopt;
}

// Whether the graded executable is older than the exercise's source, the file the student edits
// (`file`, relative to the source tree this program was built from): then the last build failed
// or was not run. False when that tree or file is not there (an installed or moved build).
bool older_than_source(const fs::path& exe, const std::string& file) {
#ifdef MGPU_SOURCE_DIR
  std::error_code ec;
  const auto source_time = fs::last_write_time(fs::path(MGPU_SOURCE_DIR) / file, ec);
  if (ec) return false;
  const auto exe_time = fs::last_write_time(exe, ec);
  return !ec && exe_time < source_time;
#else
  (void)exe, (void)file;
  return false;
#endif
}

CaseResult run_case(const fs::path& exe, const std::string& name, const std::string& impl,
                    double timeout) {
  CaseResult c{name, points_in(name)};
  // Catch reads ',' in a test spec as "or" and '[' as a tag: escape them to name exactly one case.
  std::string spec;
  for (char ch : name) {
    if (ch == ',' || ch == '[' || ch == '\\') spec += '\\';
    spec += ch;
  }
  ChildResult run =
      run_child({exe.string(), spec, "-r", "compact"}, {{"MGPU_IMPL", impl}}, timeout);
  c.passed = !run.timed_out && run.exit_code == 0 &&
             run.output.find("No test cases matched") == std::string::npos;
  if (!c.passed) c.failure = first_failure(run, timeout);
  return c;
}

// What the graded executable of `info` runs (MGPU_IMPL, --impl's grammar): the exercise as
// `impl` says, and the other exercises it calls (ex06's tensor-parallel layers all-reduce with
// ex01's ring) as `others` says: by default the reference, so one exercise is graded on its own.
std::string impl_spec(const ExerciseInfo& info, const std::string& impl,
                      const std::string& others) {
  if (impl == others) return impl;
  std::vector<std::string> items;
  for (const ExerciseInfo& e : exercises())
    items.push_back(fmt::format("{}={}", e.id, e.id == info.id ? impl : others));
  return fmt::format("{}", fmt::join(items, ","));
}

ExerciseResult grade_exercise(const ExerciseInfo& info, const std::string& impl, double timeout) {
  ExerciseResult result{&info};
  auto exe = find_graded_executable(info.id);
  if (!exe) return result;
  if (older_than_source(*exe, info.file)) {
    result.not_graded = NotGraded::out_of_date;
    result.exe_name = exe->filename().string();
    return result;
  }
  result.not_graded = NotGraded::no;
  ChildResult listing = run_child({exe->string(), "[grade]", "--list-test-names-only"},
                                  {{"MGPU_IMPL", impl}}, timeout);
  if (listing.timed_out || listing.signal) {  // cannot even list: every check counts as failed
    result.cases.push_back({"list the graded checks", 1, false, first_failure(listing, timeout)});
    return result;
  }
  for (auto& line : lines_of(listing.output)) {
    std::string name = line.substr(line.find_first_not_of(' '));
    result.cases.push_back(run_case(*exe, name, impl, timeout));
  }
  return result;
}

// ---- the table ----

void print_row(std::ostream& out, const ExerciseResult& r) {
  std::string label = r.info->id + " " + r.info->title;
  if (r.not_graded == NotGraded::not_built) {
    fmt::print(out, "{:<28} {:>7}  NOT BUILT (cmake --build build, then grade again)\n", label,
               "-");
    return;
  }
  if (r.not_graded == NotGraded::out_of_date) {
    fmt::print(out, "{:<28} {:>7}  NOT GRADED: {} is older than {}\n", label, "-", r.exe_name,
               r.info->file);
    fmt::print(out,
               "{:<38}(the build failed or was not run): cmake --build build, then grade "
               "again\n",
               "");
    return;
  }
  if (r.cases.empty()) {
    fmt::print(out, "{:<28} {:>7}  no graded tests in this build\n", label, "-");
    return;
  }
  std::string points = fmt::format("{}/{}", r.earned(), r.possible());
  if (r.all_passed()) {
    fmt::print(out, "{:<28} {:>7}  PASS\n", label, points);
    return;
  }
  auto failed = std::find_if(r.cases.begin(), r.cases.end(), [](auto& c) { return !c.passed; });
  auto n_failed = std::count_if(r.cases.begin(), r.cases.end(), [](auto& c) { return !c.passed; });
  fmt::print(out, "{:<28} {:>7}  FAIL ({} of {} checks)\n", label, points, n_failed,
             r.cases.size());
  fmt::print(out, "{:<38}first failing: {}\n", "", failed->name);
  // In full: the context and the values are what a student needs to find the bug.
  for (auto& line : lines_of(failed->failure)) fmt::print(out, "{:<38}  {}\n", "", line);
  fmt::print(out, "{:<38}hint: {} (more in {})\n", "", r.info->hint_for(failed->name).text,
             r.info->doc);
}

// The graded checks' names in one exercise's executable; nullopt when it is not built.
std::optional<std::vector<std::string>> graded_checks(const ExerciseInfo& info, double timeout) {
  auto exe = find_graded_executable(info.id);
  if (!exe) return std::nullopt;
  ChildResult listing = run_child({exe->string(), "[grade]", "--list-test-names-only"},
                                  {{"MGPU_IMPL", "reference"}}, timeout);
  std::vector<std::string> names;
  for (auto& line : lines_of(listing.output))
    names.push_back(line.substr(line.find_first_not_of(' ')));
  return names;
}

// `mgpu grade --list`: the exercise table that docs/exercises/README.md shows (and its docs test
// compares), from this file's list and the graded executables, so the page cannot drift.
int print_exercise_list(std::ostream& out, double timeout) {
  int total_points = 0, total_checks = 0;
  for (auto& info : exercises()) {
    auto checks = graded_checks(info, timeout);
    int points = 0;
    for (auto& name : checks.value_or(std::vector<std::string>{})) points += points_in(name);
    total_points += points;
    total_checks += checks ? static_cast<int>(checks->size()) : 0;
    fmt::print(out, "{} {:<30} {:>10}  edit {}\n", info.id, info.title,
               checks ? fmt::format("{} pts", points) : "not built", info.file);
    fmt::print(out, "     page: {}\n", info.doc);
    fmt::print(out, "     --impl mine runs it in: {}\n", info.runs_in);
  }
  fmt::print(out, "{} exercises, {} graded checks, {} points\n", exercises().size(), total_checks,
             total_points);
  return 0;
}

int print_table(std::ostream& out, const std::string& impl, const std::string& others,
                const std::vector<ExerciseResult>& results) {
  const std::string with = impl == others
                               ? (impl == "mine" ? ", with your other exercises too" : "")
                               : fmt::format(
                                     ", each exercise graded on its own (the others it "
                                     "calls: {})",
                                     others == "mine" ? "yours" : "the reference");
  fmt::print(out, "mgpu grade: {} implementation{}{}\n\n", impl,
             impl == "mine" ? " (exercises/)" : " (solutions/)", with);
  fmt::print(out, "{:<28} {:>7}  {}\n", "exercise", "points", "result");
  int earned = 0, possible = 0;
  bool all_passed = true;
  for (auto& r : results) {
    print_row(out, r);
    earned += r.earned();
    possible += r.possible();
    all_passed = all_passed && r.all_passed();
  }
  std::vector<std::string> not_graded;
  for (auto& r : results)
    if (!r.graded())
      not_graded.push_back(fmt::format(
          "{} ({})", r.info->id,
          r.not_graded == NotGraded::not_built ? "not built" : "older than its source"));
  fmt::print(out, "{:<28} {:>7}{}\n", "total", fmt::format("{}/{}", earned, possible),
             not_graded.empty() ? ""
                                : fmt::format("  of the exercises graded; not graded: {}",
                                              fmt::join(not_graded, ", ")));
  return all_passed ? 0 : kExitFailed;
}

}  // namespace

std::string grade_hint(const std::string& exercise, const std::string& check) {
  for (auto& info : exercises())
    if (info.id == exercise) return info.hint_for(check).text;
  return "";
}

int cmd_grade(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app("Run the graded exercise tests and print a score table", "mgpu grade");
  std::string exercise, impl = "mine";
  double timeout = 120;
  std::vector<std::string> ids;
  for (auto& info : exercises()) ids.push_back(info.id);
  CLI::Option* exercise_option = app.add_option(
      "exercise", exercise, fmt::format("one exercise: {} (default: all)", fmt::join(ids, ", ")));
  app.add_option("--impl", impl, "whose code to grade")
      ->check(CLI::IsMember({"mine", "reference"}))
      ->capture_default_str();
  std::string others = "reference";
  app.add_option("--others", others,
                 "what the graded exercise calls of the other exercises (ex06's layers "
                 "all-reduce with ex01's ring): reference grades each exercise on its own, mine "
                 "with your other exercises")
      ->check(CLI::IsMember({"mine", "reference"}))
      ->capture_default_str();
  bool list = false;
  app.add_flag("--list", list, "list the exercises (file to edit, page, points), grade nothing");
  app.add_option("--timeout", timeout, "seconds each graded check may run")
      ->check(Positive)
      ->check(AtMost(86400))
      ->capture_default_str();
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 wants it reversed
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    fmt::print(err, "mgpu grade: error: {} (see `mgpu grade --help`)\n", e.what());
    return kExitUsage;
  }

  if (list) return print_exercise_list(out, timeout);
  const bool all = exercise_option->count() == 0;  // typed "" names no exercise: not "all"
  std::vector<const ExerciseInfo*> selected;
  for (auto& info : exercises())
    if (all || info.id == exercise) selected.push_back(&info);
  if (selected.empty()) {
    fmt::print(err, "mgpu grade: error: unknown exercise '{}' (available: {})\n",
               echo_input(exercise, 40), fmt::join(ids, ", "));
    return kExitUsage;
  }

  std::vector<ExerciseResult> results;
  for (auto* info : selected)
    results.push_back(grade_exercise(*info, impl_spec(*info, impl, others), timeout));
  return print_table(out, impl, others, results);
}

}  // namespace mgpu::lessons
