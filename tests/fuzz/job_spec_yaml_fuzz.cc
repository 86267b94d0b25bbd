// The YAML job specs users write for `tsctl train/eval --spec` and `tsworker --spec`
// (job_contract/job_spec_yaml.h, through yaml-cpp and common/yaml_fields.h), then the server's
// normalisation of what they parse to (job_spec_checks.h). Selector bit 0: a training spec or an
// evaluation spec; the other bits: the training set's size.
#include <cstdint>

#include "job_contract/job_spec_yaml.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/job_spec_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  if (input.selector & 1) {
    auto spec = ts::ParseEvaluationSpecYaml(input.bytes);
    if (spec.ok()) ts::fuzz::CheckEvaluationSpec(*std::move(spec));
  } else {
    auto spec = ts::ParseTrainingSpecYaml(input.bytes);
    if (spec.ok())
      ts::fuzz::CheckTrainingSpec(*std::move(spec), ts::fuzz::TrainExamples(input.selector));
  }
  return 0;
}
