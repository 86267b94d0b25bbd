#include "model/checkpoints/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/storage_context.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/atomic_file.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "model/checkpoints/pickle_check.h"
#include "model/torch_compat.h"
#include "model/torch_status.h"

namespace ts {
namespace {

constexpr std::array<char, 8> kMagic = {'T', 'S', 'C', 'K', 'P', 'T', '\0', '\1'};
constexpr std::size_t kHeaderBytes = kMagic.size() + sizeof(std::uint32_t) + sizeof(std::uint64_t);
constexpr std::size_t kTrailerBytes = sizeof(std::uint32_t);

void AppendLittleEndian(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// The entries of a pickled Dict[str, T] as a std::map.
absl::StatusOr<std::map<std::string, c10::IValue>> StringKeyedDict(const c10::IValue& value,
                                                                   absl::string_view what) {
  if (!value.isGenericDict()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be a dict, got ", value.tagKind()));
  }
  std::map<std::string, c10::IValue> entries;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has a non-string key"));
    }
    entries.emplace(entry.key().toStringRef(), entry.value());
  }
  return entries;
}

absl::StatusOr<c10::IValue> Require(const std::map<std::string, c10::IValue>& dict,
                                    const std::string& key, absl::string_view what) {
  const auto it = dict.find(key);
  if (it == dict.end()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has no '", key, "' entry"));
  }
  return it->second;
}

c10::IValue EncodePayload(const TaylorShiftEncoderOptions& options,
                          const CheckpointMetadata& metadata,
                          const std::map<std::string, torch::Tensor>& state) {
  c10::impl::GenericDict architecture(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [name, value] : EncoderOptionsToFields(options)) {
    std::visit([&, &field = name](
                   const auto& v) { architecture.insert(c10::IValue(field), c10::IValue(v)); },
               value);
  }
  c10::Dict<std::string, std::string> provenance;
  for (const auto& [key, value] : metadata.provenance) provenance.insert(key, value);
  c10::impl::GenericDict meta(c10::StringType::get(), c10::AnyType::get());
  meta.insert(c10::IValue("modality"), c10::IValue(metadata.modality));
  meta.insert(c10::IValue("labels"), c10::IValue(metadata.labels));
  meta.insert(c10::IValue("provenance"), c10::IValue(provenance));
  c10::Dict<std::string, torch::Tensor> tensors;
  for (const auto& [name, tensor] : state) tensors.insert(name, tensor);
  c10::impl::GenericDict payload(c10::StringType::get(), c10::AnyType::get());
  payload.insert(c10::IValue("architecture"), c10::IValue(architecture));
  payload.insert(c10::IValue("metadata"), c10::IValue(meta));
  payload.insert(c10::IValue("state"), c10::IValue(tensors));
  return payload;
}

absl::StatusOr<TaylorShiftEncoderOptions> DecodeArchitecture(const c10::IValue& value) {
  TS_ASSIGN_OR_RETURN(const auto entries, StringKeyedDict(value, "checkpoint architecture"));
  EncoderOptionFields fields;
  for (const auto& [name, field] : entries) {
    if (field.isBool()) {
      fields.emplace_back(name, field.toBool());
    } else if (field.isInt()) {
      fields.emplace_back(name, field.toInt());
    } else if (field.isDouble()) {
      fields.emplace_back(name, field.toDouble());
    } else {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint architecture field '", name,
                                                     "' has unsupported type ", field.tagKind()));
    }
  }
  return EncoderOptionsFromFields(fields);
}

absl::StatusOr<CheckpointMetadata> DecodeMetadata(const c10::IValue& value) {
  TS_ASSIGN_OR_RETURN(const auto entries, StringKeyedDict(value, "checkpoint metadata"));
  CheckpointMetadata metadata;
  TS_ASSIGN_OR_RETURN(const auto modality, Require(entries, "modality", "checkpoint metadata"));
  if (!modality.isString()) {
    return absl::InvalidArgumentError("checkpoint metadata 'modality' must be a string");
  }
  metadata.modality = modality.toStringRef();
  TS_ASSIGN_OR_RETURN(const auto labels, Require(entries, "labels", "checkpoint metadata"));
  const auto is_string = [](const c10::IValue& label) { return label.isString(); };
  if (!labels.isList() || !absl::c_all_of(labels.toListRef(), is_string)) {
    return absl::InvalidArgumentError("checkpoint metadata 'labels' must be a list of strings");
  }
  for (const auto& label : labels.toListRef()) metadata.labels.push_back(label.toStringRef());
  TS_ASSIGN_OR_RETURN(const auto provenance_value,
                      Require(entries, "provenance", "checkpoint metadata"));
  TS_ASSIGN_OR_RETURN(const auto provenance,
                      StringKeyedDict(provenance_value, "checkpoint provenance"));
  for (const auto& [key, text] : provenance) {
    if (!text.isString()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint provenance '", key, "' must be a string"));
    }
    metadata.provenance.emplace(key, text.toStringRef());
  }
  return metadata;
}

