// Training and evaluation data: readers for the task formats of DESIGN.md ("Tasks and data
// formats") that turn files into byte-token examples with integer labels, the procedural ListOps
// generator, a validation split, and DataRoot, the path boundary for remote callers.
//
// Errors: a missing input is NOT_FOUND; a malformed record (bad JSON line, missing or unknown
// label, wrong TSV columns, truncated CIFAR record, unreadable file) is INVALID_ARGUMENT naming
// the file and line (the record index for CIFAR, the file path for folder entries) — unless
// `skip_malformed` is set, in which case it is dropped, counted in `skipped`, and the first
// few reasons are kept. A dataset with no usable example is INVALID_ARGUMENT.
// Torch-free; all functions are thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ts {

struct Example {
  std::string tokens;  // byte tokens (a document's bytes, grayscale pixels, a ListOps string)
  std::int64_t label = 0;
};

struct Dataset {
  std::vector<Example> examples;
  std::vector<std::string> label_names;   // label i is label_names[i]
  std::int64_t skipped = 0;               // malformed records dropped (skip_malformed)
  std::vector<std::string> skip_reasons;  // the first max_skip_reasons of them, "file:line: why"
};

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
};

// JSON Lines: one object per line with "text" (string; its bytes are the tokens) and "label"
// (string name, or integer ≥ 0 — the label index when `labels` is given). Other keys are
// ignored; blank lines are skipped; a UTF-8 BOM on the first line and CR line endings are
// tolerated. Inferred labels: one file must not mix string and integer labels (the first
// record sets the kind; a record of the other kind is malformed).
absl::StatusOr<Dataset> ReadJsonLinesDataset(const std::string& path,
                                             const DatasetReadOptions& options = {});

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

// The procedural ListOps task: `[OP arg … ]` with OP one of MIN, MAX, MED, FIRST, LAST, SM (sum
// mod 10), arguments digits 0-9 or nested expressions, rendered like LRA without its
// parentheses (`[MAX 4 3 [MIN 2 3 ] 1 0 ]`), bracket nesting ≤ 10, 2-6 arguments per operator.
struct ListOpsGeneratorOptions {
  std::int64_t count = 1000;       // examples; 0 ≤ count ≤ 10,000,000
  std::int64_t min_length = 500;   // characters, ≥ 1
  std::int64_t max_length = 2000;  // characters, ≥ max(min_length, 10) and ≤ 1,000,000
  std::uint64_t seed = 1;          // same seed (and options) → the same examples on any platform
};

// INVALID_ARGUMENT naming the option for out-of-range options.
absl::StatusOr<Dataset> GenerateListOpsDataset(const ListOpsGeneratorOptions& options);

// The value (0-9) of a ListOps expression: whitespace-separated tokens `[OP`, `]` and digits;
// LRA's `(` and `)` tokens are ignored. MED of an even number of arguments is the lower median
// (the smaller of the two middle values; LRA's int(np.median) can differ). INVALID_ARGUMENT for
// an unknown token, an operator without arguments, unbalanced brackets or trailing tokens.
absl::StatusOr<int> EvaluateListOps(std::string_view expression);

// Bracket nesting depth of a ListOps expression (a bare digit is 0).
int ListOpsDepth(std::string_view expression);

struct DatasetSplit {
  std::vector<Example> train;
  std::vector<Example> validation;
};

// Holds out round(fraction · n) examples (at least 1, leaving at least 1) chosen by a seeded
// shuffle; both parts keep the input order. INVALID_ARGUMENT unless 0 < fraction < 1 and n ≥ 2.
absl::StatusOr<DatasetSplit> SplitDataset(std::vector<Example> examples, double fraction,
                                          std::uint64_t seed);

// Uniform integer in [lo, hi] from a 64-bit engine, by rejection — unlike
// std::uniform_int_distribution, the same on every standard library.
std::int64_t UniformInt(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi);

// DataRoot: resolves user-given relative data paths inside one directory — the security boundary
// for remote callers, who must never read other files. Resolve() refuses empty and absolute
// paths and any `..` component (INVALID_ARGUMENT), and paths that leave the root through a
// symlink (PERMISSION_DENIED); it returns the path with symlinks resolved, so opening it does
// not follow a link again (a link swapped in afterwards by someone with write access to the root
// is outside this boundary). The path need not exist. Immutable and thread-safe.
class DataRoot {
 public:
  // The root must be an existing directory; it is canonicalised (symlinks resolved).
  static absl::StatusOr<DataRoot> Create(const std::string& root);

  absl::StatusOr<std::string> Resolve(std::string_view relative) const;

  const std::string& root() const { return root_; }

 private:
  explicit DataRoot(std::string root) : root_(std::move(root)) {}
  std::string root_;
};

}  // namespace ts
