// Job specs in their proto form, as Jobs.SubmitTraining and Jobs.SubmitEvaluation receive them
// (serialized SubmitTrainingRequest / SubmitEvaluationRequest; with selector bit 7 their text
// form, proto_input.h), through the server's normalisation (job_spec_checks.h). Selector bit 0:
// training or evaluation; bits 1-5: the training set's size.
#include <cstdint>

#include "taylorshift/v1/jobs.pb.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/job_spec_checks.h"
#include "tests/fuzz/proto_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  if (input.selector & 1) {
    taylorshift::v1::SubmitEvaluationRequest request;
    if (ts::fuzz::ParseMessage(input, &request)) ts::fuzz::CheckEvaluationSpec(request.spec());
  } else {
    taylorshift::v1::SubmitTrainingRequest request;
    if (ts::fuzz::ParseMessage(input, &request)) {
      ts::fuzz::CheckTrainingSpec(request.spec(), ts::fuzz::TrainExamples(input.selector));
    }
  }
  return 0;
}
