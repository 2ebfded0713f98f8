// ReasoningBudget (--reasoning-budget) without a model: counting tokens inside
// <think> ... </think> (tags split over tokens too) and handing out the closing tokens
// once, after the budget.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "engine/reasoning_budget.h"

using hearth::engine::ReasoningBudget;
using hearth::engine::ReasoningLimit;

namespace {

ReasoningLimit limit(int32_t budget, bool inside) {
  ReasoningLimit l;
  l.budget = budget;
  l.starts_inside = inside;
  l.close_tokens = {901, 902, 903};
  return l;
}

TEST(ReasoningBudget, ForcesTheCloseAfterBudgetTokensInside) {
  ReasoningBudget b(limit(3, true));
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(b.forced().has_value()) << i;
    b.accept("word ");
  }
  std::vector<int32_t> forced;
  for (int i = 0; i < 3; ++i) {
    auto t = b.forced();
    ASSERT_TRUE(t.has_value()) << i;
    forced.push_back(*t);
    b.accept(i == 1 ? "</think>" : "\n");
  }
  EXPECT_EQ(forced, (std::vector<int32_t>{901, 902, 903}));
  EXPECT_FALSE(b.inside());
  // One cut per request: a later block is not cut again.
  b.accept("<think>");
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(b.forced().has_value());
    b.accept("x");
  }
}

TEST(ReasoningBudget, CountsOnlyInsideAndSeesSplitTags) {
  ReasoningBudget b(limit(2, false));
  b.accept("Hello ");
  b.accept("there");
  EXPECT_FALSE(b.forced().has_value());
  b.accept("<th");
  b.accept("ink>");  // the tag split over two tokens opens the block
  EXPECT_TRUE(b.inside());
  EXPECT_FALSE(b.forced().has_value());
  b.accept("a");
  EXPECT_FALSE(b.forced().has_value());
  b.accept("b");
  EXPECT_EQ(b.forced(), std::optional<int32_t>(901));
}

TEST(ReasoningBudget, ModelClosingItselfNeedsNoForce) {
  ReasoningBudget b(limit(5, true));
  b.accept("short");
  b.accept("</");
  b.accept("think>");
  EXPECT_FALSE(b.inside());
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(b.forced().has_value());
    b.accept("answer");
  }
}

TEST(ReasoningBudget, ZeroBudgetAndNoLimit) {
  ReasoningBudget zero(limit(0, true));
  EXPECT_EQ(zero.forced(), std::optional<int32_t>(901));
  ReasoningBudget off(limit(-1, true));
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(off.forced().has_value());
    off.accept("x");
  }
}

}  // namespace
