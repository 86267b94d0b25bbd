// The model on a GPU as serving and training use it, against the CPU: ClassifyBatch on both
// bundled demo checkpoints (fp32 and bf16, both attention paths) on real files, and training
// steps. Every test needs a CUDA device and skips without one (scripts/gpu-check runs them).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/file_io.h"
#include "model/checkpoints/checkpoint.h"
#include "model/data/listops_generator.h"
#include "model/kernels/taylor_attention.h"
#include "model/networks/batch_classifier.h"
#include "model/torch_compat.h"
#include "model/training/data_parallel.h"
#include "model/training/training.h"
#include "tests/testing/encoder_testing.h"

namespace ts {
namespace {

std::string SourceDir() {
  const char* dir = std::getenv("TS_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

class CudaModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
    compat::SetCudaTf32(false);
  }
};

// Real inputs of each demo model: files of the repository for source-lang (shell, python,
// C header), generated expressions for listops.
std::vector<std::string> Inputs(const std::string& model) {
  std::vector<std::string> inputs;
  if (model == "source-lang-demo") {
    for (const char* file : {"scripts/setup", "bench/debian_tasks.py", "model/networks/encoder.h",
                             "scripts/build", "bench/attention_report.py"}) {
      auto bytes = ReadFile(SourceDir() + "/" + file);
      EXPECT_TRUE(bytes.ok()) << bytes.status();
      if (bytes.ok()) inputs.push_back(bytes->substr(0, 2000));
    }
  } else {
    // Up to 250 characters: the listops demo takes 256 tokens, CLS included.
    for (const auto& example : testing::ListOpsData(6, 100, 250, 3).examples) {
      inputs.push_back(example.tokens);
    }
  }
  return inputs;
}

// A loopback TCP port that was free a moment ago (for the group's TCPStore).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

// CUDA ranks all-reduce over NCCL: a build without it refuses them before any rendezvous.
TEST(DataParallelTest, CudaRanksNeedNccl) {
  if (HaveNccl()) GTEST_SKIP() << "this build has NCCL (NcclGroupOfOne... tests it on a GPU)";
  DataParallelOptions options;
  options.world_size = 2;
  options.device = torch::Device(torch::kCUDA, 0);
  auto group = DataParallelGroup::Connect(options);
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(group.status().message().find("needs c10d's NCCL backend"), std::string::npos)
      << group.status();
}

// NCCL as CUDA ranks use it, in a world of one rank on this GPU: the gradient average, the sum
// and the broadcast run on the device and leave the values as they are.
TEST_F(CudaModelTest, NcclGroupOfOneAveragesSumsAndBroadcastsOnTheDevice) {
  ASSERT_TRUE(HaveNccl()) << "a CUDA build has c10d's NCCL backend";
  DataParallelOptions options;
  options.device = torch::Device(torch::kCUDA, 0);
  options.group_of_one = true;
  options.master_port = FreePort();
  options.timeout = std::chrono::seconds(120);
  auto group = DataParallelGroup::Connect(options);
  ASSERT_TRUE(group.ok()) << group.status();
  const auto on_gpu = torch::TensorOptions().device(torch::kCUDA);
  torch::Tensor weight = torch::randn({3, 4}, on_gpu).requires_grad_();
  weight.mutable_grad() = torch::full({3, 4}, 2.0, on_gpu);
  ASSERT_TRUE((*group)->AverageGradients({weight}).ok());
  EXPECT_TRUE(torch::equal(weight.grad().cpu(), torch::full({3, 4}, 2.0)));
  auto sums = (*group)->Sum({1.5, -2.0});
  ASSERT_TRUE(sums.ok()) << sums.status();
  EXPECT_EQ(*sums, (std::vector<double>{1.5, -2.0}));
  torch::Tensor values = torch::arange(5, on_gpu.dtype(torch::kFloat32));
  ASSERT_TRUE((*group)->Broadcast({values}).ok());
  EXPECT_TRUE(torch::equal(values.cpu(), torch::arange(5, torch::kFloat32)));
}

TEST_F(CudaModelTest, ClassifyBatchOnBothDemoCheckpointsMatchesTheCpu) {
  for (const std::string name : {"source-lang-demo", "listops-demo"}) {
    const std::string path = SourceDir() + "/models/" + name + ".tsckpt";
    auto cpu = LoadCheckpoint(path, torch::kCPU);
    auto gpu = LoadCheckpoint(path, torch::kCUDA);
    ASSERT_TRUE(cpu.ok() && gpu.ok()) << path;
    cpu->model->eval();
    gpu->model->eval();
    const auto texts = Inputs(name);
    ASSERT_FALSE(texts.empty());
    const std::vector<std::string_view> sequences(texts.begin(), texts.end());
    for (const auto path_choice : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
      const auto expected = ClassifyBatch(cpu->model, sequences, path_choice, torch::kCPU);
      ASSERT_TRUE(expected.ok()) << expected.status();
      for (const auto precision : {Precision::kFp32, Precision::kBf16}) {
        gpu->model->set_precision(precision);
        const auto actual = ClassifyBatch(gpu->model, sequences, path_choice, torch::kCUDA);
        ASSERT_TRUE(actual.ok()) << actual.status();
        EXPECT_EQ(actual->path, path_choice);
        const double tolerance = precision == Precision::kFp32 ? 1e-4 : 2e-2;
        for (std::size_t s = 0; s < sequences.size(); ++s) {
          for (std::size_t c = 0; c < expected->probabilities[s].size(); ++c) {
            EXPECT_NEAR(actual->probabilities[s][c], expected->probabilities[s][c], tolerance)
                << name << " " << AttentionPathName(path_choice) << " " << PrecisionName(precision)
                << " sequence " << s << " class " << c;
          }
        }
      }
      gpu->model->set_precision(Precision::kFp32);
    }
  }
}

// A job's steps on the GPU take the CPU's: the same initial weights and batches, 20 AdamW steps,
// the losses equal within float32 summation-order differences, on both attention paths.
TEST_F(CudaModelTest, TwentyFp32TrainingStepsMatchTheCpu) {
  const Dataset data = testing::ListOpsData(64, 20, 120, 9);
  const std::vector<LabeledSequence> examples = data.examples;
  TaylorShiftEncoderOptions encoder(32, 2, 4, 128, 10);
  for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
    TrainingOptions options;
    options.steps = 20;
    options.batch_size = 8;
    options.lr = 3e-3;
    options.path = path;
    std::vector<std::vector<double>> losses(2);
    for (int device = 0; device < 2; ++device) {
      torch::manual_seed(21);
      TaylorShiftEncoder model(encoder);
      if (device == 1) model->to(torch::kCUDA);
      auto trainer = Trainer::Create(model, encoder, options, examples, {});
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      for (int step = 0; step < 20; ++step) {
        auto result = (*trainer)->Step();
        ASSERT_TRUE(result.ok()) << result.status();
        losses[device].push_back(result->loss);
      }
    }
    for (int step = 0; step < 20; ++step) {
      EXPECT_NEAR(losses[1][step], losses[0][step], 1e-3 * std::max(1.0, losses[0][step]))
          << AttentionPathName(path) << " step " << step + 1;
    }
    EXPECT_LT(losses[1].back(), losses[1].front()) << AttentionPathName(path);
  }
}

// Mixed precision on the GPU: bfloat16 autocast beside float32 from the same weights and
// batches; the first losses differ by bfloat16 rounding only, and over 200 steps the bf16 loss
// falls as the float32 one does.
TEST_F(CudaModelTest, Bf16MixedPrecisionTrainingLearns) {
  constexpr int kSteps = 200;
  const Dataset data = testing::ListOpsData(256, 20, 120, 6);
  TaylorShiftEncoderOptions encoder(64, 2, 4, 128, 10);
  encoder.conv_embed(true);
  for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
    std::vector<std::vector<double>> losses(2);
    for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
      TrainingOptions options;
      options.steps = kSteps;
      options.batch_size = 16;
      options.lr = 3e-3;
      options.path = path;
      options.precision = precision;
      options.device = torch::Device(torch::kCUDA, 0);
      auto trainer = Trainer::Create(encoder, options, data.examples, {});
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      for (int step = 0; step < kSteps; ++step) {
        auto result = (*trainer)->Step();
        ASSERT_TRUE(result.ok()) << result.status();
        losses[precision == Precision::kBf16].push_back(result->loss);
      }
    }
    const double first_difference = std::abs(losses[1][0] - losses[0][0]);
    EXPECT_GT(first_difference, 0.0) << AttentionPathName(path);
    EXPECT_LT(first_difference, 2e-2 * losses[0][0]) << AttentionPathName(path);
    const auto mean = [](const std::vector<double>& v, std::size_t from) {
      double sum = 0;
      for (std::size_t i = from; i < from + 10; ++i) sum += v[i];
      return sum / 10;
    };
    // The last 10 steps against the first 10, for bf16 and float32 alike.
    const std::size_t last = kSteps - 10;
    EXPECT_LT(mean(losses[1], last), mean(losses[1], 0) - 0.1) << AttentionPathName(path);
    EXPECT_LT(mean(losses[0], last), mean(losses[0], 0) - 0.1) << AttentionPathName(path);
  }
}

