# Dependencies of the kernel-only build (HEARTH_KERNELS_ONLY, the ARM64 cross build):
# the layers core, format, quant, ops, model and backends/cpu, and their unit tests,
# need only the compiler's own libraries plus two things taken from the host's
# Debian packages, which are architecture-independent:
#   - nlohmann-json (header only): its headers alone, through a folder holding just
#     them (adding the host's /usr/include would mix x86-64 glibc headers into the build);
#   - GoogleTest, compiled from its Debian sources (/usr/src/googletest, libgtest-dev)
#     with the cross compiler.
find_package(Threads REQUIRED)

set(_host_json ${CMAKE_BINARY_DIR}/host_headers)
if(NOT EXISTS /usr/include/nlohmann/json.hpp)
  message(FATAL_ERROR "hearth: the kernel-only build needs nlohmann/json.hpp (Debian: nlohmann-json3-dev)")
endif()
file(MAKE_DIRECTORY ${_host_json})
file(CREATE_LINK /usr/include/nlohmann ${_host_json}/nlohmann SYMBOLIC)
add_library(hearth_nlohmann_json INTERFACE)
target_include_directories(hearth_nlohmann_json SYSTEM INTERFACE ${_host_json})
add_library(nlohmann_json::nlohmann_json ALIAS hearth_nlohmann_json)

if(HEARTH_BUILD_TESTS)
  if(NOT EXISTS /usr/src/googletest/CMakeLists.txt)
    message(FATAL_ERROR "hearth: the kernel-only build compiles GoogleTest from /usr/src/googletest (Debian: libgtest-dev)")
  endif()
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  add_subdirectory(/usr/src/googletest ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  # GoogleTest's own code is not ours to warn about.
  target_compile_options(gtest PRIVATE -w)
  target_compile_options(gtest_main PRIVATE -w)  # (it defines GTest::gtest and GTest::gtest_main)
endif()
