#include "model/data/dataset.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ts {
namespace {

TEST(DatasetTest, UniformIntStaysInRangeAndIsFixedForASeed) {
  std::mt19937_64 rng(42);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 5000; ++i) {
    const std::int64_t x = UniformInt(rng, -2, 2);
    ASSERT_GE(x, -2);
    ASSERT_LE(x, 2);
    ++counts[x + 2];
  }
  for (int c : counts) EXPECT_GT(c, 800);
  // mt19937_64 is fully specified by the standard, so this sequence is too.
  std::mt19937_64 again(42);
  std::mt19937_64 reference(42);
  EXPECT_EQ(UniformInt(again, 0, 9), static_cast<std::int64_t>(reference() % 10));
}

TEST(SplitDatasetTest, HoldsOutTheFractionDeterministically) {
  std::vector<Example> examples;
  examples.reserve(100);
  for (int i = 0; i < 100; ++i) examples.push_back(Example{std::to_string(i), i % 3});
  absl::StatusOr<DatasetSplit> a = SplitDataset(examples, 0.1, 5);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->validation.size(), 10u);
  EXPECT_EQ(a->train.size(), 90u);
  std::set<std::string> seen;
  for (const Example& e : a->train) seen.insert(e.tokens);
  for (const Example& e : a->validation) seen.insert(e.tokens);
  EXPECT_EQ(seen.size(), 100u);  // a partition
  absl::StatusOr<DatasetSplit> b = SplitDataset(examples, 0.1, 5);
  ASSERT_TRUE(b.ok());
  for (std::size_t i = 0; i < a->validation.size(); ++i) {
    EXPECT_EQ(a->validation[i].tokens, b->validation[i].tokens);
  }
  absl::StatusOr<DatasetSplit> c = SplitDataset(examples, 0.1, 6);
  ASSERT_TRUE(c.ok());
  bool differs = false;
  for (std::size_t i = 0; i < a->validation.size(); ++i) {
    differs |= a->validation[i].tokens != c->validation[i].tokens;
  }
  EXPECT_TRUE(differs);

  absl::StatusOr<DatasetSplit> tiny = SplitDataset({examples[0], examples[1]}, 0.01, 1);
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->validation.size(), 1u);
  EXPECT_EQ(SplitDataset(examples, 0.0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitDataset(examples, 1.0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitDataset({examples[0]}, 0.5, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ts
