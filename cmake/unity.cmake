# Unity builds (GPOOL_UNITY, top-level CMakeLists.txt; docs/ci.md, "Why it is built this way").
# Included after every add_subdirectory, so it sees all targets. Two jobs:
# 1. The exceptions: sources that stay out of the unity batches and targets built without them.
#    They are set whether or not GPOOL_UNITY is on, so the clash check below checks the same
#    sources in every tree.
# 2. The clash check: writes ${PROJECT_BINARY_DIR}/unity-sources.txt (each target's sources that
#    a unity build batches) and registers the CTest test unity_clashes, which runs
#    cmake/unity_clashes.py on it (under a second), so a name clash that only a unity build would
#    hit fails `make test` in any tree.

# Exceptions. Each names why; docs/ci.md lists them as the next step (rename, then drop).
# - gpool_sim: workload_gen.cc and fill.cc both define class `Rng` in gpool::sim::{anon} (not
#   renamed yet).
# - sched_test, sim_test: their tests share helper names (`Job`, `MakeCluster`, `Sec`, `Fill`,
#   `Jobs`, `OneLeaf`, `Runtimes`, ...) across sources (not renamed yet).
# - driver_stubs.cc: by design a TU of its own (generated weak `extern "C" int f()` stubs that
#   include no CUDA header; beside driver_api.cc's cuda.h signatures they conflict). Permanent.
#   nccl_stubs.cc likewise, beside nccl_api.cc's nccl.h ones.
# - share_arbiter.cc: its ShareArbiter::Shared holds a `Slot` from the anonymous namespace; in a
#   unity TU the .cc counts as an included file, so GCC's -Wsubobject-linkage (on by default,
#   an error under -Werror) fires. Moving `Slot` into ShareArbiter (or a named namespace) would
#   let it in; src/remote is others' now.
# - api.cc: the same (ApiServer::Services holds the gRPC service classes of its anonymous
#   namespace). Turning -Wsubobject-linkage off in unity trees would let these in, but it would
#   also stop CI seeing the real case (a header's class holding a TU-local type), so no.
set(GPOOL_UNITY_SKIP_SOURCES
    src/remote/client/driver_stubs.cc
    src/remote/client/nccl_stubs.cc
    src/remote/server/share_arbiter.cc
    src/control/api.cc
    src/sim/fill.cc)
set(GPOOL_UNITY_OFF_TARGETS sched_test sim_test)

foreach(src IN LISTS GPOOL_UNITY_SKIP_SOURCES)
  get_filename_component(dir ${PROJECT_SOURCE_DIR}/${src} DIRECTORY)
  set_source_files_properties(${PROJECT_SOURCE_DIR}/${src} DIRECTORY ${dir}
                              PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endforeach()
foreach(t IN LISTS GPOOL_UNITY_OFF_TARGETS)
  if(NOT TARGET ${t})
    message(FATAL_ERROR "cmake/unity.cmake: GPOOL_UNITY_OFF_TARGETS names ${t}, which is no target")
  endif()
  set_target_properties(${t} PROPERTIES UNITY_BUILD OFF)
endforeach()

# All targets defined in `dir` and the directories below it.
function(gpool_unity_collect dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    gpool_unity_collect(${sub} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

gpool_unity_collect(${PROJECT_SOURCE_DIR} gpool_all_targets)
set(manifest "")
foreach(t IN LISTS gpool_all_targets)
  get_target_property(type ${t} TYPE)
  if(NOT type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|EXECUTABLE|OBJECT_LIBRARY)$")
    continue()
  endif()
  if(t IN_LIST GPOOL_UNITY_OFF_TARGETS)
    continue()
  endif()
  get_target_property(srcs ${t} SOURCES)
  get_target_property(tdir ${t} SOURCE_DIR)
  set(line "${t}")
  set(n 0)
  foreach(s IN LISTS srcs)
    if(NOT s MATCHES "\\.(cc|cpp|cxx|c)$" OR s MATCHES "^\\$<")
      continue()
    endif()
    if(IS_ABSOLUTE ${s})
      set(path ${s})
    else()
      set(path ${tdir}/${s})
    endif()
    get_source_file_property(skip ${path} TARGET_DIRECTORY ${t} SKIP_UNITY_BUILD_INCLUSION)
    get_source_file_property(generated ${path} TARGET_DIRECTORY ${t} GENERATED)
    # Generated code (protoc's) is checked by the unity build itself, not by the scan.
    if(skip OR generated)
      continue()
    endif()
    string(APPEND line "\t${path}")
    math(EXPR n "${n} + 1")
  endforeach()
  if(n GREATER 1)
    string(APPEND manifest "${line}\n")
  endif()
endforeach()
file(WRITE ${PROJECT_BINARY_DIR}/unity-sources.txt "${manifest}")

# The Debian python3 when there is one (cmake/gpool.cmake): a pyenv shim costs ~0.7 s per start.
if(GPOOL_SYSTEM_PYTHON3)
  set(Python3_EXECUTABLE ${GPOOL_SYSTEM_PYTHON3})
  set(Python3_FOUND ON)
else()
  find_package(Python3 COMPONENTS Interpreter)
endif()
if(Python3_FOUND)
  add_test(NAME unity_clashes
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/cmake/unity_clashes.py
                   ${PROJECT_BINARY_DIR}/unity-sources.txt
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(unity_clashes PROPERTIES TIMEOUT 60)
  # The checker itself: a known clash must be reported (else a broken scan would pass silently).
  add_test(NAME unity_clashes_selftest
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/cmake/unity_clashes_selftest.py
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(unity_clashes_selftest PROPERTIES TIMEOUT 60)
else()
  message(WARNING "gpool: no python3, so no unity_clashes test")
endif()
