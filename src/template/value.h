// Dynamic values of the Jinja interpreter, with Python semantics: truthiness,
// str()/repr(), equality and ordering, json.dumps. Lists, dicts and namespaces
// have shared ownership so that mutation through one reference (namespace
// attribute assignment) is seen through every other, as in Python.
// A Value is not thread-safe to mutate; values created during one render are
// owned by that render only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth::tmpl {

class Value;

// A failure while evaluating; the evaluator adds the template line and column.
struct RenderError {
  std::string message;
  bool located = false;  // message already carries "line L, column C: "
  bool unsupported = false;
  bool limit = false;
};
// Throws RenderError(message).
[[noreturn]] void throw_render(std::string message);
// Throws RenderError(message) marked as a resource limit (Error kResource).
[[noreturn]] void throw_limit(std::string message);
// Throws RenderError(message) marked unsupported (Error kUnsupported).
[[noreturn]] void throw_unsupported(std::string message);

// Largest string or list one operation may build (a padding width, a repetition, ...),
// checked before allocating; the render's own limits (evaluator.h) apply on top.
inline constexpr size_t kMaxValueBytes = 64u << 20;
// A width/count argument as a size: negative -> 0; above kMaxValueBytes -> throw_limit.
size_t checked_width(int64_t width, const char* what);
// Python ints are unbounded, ours are int64: these throw_unsupported on overflow.
int64_t int_add(int64_t a, int64_t b);
int64_t int_sub(int64_t a, int64_t b);
int64_t int_mul(int64_t a, int64_t b);
int64_t int_neg_abs(int64_t a, bool abs);  // -a, or |a| when abs
int64_t int_pow(int64_t base, int64_t exp);  // exp >= 0

enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunc, kNamespace };

// Arguments of a call: positional then keyword, in source order.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The keyword `name`, or positional `idx`, or nullptr.
  const Value* get(size_t idx, std::string_view name) const;
};

using Func = std::function<Value(Args&)>;

struct List {
  std::vector<Value> items;
  bool generator = false;  // result of map/select/...: Python generator (not JSON serializable)
  bool tuple = false;      // a Python tuple: repr "(a, b)"
  bool group = false;      // groupby's (grouper, list) named tuple: also .grouper / .list
};

// Insertion-ordered dict with Python key semantics: keys are None, bool, int, float, str or
// tuples of those; equal keys are one key (1 == 1.0 == True), the first one given is kept.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(std::string_view key) const;  // the str key `key`
  Value* find(std::string_view key);
  const Value* find(const Value& key) const;  // any key; an unhashable one finds nothing
  Value* find(const Value& key);
  void set(const std::string& key, Value v);
  void set(const Value& key, Value v);  // throws RenderError "unhashable type" for a list/dict key
  const Value* find(const char* key) const { return find(std::string_view(key)); }
  Value* find(const char* key) { return find(std::string_view(key)); }
  Value* find(const std::string& key) { return find(std::string_view(key)); }
  const Value* find(const std::string& key) const { return find(std::string_view(key)); }
  void set(const char* key, Value v);
};

// Whether `v` can be a dict key (Python hashable among template values).
bool is_hashable(const Value& v);

class Value {
 public:
  Value() = default;  // Undefined
  Value(bool b) : kind_(Kind::kBool), b_(b) {}
  Value(int v) : kind_(Kind::kInt), i_(v) {}
  Value(int64_t v) : kind_(Kind::kInt), i_(v) {}
  Value(double v) : kind_(Kind::kFloat), f_(v) {}
  Value(std::string s, bool safe = false) : kind_(Kind::kString), safe_(safe), s_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::kString), s_(s) {}

  static Value none();
  // Undefined whose use raises `message` (e.g. "'x' is undefined"); security: a SecurityError.
  static Value undefined(std::string message, bool security = false);
  static Value make_list(std::vector<Value> items = {}, bool generator = false);
  static Value make_tuple(std::vector<Value> items);
  static Value make_dict();
  static Value namespace_();
  static Value func(std::string name, Func f);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_func() const { return kind_ == Kind::kFunc; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_safe() const { return safe_; }  // a Markup string
  bool is_security_undefined() const { return kind_ == Kind::kUndefined && security_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const;  // any number
  const std::string& str() const { return s_; }  // string payload, or undefined message
  List& list() const { return *l_; }
  Dict& dict() const { return *d_; }  // dict or namespace attributes
  const Func& func() const { return *fn_; }
  const std::string& func_name() const { return s_; }

  // Raises the stored UndefinedError / SecurityError if undefined.
  void check_defined() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool safe_ = false;
  bool security_ = false;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;
  std::shared_ptr<List> l_;
  std::shared_ptr<Dict> d_;
  std::shared_ptr<Func> fn_;
};

// --- Python semantics -------------------------------------------------------
bool truthy(const Value& v);
std::string to_str(const Value& v);   // str(v); Undefined -> ""
std::string repr(const Value& v);     // repr(v)
std::string type_name(const Value& v);  // Python type name: 'dict', 'NoneType', ...
std::string float_repr(double d);     // Python repr(float)
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);  // <0, 0, >0; throws TypeError-like RenderError
bool contains(const Value& container, const Value& item);  // `item in container`
Value make_safe(std::string s);
std::string html_escape(const std::string& s);  // markupsafe.escape

// json.dumps(v, ensure_ascii, indent (<0: none; or indent_str), separators, sort_keys).
struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& opts);

// How big a value is, roughly (string bytes, plus 16 per list/dict item and the keys:
// an item costs more to hold than to print), and how deep it nests; cycles through namespaces are cut. The walk stops early
// once `max_bytes` or `max_depth` is passed (the result is then just above the limit).
struct ValueSize {
  size_t bytes = 0;
  int depth = 0;
};
ValueSize measure(const Value& v, size_t max_bytes, int max_depth);

// --- UTF-8 helpers (Python str indexes code points) ---------------------------
std::vector<char32_t> utf8_decode(std::string_view s);
std::string utf8_encode(const std::vector<char32_t>& cps, size_t begin, size_t end);
void utf8_append(std::string& out, char32_t cp);
size_t utf8_length(std::string_view s);
bool is_py_space(char32_t c);

// Python str.splitlines: breaks at \n, \r, \r\n, \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029.
std::vector<std::string> py_splitlines(const std::string& s, bool keepends = false);

// Python's case mapping for Latin, Greek, Cyrillic and fullwidth letters (one code point to
// one; the few that expand, like U+00DF -> "SS", are handled by py_case).
char32_t py_upper(char32_t c);
char32_t py_lower(char32_t c);
bool py_cased(char32_t c);  // has a case (upper or lower differs)
enum class CaseOp { kUpper, kLower, kSwap, kTitle, kCapitalize };
// str.upper() / lower() / swapcase() / title() / capitalize() of UTF-8 text.
std::string py_case(const std::string& s, CaseOp op);

}  // namespace hearth::tmpl
