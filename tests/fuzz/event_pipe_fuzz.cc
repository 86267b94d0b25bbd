// The frames a tsworker writes to its supervisor (job_contract/event_pipe.h: EventDecoder),
// arriving in chunks of the size the selector picks (1 to 256 bytes, as reads from a pipe split
// them). Once the decoder reports DATA_LOSS the stream is abandoned, as the supervisor abandons it.
#include <algorithm>
#include <cstdint>

#include "job_contract/event_pipe.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  const std::size_t chunk = std::size_t{input.selector} + 1;
  ts::job::EventDecoder decoder;
  for (std::size_t at = 0; at < input.bytes.size(); at += chunk) {
    decoder.Append(input.bytes.data() + at, std::min(chunk, input.bytes.size() - at));
    while (true) {
      auto message = decoder.Next();
      if (!message.ok()) return 0;
      if (!message->has_value()) break;
    }
  }
  if (decoder.pending_bytes() > input.bytes.size()) {
    ts::fuzz::Broken("more bytes pending than were appended");
  }
  return 0;
}