// The payload, in memory, as LibTorch's archive reader reads a file.
class PayloadReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit PayloadReadAdapter(std::string_view payload) : payload_(payload) {}

  std::size_t size() const override { return payload_.size(); }

  std::size_t read(std::uint64_t pos, void* buf, std::size_t n,
                   const char* /*what*/) const override {
    if (pos >= payload_.size()) return 0;
    n = std::min<std::size_t>(n, payload_.size() - pos);
    std::memcpy(buf, payload_.data() + pos, n);
    return n;
  }

 private:
  std::string_view payload_;
};

// What torch::pickle_load does (the archive's data.pkl, its tensors from data/KEY), with two
// checks LibTorch lacks: the pickle is checked first (CheckPickle: lengths, memo indexes, the
// values each opcode takes from the stack, nesting), and every tensor record is read into a
// storage of the record's own size before the unpickler runs (it sizes a storage by the element
// count the pickle states, not by the bytes of the record, so a pickle that claimed more elements
// than its record held gave a tensor over the memory past the record's buffer). Tensors stay on
// the CPU whatever device the pickle names. What LibTorch throws comes back as INTERNAL, prefixed
// with `context`.
absl::StatusOr<c10::IValue> UnpicklePayload(std::string_view payload, const std::string& context) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
  TS_ASSIGN_OR_RETURN(const std::string pickle, CatchTorch(context, [&] {
                        reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(
                            std::make_shared<PayloadReadAdapter>(payload));
                        constexpr std::string_view kTensorFolder = "data/";
                        for (const std::string& record : reader->getAllRecords()) {
                          if (record.compare(0, kTensorFolder.size(), kTensorFolder) != 0) {
                            continue;
                          }
                          auto [data, bytes] = reader->getRecord(record);
                          storages->addStorage(record.substr(kTensorFolder.size()),
                                               c10::Storage(c10::Storage::use_byte_size_t(), bytes,
                                                            std::move(data), /*allocator=*/nullptr,
                                                            /*resizable=*/false));
                        }
                        const auto [data, bytes] = reader->getRecord("data.pkl");
                        return std::string(static_cast<const char*>(data.get()), bytes);
                      }));
  if (auto checked = CheckPickle(pickle); !checked.ok()) {
    return absl::InternalError(absl::StrCat(context, ": ", checked.message()));
  }
  return CatchTorch(context, [&] {
    return torch::jit::readArchiveAndTensors(
        "data", /*pickle_prefix=*/"", /*tensor_prefix=*/"", /*type_resolver=*/{},
        /*obj_loader=*/{}, /*device=*/torch::Device(torch::kCPU), *reader,
        torch::jit::Unpickler::defaultTypeParser, storages);
  });
}

