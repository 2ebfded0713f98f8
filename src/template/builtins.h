// Built-in filters, tests, and Python methods of str/list/dict, as the
// evaluator calls them. Failures throw RenderError (no location; the evaluator
// adds it).
#pragma once

#include <string>

#include "template/value.h"

namespace hearth::tmpl {

// `value | name(args)`. Unknown name: RenderError "unknown filter 'name'" (unsupported).
Value call_filter(const std::string& name, const Value& value, const Args& args);

// Whether `name` is a filter this interpreter has (jinja2's `is filter` test).
bool is_filter_name(const std::string& name);

// `value is name(args)`. Unknown name: RenderError "unknown test 'name'" (unsupported).
bool call_test(const std::string& name, const Value& value, const Args& args);

// jinja2 environment.getattr (`obj.name`): Python attribute (bound method) first, then item.
Value get_attr(const Value& obj, const std::string& name);

// jinja2 environment.getitem (`obj[key]`): item first, then attribute for string keys.
Value get_item(const Value& obj, const Value& key);

// Python slicing obj[start:stop:step] of a list or str (null parts = Value undefined).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Calls Python method `name` of `self` (str, list or dict). Unknown: nullptr result via has_method.
bool has_method(const Value& self, const std::string& name);
Value call_method(const Value& self, const std::string& name, const Args& args);

// Items of `v` as a Python for-loop sees them (dict -> keys, str -> characters).
std::vector<Value> iterate(const Value& v);

// jinja2 object_type_repr: "dict object", "None", ...
std::string object_type_repr(const Value& v);

// Python format(v, spec): the format-spec mini-language for int, float, bool and str.
std::string format_value(const Value& v, const std::string& spec);

// Python fmt.format(*a.pos, **a.kw) as jinja2's sandboxed formatter runs it ({0.x} and {0[k]}
// through get_attr / get_item).
std::string str_format(const std::string& fmt, const Args& a);

// Python fmt % rhs (printf style; a tuple is the argument list, a dict feeds %(key)s).
std::string percent_format(const std::string& fmt, const Value& rhs);

}  // namespace hearth::tmpl
