#include "model/checkpoints/pickle_check.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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
  const auto one_of = [opcode](std::string_view opcodes) {
    return opcodes.find(static_cast<char>(opcode)) != std::string_view::npos;
  };
  // MARK, STOP, NONE, BINPERSID, REDUCE, BUILD, DICT, EMPTY_DICT, APPENDS, LIST, EMPTY_LIST,
  // SETITEM, TUPLE, EMPTY_TUPLE, SETITEMS, NEWOBJ, TUPLE1, TUPLE2, TUPLE3, NEWTRUE, NEWFALSE
  if (one_of("(.NQRbd}el]st)u\x81\x85\x86\x87\x88\x89")) return Argument{};
  // PROTO, BININT1, BINGET, BINPUT
  if (one_of("\x80Khq")) return Argument{Argument::kFixed, 1};
  if (opcode == 'M') return Argument{Argument::kFixed, 2};  // BININT2
  // BININT, LONG_BINGET, LONG_BINPUT
  if (one_of("Jjr")) return Argument{Argument::kFixed, 4};
  if (opcode == 'G') return Argument{Argument::kFixed, 8};            // BINFLOAT
  if (opcode == 0x8a) return Argument{Argument::kLengthPrefixed, 1};  // LONG1
  if (opcode == 'X') return Argument{Argument::kLengthPrefixed, 4};   // BINUNICODE
  if (opcode == 'c') return Argument{Argument::kTwoLines, 0};         // GLOBAL
  return std::nullopt;
}

// A value on the modelled stack or in the memo.
struct Value {
  int nesting = 0;            // 0 for a scalar, 1 + the deepest element's for a container
  bool shared = false;        // the memo refers to it
  bool holds_shared = false;  // the memo refers to something in it
};

// The unpickler's stack, MARKs and memo, as far as CheckPickle follows them. Each method returns
// what is wrong, or nothing.
class StackModel {
 public:
  std::optional<std::string> Push(Value value) {
    if (value.nesting > kMaxPickleNesting) {
      return absl::StrCat("nests containers ", value.nesting, " deep (at most ", kMaxPickleNesting,
                          ")");
    }
    stack_.push_back(value);
    return std::nullopt;
  }

  // Whether the top `count` values are above the last MARK.
  std::optional<std::string> Need(std::size_t count) const {
    if (stack_.size() - MarkFloor() >= count) return std::nullopt;
    return absl::StrCat("takes ", count, " values, the stack holds ", stack_.size() - MarkFloor(),
                        " above its last MARK");
  }

  // Removes and returns the top `count` values (Need(count) first).
  std::vector<Value> Pop(std::size_t count) {
    std::vector<Value> values(stack_.end() - static_cast<std::ptrdiff_t>(count), stack_.end());
    stack_.resize(stack_.size() - count);
    return values;
  }

  void Mark() { marks_.push_back(stack_.size()); }

  // Removes the values above the last MARK and the MARK; nothing when there is no MARK.
  std::optional<std::vector<Value>> PopToMark() {
    if (marks_.empty()) return std::nullopt;
    const std::size_t mark = marks_.back();
    marks_.pop_back();
    return Pop(stack_.size() - mark);
  }

  // Where the container below the last MARK is, which APPENDS/SETITEMS fill; nothing when
  // there is none.
  std::optional<std::size_t> BelowMark() const {
    if (marks_.empty() || marks_.back() == 0) return std::nullopt;
    return marks_.back() - 1;
  }

  Value& At(std::size_t index) { return stack_[index]; }
  Value& Top() { return stack_.back(); }

  std::optional<std::string> Put(std::uint64_t index) {
    if (index > memo_.size()) {
      return absl::StrCat("stores memo entry ", index, " after ", memo_.size(), " entries");
    }
    if (stack_.size() == MarkFloor()) return std::string("stores an empty stack in the memo");
    stack_.back().shared = true;
    if (index == memo_.size()) {
      memo_.push_back(stack_.back());
    } else {
      memo_[index] = stack_.back();
    }
    return std::nullopt;
  }

  std::optional<std::string> Get(std::uint64_t index) {
    if (index >= memo_.size()) {
      return absl::StrCat("reads memo entry ", index, " of ", memo_.size());
    }
    return Push(memo_[index]);
  }

 private:
  // Values at or below the last MARK are not an opcode's to take (except the MARK's own).
  std::size_t MarkFloor() const { return marks_.empty() ? 0 : marks_.back(); }

  std::vector<Value> stack_;
  std::vector<std::size_t> marks_;
  std::vector<Value> memo_;
};