// A state tensor as SaveCheckpoint writes it: contiguous, inside its storage, which no other
// entry shares. LibTorch's unpickler takes sizes, strides and offset from the pickle without
// checking them against the storage (1.13), so a tensor could reach past its record's bytes;
// checked here, with UnpicklePayload's record-sized storages, the state's elements are at most
// the payload's bytes, before anything reads them.
absl::Status CheckStateTensor(const std::string& name, const torch::Tensor& tensor,
                              std::set<const void*>& storages) {
  const auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("checkpoint state '", name, "' ", c10::str(tensor.sizes()), " ", what));
  };
  if (!tensor.defined() || !tensor.has_storage()) return corrupt("has no storage");
  std::int64_t elements = 1;
  for (const std::int64_t size : tensor.sizes()) {
    if (size < 0 || (size > 0 && elements > std::numeric_limits<std::int64_t>::max() / size)) {
      return corrupt("has more elements than an int64 counts");
    }
    elements *= size;
  }
  if (!tensor.is_contiguous()) return corrupt("is not contiguous");
  const std::int64_t offset = tensor.storage_offset();
  const auto item = static_cast<std::int64_t>(tensor.element_size());
  const auto storage_bytes = static_cast<std::int64_t>(tensor.storage().nbytes());
  if (offset < 0 || elements > storage_bytes / item || offset > storage_bytes / item - elements) {
    return corrupt(absl::StrCat("needs ", elements, " elements of ", item, " bytes from offset ",
                                offset, ", its storage holds ", storage_bytes, " bytes"));
  }
  if (elements > 0 && !storages.insert(tensor.storage().unsafeGetStorageImpl()).second) {
    return corrupt("shares its storage with another entry");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, torch::Tensor>> DecodeState(const c10::IValue& value) {
  TS_ASSIGN_OR_RETURN(const auto entries, StringKeyedDict(value, "checkpoint state"));
  std::map<std::string, torch::Tensor> state;
  std::set<const void*> storages;
  for (const auto& [name, tensor] : entries) {
    if (!tensor.isTensor()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint state '", name, "' is not a tensor"));
    }
    TS_RETURN_IF_ERROR(CheckStateTensor(name, tensor.toTensor(), storages));
    state.emplace(name, tensor.toTensor());
  }
  return state;
}

// The weights the state holds, against what the architecture needs at least, before the model is
// built: a small file that claims a large architecture is refused without allocating it.
absl::Status CheckStateCanFillModel(const TaylorShiftEncoderOptions& options,
                                    const std::map<std::string, torch::Tensor>& state) {
  std::int64_t held = 0;
  for (const auto& [name, tensor] : state) held += tensor.numel();
  const std::int64_t needed = MinimumEncoderStateElements(options);
  if (held < needed) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint architecture (", DescribeEncoderOptions(options),
                     ") needs at least ", needed, " weights, the state holds ", held));
  }
  return absl::OkStatus();
}

