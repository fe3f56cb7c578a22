// `mgpu grade` end to end: the real mgpu binary runs the real graded executables (all built in
// MGPU_BINARY_DIR), so these run child processes; absolute paths keep them independent of
// ctest's working directory.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <chrono>
#include <filesystem>
#include <regex>
#include <string>

#include "lessons/grade.h"

namespace test_grade_cli {

using mgpu::lessons::ChildResult;
using mgpu::lessons::run_child;

namespace {

ChildResult mgpu_grade(std::vector<std::string> args,
                       std::vector<std::pair<std::string, std::string>> env = {}) {
  args.insert(args.begin(), {std::string(MGPU_BINARY_DIR) + "/mgpu", "grade"});
  env.push_back({"MGPU_IMPL", ""});
  return run_child(args, env, 600);
}

namespace fs = std::filesystem;

// A scratch directory for MGPU_GRADE_DIR, removed at the end of the test.
struct GradeDir {
  fs::path path = fs::temp_directory_path() / ("mgpu_grade_dir_" + std::to_string(getpid()));
  GradeDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~GradeDir() { fs::remove_all(path); }
  // A copy of a real graded executable, its modification time `age` before now.
  void add(const std::string& exe, std::chrono::hours age) {
    fs::copy_file(fs::path(MGPU_BINARY_DIR) / exe, path / exe);
    fs::last_write_time(path / exe, fs::file_time_type::clock::now() - age);
  }
};

// The "total  earned/possible" line of the table.
std::pair<int, int> total_points(const std::string& output) {
  std::smatch m;
  REQUIRE(std::regex_search(output, m, std::regex(R"(total\s+(\d+)/(\d+))")));
  return {std::stoi(m[1]), std::stoi(m[2])};
}

}  // namespace

TEST_CASE("mgpu grade on the untouched stubs: 0 points and a non-zero exit", "[cli]") {
  ChildResult r = mgpu_grade({});
  INFO(r.output);
  CHECK(r.exit_code == 1);
  auto [earned, possible] = total_points(r.output);
  CHECK(earned == 0);
  CHECK(possible > 0);
  CHECK(r.output.find("not implemented yet: see docs/exercises/01-ring-all-reduce.md") !=
        std::string::npos);
  CHECK(r.output.find("hint: ") != std::string::npos);
}

TEST_CASE("mgpu grade keeps the failing check's context and its whole message", "[cli]") {
  ChildResult r = mgpu_grade({"ex01"});
  INFO(r.output);
  CHECK(r.exit_code == 1);
  // The first check on 2 ranks with an empty tensor: its INFO context, then the exception's
  // message to its last character (a long line is not cut).
  CHECK(r.output.find("context: 'ranks=2 length=0 op=sum'") != std::string::npos);
  // (Either rank may throw first: the ranks are threads.)
  CHECK(r.output.find("exception: 'rank ") != std::string::npos);
  CHECK(r.output.find(": not implemented yet: see docs/exercises/01-ring-all-reduce.md'") !=
        std::string::npos);
  CHECK(r.output.find("...") == std::string::npos);
}

TEST_CASE("mgpu grade's hint is the failing check's", "[cli]") {
  using mgpu::lessons::grade_hint;
  const std::string gpipe = grade_hint("ex03", "ex03 GPipe: all forwards then all backwards");
  const std::string one_f_one_b = grade_hint("ex03", "ex03 1F1B: a valid schedule (4 pts)");
  const std::string diagrams = grade_hint("ex03", "ex03 compute orders equal the reference");
  CHECK(gpipe.find("B0 B1 ... B(M-1)") != std::string::npos);  // not "in reverse"
  CHECK(one_f_one_b.find("warms up with min(M, P-s-1) forwards") != std::string::npos);
  CHECK(diagrams.find("micro-batch 0, 1, 2") != std::string::npos);
  const std::string zbv =
      grade_hint("ex03", "ex03 ZB-V: a V-shaped schedule that is deadlock-free");
  CHECK(zbv.find("2(P-s)-1 chunk-0 forwards") != std::string::npos);
  CHECK(grade_hint("ex01", "ex01 avg on 1..8 ranks") != grade_hint("ex01", "ex01 sum on 2 ranks"));
  CHECK(grade_hint("ex99", "anything").empty());
}

TEST_CASE("mgpu grade --list: every exercise with its file, page and the graded points", "[cli]") {
  ChildResult r = mgpu_grade({"--list"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  for (const char* ex :
       {"ex01", "ex02", "ex03", "ex04", "ex05", "ex06", "ex07", "ex08", "ex09", "ex10"})
    CHECK(r.output.find(std::string(ex) + " ") != std::string::npos);
  CHECK(r.output.find("edit exercises/pipeline_schedules.cpp") != std::string::npos);
  // Each exercise's points come from its graded checks; the last line sums them.
  int sum = 0;
  const std::regex pts(R"( (\d+) pts  edit )");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), pts), end; it != end; ++it)
    sum += std::stoi((*it)[1]);
  CHECK(sum > 0);
  CHECK(r.output.find("10 exercises, ") != std::string::npos);
  CHECK(r.output.find(", " + std::to_string(sum) + " points\n") != std::string::npos);
}