// Training with the fused CUDA kernels' forward and backward (implementation cuda, bf16
// products) beside the ATen form in float32, from the same weights and batches: the first
// losses differ by bfloat16 rounding only, and over 200 steps the fused loss falls as the other
// does, on both paths.
TEST_F(CudaModelTest, FusedKernelTrainingLearnsAsTheAtenFormDoes) {
  constexpr int kSteps = 200;
  const Dataset data = testing::ListOpsData(256, 20, 120, 6);
  TaylorShiftEncoderOptions encoder(64, 2, 4, 128, 10);  // d = 16
  for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
    std::vector<std::vector<double>> losses(2);
    for (const auto implementation : {KernelImplementation::kAten, KernelImplementation::kCuda}) {
      TrainingOptions options;
      options.steps = kSteps;
      options.batch_size = 16;
      options.lr = 3e-3;
      options.path = path;
      options.device = torch::Device(torch::kCUDA, 0);
      torch::manual_seed(8);
      auto trainer = Trainer::Create(encoder, options, data.examples, {});
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      (*trainer)->model()->set_kernel_implementation(implementation);
      for (int step = 0; step < kSteps; ++step) {
        auto result = (*trainer)->Step();
        ASSERT_TRUE(result.ok()) << result.status();
        losses[implementation == KernelImplementation::kCuda].push_back(result->loss);
      }
    }
    EXPECT_LT(std::abs(losses[1][0] - losses[0][0]), 2e-2 * losses[0][0])
        << AttentionPathName(path);
    const auto mean = [](const std::vector<double>& v, std::size_t from) {
      double sum = 0;
      for (std::size_t i = from; i < from + 10; ++i) sum += v[i];
      return sum / 10;
    };
    const std::size_t last = kSteps - 10;
    EXPECT_LT(mean(losses[1], last), mean(losses[1], 0) - 0.1) << AttentionPathName(path);
    EXPECT_NEAR(mean(losses[1], last), mean(losses[0], last), 0.1) << AttentionPathName(path);
  }
}

