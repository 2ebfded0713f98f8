# Cross-compiling for 64-bit ARM Linux with Debian's cross compiler
# (g++-aarch64-linux-gnu); the binaries run here under qemu-user (qemu-aarch64),
# which ctest and gtest_discover_tests call through CMAKE_CROSSCOMPILING_EMULATOR.
# Used by the arm64-cross preset (CMakePresets.json) and the cross stage of scripts/test.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Debian's aarch64 sysroot (libc, libstdc++ of the cross compiler).
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# qemu finds the ARM dynamic loader and libraries under -L; QEMU_CPU in the
# environment picks the emulated CPU (max: dotprod, i8mm; cortex-a53: plain NEON).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