// The fields that determine parameter shapes must agree between `options` and the model.
absl::Status CheckOptionsDescribeModel(const TaylorShiftEncoderOptions& options,
                                       const TaylorShiftEncoderOptions& model) {
  const auto given = EncoderOptionsToFields(options);
  const auto actual = EncoderOptionsToFields(model);
  for (std::size_t i = 0; i < given.size(); ++i) {
    static constexpr absl::string_view kShapeFields[] = {
        "vocab_size", "embed_dim",   "depth",    "heads",      "mlp_hidden",
        "max_length", "num_classes", "qkv_bias", "conv_embed", "input_normalize"};
    if (absl::c_linear_search(kShapeFields, given[i].first) &&
        given[i].second != actual[i].second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "options do not describe the model: ", given[i].first, " differs (options: ",
          DescribeEncoderOptions(options), "; model: ", DescribeEncoderOptions(model), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string CheckpointVersion(std::string_view file_bytes) {
  const std::size_t covered =
      file_bytes.size() >= kTrailerBytes ? file_bytes.size() - kTrailerBytes : file_bytes.size();
  return absl::StrFormat("%08x", Crc32(file_bytes.data(), covered));
}

std::uint32_t Crc32(const void* data, std::size_t size) {
  // crc32_z takes a size_t length, so a payload over 4 GiB needs no chunking.
  return static_cast<std::uint32_t>(
      crc32_z(crc32_z(0L, Z_NULL, 0), static_cast<const Bytef*>(data), size));
}

absl::Status ValidateCheckpointMetadata(const CheckpointMetadata& metadata,
                                        std::int64_t num_classes) {
  if (metadata.modality != "bytes" && metadata.modality != "pixels") {
    return absl::InvalidArgumentError(
        absl::StrCat("modality must be 'bytes' or 'pixels', got '", metadata.modality, "'"));
  }
  if (static_cast<std::int64_t>(metadata.labels.size()) != num_classes) {
    return absl::InvalidArgumentError(absl::StrCat("the model has ", num_classes, " classes but ",
                                                   metadata.labels.size(), " labels were given"));
  }
  return absl::OkStatus();
}

// The model's parameters and buffers by name, the model's own tensors.
std::map<std::string, torch::Tensor> NamedTensors(TaylorShiftEncoder& model) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model->named_parameters(/*recurse=*/true)) tensors.emplace(item.pair());
  for (const auto& item : model->named_buffers(/*recurse=*/true)) tensors.emplace(item.pair());
  return tensors;
}

std::map<std::string, torch::Tensor> StateDict(TaylorShiftEncoder& model) {
  std::map<std::string, torch::Tensor> state = NamedTensors(model);
  for (auto& [name, tensor] : state) tensor = tensor.detach().cpu().contiguous();
  return state;
}

absl::Status LoadStateDict(const std::map<std::string, torch::Tensor>& state,
                           TaylorShiftEncoder& model) {
  const std::map<std::string, torch::Tensor> expected = NamedTensors(model);

  std::vector<std::string> missing;
  std::vector<std::string> unexpected;
  for (const auto& [name, tensor] : expected) {
    if (state.count(name) == 0) {
      missing.push_back(absl::StrCat(name, " ", c10::str(tensor.sizes())));
    }
  }
  for (const auto& [name, tensor] : state) {
    if (expected.count(name) == 0) unexpected.push_back(name);
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("state dict is missing ", absl::StrJoin(missing, ", ")));
  }
  if (!unexpected.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("state dict has unexpected keys ", absl::StrJoin(unexpected, ", ")));
  }
  std::optional<std::pair<std::string, c10::ScalarType>> dtype;
  for (const auto& [name, tensor] : state) {
    const auto& target = expected.at(name);
    if (!tensor.defined()) {
      return absl::InvalidArgumentError(absl::StrCat("state dict entry ", name, " is undefined"));
    }
    if (tensor.sizes() != target.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat("state dict entry ", name, " has shape ",
                                                     c10::str(tensor.sizes()), ", expected ",
                                                     c10::str(target.sizes())));
    }
    if (!tensor.is_floating_point()) {
      return absl::InvalidArgumentError(absl::StrCat("state dict entry ", name, " has dtype ",
                                                     c10::toString(tensor.scalar_type()),
                                                     ", expected a floating-point dtype"));
    }
    if (!dtype) {
      dtype.emplace(name, tensor.scalar_type());
    } else if (dtype->second != tensor.scalar_type()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state dict entry ", name, " has dtype ", c10::toString(tensor.scalar_type()),
          ", expected ", c10::toString(dtype->second), " (the dtype of ", dtype->first, ")"));
    }
  }
  return CatchTorch("loading state dict", [&] {
    torch::NoGradGuard no_grad;
    if (dtype) model->to(dtype->second);
    for (auto& [name, tensor] : NamedTensors(model)) tensor.copy_(state.at(name));
  });
}

absl::Status SaveCheckpoint(const std::string& path, const TaylorShiftEncoderOptions& options,
                            const CheckpointMetadata& metadata, TaylorShiftEncoder& model) {
  if (model.is_empty()) return absl::InvalidArgumentError("SaveCheckpoint: model is null");
  TS_RETURN_IF_ERROR(ValidateEncoderOptions(options));
  TS_RETURN_IF_ERROR(CheckOptionsDescribeModel(options, model->options()));
  TS_RETURN_IF_ERROR(ValidateCheckpointMetadata(metadata, options.num_classes()));
  CheckpointMetadata stamped = metadata;
  stamped.provenance.try_emplace(
      "created_at", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()));
  stamped.provenance.try_emplace("libtorch_version", compat::TorchVersion());

  TS_ASSIGN_OR_RETURN(
      const auto payload, CatchTorch("saving checkpoint", [&] {
        return torch::pickle_save(EncodePayload(options, stamped, StateDict(model)));
      }));

  std::string file(kMagic.begin(), kMagic.end());
  file.reserve(kHeaderBytes + payload.size() + kTrailerBytes);
  AppendLittleEndian(file, kCheckpointFormatVersion, 4);
  AppendLittleEndian(file, payload.size(), 8);
  file.append(payload.begin(), payload.end());
  AppendLittleEndian(file, Crc32(payload.data(), payload.size()), 4);
  return WriteFileAtomically(path, file);
}

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path, torch::Device device) {
  TS_ASSIGN_OR_RETURN(const std::string file, ReadFile(path, "checkpoint"));
  return ParseCheckpoint(file, path, device);
}

