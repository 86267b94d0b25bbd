// A check of a checkpoint's pickle (the archive's data.pkl) before LibTorch's unpickler reads it.
// LibTorch 1.13's Unpickler trusts what the pickle states (checkpoint_fuzz found each of these):
//   - a string's 4-byte length is allocated and zero-filled before the string is read
//     (readBytes): a 2.4 KB pickle that stated 4 GiB made the process touch 4 GiB;
//   - a memo index grows the memo table to that many entries (setInput, 16 bytes each): index
//     2^31 touched 32 GiB;
//   - TUPLE1/2/3 and others pop the stack without looking whether it holds enough values: popping
//     an empty stack crashed the process (SIGSEGV).
// A value nested thousands deep would also exhaust the thread's stack when it is destroyed
// (recursively), and a container given to itself through the memo would never be freed.
// Torch-free; stateless, callable from any thread.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace ts {

// The deepest nesting of containers a checkpoint's pickle may build (SaveCheckpoint's: 5).
inline constexpr int kMaxPickleNesting = 64;

// Runs the opcodes of a protocol-2 pickle, up to STOP, on a model of the unpickler's stack that
// keeps only each value's nesting depth and whether the memo refers to it. OK when every opcode
// is one LibTorch's unpickler reads, every argument (length-prefixed strings included) lies within
// `pickle`, every memo index is one the pickle has reached (a pickler numbers its entries 0, 1, 2,
// ...), every opcode finds the values and the MARK it takes on the stack, no container nests
// deeper than kMaxPickleNesting, and no container is changed after the memo refers to it (a
// pickler memoizes a container once it is complete). DATA_LOSS naming the offset and the opcode
// otherwise. Types are not checked: the unpickler checks them, and throws.
absl::Status CheckPickle(std::string_view pickle);

// The unsigned little-endian integer in `bytes` (at most 8 of them): the pickle's arguments and
// the checkpoint file's header and trailer.
std::uint64_t ReadLittleEndian(std::string_view bytes);

}  // namespace ts
