#include "tokenizer/spm.h"

#include <queue>

#include "tokenizer/unicode.h"

namespace hearth::tokenizer {

namespace {

struct Symbol {
  int prev;
  int next;
  size_t offset;
  size_t n;
};

struct Bigram {
  float score;
  int left;
  int right;
  size_t size;
};

struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {  // highest score, then leftmost
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

TokenId spm_byte_token(const Vocab& vocab, uint8_t b) {
  static const char* hex = "0123456789ABCDEF";
  const char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
  TokenId id = vocab.find(std::string_view(buf, 6));
  if (id == kNoToken) id = vocab.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
  return id;
}

void spm_encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out) {
  std::vector<Symbol> syms;
  syms.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min<size_t>(unicode::utf8_len(static_cast<uint8_t>(text[off])), text.size() - off);
    const int idx = static_cast<int>(syms.size());
    syms.push_back({idx - 1, off + n == text.size() ? -1 : idx + 1, off, n});
    off += n;
  }
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t size = syms[left].n + syms[right].n;
    const TokenId id = vocab.find(text.substr(syms[left].offset, size));
    if (id == kNoToken) return;
    queue.push({vocab.tokens[id].score, left, right, size});
  };
  for (int i = 1; i < static_cast<int>(syms.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = syms[b.left];
    Symbol& r = syms[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = 0; i >= 0 && i < static_cast<int>(syms.size()); i = syms[i].next) {
    const std::string_view piece = text.substr(syms[i].offset, syms[i].n);
    const TokenId id = vocab.find(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      const TokenId bt = spm_byte_token(vocab, static_cast<uint8_t>(c));
      if (bt != kNoToken) {
        out.push_back(bt);
      } else if (vocab.unk != kNoToken) {
        out.push_back(vocab.unk);
      }
    }
  }
}

}  // namespace hearth::tokenizer
