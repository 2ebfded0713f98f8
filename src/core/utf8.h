// UTF-8 encoding shared by the tokenizer and the template engine.
#pragma once

#include <cstdint>
#include <string>

namespace hearth {

// Appends the UTF-8 encoding (1 to 4 bytes) of code point cp (<= 0x10FFFF) to out.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace hearth
