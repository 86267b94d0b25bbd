#include "model/checkpoints/pickle_sizes.h"

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ts {
namespace {

// What follows an opcode, as torch::jit::Unpickler reads it (torch/csrc/jit/serialization/
// unpickler.cpp, readInstruction): nothing, a fixed count of bytes, a little-endian length of 1
// or 4 bytes and that many bytes, or GLOBAL's two newline-terminated names.
struct Argument {
  enum Kind { kFixed, kLengthPrefixed, kTwoLines } kind = kFixed;
  std::size_t bytes = 0;  // kFixed: the argument; kLengthPrefixed: the length's own bytes
};

// The opcodes the unpickler reads (pickler.h's PickleOpCode); none other may appear.
std::optional<Argument> ArgumentOf(unsigned char opcode) {
  switch (opcode) {
    case '(':   // MARK
    case '.':   // STOP
    case 'N':   // NONE
    case 'Q':   // BINPERSID
    case 'R':   // REDUCE
    case 'b':   // BUILD
    case 'd':   // DICT
    case '}':   // EMPTY_DICT
    case 'e':   // APPENDS
    case 'l':   // LIST
    case ']':   // EMPTY_LIST
    case 's':   // SETITEM
    case 't':   // TUPLE
    case ')':   // EMPTY_TUPLE
    case 'u':   // SETITEMS
    case 0x81:  // NEWOBJ
    case 0x85:  // TUPLE1
    case 0x86:  // TUPLE2
    case 0x87:  // TUPLE3
    case 0x88:  // NEWTRUE
    case 0x89:  // NEWFALSE
      return Argument{};
    case 0x80:  // PROTO
    case 'K':   // BININT1
    case 'h':   // BINGET
    case 'q':   // BINPUT
      return Argument{Argument::kFixed, 1};
    case 'M':  // BININT2
      return Argument{Argument::kFixed, 2};
    case 'J':  // BININT
    case 'j':  // LONG_BINGET
    case 'r':  // LONG_BINPUT
      return Argument{Argument::kFixed, 4};
    case 'G':  // BINFLOAT
      return Argument{Argument::kFixed, 8};
    case 0x8a:  // LONG1
      return Argument{Argument::kLengthPrefixed, 1};
    case 'X':  // BINUNICODE
      return Argument{Argument::kLengthPrefixed, 4};
    case 'c':  // GLOBAL
      return Argument{Argument::kTwoLines, 0};
    default:
      return std::nullopt;
  }
}

std::uint64_t ReadLittleEndian(std::string_view bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  return value;
}

}  // namespace

absl::Status CheckPickleSizes(std::string_view pickle) {
  std::size_t at = 0;
  std::uint64_t memo_entries = 0;  // BINPUT and LONG_BINPUT so far
  while (at < pickle.size()) {
    const std::size_t start = at;
    const auto opcode = static_cast<unsigned char>(pickle[at++]);
    const auto broken = [&](absl::string_view what) {
      return absl::DataLossError(absl::StrFormat("pickle opcode 0x%02x at byte %d of %d %s", opcode,
                                                 start, pickle.size(), what));
    };
    const std::optional<Argument> argument = ArgumentOf(opcode);
    if (!argument) return broken("is not one LibTorch's unpickler reads");
    const std::size_t left = pickle.size() - at;
    switch (argument->kind) {
      case Argument::kFixed:
        if (argument->bytes > left) return broken("is cut short");
        if (opcode == 'q' || opcode == 'r') {  // BINPUT, LONG_BINPUT
          const std::uint64_t index = ReadLittleEndian(pickle.substr(at, argument->bytes));
          if (index > memo_entries) {
            return broken(
                absl::StrCat("stores memo entry ", index, " after ", memo_entries, " entries"));
          }
          ++memo_entries;
        }
        at += argument->bytes;
        break;
      case Argument::kLengthPrefixed: {
        if (argument->bytes > left) return broken("is cut short");
        const std::uint64_t length = ReadLittleEndian(pickle.substr(at, argument->bytes));
        at += argument->bytes;
        if (length > left - argument->bytes) {
          return broken(
              absl::StrCat("states ", length, " bytes, ", left - argument->bytes, " follow"));
        }
        at += length;
        break;
      }
      case Argument::kTwoLines:
        for (int line = 0; line < 2; ++line) {
          const std::size_t end = pickle.find('\n', at);
          if (end == std::string_view::npos) return broken("has a name without its newline");
          at = end + 1;
        }
        break;
    }
    if (opcode == '.') return absl::OkStatus();
  }
  return absl::DataLossError(
      absl::StrCat("pickle of ", pickle.size(), " bytes ends without its STOP opcode"));
}

}  // namespace ts
