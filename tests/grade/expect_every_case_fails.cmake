# Run by ctest as `cmake -DEXE=<graded test executable> -P expect_every_case_fails.cmake`.
# With the exercise's own untouched stub and the reference for every other exercise
# (MGPU_IMPL=exNN=mine, what `mgpu grade exNN` runs) EVERY [grade] test case must fail: a graded
# test that passes on its stub checks nothing, and one that fails only through another exercise's
# stub (ex06's layers call ex01's ring) does not check its own. Lists the cases, runs each one on
# its own, and fails naming every case that passed (or that did not run at all).
get_filename_component(exe_name "${EXE}" NAME)
string(REGEX REPLACE "^test_grade_(ex[0-9]+)_.*" "\\1" exercise "${exe_name}")
set(ENV{MGPU_IMPL} "${exercise}=mine")
execute_process(COMMAND ${EXE} [grade] --list-test-names-only
                OUTPUT_VARIABLE listing RESULT_VARIABLE ignored)  # exit code = number listed
string(REPLACE "\n" ";" lines "${listing}")
set(cases "")
foreach(line IN LISTS lines)
  string(STRIP "${line}" name)
  if(NOT name STREQUAL "")
    list(APPEND cases "${name}")
  endif()
endforeach()
list(LENGTH cases count)
if(count EQUAL 0)
  message(FATAL_ERROR "${EXE}: no [grade] test cases listed")
endif()

set(passed "")
foreach(name IN LISTS cases)
  execute_process(COMMAND ${EXE} "${name}" -r compact TIMEOUT 120
                  OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)
  if(out MATCHES "No test cases matched")
    message(FATAL_ERROR "'${name}' could not be selected by name (avoid , [ ] in graded names)")
  endif()
  if(rc EQUAL 0)
    list(APPEND passed "${name}")
  else()
    message(STATUS "fails on the stub, as it must: ${name}")
  endif()
endforeach()

if(passed)
  string(REPLACE ";" "\n  " passed_lines "${passed}")
  message(FATAL_ERROR "graded test cases that PASS on the untouched stubs (they check nothing):\n  ${passed_lines}")
endif()
message(STATUS "all ${count} graded cases fail on the stubs")
