// Included first by every quant kernel .cpp: forbids the compiler from fusing
// a*b+c into one FMA (GCC's default in C++ when the target has FMA, e.g.
// HEARTH_NATIVE=ON). ggml's reference code rounds the product and the sum
// separately, and bit-exactness with it depends on doing the same.
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
