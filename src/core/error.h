// Error policy (see docs/ARCHITECTURE.md): an Error is thrown for a failure
// that ends the current operation (bad model file, bad template, bad request);
// expected outcomes (queue full, not found) are return values. Messages start
// with the component in brackets and name the file / field / offset involved:
//   "[gguf] model.gguf: tensor 'blk.3.attn_q.weight' extends past end of file (...)"
#pragma once

#include <stdexcept>
#include <string>

namespace hearth {

// Kind of failure, used by callers to pick an exit status or HTTP status.
enum class ErrorKind {
  kInvalidInput,  // malformed file, request, template: the caller's data is wrong
  kUnsupported,   // well-formed but not supported (unknown tensor type, construct)
  kNotFound,      // a file, key or tensor that does not exist
  kResource,      // out of memory / limits exceeded
  kIo,            // the operating system refused (open, mmap, read)
  kInternal,      // a broken invariant in Hearth itself
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Builds "[component] message" and throws it.
[[noreturn]] void fail(ErrorKind kind, const std::string& component, const std::string& message);

}  // namespace hearth
