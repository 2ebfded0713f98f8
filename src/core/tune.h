// The tuning registry: every setting that picks a kernel variant, a threshold or a
// diagnostic is a key of core/tune_keys.h with a type, a default and a doc line. The code
// reads a key with tune::get / tune::on (an atomic load: cheap on any path, and a change
// is seen by the next read); a program sets keys once from its `--tune key=value,...`
// option (tune::apply) before it creates a back-end, and `hearth info --tune` lists them
// (tune::listing). Tests change a key for a scope with tune::Override.
//
// Back-ends read some keys when they are constructed (the CUDA back-end's switches), others
// at each call (kernel shapes): set keys before creating the back-end.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/tune_keys.h"

namespace hearth::tune {

enum class Type { Bool, Int, Enum };
enum class Group { Kill, Tune, Debug };

// The keys' ids (tune_keys.h): tune::kCudaGraph, ...
enum Id : int {
#define HEARTH_TUNE_ID(id, ...) id,
  HEARTH_TUNE_KEYS(HEARTH_TUNE_ID)
#undef HEARTH_TUNE_ID
      kCount
};

struct Key {
  std::string_view name;  // "cuda.graph"
  Type type;
  Group group;
  int64_t dflt, min, max;    // Enum: the index of a choice
  std::string_view choices;  // Enum: "a|b|c"
  std::string_view doc;
};

const Key& key(Id id);
// The key named `name`, or kCount.
Id find(std::string_view name);

// The current value (Bool: 0 / 1; Enum: the choice's index).
int64_t get(Id id);
inline bool on(Id id) { return get(id) != 0; }

// Sets `name` from its text: Bool 1/0/true/false/on/off, Int a decimal number in the
// key's range, Enum a choice's name or index. Throws Error(kInvalidInput) naming the key
// and what it takes.
void set(std::string_view name, std::string_view value);
// "key=value,key=value" (the --tune option); empty: nothing. Throws as set does.
void apply(std::string_view list);
// Sets a key to a value in its range (throws otherwise); reset: back to the default.
void set(Id id, int64_t value);
void reset(Id id);
void reset_all();

// The value as text: true / false, the number, or the choice's name.
std::string value_text(Id id);
// Every key with its value, default and doc, in groups (kill switches first), for
// `hearth info --tune`; keys whose value differs from the default are marked.
std::string listing();

// Sets a key for a scope and puts the value before back on destruction (tests).
class Override {
 public:
  Override(Id id, int64_t value) : id_(id), before_(get(id)) { set(id, value); }
  ~Override() { set(id_, before_); }
  Override(const Override&) = delete;
  Override& operator=(const Override&) = delete;

 private:
  Id id_;
  int64_t before_;
};

}  // namespace hearth::tune
