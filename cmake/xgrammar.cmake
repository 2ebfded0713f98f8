# xgrammar's C++ core (Apache-2.0), the grammar engine behind constrained decoding.
#
# Fetched at configure time as its pinned PyPI source distribution (hash-checked),
# never copied into this repository. Only the sources are used: xgrammar's own
# CMakeLists adds -Werror and -flto=auto to CMAKE_CXX_FLAGS and turns its Python
# bindings on from its config.cmake, none of which suits us (clang's fuzz preset
# cannot link its LTO objects; a new compiler warning must not break our build), so
# the static library is defined here from the same file list it uses: cpp/*.cc
# without the tvm_ffi Python bridge, plus the dlpack and picojson headers that come
# inside the same sdist. Our own flags (sanitizers, fuzzer instrumentation) apply.
#
# To move to a new release: take the sdist URL and sha256 from
# https://pypi.org/pypi/xgrammar/json ("urls", packagetype "sdist").
include(FetchContent)

set(HEARTH_XGRAMMAR_VERSION 0.2.9)
set(HEARTH_XGRAMMAR_URL
    "https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-0.2.9.tar.gz")
set(HEARTH_XGRAMMAR_SHA256 87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90)

FetchContent_Declare(
  xgrammar
  URL ${HEARTH_XGRAMMAR_URL}
  URL_HASH SHA256=${HEARTH_XGRAMMAR_SHA256}
  DOWNLOAD_EXTRACT_TIMESTAMP ON
  # A folder the sdist does not have: FetchContent only downloads and unpacks,
  # it never runs xgrammar's own CMakeLists (see above).
  SOURCE_SUBDIR hearth-no-cmake)
# FetchContent reports a failed download or a hash mismatch as a configure error
# already; the check below names the cause (and the way out) when it comes back
# without the sources, e.g. FETCHCONTENT_SOURCE_DIR_XGRAMMAR pointing at a wrong folder.
FetchContent_MakeAvailable(xgrammar)
if(NOT EXISTS "${xgrammar_SOURCE_DIR}/include/xgrammar/xgrammar.h"
   OR NOT EXISTS "${xgrammar_SOURCE_DIR}/3rdparty/dlpack/include/dlpack/dlpack.h"
   OR NOT EXISTS "${xgrammar_SOURCE_DIR}/3rdparty/picojson/picojson.h")
  message(FATAL_ERROR
    "hearth: xgrammar ${HEARTH_XGRAMMAR_VERSION} sources are missing from '${xgrammar_SOURCE_DIR}'. "
    "The build downloads them from ${HEARTH_XGRAMMAR_URL} (sha256 ${HEARTH_XGRAMMAR_SHA256}); "
    "give the configure step network access to files.pythonhosted.org, or unpack that file "
    "yourself and pass -DFETCHCONTENT_SOURCE_DIR_XGRAMMAR=<folder>.")
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
# -O3 as upstream builds it (the mask computation is on the decode path) unless
# this is a Debug build.
target_compile_options(xgrammar PRIVATE -w $<$<NOT:$<CONFIG:Debug>>:-O3>)
set_target_properties(xgrammar PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON
                                          INTERPROCEDURAL_OPTIMIZATION OFF)
target_link_libraries(xgrammar PUBLIC Threads::Threads)
