// The tuning registry (core/tune.h): every key has a unique name, a default inside its
// range and a doc line; --tune text sets keys by type (bool words, numbers in range, enum
// names or indexes) and bad text is refused with the key and what it takes, changing
// nothing; Override puts the value back; the listing shows values and marks changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "core/error.h"
#include "core/tune.h"

namespace tune = hearth::tune;

namespace {

class Tune : public ::testing::Test {
 protected:
  void TearDown() override { tune::reset_all(); }
};

std::string error_of(const std::string& list) {
  try {
    tune::apply(list);
  } catch (const hearth::Error& e) {
    EXPECT_EQ(e.kind(), hearth::ErrorKind::kInvalidInput);
    return e.what();
  }
  return "";
}

TEST_F(Tune, KeysAreUniqueWithDefaultsInRangeAndDocs) {
  std::set<std::string> names;
  for (int i = 0; i < tune::kCount; ++i) {
    const tune::Key& k = tune::key(static_cast<tune::Id>(i));
    EXPECT_TRUE(names.insert(std::string(k.name)).second) << k.name;
    EXPECT_LE(k.min, k.dflt) << k.name;
    EXPECT_LE(k.dflt, k.max) << k.name;
    EXPECT_FALSE(k.doc.empty()) << k.name;
    EXPECT_EQ(k.name.find_first_of(" =,"), std::string_view::npos) << k.name;
    EXPECT_EQ(tune::find(k.name), i);
    EXPECT_EQ(tune::get(static_cast<tune::Id>(i)), k.dflt) << k.name;
    if (k.type == tune::Type::Bool) {
      EXPECT_TRUE(k.min == 0 && k.max == 1) << k.name;
    }
    if (k.type == tune::Type::Enum) {  // one choice per index from 0
      EXPECT_EQ(k.min, 0) << k.name;
      EXPECT_EQ(static_cast<int64_t>(std::count(k.choices.begin(), k.choices.end(), '|')), k.max) << k.name;
    }
    if (k.group == tune::Group::Kill) {  // on by default: a bool at 1, an enum at its first choice
      EXPECT_NE(k.type, tune::Type::Int) << k.name;
      EXPECT_EQ(k.dflt, k.type == tune::Type::Bool ? 1 : 0) << k.name;
    }
  }
  EXPECT_EQ(tune::find("no.such_key"), tune::kCount);
}

TEST_F(Tune, SetsEachTypeFromText) {
  tune::apply("cuda.graph=0, pool.spin_us = 0 ,cpu.moe=generic,cuda.op_timing=2");
  EXPECT_FALSE(tune::on(tune::kCudaGraph));
  EXPECT_EQ(tune::get(tune::kPoolSpinUs), 0);
  EXPECT_EQ(tune::get(tune::kCpuMoe), 1);
  EXPECT_EQ(tune::value_text(tune::kCpuMoe), "generic");
  EXPECT_EQ(tune::value_text(tune::kCudaOpTiming), "host");
  tune::apply("cuda.graph=on,cuda.fuse=false,cuda.draw=off,cuda.argmax=true,engine.timing=each,,");
  EXPECT_TRUE(tune::on(tune::kCudaGraph));
  EXPECT_FALSE(tune::on(tune::kCudaFuse));
  EXPECT_FALSE(tune::on(tune::kCudaDraw));
  EXPECT_TRUE(tune::on(tune::kCudaArgmax));
  EXPECT_EQ(tune::get(tune::kEngineTiming), 2);
  tune::apply("cuda.matvec_early=-1,cpu.token_block=+16");
  EXPECT_EQ(tune::get(tune::kCudaMatvecEarly), -1);
  EXPECT_EQ(tune::get(tune::kCpuTokenBlock), 16);
  tune::apply("");
}

TEST_F(Tune, RefusesBadTextNamingTheKeyAndChangesNothing) {
  EXPECT_NE(error_of("cuda.grahp=0").find("unknown key 'cuda.grahp'"), std::string::npos);
  EXPECT_NE(error_of("cuda.graph").find("key=value"), std::string::npos);
  EXPECT_NE(error_of("cuda.graph=2").find("cuda.graph takes 1, 0, true, false, on or off"), std::string::npos);
  EXPECT_NE(error_of("cuda.qgemm_pf=4").find("from 1 to 3"), std::string::npos);
  EXPECT_NE(error_of("pool.spin_us=12x").find("pool.spin_us=12x"), std::string::npos);
  EXPECT_NE(error_of("pool.spin_us=").find("whole number"), std::string::npos);
  EXPECT_NE(error_of("cpu.moe=fast").find("one of fused, generic"), std::string::npos);
  EXPECT_NE(error_of("cpu.moe=2").find("cpu.moe"), std::string::npos);
  EXPECT_NE(error_of("cuda.graph=0,cuda.fuse=maybe").find("cuda.fuse=maybe"), std::string::npos);
  EXPECT_NE(error_of("pool.spin_us=99999999999999999999").find("pool.spin_us"), std::string::npos);
  for (int i = 0; i < tune::kCount; ++i) {
    EXPECT_EQ(tune::get(static_cast<tune::Id>(i)), tune::key(static_cast<tune::Id>(i)).dflt);
  }
  EXPECT_THROW(tune::set(tune::kCudaQgemmPf, 4), hearth::Error);
}

TEST_F(Tune, OverrideRestoresTheValueBefore) {
  tune::set(tune::kPoolSpinUs, 32);
  {
    tune::Override o(tune::kPoolSpinUs, 128);
    EXPECT_EQ(tune::get(tune::kPoolSpinUs), 128);
    tune::Override o2(tune::kPoolSpinUs, 64);
    EXPECT_EQ(tune::get(tune::kPoolSpinUs), 64);
  }
  EXPECT_EQ(tune::get(tune::kPoolSpinUs), 32);
  tune::reset(tune::kPoolSpinUs);
  EXPECT_EQ(tune::get(tune::kPoolSpinUs), 200);
}

TEST_F(Tune, ListingShowsGroupsValuesAndChanges) {
  tune::apply("cuda.graph=0,cpu.moe=generic");
  const std::string l = tune::listing();
  const size_t kill = l.find("kill switches"), tuned = l.find("thresholds and variants"), debug = l.find("timing and");
  ASSERT_NE(kill, std::string::npos);
  ASSERT_LT(kill, tuned);
  ASSERT_LT(tuned, debug);
  EXPECT_NE(l.find("  cuda.graph=false "), std::string::npos) << l;
  EXPECT_NE(l.find("[default true]"), std::string::npos);
  EXPECT_NE(l.find("  cpu.moe=generic "), std::string::npos);
  EXPECT_NE(l.find("(fused|generic)"), std::string::npos);
  EXPECT_NE(l.find("  pool.spin_us=200 "), std::string::npos);
  EXPECT_GT(l.find("  pool.spin_us=200 "), tuned);
  EXPECT_GT(l.find("  cuda.op_timing=off "), debug);
  for (int i = 0; i < tune::kCount; ++i) {
    EXPECT_NE(l.find("  " + std::string(tune::key(static_cast<tune::Id>(i)).name) + "="), std::string::npos);
  }
}

}  // namespace
