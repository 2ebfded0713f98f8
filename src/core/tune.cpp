#include "core/tune.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <utility>
#include <vector>

#include "core/error.h"

namespace hearth::tune {

namespace {

constexpr Key kKeys[] = {
#define HEARTH_TUNE_KEY(id, name, type, group, dflt, lo, hi, choices, doc) \
  Key{name, Type::type, Group::group, dflt, lo, hi, choices, doc},
    HEARTH_TUNE_KEYS(HEARTH_TUNE_KEY)
#undef HEARTH_TUNE_KEY
};
static_assert(sizeof(kKeys) / sizeof(kKeys[0]) == kCount);

// Constant-initialized, so a read during another file's static initialization sees the
// default.
std::atomic<int64_t> g_values[] = {
#define HEARTH_TUNE_DEFAULT(id, name, type, group, dflt, ...) dflt,
    HEARTH_TUNE_KEYS(HEARTH_TUNE_DEFAULT)
#undef HEARTH_TUNE_DEFAULT
};

[[noreturn]] void bad(const Key& k, std::string_view value, const std::string& takes) {
  fail(ErrorKind::kInvalidInput, "tune",
       std::string(k.name) + "=" + std::string(value) + ": " + std::string(k.name) + " takes " + takes);
}

std::string takes(const Key& k) {
  switch (k.type) {
    case Type::Bool: return "1, 0, true, false, on or off";
    case Type::Enum: {
      std::string s;
      size_t start = 0;
      for (int64_t i = 0;; ++i) {
        const size_t bar = k.choices.find('|', start);
        if (!s.empty()) s += ", ";
        s += std::string(k.choices.substr(start, bar - start));
        if (bar == std::string_view::npos) break;
        start = bar + 1;
      }
      return "one of " + s + " (or its index from 0)";
    }
    case Type::Int: break;
  }
  return "a whole number from " + std::to_string(k.min) + " to " + std::to_string(k.max);
}

// The name of choice i of an Enum key.
std::string_view choice(const Key& k, int64_t i) {
  size_t start = 0;
  for (int64_t n = 0; n < i; ++n) {
    const size_t bar = k.choices.find('|', start);
    if (bar == std::string_view::npos) return {};
    start = bar + 1;
  }
  return k.choices.substr(start, k.choices.find('|', start) - start);
}

bool parse_int(std::string_view s, int64_t* out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

std::string text_of(const Key& k, int64_t v) {
  switch (k.type) {
    case Type::Bool: return v != 0 ? "true" : "false";
    case Type::Enum: return std::string(choice(k, v));
    case Type::Int: break;
  }
  return std::to_string(v);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

const Key& key(Id id) { return kKeys[id]; }

Id find(std::string_view name) {
  for (int i = 0; i < kCount; ++i) {
    if (kKeys[i].name == name) return static_cast<Id>(i);
  }
  return kCount;
}

int64_t get(Id id) { return g_values[id].load(std::memory_order_relaxed); }

void set(Id id, int64_t value) {
  const Key& k = kKeys[id];
  if (value < k.min || value > k.max) bad(k, std::to_string(value), takes(k));
  g_values[id].store(value, std::memory_order_relaxed);
}

void reset(Id id) { g_values[id].store(kKeys[id].dflt, std::memory_order_relaxed); }

void reset_all() {
  for (int i = 0; i < kCount; ++i) reset(static_cast<Id>(i));
}

namespace {

// The key and value of `name=value` (throws as set does).
std::pair<Id, int64_t> parse(std::string_view name, std::string_view value) {
  const Id id = find(name);
  if (id == kCount) {
    fail(ErrorKind::kInvalidInput, "tune",
         "unknown key '" + std::string(name) + "' (`hearth info --tune` lists the keys)");
  }
  const Key& k = kKeys[id];
  int64_t v = 0;
  switch (k.type) {
    case Type::Bool:
      if (value == "1" || value == "true" || value == "on") v = 1;
      else if (value == "0" || value == "false" || value == "off") v = 0;
      else bad(k, value, takes(k));
      break;
    case Type::Enum: {
      v = -1;
      for (int64_t i = k.min; i <= k.max; ++i) {
        if (choice(k, i) == value) v = i;
      }
      if (v < 0 && !parse_int(value, &v)) bad(k, value, takes(k));
      if (v < k.min || v > k.max) bad(k, value, takes(k));
      break;
    }
    case Type::Int:
      if (!parse_int(value, &v) || v < k.min || v > k.max) bad(k, value, takes(k));
      break;
  }
  return {id, v};
}

}  // namespace

void set(std::string_view name, std::string_view value) {
  const auto [id, v] = parse(name, value);
  g_values[id].store(v, std::memory_order_relaxed);
}

void apply(std::string_view list) {
  // Every item is checked before any is set: a bad list changes nothing.
  std::vector<std::pair<Id, int64_t>> items;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string_view item = trim(list.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      fail(ErrorKind::kInvalidInput, "tune",
           "--tune takes key=value[,key=value...], got '" + std::string(item) + "'");
    }
    items.push_back(parse(trim(item.substr(0, eq)), trim(item.substr(eq + 1))));
  }
  for (const auto& [id, v] : items) g_values[id].store(v, std::memory_order_relaxed);
}

std::string value_text(Id id) { return text_of(kKeys[id], get(id)); }

std::string listing() {
  std::string out;
  const std::pair<Group, const char*> groups[] = {
      {Group::Kill, "kill switches (on by default; each turns one optimization off: =0, or the other choice)"},
      {Group::Tune, "thresholds and variants"},
      {Group::Debug, "timing and diagnostics (stderr)"}};
  size_t width = 0;
  for (const Key& k : kKeys) width = std::max(width, k.name.size() + 1 + text_of(k, k.max).size());
  for (const auto& [group, title] : groups) {
    out += std::string(title) + ":\n";
    for (int i = 0; i < kCount; ++i) {
      const Key& k = kKeys[i];
      if (k.group != group) continue;
      const int64_t v = get(static_cast<Id>(i));
      std::string item = "  " + std::string(k.name) + "=" + text_of(k, v);
      item.resize(std::max(item.size() + 2, width + 6), ' ');
      out += item + std::string(k.doc);
      if (v != k.dflt) out += " [default " + text_of(k, k.dflt) + "]";
      if (k.type == Type::Enum) out += " (" + std::string(k.choices) + ")";
      out += "\n";
    }
  }
  return out;
}

}  // namespace hearth::tune
