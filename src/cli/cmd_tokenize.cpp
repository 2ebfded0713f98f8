// `hearth tokenize -m MODEL_OR_TOKENIZER_JSON [--file F | TEXT] [--pieces] [--no-special] [--no-bos]`
// prints the token ids of the text on one line (or "id<TAB>piece" per line with --pieces);
// `hearth tokenize -m MODEL --decode "ID ID ..."` prints the text of the ids.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/model_ref.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace hearth::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string file;
  std::string decode;
  bool pieces = false;
  bool no_special = false;
  bool no_bos = false;
  CLI::Option* text_opt = nullptr;
  CLI::Option* file_opt = nullptr;
  CLI::Option* decode_opt = nullptr;
};

// A piece shown on one line: complete UTF-8 characters as they are, control characters and
// stray bytes (a piece may hold part of a character) escaped.
std::string escape_piece(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = tokenizer::unicode::utf8_len(c);
    bool whole = n > 1 && i + n <= s.size();
    for (int k = 1; whole && k < n; ++k) whole = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (whole) {
      out.append(s, i, n);
      i += n;
      continue;
    }
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c < 0x20 || c >= 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  return out;
}

std::vector<tokenizer::TokenId> parse_ids(const std::string& s) {
  std::vector<tokenizer::TokenId> ids;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ' ' || s[i] == ',' || s[i] == '\t' || s[i] == '\n' || s[i] == '[' || s[i] == ']') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && !(s[j] == ' ' || s[j] == ',' || s[j] == '\t' || s[j] == '\n' || s[j] == ']')) ++j;
    const std::string word = s.substr(i, j - i);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v < INT32_MIN || v > INT32_MAX) {
      fail(ErrorKind::kInvalidInput, "tokenize", "--decode: '" + word + "' is not a token id");
    }
    ids.push_back(static_cast<tokenizer::TokenId>(v));
    i = j;
  }
  return ids;
}

void run(const TokenizeArgs& a) {
  const size_t n_inputs = a.text_opt->count() + a.file_opt->count() + a.decode_opt->count();
  if (n_inputs != 1) fail(ErrorKind::kInvalidInput, "tokenize", "give exactly one of TEXT, --file and --decode");
  const auto tok = tokenizer::Tokenizer::load(model_file_arg(a.model, "tokenizer.json"));
  if (a.decode_opt->count()) {
    const auto ids = parse_ids(a.decode);
    const std::string text = tok.decode(ids, {.skip_special = a.no_special});
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return;
  }
  const std::string text = a.file_opt->count() ? read_text_file(a.file) : a.text;
  const auto ids = tok.encode(text, {.add_special = !a.no_bos, .parse_special = !a.no_special});
  if (a.pieces) {
    for (auto id : ids) std::printf("%d\t%s\n", id, escape_piece(tok.token_to_piece(id)).c_str());
    return;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "Token ids of a text, or the text of token ids");
  cmd->add_option("-m,--model", args->model, "GGUF model, Hugging Face tokenizer.json, or a store name (see `hearth list`)")->required();
  args->text_opt = cmd->add_option("text", args->text, "Text to tokenize");
  args->file_opt = cmd->add_option("--file", args->file, "Tokenize the contents of this file");
  args->decode_opt = cmd->add_option("--decode", args->decode, "Print the text of these token ids (\"ID ID ...\")");
  cmd->add_flag("--pieces", args->pieces, "Print \"id<TAB>piece\" per token");
  cmd->add_flag("--no-special", args->no_special,
                "Special-token text in the input stays text; with --decode, special tokens print nothing");
  cmd->add_flag("--no-bos", args->no_bos, "Do not add BOS/EOS even where the model asks for them");
  cmd->callback([args]() { run(*args); });
}

}  // namespace hearth::cli