// TrainingOptions::device puts a fresh trainer's model, optimizer state and batches on the GPU;
// its saved state resumes there (the archive mapped to the device) and on the CPU, and the
// resumed trainers take the same next step.
TEST_F(CudaModelTest, TrainerOnTheCudaDeviceSavesAndResumes) {
  const Dataset data = testing::ListOpsData(48, 20, 100, 4);
  TaylorShiftEncoderOptions encoder(32, 2, 4, 128, 10);
  TrainingOptions options;
  options.steps = 40;
  options.batch_size = 8;
  options.lr = 3e-3;
  options.device = torch::Device(torch::kCUDA, 0);
  auto trainer = Trainer::Create(encoder, options, data.examples, {});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  for (const auto& parameter : (*trainer)->model()->parameters()) {
    ASSERT_TRUE(parameter.is_cuda());
  }
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step) {
    auto result = (*trainer)->Step();
    ASSERT_TRUE(result.ok()) << result.status();
    losses.push_back(result->loss);
  }
  const auto mean = [&losses](int from) {
    double sum = 0;
    for (int i = from; i < from + 5; ++i) sum += losses[i];
    return sum / 5;
  };
  EXPECT_LT(mean(25), mean(0));
  const std::string state = ::testing::TempDir() + "/cuda_trainer.state";
  ASSERT_TRUE((*trainer)->SaveState(state).ok());
  auto next = (*trainer)->Step();
  ASSERT_TRUE(next.ok()) << next.status();
  for (const torch::Device device : {torch::Device(torch::kCUDA, 0), torch::Device(torch::kCPU)}) {
    TrainingOptions resume_options = options;
    resume_options.device = device;
    auto resumed = Trainer::Resume(state, resume_options, data.examples, {});
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ((*resumed)->step(), 30);
    for (const auto& parameter : (*resumed)->model()->parameters()) {
      ASSERT_EQ(parameter.device().type(), device.type());
    }
    auto step = (*resumed)->Step();
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_NEAR(step->loss, next->loss, 1e-4 * std::max(1.0, next->loss)) << device;
  }
}

}  // namespace
}  // namespace ts