absl::StatusOr<LoadedCheckpoint> ParseCheckpoint(std::string_view file, const std::string& name,
                                                 torch::Device device) {
  if (file.size() < kMagic.size() || !std::equal(kMagic.begin(), kMagic.end(), file.begin())) {
    return absl::DataLossError(absl::StrCat(name, " is not a TaylorShift checkpoint (bad magic)"));
  }
  if (file.size() < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(name, " is truncated: ", file.size(),
                                            " bytes, shorter than the ", kHeaderBytes,
                                            "-byte header"));
  }
  const auto version = static_cast<std::uint32_t>(ReadLittleEndian({file.data() + 8, 4}));
  if (version != kCheckpointFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has checkpoint format version ", version,
                                                   "; this build reads version ",
                                                   kCheckpointFormatVersion));
  }
  const std::uint64_t payload_bytes = ReadLittleEndian({file.data() + 12, 8});
  const std::uint64_t available = file.size() - kHeaderBytes;
  if (available < kTrailerBytes || payload_bytes > available - kTrailerBytes) {
    return absl::DataLossError(absl::StrCat(name, " is truncated: header promises ", payload_bytes,
                                            " payload bytes + 4 CRC bytes, ", available,
                                            " bytes follow the header"));
  }
  if (payload_bytes != available - kTrailerBytes) {
    return absl::DataLossError(absl::StrCat(
        name, " has ", available - kTrailerBytes - payload_bytes, " unexpected trailing bytes"));
  }
  const char* payload = file.data() + kHeaderBytes;
  const auto stored_crc =
      static_cast<std::uint32_t>(ReadLittleEndian({payload + payload_bytes, 4}));
  const std::uint32_t actual_crc = Crc32(payload, payload_bytes);
  if (stored_crc != actual_crc) {
    return absl::DataLossError(
        absl::StrFormat("%s is corrupted: CRC-32 of the payload is %08x, the file says %08x", name,
                        actual_crc, stored_crc));
  }

  auto unpickled =
      UnpicklePayload(std::string_view(payload, payload_bytes), absl::StrCat("unpickling ", name));
  // A payload that matches its CRC but does not unpickle was written corrupt (or crafted): the
  // file's content is lost, as with a failed CRC. Out of memory stays RESOURCE_EXHAUSTED.
  if (!unpickled.ok() && unpickled.status().code() == absl::StatusCode::kInternal) {
    return absl::DataLossError(absl::StrCat(name, " is corrupted: its payload passed the CRC but ",
                                            unpickled.status().message()));
  }
  TS_ASSIGN_OR_RETURN(const auto root_value, std::move(unpickled));
  TS_ASSIGN_OR_RETURN(const auto root, StringKeyedDict(root_value, "checkpoint payload"));
  TS_ASSIGN_OR_RETURN(const auto architecture_value,
                      Require(root, "architecture", "checkpoint payload"));
  TS_ASSIGN_OR_RETURN(const auto metadata_value, Require(root, "metadata", "checkpoint payload"));
  TS_ASSIGN_OR_RETURN(const auto state_value, Require(root, "state", "checkpoint payload"));

  TS_ASSIGN_OR_RETURN(const auto options, DecodeArchitecture(architecture_value));
  TS_ASSIGN_OR_RETURN(auto metadata, DecodeMetadata(metadata_value));
  metadata.format_version = static_cast<int>(version);
  TS_RETURN_IF_ERROR(ValidateCheckpointMetadata(metadata, options.num_classes()));
  auto decoded_state = DecodeState(state_value);
  if (!decoded_state.ok() && decoded_state.status().code() == absl::StatusCode::kDataLoss) {
    return absl::DataLossError(
        absl::StrCat(name, " is corrupted: ", decoded_state.status().message()));
  }
  TS_ASSIGN_OR_RETURN(const auto state, std::move(decoded_state));
  TS_RETURN_IF_ERROR(CheckStateCanFillModel(options, state));

  TS_ASSIGN_OR_RETURN(auto model,
                      CatchTorch("building model", [&] { return TaylorShiftEncoder(options); }));
  TS_RETURN_IF_ERROR(Prefixed(LoadStateDict(state, model), name + ": "));
  TS_RETURN_IF_ERROR(CatchTorch("moving model to device", [&] {
    model->to(device);
    model->eval();
  }));
  return LoadedCheckpoint{options, std::move(metadata), std::move(model)};
}

}  // namespace ts
