// What the job-spec fuzz targets ask of a spec that parsed: the server's normalisation
// (job_contract/job_spec.h) against the default jobs settings, then, as a worker does once its data
// is loaded, FinalizeTrainingSpec; and the promise NormalizeTrainingSpec's comment makes, that a
// normalised spec normalises to itself.
#pragma once

#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <string>

#include "job_contract/job_spec.h"
#include "server/config.h"
#include "tests/fuzz/fuzz_support.h"

namespace ts::fuzz {

inline constexpr int kFuzzCores = 4;

// `train_examples`: the data set's size FinalizeTrainingSpec is given.
inline void CheckTrainingSpec(taylorshift::v1::TrainingSpec spec, std::int64_t train_examples) {
  const job::SpecRules jobs;
  if (!job::NormalizeTrainingSpec(&spec, jobs, kFuzzCores).ok()) return;
  taylorshift::v1::TrainingSpec again = spec;
  const absl::Status status = job::NormalizeTrainingSpec(&again, jobs, kFuzzCores);
  if (!status.ok()) {
    Broken("a normalised training spec is refused: " + std::string(status.message()));
  }
  if (!google::protobuf::util::MessageDifferencer::Equals(again, spec)) {
    Broken("a normalised training spec changes when normalised again:\n" + spec.DebugString() +
           "---\n" + again.DebugString());
  }
  (void)job::FinalizeTrainingSpec(&spec, train_examples, jobs);
}

inline void CheckEvaluationSpec(taylorshift::v1::EvaluationSpec spec) {
  const job::SpecRules jobs;
  if (!job::NormalizeEvaluationSpec(&spec, jobs, kFuzzCores).ok()) return;
  taylorshift::v1::EvaluationSpec again = spec;
  const absl::Status status = job::NormalizeEvaluationSpec(&again, jobs, kFuzzCores);
  if (!status.ok()) {
    Broken("a normalised evaluation spec is refused: " + std::string(status.message()));
  }
  if (!google::protobuf::util::MessageDifferencer::Equals(again, spec)) {
    Broken("a normalised evaluation spec changes when normalised again");
  }
}

// The training set's size for FinalizeTrainingSpec, from the selector: 1 to 2^31 examples.
inline std::int64_t TrainExamples(std::uint8_t selector) {
  return std::int64_t{1} << ((selector >> 1) % 32);
}

}  // namespace ts::fuzz
