// GET /v1/status's pieces without a server: the recent percentiles read from histogram
// buckets (histogram_quantile), and the web page's files built into the binary.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "server/metrics.h"
#include "server/status_route.h"
#include "server/ui_assets.h"
#include "server/ui_page.h"

using namespace hearth::server;

namespace {

TEST(StatusQuantile, InterpolatesInsideTheBucket) {
  const std::vector<double> bounds = {1, 2, 4};
  // 10 observations: 2 in (0, 1], 6 in (1, 2], 2 in (2, 4], none above.
  const std::vector<uint64_t> cum = {2, 8, 10, 10};
  EXPECT_DOUBLE_EQ(histogram_quantile(0.1, bounds, cum), 0.5);   // rank 1 of 2 in [0, 1]
  EXPECT_DOUBLE_EQ(histogram_quantile(0.5, bounds, cum), 1.5);   // rank 5: 3 of 6 into (1, 2]
  EXPECT_DOUBLE_EQ(histogram_quantile(0.9, bounds, cum), 3.0);   // rank 9: 1 of 2 into (2, 4]
  EXPECT_DOUBLE_EQ(histogram_quantile(1.0, bounds, cum), 4.0);
  EXPECT_DOUBLE_EQ(histogram_quantile(0.0, bounds, cum), 0.0);
}

TEST(StatusQuantile, InfBucketGivesTheLastBoundAndEmptyIsNaN) {
  const std::vector<double> bounds = {1, 2};
  EXPECT_DOUBLE_EQ(histogram_quantile(0.99, bounds, {0, 1, 10}), 2.0);  // 9 of 10 above 2
  EXPECT_TRUE(std::isnan(histogram_quantile(0.5, bounds, {0, 0, 0})));
  EXPECT_TRUE(std::isnan(histogram_quantile(0.5, bounds, {1, 2})));  // wrong length
}

TEST(StatusQuantile, AgreesWithTheRegistrysHistogram) {
  // Observations of the real TTFT histogram; every quantile lies in the bucket that holds
  // the exact order statistic.
  Histogram h(ttft_buckets_seconds());
  std::vector<double> xs;
  for (int i = 1; i <= 200; ++i) xs.push_back(0.003 * i);  // 3 ms .. 600 ms
  for (double x : xs) h.observe(x);
  for (double q : {0.5, 0.9, 0.99}) {
    const double v = histogram_quantile(q, h.bounds(), h.cumulative());
    const double exact = xs[static_cast<size_t>(std::ceil(q * xs.size())) - 1];
    double lo = 0, hi = 0;
    for (double b : h.bounds()) {
      if (exact <= b) {
        hi = b;
        break;
      }
      lo = b;
    }
    EXPECT_GE(v, lo) << q;
    EXPECT_LE(v, hi) << q;
  }
}

const UiFile* find(const std::string& name) {
  for (const UiFile& f : ui_files()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

TEST(UiFiles, ThePageAndEveryFileItLoadsAreBuiltIn) {
  const UiFile* index = find("index.html");
  ASSERT_NE(index, nullptr);
  const std::string html(index->bytes);
  EXPECT_EQ(html.rfind("<!doctype html>", 0), 0u);
  std::regex ref(R"re((?:src|href)="/ui/([A-Za-z0-9._-]+)")re");
  int n = 0;
  for (std::sregex_iterator it(html.begin(), html.end(), ref), end; it != end; ++it, ++n) {
    const UiFile* f = find((*it)[1].str());
    ASSERT_NE(f, nullptr) << (*it)[1].str();
    EXPECT_GT(f->bytes.size(), 100u) << f->name;
  }
  EXPECT_GE(n, 2);
  // Nothing from another origin.
  EXPECT_FALSE(std::regex_search(html, std::regex(R"re((?:src|href)="(?:https?:)?//)re")));
}

TEST(UiFiles, ContentTypes) {
  EXPECT_EQ(ui_content_type("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(ui_content_type("app.css"), "text/css; charset=utf-8");
  EXPECT_EQ(ui_content_type("chat.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(ui_content_type("x.bin"), "application/octet-stream");
}

}  // namespace
