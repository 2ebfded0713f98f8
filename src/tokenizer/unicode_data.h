// Raw Unicode tables (generated into unicode_data_classes.cpp and unicode_data_nfc.cpp by scripts/gen_tokenizer_fixtures.py
// unicode-tables). Use the functions in unicode.h rather than these arrays.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hearth::tokenizer::unicode_data {

struct FlagRange { uint32_t first, last, flags; };    // sorted, covering 0..0x10FFFF
struct CpPair { uint32_t from, to; };                  // sorted by `from`
struct Decomposition { uint32_t cpt; uint32_t seq[4]; };  // full canonical, 0-padded; sorted
struct CccRange { uint32_t first, last, ccc; };        // only non-zero classes; sorted
struct Composition { uint32_t first, second, composed; };  // sorted by (first, second)

extern const FlagRange kFlagRanges[];
extern const size_t kNumFlagRanges;
extern const CpPair kLower[];
extern const size_t kNumLower;
extern const Decomposition kDecomp[];
extern const size_t kNumDecomp;
extern const CccRange kCcc[];
extern const size_t kNumCcc;
extern const Composition kCompose[];
extern const size_t kNumCompose;

}  // namespace hearth::tokenizer::unicode_data