TEST_CASE("mgpu grade --impl reference: full points and exit 0", "[cli]") {
  ChildResult r = mgpu_grade({"--impl", "reference"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  auto [earned, possible] = total_points(r.output);
  CHECK(possible > 0);
  CHECK(earned == possible);
  CHECK(r.output.find("FAIL") == std::string::npos);
}

TEST_CASE("mgpu grade exNN grades one exercise", "[cli]") {
  ChildResult r = mgpu_grade({"ex04", "--impl", "reference"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("ex04 bubble accounting") != std::string::npos);
  CHECK(r.output.find("ex01") == std::string::npos);
}

TEST_CASE("mgpu grade with an unknown exercise: one line and exit 2", "[cli]") {
  ChildResult r = mgpu_grade({"ex99"});
  CHECK(r.exit_code == 2);
  CHECK(r.output ==
        "mgpu grade: error: unknown exercise 'ex99' (available: ex01, ex02, ex03, "
        "ex04, ex05, ex06, ex07, ex08, ex09, ex10)\n");
  CHECK(mgpu_grade({"--impl", "yours"}).exit_code == 2);
}

TEST_CASE("mgpu run --impl mine on the untouched stubs: every exercise falls back with one line",
          "[cli]") {
  ChildResult r = run_child({std::string(MGPU_BINARY_DIR) + "/mgpu", "run", "single_device",
                             "--steps", "1", "--impl", "mine"},
                            {{"MGPU_IMPL", ""}}, 120);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  for (const char* ex :
       {"ex01", "ex02", "ex03", "ex04", "ex05", "ex06", "ex07", "ex08", "ex09", "ex10"})
    CHECK(r.output.find(std::string(ex) + " not implemented yet: using the reference\n") !=
          std::string::npos);
  // Above the lesson's header: whose code runs (none of the student's yet).
  CHECK(r.output.find("your code (exercises/) runs: none yet; every other exercise is the "
                      "reference\n") != std::string::npos);
}

TEST_CASE("mgpu run --impl with an unknown exercise: one line naming the valid ones and exit 2",
          "[cli]") {
  ChildResult r = run_child(
      {std::string(MGPU_BINARY_DIR) + "/mgpu", "run", "single_device", "--impl", "ex11=mine"},
      {{"MGPU_IMPL", ""}}, 120);
  CHECK(r.exit_code == 2);
  CHECK(r.output.rfind("mgpu run single_device: error: --impl 'ex11=mine': no exercise 'ex11'; "
                       "use reference, mine, or a list like ex01=mine,ex03=mine (exercises: "
                       "ex01, ex02, ex03, ex04, ex05, ex06, ex07, ex08, ex09, ex10",
                       0) == 0);
  CHECK(r.output.find('\n') == r.output.size() - 1);
}

TEST_CASE("mgpu grade exNN grades the exercise on its own: the others it calls are the reference",
          "[cli]") {
  // ex06's tensor-parallel layers all-reduce with exercise 01's ring. On the untouched stubs the
  // failure must be ex06's own, not ex01's stub.
  ChildResult own = mgpu_grade({"ex06"});
  INFO(own.output);
  CHECK(own.exit_code == 1);
  CHECK(own.output.find("each exercise graded on its own (the others it calls: the reference)") !=
        std::string::npos);
  CHECK(own.output.find("see docs/exercises/06-tensor-parallel.md") != std::string::npos);
  CHECK(own.output.find("01-ring-all-reduce") == std::string::npos);
  // The reference ex06 passes on its own; over the student's other exercises (--others mine)
  // its layers all-reduce with ex01's untouched stub, and that is what fails.
  CHECK(mgpu_grade({"ex06", "--impl", "reference"}).exit_code == 0);
  ChildResult with_mine = mgpu_grade({"ex06", "--impl", "reference", "--others", "mine"});
  INFO(with_mine.output);
  CHECK(with_mine.exit_code == 1);
  CHECK(with_mine.output.find("each exercise graded on its own (the others it calls: yours)") !=
        std::string::npos);
  CHECK(with_mine.output.find("see docs/exercises/01-ring-all-reduce.md") != std::string::npos);
  CHECK(mgpu_grade({"ex06", "--others", "theirs"}).exit_code == 2);
}

TEST_CASE("a graded executable refuses an MGPU_IMPL that names nothing, in one line, exit 2",
          "[cli]") {
  const std::string exe = std::string(MGPU_BINARY_DIR) + "/test_grade_ex04_bubble_accounting";
  for (const char* bad : {"ex06=mne", "mien", "ex11=mine"}) {
    ChildResult r = run_child({exe, "--list-test-names-only"}, {{"MGPU_IMPL", bad}}, 120);
    INFO(bad << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.rfind(std::string("MGPU_IMPL: --impl '") + bad + "'", 0) == 0);
    CHECK(r.output.find('\n') == r.output.size() - 1);
  }
  // The grammar's valid forms run: the reference passes ex04's checks, ex04's stub fails them.
  CHECK(run_child({exe}, {{"MGPU_IMPL", "ex01=mine,ex04=reference"}}, 300).exit_code == 0);
  CHECK(run_child({exe}, {{"MGPU_IMPL", "ex04=mine"}}, 300).exit_code != 0);
}

TEST_CASE("mgpu grade does not grade an executable older than its exercise's source", "[cli]") {
  // After an edit that does not compile, the build leaves the old graded executable: grading it
  // would grade the old code. A copy ten years old stands for it (older than any checkout).
  GradeDir dir;
  dir.add("test_grade_ex04_bubble_accounting", std::chrono::hours(24 * 365 * 10));
  ChildResult old =
      mgpu_grade({"ex04", "--impl", "reference"}, {{"MGPU_GRADE_DIR", dir.path.string()}});
  INFO(old.output);
  CHECK(old.exit_code == 1);
  CHECK(old.output.find("NOT GRADED: test_grade_ex04_bubble_accounting is older than "
                        "exercises/bubble_accounting.cpp\n") != std::string::npos);
  CHECK(old.output.find("(the build failed or was not run): cmake --build build, then grade "
                        "again\n") != std::string::npos);
  CHECK(old.output.find("PASS") == std::string::npos);
  CHECK(
      old.output.find("0/0  of the exercises graded; not graded: ex04 (older than its source)\n") !=
      std::string::npos);
  // The same executable, newer than the source: graded.
  fs::last_write_time(dir.path / "test_grade_ex04_bubble_accounting",
                      fs::file_time_type::clock::now() + std::chrono::hours(1));
  ChildResult fresh =
      mgpu_grade({"ex04", "--impl", "reference"}, {{"MGPU_GRADE_DIR", dir.path.string()}});
  INFO(fresh.output);
  CHECK(fresh.exit_code == 0);
  CHECK(fresh.output.find("PASS") != std::string::npos);
  CHECK(fresh.output.find("not graded") == std::string::npos);
}

TEST_CASE("mgpu grade with some executables missing or out of date: the total counts the graded",
          "[cli]") {
  GradeDir dir;
  dir.add("test_grade_ex04_bubble_accounting", std::chrono::hours(-1));  // newer than its source
  dir.add("test_grade_ex02_ddp_buckets", std::chrono::hours(24 * 365 * 10));
  ChildResult r = mgpu_grade({"--impl", "reference"}, {{"MGPU_GRADE_DIR", dir.path.string()}});
  INFO(r.output);
  CHECK(r.exit_code == 1);  // full marks on what was graded, but not everything was
  std::smatch ex04;
  REQUIRE(
      std::regex_search(r.output, ex04, std::regex(R"(ex04 bubble accounting\s+(\d+)/\1  PASS)")));
  auto [earned, possible] = total_points(r.output);
  CHECK(earned == std::stoi(ex04[1]));
  CHECK(possible == earned);
  CHECK(std::regex_search(r.output, std::regex(R"(ex01 ring all-reduce\s+-  NOT BUILT)")));
  CHECK(r.output.find("of the exercises graded; not graded: ex01 (not built), ex02 (older than its "
                      "source), ex03 (not built), ex05 (not built), ex06 (not built), ex07 (not "
                      "built), ex08 (not built), ex09 (not built), ex10 (not built)\n") !=
        std::string::npos);
}

TEST_CASE("mgpu grade --help names every exercise", "[cli]") {
  ChildResult r = mgpu_grade({"--help"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("one exercise: ex01, ex02, ex03, ex04, ex05, ex06, ex07, ex08, ex09, ex10 "
                      "(default: all)") != std::string::npos);
}

TEST_CASE("mgpu grade ex01's messages name the phase and chunk of a wrong ring", "[cli]") {
  // Rings with one deliberate bug each (tests/grade/test_grade_ex01_ring_all_reduce.cpp, hidden
  // cases [.ring_watch]) through the graded check: its message must name where they leave the
  // page's ring.
  ChildResult r = run_child({std::string(MGPU_BINARY_DIR) + "/test_grade_ex01_ring_all_reduce",
                             "[ring_watch]", "-r", "compact"},
                            {{"MGPU_IMPL", ""}}, 300);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("Passed all 4 test cases") != std::string::npos);
}

}  // namespace test_grade_cli
