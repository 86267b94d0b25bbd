// The calibration file tsserver and tsmodel load (model/networks/calibration_file.h:
// ParseCalibration), then the crossover tables a model takes from it, looked up at several batch
// sizes.
#include <cstdint>
#include <string>

#include "model/networks/calibration_file.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto results = ts::ParseCalibration(text, "fuzz.calibration");
  if (!results.ok()) return 0;
  for (const ts::CalibrationResult& result : *results) {
    const ts::CrossoverTable table =
        ts::LookupCrossovers(*results, result.head_dim, result.heads, result.precision);
    (void)table.Describe();
    for (const std::int64_t batch : {std::int64_t{1}, std::int64_t{3}, std::int64_t{1} << 40}) {
      const auto tokens = table.For(batch);
      if (tokens.has_value() && *tokens <= 0) {
        ts::fuzz::Broken("a crossover table answers a crossover of no tokens");
      }
    }
  }
  return 0;
}