// A container of `elements`.
Value ContainerOf(const std::vector<Value>& elements) {
  Value container{1, false, false};
  for (const Value& element : elements) {
    container.nesting = std::max(container.nesting, element.nesting + 1);
    container.holds_shared |= element.shared || element.holds_shared;
  }
  return container;
}

// `container` given `elements` (APPENDS, SETITEMS, SETITEM).
std::optional<std::string> Fill(Value& container, const std::vector<Value>& elements) {
  if (container.shared) return std::string("changes a container the memo refers to");
  const Value filled = ContainerOf(elements);
  container.nesting = std::max(container.nesting, filled.nesting);
  container.holds_shared |= filled.holds_shared;
  if (container.nesting > kMaxPickleNesting) {
    return absl::StrCat("nests containers ", container.nesting, " deep (at most ",
                        kMaxPickleNesting, ")");
  }
  return std::nullopt;
}

// What `opcode`, one ArgumentOf accepts, does (its argument `argument`) to the stack.
std::optional<std::string> Run(StackModel& stack, unsigned char opcode, std::string_view argument) {
  switch (opcode) {
    case 0x80:  // PROTO
      return std::nullopt;
    case '(':  // MARK
      stack.Mark();
      return std::nullopt;
    case '.':  // STOP: the unpickler checks that exactly one value is left
      return stack.Need(1);
    case '}':
    case ']':
    case ')':  // EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE
      return stack.Push(Value{1, false, false});
    case 'q':
    case 'r':  // BINPUT, LONG_BINPUT
      return stack.Put(ReadLittleEndian(argument));
    case 'h':
    case 'j':  // BINGET, LONG_BINGET
      return stack.Get(ReadLittleEndian(argument));
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
      const std::size_t count = opcode - 0x84;
      if (auto missing = stack.Need(count)) return missing;
      return stack.Push(ContainerOf(stack.Pop(count)));
    }
    case 't':
    case 'l':
    case 'd': {  // TUPLE, LIST, DICT: the values above the MARK
      const auto elements = stack.PopToMark();
      if (!elements) return std::string("has no MARK to take values from");
      if (opcode == 'd' && elements->size() % 2 != 0) {
        return absl::StrCat("pairs ", elements->size(), " values");
      }
      return stack.Push(ContainerOf(*elements));
    }
    case 'e':
    case 'u': {  // APPENDS, SETITEMS: into the container below the MARK
      const std::optional<std::size_t> container = stack.BelowMark();
      if (!container) return std::string("has no container below its MARK");
      const auto elements = stack.PopToMark();
      if (opcode == 'u' && elements->size() % 2 != 0) {
        return absl::StrCat("pairs ", elements->size(), " values");
      }
      return Fill(stack.At(*container), *elements);
    }
    case 's': {  // SETITEM: dict, key, value
      if (auto missing = stack.Need(3)) return missing;
      const std::vector<Value> item = stack.Pop(2);
      return Fill(stack.Top(), item);
    }
    case 'R':
    case 'b': {  // REDUCE, BUILD: function index, argument -> result
      if (auto missing = stack.Need(2)) return missing;
      const std::vector<Value> call = stack.Pop(2);
      // The result may be (part of) the argument: as deep, shared if anything in it is.
      const Value& argument = call[1];
      return stack.Push(
          Value{argument.nesting, argument.shared || argument.holds_shared, argument.holds_shared});
    }
    case 0x81:  // NEWOBJ: drops its (empty) argument
      if (auto missing = stack.Need(1)) return missing;
      stack.Pop(1);
      return std::nullopt;
    case 'Q':  // BINPERSID: the storage's description -> a tensor
      if (auto missing = stack.Need(1)) return missing;
      stack.Pop(1);
      return stack.Push(Value{});
    // The rest push a scalar: NONE, NEWTRUE, NEWFALSE, BININT1, BININT2, BININT, BINFLOAT,
    // LONG1, BINUNICODE and GLOBAL (which pushes the index of the function it names).
    default:
      return stack.Push(Value{});
  }
}

}  // namespace

absl::Status CheckPickle(std::string_view pickle) {
  StackModel stack;
  std::size_t at = 0;
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
    std::string_view operand;
    switch (argument->kind) {
      case Argument::kFixed:
        if (argument->bytes > left) return broken("is cut short");
        operand = pickle.substr(at, argument->bytes);
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
    if (auto wrong = Run(stack, opcode, operand)) return broken(*wrong);
    if (opcode == '.') return absl::OkStatus();
  }
  return absl::DataLossError(
      absl::StrCat("pickle of ", pickle.size(), " bytes ends without its STOP opcode"));
}

std::uint64_t ReadLittleEndian(std::string_view bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  return value;
}

}  // namespace ts
