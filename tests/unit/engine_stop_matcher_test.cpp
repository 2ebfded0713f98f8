#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/stop_matcher.h"

using hearth::engine::StopMatcher;

namespace {

// Pushes the pieces in order; returns everything released (push results, and the
// flush when the stream did not stop).
std::string run(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += m.push(p);
  out += m.flush();
  return out;
}

}  // namespace

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("Hello"), "Hello");
  EXPECT_EQ(m.push(", wor"), ", wor");
  EXPECT_EQ(m.push(""), "");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.stopped());
  StopMatcher empty_only({"", ""});  // empty stop strings are ignored
  EXPECT_EQ(empty_only.push("abc"), "abc");
  EXPECT_FALSE(empty_only.stopped());
}

TEST(StopMatcher, StopSplitAcrossPieces) {
  StopMatcher m({"</end>"});
  EXPECT_EQ(m.push("Hello </"), "Hello ");
  EXPECT_EQ(m.push("en"), "");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("d> trailing"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");  // nothing after a stop
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, StopSplitOneByteAtATime) {
  StopMatcher m({"STOP"});
  std::string out;
  for (char c : std::string("abSTcSTOPxyz")) {
    out += m.push(std::string(1, c));
    if (m.stopped()) break;
  }
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "abSTc");
}

TEST(StopMatcher, StopInsideOnePieceReleasesTheTextBefore) {
  StopMatcher m({"\n\n"});
  EXPECT_EQ(m.push("line one\n\nline two"), "line one");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, StopAtTheVeryStart) {
  StopMatcher m({"User:"});
  EXPECT_EQ(m.push("User:"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.flush(), "");

  StopMatcher split({"User:"});
  EXPECT_EQ(split.push("Us"), "");
  EXPECT_EQ(split.push("er: hi"), "");
  EXPECT_TRUE(split.stopped());
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo"});
  EXPECT_EQ(m.push("hello world"), "hel");
  EXPECT_TRUE(m.stopped());

  // The later-listed stop starting earlier wins, also when the text comes in pieces.
  StopMatcher n({"cd", "bcx"});
  EXPECT_EQ(n.push("ab"), "a");  // "b" may start "bcx"
  EXPECT_EQ(n.push("cd"), "b");
  EXPECT_TRUE(n.stopped());

  StopMatcher o({"xyz", "y"});
  EXPECT_EQ(o.push("axyz"), "a");
  EXPECT_TRUE(o.stopped());
}

TEST(StopMatcher, MatchedNamesTheStopThatWon) {
  StopMatcher none({"END"});
  EXPECT_EQ(none.push("no stop here"), "no stop here");
  EXPECT_EQ(none.matched(), "");

  StopMatcher m({"world", "lo"});
  m.push("hello world");
  EXPECT_EQ(m.matched(), "lo");  // the earliest in the text, not the first listed

  StopMatcher split({"cd", "bcx"});
  split.push("ab");
  split.push("cx");
  EXPECT_EQ(split.matched(), "bcx");

  StopMatcher tie({"ab", "abc"});  // both start at 0: the first given wins
  tie.push("abc");
  EXPECT_EQ(tie.matched(), "ab");
}

TEST(StopMatcher, HeldPrefixThatIsNotAStopIsReleased) {
  StopMatcher m({"###"});
  EXPECT_EQ(m.push("a #"), "a ");
  EXPECT_EQ(m.push("#"), "");
  EXPECT_EQ(m.push("x"), "##x");
  EXPECT_FALSE(m.stopped());
  // The held text may itself hold the start of the stop after the mismatch.
  EXPECT_EQ(m.push("##"), "");
  EXPECT_EQ(m.push("b"), "##b");
  EXPECT_FALSE(m.stopped());
  // Overlapping start: "aab" with stop "ab" after holding "a".
  StopMatcher k({"ab"});
  EXPECT_EQ(k.push("a"), "");
  EXPECT_EQ(k.push("a"), "a");
  EXPECT_EQ(k.push("b"), "");
  EXPECT_TRUE(k.stopped());
}

TEST(StopMatcher, FlushReturnsTheHeldText) {
  StopMatcher m({"<|end|>"});
  EXPECT_EQ(m.push("done <|en"), "done ");
  EXPECT_EQ(m.flush(), "<|en");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, ReleasedTextIsTheInputMinusTheStop) {
  const std::vector<std::string> pieces = {"The ", "answer", " is", " 4", "2.", "\n", "Q", ":", " next"};
  StopMatcher none({"Z:"});
  EXPECT_EQ(run(none, pieces), "The answer is 42.\nQ: next");
  StopMatcher stop({"\nQ:"});
  EXPECT_EQ(run(stop, pieces), "The answer is 42.");
  EXPECT_TRUE(stop.stopped());
}

TEST(StopMatcher, MultiByteUtf8) {
  // "é" is C3 A9, "日本" is E6 97 A5 E6 9C AC; the stop "本語" begins like "本当".
  StopMatcher m({"本語"});
  EXPECT_EQ(m.push("caf\xC3\xA9 "), "caf\xC3\xA9 ");
  EXPECT_EQ(m.push("日本"), "日");
  EXPECT_EQ(m.push("当に"), "本当に");
  EXPECT_EQ(m.push("日本"), "日");
  EXPECT_EQ(m.push("語です"), "");
  EXPECT_TRUE(m.stopped());

  // A stop whose first character shares its lead byte with the text's is not cut
  // inside a character: what is released is always whole characters here.
  StopMatcher e({"éx"});
  EXPECT_EQ(e.push("è"), "è");  // C3 A8: only the lead byte matches, not a prefix
  EXPECT_EQ(e.push("é"), "");
  EXPECT_EQ(e.push("é"), "é");
  EXPECT_EQ(e.push("x!"), "");
  EXPECT_TRUE(e.stopped());
  EXPECT_EQ(e.flush(), "");
}
