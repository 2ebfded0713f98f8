#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "core/mapped_file.h"

using hearth::Error;
using hearth::ErrorKind;
using hearth::MappedFile;

TEST(MappedFile, MapsWholeFile) {
  std::string path = testing::TempDir() + "/mapped.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out << "hello hearth";
  }
  MappedFile f(path);
  ASSERT_EQ(f.size(), 12u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.data()), f.size()), "hello hearth");
  MappedFile moved = std::move(f);
  EXPECT_EQ(moved.size(), 12u);
  EXPECT_EQ(f.data(), nullptr);
  std::remove(path.c_str());
}

TEST(MappedFile, EmptyFileHasNoData) {
  std::string path = testing::TempDir() + "/empty.bin";
  { std::ofstream out(path, std::ios::binary); }
  MappedFile f(path);
  EXPECT_EQ(f.size(), 0u);
  EXPECT_EQ(f.data(), nullptr);
  std::remove(path.c_str());
}

TEST(MappedFile, MissingFileNamesPath) {
  try {
    MappedFile f("/nonexistent/hearth-model.gguf");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/hearth-model.gguf"), std::string::npos);
  }
}

TEST(MappedFile, DirectoryIsRejected) {
  EXPECT_THROW(MappedFile f("/tmp"), Error);
}
