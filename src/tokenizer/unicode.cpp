// Unicode helpers over the generated tables in unicode_data.cpp. Hangul syllables are
// (de)composed algorithmically (Unicode 15, section 3.12).
#include "tokenizer/unicode.h"

#include <algorithm>

#include "tokenizer/unicode_data.h"

namespace hearth::tokenizer::unicode {

namespace ud = unicode_data;

namespace {
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr uint32_t kSCount = kLCount * kNCount;
}  // namespace

int utf8_len(uint8_t c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

std::vector<uint32_t> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    const int n = utf8_len(c);
    if (n == 1) {
      out.push_back(c < 0x80 ? c : 0xFFFD);
      ++i;
      continue;
    }
    if (i + n > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    uint32_t cp = c & (0x7F >> n);
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      const auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xC0) != 0x80) { ok = false; break; }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}


std::string encode_utf8(const std::vector<uint32_t>& cpts) {
  std::string out;
  out.reserve(cpts.size());
  for (uint32_t c : cpts) append_utf8(out, c);
  return out;
}

size_t incomplete_utf8_tail(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<uint8_t>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const int len = utf8_len(c);
    return (len > 1 && static_cast<size_t>(len) > back) ? back : 0;
  }
  return 0;
}

uint32_t flags(uint32_t cpt) {
  if (cpt > 0x10FFFF) return kUndefined;
  const auto* end = ud::kFlagRanges + ud::kNumFlagRanges;
  const auto* it = std::upper_bound(ud::kFlagRanges, end, cpt,
                                    [](uint32_t c, const ud::FlagRange& r) { return c < r.first; });
  return (it - 1)->flags;
}

uint32_t to_lower(uint32_t cpt) {
  const auto* end = ud::kLower + ud::kNumLower;
  const auto* it = std::lower_bound(ud::kLower, end, cpt,
                                    [](const ud::CpPair& p, uint32_t c) { return p.from < c; });
  return (it != end && it->from == cpt) ? it->to : cpt;
}

uint32_t combining_class(uint32_t cpt) {
  const auto* end = ud::kCcc + ud::kNumCcc;
  const auto* it = std::upper_bound(ud::kCcc, end, cpt,
                                    [](uint32_t c, const ud::CccRange& r) { return c < r.first; });
  if (it == ud::kCcc) return 0;
  --it;
  return cpt <= it->last ? it->ccc : 0;
}

static const ud::Decomposition* find_decomp(uint32_t cpt) {
  const auto* end = ud::kDecomp + ud::kNumDecomp;
  const auto* it = std::lower_bound(ud::kDecomp, end, cpt,
                                    [](const ud::Decomposition& d, uint32_t c) { return d.cpt < c; });
  return (it != end && it->cpt == cpt) ? it : nullptr;
}

static void canonical_order(std::vector<uint32_t>& v) {
  // Stable sort of each run of non-starters by combining class.
  size_t i = 0;
  while (i < v.size()) {
    if (combining_class(v[i]) == 0) { ++i; continue; }
    size_t j = i;
    while (j < v.size() && combining_class(v[j]) != 0) ++j;
    std::stable_sort(v.begin() + i, v.begin() + j,
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
}

std::vector<uint32_t> nfd(const std::vector<uint32_t>& cpts) {
  std::vector<uint32_t> out;
  out.reserve(cpts.size());
  for (uint32_t c : cpts) {
    if (c >= kSBase && c < kSBase + kSCount) {
      const uint32_t s = c - kSBase;
      out.push_back(kLBase + s / kNCount);
      out.push_back(kVBase + (s % kNCount) / kTCount);
      if (s % kTCount) out.push_back(kTBase + s % kTCount);
    } else if (const auto* d = find_decomp(c)) {
      for (uint32_t x : d->seq) if (x) out.push_back(x);
    } else {
      out.push_back(c);
    }
  }
  canonical_order(out);
  return out;
}

static uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* end = ud::kCompose + ud::kNumCompose;
  const auto* it = std::lower_bound(ud::kCompose, end, std::make_pair(a, b),
                                    [](const ud::Composition& c, const std::pair<uint32_t, uint32_t>& k) {
                                      return c.first < k.first || (c.first == k.first && c.second < k.second);
                                    });
  return (it != end && it->first == a && it->second == b) ? it->composed : 0;
}

std::vector<uint32_t> nfc(const std::vector<uint32_t>& cpts) {
  std::vector<uint32_t> d = nfd(cpts);
  if (d.empty()) return d;
  std::vector<uint32_t> out;
  out.reserve(d.size());
  size_t starter = SIZE_MAX;  // index in `out` of the last starter
  uint32_t last_ccc = 0;
  for (uint32_t c : d) {
    const uint32_t ccc = combining_class(c);
    if (starter != SIZE_MAX) {
      const bool blocked = !out.empty() && out.size() - 1 != starter && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        if (uint32_t comp = compose_pair(out[starter], c)) {
          out[starter] = comp;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = out.size();
      last_ccc = 0;
    } else {
      last_ccc = ccc;
    }
    out.push_back(c);
  }
  return out;
}

size_t valid_utf8_len(std::string_view s, size_t i) {
  const auto c = static_cast<uint8_t>(s[i]);
  const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t cp = n == 1 ? c : (c & (0x7F >> n));
  for (size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<uint8_t>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
      (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) {
    return 0;
  }
  return n;
}

std::string nfc(std::string_view text) {
  bool ascii = true;
  for (char ch : text) {
    if (static_cast<uint8_t>(ch) >= 0x80) { ascii = false; break; }
  }
  if (ascii) return std::string(text);
  // Normalize each valid run; invalid bytes pass through untouched.
  std::string out;
  size_t run = 0, i = 0;
  while (i < text.size()) {
    const size_t n = valid_utf8_len(text, i);
    if (n) {
      i += n;
      continue;
    }
    out += encode_utf8(nfc(decode_utf8(text.substr(run, i - run))));
    out += text[i++];
    run = i;
  }
  out += encode_utf8(nfc(decode_utf8(text.substr(run))));
  return out;
}

}  // namespace hearth::tokenizer::unicode
