#include "tokenizer/bpe.h"

#include <queue>

#include "tokenizer/byte_unicode.h"
#include "tokenizer/unicode.h"

namespace hearth::tokenizer {

namespace {

struct Symbol {
  int prev;
  int next;
  size_t offset;  // into the word
  size_t n;       // bytes; 0 once merged into its left neighbour
};

struct Pair {
  int32_t rank;
  int left;
  int right;
  size_t left_n;   // symbol sizes when queued: the pair is stale when either changed
  size_t right_n;
};

struct PairOrder {
  bool operator()(const Pair& a, const Pair& b) const {  // max-heap on "lowest rank, leftmost"
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void bpe_encode_word(const Vocab& vocab, std::string_view word, std::vector<TokenId>& out) {
  if (word.empty()) return;
  if (vocab.ignore_merges) {
    const TokenId id = vocab.find(word);
    if (id != kNoToken) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  for (size_t off = 0; off < word.size();) {
    const size_t n = std::min<size_t>(unicode::utf8_len(static_cast<uint8_t>(word[off])), word.size() - off);
    const int idx = static_cast<int>(syms.size());
    syms.push_back({idx - 1, off + n == word.size() ? -1 : idx + 1, off, n});
    off += n;
  }
  std::priority_queue<Pair, std::vector<Pair>, PairOrder> queue;
  auto text_of = [&](int i) { return word.substr(syms[i].offset, syms[i].n); };
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const int32_t rank = vocab.merge_rank(text_of(left), text_of(right));
    if (rank >= 0) queue.push({rank, left, right, syms[left].n, syms[right].n});
  };
  for (int i = 1; i < static_cast<int>(syms.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol& l = syms[p.left];
    Symbol& r = syms[p.right];
    if (l.n != p.left_n || r.n != p.right_n || l.next != p.right) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = p.left;
    try_add(l.prev, p.left);
    try_add(p.left, l.next);
  }

  for (int i = 0; i >= 0 && i < static_cast<int>(syms.size()); i = syms[i].next) {
    const std::string_view text = text_of(i);
    const TokenId id = vocab.find(text);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    // Not in the vocabulary: one token per byte where such a token exists (llama.cpp).
    for (char c : text) {
      const TokenId b = vocab.find(std::string_view(&c, 1));
      if (b != kNoToken) out.push_back(b);
    }
  }
}

void bpe_encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out) {
  for (std::string_view piece : vocab.pre.split(text)) {
    if (vocab.byte_level) {
      bpe_encode_word(vocab, bytes_to_unicode(piece), out);
    } else {
      bpe_encode_word(vocab, piece, out);
    }
  }
}

}  // namespace hearth::tokenizer
