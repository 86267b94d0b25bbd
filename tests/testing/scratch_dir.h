// A scratch directory per test, for tests that read files: made empty before the test and
// removed after it, named after the test (and gtest's seed) so parallel tests never share one.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ts::testing {

class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
    dir_ = std::filesystem::temp_directory_path() /
           ("ts_" + std::string(unit.current_test_info()->test_suite_name()) + "_" +
            std::to_string(unit.random_seed()) + "_" + unit.current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes `contents` to dir_/name (creating folders); returns the path.
  std::string Write(const std::string& name, const std::string& contents) {
    const std::filesystem::path path = dir_ / name;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << contents;
    return path.string();
  }

  std::filesystem::path dir_;
};

}  // namespace ts::testing
