// A check of a checkpoint's pickle (the archive's data.pkl) before LibTorch's unpickler reads it.
// LibTorch 1.13's Unpickler sizes memory by what the pickle states before it reads anything: a
// string's 4-byte length is allocated and zero-filled (readBytes), and a memo index grows the
// memo table to that many entries (setInput, 16 bytes each). A pickle of a few KB that stated
// 4 GiB, or memo index 2^31, made the process touch 4 or 32 GiB of memory. Torch-free; stateless,
// callable from any thread.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace ts {

// Walks the opcodes of a protocol-2 pickle as torch::jit::Unpickler reads them, up to STOP. OK
// when every opcode is one the unpickler reads, every argument (length-prefixed strings
// included) lies within `pickle`, and every memo index is one the pickle has reached (a pickler
// numbers its memo entries 0, 1, 2, ...); DATA_LOSS naming the offset and the opcode otherwise.
// Checks nothing else (stack, types): the unpickler does, allocating no more than it reads.
absl::Status CheckPickleSizes(std::string_view pickle);

}  // namespace ts
