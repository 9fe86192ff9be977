# Helpers that keep each src/ folder one library with explicit dependencies.
#
# gpool_library(NAME SRCS a.cc b.cc DEPS other_lib ...)
#   Builds static library gpool_NAME from SRCS; includes resolve from src/ ("common/status.h").
# gpool_test(NAME SRCS a_test.cc ... DEPS ...)
#   One GoogleTest binary per folder (fewer links on a 2-core machine); registered with CTest.
#   Tests run with the repository root as working directory so they can reach testdata/.
# gpool_script_test(NAME SCRIPT TIMEOUT SECONDS [ARGS a b ...])
#   A shell scenario test: SCRIPT (beside the calling CMakeLists.txt) run as
#   `SCRIPT path/to/gpool ARGS...` from the repository root, killed after SECONDS.

function(gpool_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(gpool_${name} STATIC ${ARG_SRCS})
  target_include_directories(gpool_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(gpool_${name} PUBLIC ${ARG_DEPS})
endfunction()

function(gpool_test name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "GPOOL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()

# The scenario tests parse JSON with python3 (standard library only) dozens of times each. They
# get the Debian python3 (scripts/setup.sh installs it) ahead of whatever else is first in PATH:
# a pyenv shim costs ~0.7 s CPU per call against ~0.06 s (docs/ci.md).
find_program(GPOOL_SYSTEM_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(GPOOL_SYSTEM_PYTHON3)
  set(GPOOL_TEST_BIN_DIR ${PROJECT_BINARY_DIR}/test-bin)
  file(MAKE_DIRECTORY ${GPOOL_TEST_BIN_DIR})
  file(CREATE_LINK ${GPOOL_SYSTEM_PYTHON3} ${GPOOL_TEST_BIN_DIR}/python3 SYMBOLIC)
endif()

function(gpool_script_test name script)
  cmake_parse_arguments(ARG "" "TIMEOUT" "ARGS" ${ARGN})
  add_test(NAME ${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/${script} $<TARGET_FILE:gpool> ${ARG_ARGS}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  if(GPOOL_TEST_BIN_DIR)
    set_property(TEST ${name} APPEND PROPERTY
                 ENVIRONMENT_MODIFICATION "PATH=path_list_prepend:${GPOOL_TEST_BIN_DIR}")
  endif()
endfunction()
