// StepRate: the step rate over a training job's recent progress reports and the ETA from it.
#include "server/jobs/step_rate.h"

#include <gtest/gtest.h>

namespace ts::server {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

TEST(StepRateTest, NoRateBeforeTwoReports) {
  StepRate rate;
  EXPECT_FALSE(rate.StepsPerSecond().has_value());
  EXPECT_FALSE(rate.EtaSeconds(0, 100).has_value());
  rate.Add(10, kStart);
  EXPECT_FALSE(rate.StepsPerSecond().has_value());
  EXPECT_FALSE(rate.EtaSeconds(10, 100).has_value());
  // At the last step nothing is left, rate or not.
  EXPECT_EQ(rate.EtaSeconds(100, 100), 0.0);
}

TEST(StepRateTest, EtaIsTheRemainingStepsAtTheRateOverTheWindow) {
  StepRate rate;
  rate.Add(10, kStart);
  rate.Add(20, kStart + absl::Seconds(2));
  ASSERT_TRUE(rate.StepsPerSecond().has_value());
  EXPECT_DOUBLE_EQ(*rate.StepsPerSecond(), 5);
  EXPECT_DOUBLE_EQ(*rate.EtaSeconds(20, 100), 16);
  // A slow interval (a validation run) counts with its share of the window only.
  rate.Add(30, kStart + absl::Seconds(10));
  EXPECT_DOUBLE_EQ(*rate.StepsPerSecond(), 20.0 / 10);
  // Older reports leave the window: the rate follows the recent ones.
  for (int i = 1; i <= static_cast<int>(StepRate::kWindow); ++i) {
    rate.Add(30 + 10 * i, kStart + absl::Seconds(10 + i));
  }
  EXPECT_DOUBLE_EQ(*rate.StepsPerSecond(), 10);
  EXPECT_DOUBLE_EQ(*rate.EtaSeconds(50, 100), 5);
  EXPECT_FALSE(rate.EtaSeconds(50, 0).has_value());  // no total: no ETA
}

TEST(StepRateTest, AStepOrTimeThatGoesBackStartsAgain) {
  StepRate rate;
  rate.Add(10, kStart);
  rate.Add(20, kStart + absl::Seconds(1));
  rate.Add(15, kStart + absl::Seconds(2));  // a restarted worker resumed at an earlier step
  EXPECT_FALSE(rate.StepsPerSecond().has_value());
  rate.Add(25, kStart + absl::Seconds(4));
  EXPECT_DOUBLE_EQ(*rate.StepsPerSecond(), 5);
  rate.Reset();
  EXPECT_FALSE(rate.StepsPerSecond().has_value());
}

}  // namespace
}  // namespace ts::server
