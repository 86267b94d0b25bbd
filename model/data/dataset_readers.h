// Readers for the task formats of docs/MODEL.md ("Data sets"): JSON Lines, a folder per class,
// LRA ListOps TSV and CIFAR-10 binary batches, each turned into a Dataset (model/data/dataset.h).
//
// Errors: a missing input is NOT_FOUND; a malformed record (bad JSON line, missing or unknown
// label, wrong TSV columns, truncated CIFAR record, unreadable file) is INVALID_ARGUMENT naming
// the file and line (the record index for CIFAR, the file path for folder entries) — unless
// `skip_malformed` is set, in which case it is dropped, counted in `skipped`, and the first
// few reasons are kept. A dataset with no usable example is INVALID_ARGUMENT. A read that
// `stop_requested` stops is ABORTED ("stopped while reading PATH after N examples").
// Torch-free; all functions are thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/data/dataset.h"

namespace ts {

struct DatasetReadOptions {
  // Drop malformed records (and count them) instead of failing on the first one.
  bool skip_malformed = false;
  // How many skip reasons Dataset::skip_reasons keeps.
  std::int64_t max_skip_reasons = 5;
  // The label names, in label order. Empty (default) = inferred from the data: for JSON Lines
  // the distinct string labels sorted bytewise, or "0".."max" for integer labels; for folders
  // every class folder sorted by name. When given (e.g. the training set's names for its
  // validation set): JSON Lines string labels must be one of them and integer labels index
  // them; a folder dataset reads only these class folders (so aclImdb's `unsup/` is left out
  // with labels [neg, pos]). ListOps ("0".."9") and CIFAR-10 (its ten class names) ignore it.
  std::vector<std::string> labels;
  // When non-empty (normally DataRoot::root()), every file a folder dataset reaches through a
  // symlink must resolve inside this directory; PERMISSION_DENIED otherwise.
  std::string confine_to;
  // Asked before each record (each file of a folder dataset); see StopRequested.
  StopRequested stop_requested;
};

// JSON Lines: one object per line with "text" (string; its bytes are the tokens) and "label"
// (string name, or integer ≥ 0 — the label index when `labels` is given). Other keys are
// ignored; blank lines are skipped; a UTF-8 BOM on the first line and CR line endings are
// tolerated. Inferred labels: one file must not mix string and integer labels (the first
// record sets the kind; a record of the other kind is malformed).
absl::StatusOr<Dataset> ReadJsonLinesDataset(const std::string& path,
                                             const DatasetReadOptions& options = {});

// The labels of a JSON Lines file's first records, for a check before anything reads the whole
// file (a job's submission): at most `max_bytes` of the file are read, and only whole lines of
// them. Each record's "label" is taken as ReadJsonLinesDataset takes it; a record that is not a
// JSON object with a string or non-negative integer "label" is passed over (the reader judges
// it). NOT_FOUND / PERMISSION_DENIED as the readers when the file cannot be opened.
struct JsonLinesLabelScan {
  // The distinct labels read, in the order first seen (integers in decimal), at most
  // kMaxScannedLabels of them.
  std::vector<std::string> labels;
  bool more_labels = false;  // more distinct labels than that were seen
  // The first record whose label is not one of `known` (a string not among them, an integer
  // not below their count): its line number (from 1) and label; 0 and "" when there is none.
  std::int64_t unknown_line = 0;
  std::string unknown_label;
  bool complete = false;  // the whole file was read (it is at most max_bytes)
};
inline constexpr std::size_t kMaxScannedLabels = 1000;
absl::StatusOr<JsonLinesLabelScan> ScanJsonLinesLabels(const std::string& path,
                                                       const std::vector<std::string>& known,
                                                       std::int64_t max_bytes);

// Folder per class (the aclImdb layout): `root/<class>/*.txt`, each file's bytes one example.
// Classes are the sub-folders (hidden ones excluded) sorted by name; files are read in name
// order. Entries that are not `*.txt` are ignored; a `*.txt` that is not a readable regular file
// or is empty is malformed.
absl::StatusOr<Dataset> ReadFolderDataset(const std::string& root,
                                          const DatasetReadOptions& options = {});

// LRA ListOps TSV: a `Source\tTarget` header line, then `<expression>\t<digit>` rows. The
// source's bytes are the tokens (as LRA writes them, parentheses included); labels "0".."9".
absl::StatusOr<Dataset> ReadListOpsTsvDataset(const std::string& path,
                                              const DatasetReadOptions& options = {});

// One CIFAR-10 binary batch: 3073-byte records (label byte 0-9, then the 32x32 image as 1024 R,
// 1024 G, 1024 B — planar) → 1024 grayscale tokens with ImageToTokens' conversion. Labels are
// the CIFAR-10 class names (airplane … truck). A trailing partial record is malformed.
absl::StatusOr<Dataset> ReadCifar10Dataset(const std::string& path,
                                           const DatasetReadOptions& options = {});
// The CIFAR-10 class names in label order (airplane … truck): a CIFAR-10 dataset's label_names.
std::vector<std::string> Cifar10LabelNames();

}  // namespace ts
