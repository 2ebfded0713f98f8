# xgrammar's C++ core (Apache-2.0), the grammar engine behind constrained decoding.
#
# Fetched at configure time as its pinned PyPI source distribution (hash-checked),
# never copied into this repository. Only the sources are used: xgrammar's own
# CMakeLists adds -Werror and -flto=auto to CMAKE_CXX_FLAGS and turns its Python
# bindings on from its config.cmake, none of which suits us (clang's fuzz preset
# cannot link its LTO objects; a new compiler warning must not break our build), so
# the static library is defined here from the same file list it uses: cpp/*.cc
# without the tvm_ffi Python bridge, plus the dlpack and picojson headers that come
# inside the same sdist, compiled with our compiler and build type (sanitizer and fuzzer
# instrumentation left out unless HEARTH_XGRAMMAR_SANITIZE, see the end of this file).
#
# To move to a new release: take the sdist URL and sha256 from
# https://pypi.org/pypi/xgrammar/json ("urls", packagetype "sdist").
include(FetchContent)

set(HEARTH_XGRAMMAR_VERSION 0.2.9)
set(HEARTH_XGRAMMAR_URL
    "https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-0.2.9.tar.gz")
set(HEARTH_XGRAMMAR_SHA256 87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90)

# The download is done here, not by FetchContent, so that a failure says what went wrong
# and how to get past it (FetchContent's own error is a generic "each download failed").
if(NOT FETCHCONTENT_SOURCE_DIR_XGRAMMAR)
  set(_xg_archive "${CMAKE_BINARY_DIR}/_downloads/xgrammar-${HEARTH_XGRAMMAR_VERSION}.tar.gz")
  if(EXISTS "${_xg_archive}")
    file(SHA256 "${_xg_archive}" _xg_have)
    if(NOT _xg_have STREQUAL HEARTH_XGRAMMAR_SHA256)
      file(REMOVE "${_xg_archive}")
    endif()
  endif()
  if(NOT EXISTS "${_xg_archive}")
    message(STATUS "hearth: downloading xgrammar ${HEARTH_XGRAMMAR_VERSION} from PyPI")
    file(DOWNLOAD "${HEARTH_XGRAMMAR_URL}" "${_xg_archive}.part" STATUS _xg_status TLS_VERIFY ON
         INACTIVITY_TIMEOUT 60 TIMEOUT 600)
    list(GET _xg_status 0 _xg_code)
    list(GET _xg_status 1 _xg_why)
    if(NOT _xg_code EQUAL 0)
      file(REMOVE "${_xg_archive}.part")
      message(FATAL_ERROR
        "hearth: could not download xgrammar ${HEARTH_XGRAMMAR_VERSION} (needed for constrained decoding) "
        "from ${HEARTH_XGRAMMAR_URL}: ${_xg_why} (curl code ${_xg_code}). Give the configure step network "
        "access to files.pythonhosted.org, or download that file (sha256 ${HEARTH_XGRAMMAR_SHA256}), unpack "
        "it and pass -DFETCHCONTENT_SOURCE_DIR_XGRAMMAR=<the unpacked xgrammar-${HEARTH_XGRAMMAR_VERSION} folder>.")
    endif()
    file(SHA256 "${_xg_archive}.part" _xg_have)
    if(NOT _xg_have STREQUAL HEARTH_XGRAMMAR_SHA256)
      file(REMOVE "${_xg_archive}.part")
      message(FATAL_ERROR
        "hearth: the xgrammar ${HEARTH_XGRAMMAR_VERSION} download from ${HEARTH_XGRAMMAR_URL} has sha256 "
        "${_xg_have}, not the pinned ${HEARTH_XGRAMMAR_SHA256}: refusing to build it.")
    endif()
    file(RENAME "${_xg_archive}.part" "${_xg_archive}")
  endif()
  set(_xg_url "${_xg_archive}")
else()
  set(_xg_url "${HEARTH_XGRAMMAR_URL}")
endif()

FetchContent_Declare(
  xgrammar
  URL ${_xg_url}
  URL_HASH SHA256=${HEARTH_XGRAMMAR_SHA256}
  DOWNLOAD_EXTRACT_TIMESTAMP ON
  # A folder the sdist does not have: FetchContent only unpacks, it never runs
  # xgrammar's own CMakeLists (see above).
  SOURCE_SUBDIR hearth-no-cmake)
FetchContent_MakeAvailable(xgrammar)
if(NOT EXISTS "${xgrammar_SOURCE_DIR}/include/xgrammar/xgrammar.h"
   OR NOT EXISTS "${xgrammar_SOURCE_DIR}/3rdparty/dlpack/include/dlpack/dlpack.h"
   OR NOT EXISTS "${xgrammar_SOURCE_DIR}/3rdparty/picojson/picojson.h")
  message(FATAL_ERROR
    "hearth: xgrammar ${HEARTH_XGRAMMAR_VERSION} sources are missing from '${xgrammar_SOURCE_DIR}' "
    "(FETCHCONTENT_SOURCE_DIR_XGRAMMAR must name the unpacked sdist folder, the one holding "
    "include/, cpp/ and 3rdparty/).")
endif()

file(GLOB_RECURSE _xgrammar_srcs CONFIGURE_DEPENDS "${xgrammar_SOURCE_DIR}/cpp/*.cc")
list(FILTER _xgrammar_srcs EXCLUDE REGEX "/cpp/tvm_ffi/.*\\.cc$")
add_library(xgrammar STATIC ${_xgrammar_srcs})
target_include_directories(xgrammar PUBLIC "${xgrammar_SOURCE_DIR}/include")
target_include_directories(xgrammar SYSTEM PUBLIC "${xgrammar_SOURCE_DIR}/3rdparty/picojson"
                                                  "${xgrammar_SOURCE_DIR}/3rdparty/dlpack/include")
target_include_directories(xgrammar PRIVATE "${xgrammar_SOURCE_DIR}/cpp")
target_compile_definitions(xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_ENABLE_INTERNAL_CHECK=0)
# Its own code, its own warnings: none of ours (-Wall -Wextra) and never -Werror.
# -O3 as upstream builds it (the mask computation is on the decode path) unless this is a
# Debug or an instrumented build.
if(HEARTH_SANITIZE OR HEARTH_FUZZ)
  target_compile_options(xgrammar PRIVATE -w)
else()
  target_compile_options(xgrammar PRIVATE -w $<$<NOT:$<CONFIG:Debug>>:-O3>)
endif()
set_target_properties(xgrammar PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON
                                          INTERPROCEDURAL_OPTIMIZATION OFF)
target_link_libraries(xgrammar PUBLIC Threads::Threads)

# The asan and fuzz presets instrument our code; xgrammar is treated like the system
# libraries we link (pcre2, cpp-httplib): built without instrumentation, which ASan,
# UBSan and libFuzzer all work with. Instrumented, its template-heavy sources compile for
# tens of minutes each; HEARTH_XGRAMMAR_SANITIZE=ON instruments it anyway (e.g. to hunt a
# crash inside it).
option(HEARTH_XGRAMMAR_SANITIZE "Instrument xgrammar too in sanitizer / fuzz builds (slow to build)" OFF)
if(NOT HEARTH_XGRAMMAR_SANITIZE)
  get_target_property(_xg_opts xgrammar COMPILE_OPTIONS)
  if(_xg_opts)
    list(FILTER _xg_opts EXCLUDE REGEX "^-f(no-)?sanitize")
    set_property(TARGET xgrammar PROPERTY COMPILE_OPTIONS ${_xg_opts})
  endif()
endif()
