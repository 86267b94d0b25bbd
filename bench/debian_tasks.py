#!/usr/bin/python3
"""Builds real byte-level classification tasks from files every Debian machine has.

Usage: /usr/bin/python3 bench/debian_tasks.py TASK OUT_DIR [--train N] [--validation N]
       [--test N] [--seed S] [--min-bytes 1024] [--max-bytes 2048]

Writes OUT_DIR/{train,validation,test}.jsonl ({"text": ..., "label": ...} per line, the format a
training job reads) and OUT_DIR/task.json (the task, its classes, the files each split drew
from). Classes are balanced; each example is a window of min..max bytes of one file, and the
splits draw from disjoint files, so no file is seen in training and in testing.

Tasks:
  man-section   which section of the manual a man page belongs to: 1 (user commands),
                3 (library calls), 5 (file formats), 8 (administration); the uncompressed
                troff source of /usr/share/man/man{1,3,5,8}/*.gz (English pages only).
  source-lang   which language a source file is written in: C/C++ headers (/usr/include),
                Python (/usr/lib/python3*), Perl (/usr/share/perl*, /usr/lib/*/perl*), shell
                (scripts whose first line is a /bin/sh or /bin/bash shebang, under /usr).

Text is kept as bytes (decoded as Latin-1 so that every byte survives the JSON round trip;
a training job reads the string's UTF-8 encoding, so non-ASCII bytes become two tokens —
these files are nearly all ASCII).
"""
import argparse
import glob
import gzip
import json
import os
import random
import sys

SPLITS = ("train", "validation", "test")


def man_section_sources():
    classes = {}
    for section in ("1", "3", "5", "8"):
        files = sorted(glob.glob(f"/usr/share/man/man{section}/*.gz"))
        classes[section] = files
    return classes


def read_man(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    # A ".so other-page" stub is a link, not a page.
    if data.startswith(b".so ") and len(data) < 200:
        return b""
    return data


def is_shell_script(path):
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    first = head.split(b"\n", 1)[0]
    return first.startswith(b"#!") and (first.endswith(b"/sh") or first.endswith(b"/bash") or
                                         b"/sh " in first or b"/bash " in first)


def source_lang_sources():
    def walk(patterns, suffixes):
        out = set()
        for pattern in patterns:
            for root in glob.glob(pattern):
                for dirpath, _, names in os.walk(root):
                    for name in names:
                        if any(name.endswith(s) for s in suffixes):
                            path = os.path.join(dirpath, name)
                            if os.path.isfile(path) and not os.path.islink(path):
                                out.add(path)
        return sorted(out)

    shell = set()
    for root in ("/usr/bin", "/usr/sbin", "/usr/share", "/usr/lib"):
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = os.path.join(dirpath, name)
                if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) > 0:
                    if name.endswith(".sh") or "." not in name:
                        if is_shell_script(path):
                            shell.add(path)
    return {
        "c-header": walk(["/usr/include"], [".h"]),
        "python": walk(["/usr/lib/python3", "/usr/lib/python3.*"], [".py"]),
        "perl": walk(["/usr/share/perl", "/usr/share/perl5", "/usr/lib/x86_64-linux-gnu/perl*",
                      "/usr/lib/x86_64-linux-gnu/perl-base"], [".pm", ".pl"]),
        "shell": sorted(shell),
    }


def read_plain(path):
    with open(path, "rb") as f:
        return f.read()


TASKS = {
    "man-section": (man_section_sources, read_man),
    "source-lang": (source_lang_sources, read_plain),
}


def window(data, rng, min_bytes, max_bytes):
    size = rng.randint(min_bytes, max_bytes)
    if len(data) <= size:
        return data
    start = rng.randrange(0, len(data) - size + 1)
    return data[start:start + size]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("out_dir")
    parser.add_argument("--train", type=int, default=1600)
    parser.add_argument("--validation", type=int, default=400)
    parser.add_argument("--test", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=2048)
    args = parser.parse_args()

    sources, read = TASKS[args.task]
    classes = sources()
    rng = random.Random(args.seed)
    counts = {"train": args.train, "validation": args.validation, "test": args.test}
    for label, files in classes.items():
        if len(files) < 3:
            sys.exit(f"{args.task}: class {label} has only {len(files)} files on this machine")
    # Files split 70/15/15 per class; windows are then drawn from each split's own files.
    per_split_files = {s: {} for s in SPLITS}
    for label, files in classes.items():
        files = list(files)
        rng.shuffle(files)
        n = len(files)
        a, b = int(n * 0.7), int(n * 0.85)
        per_split_files["train"][label] = files[:a]
        per_split_files["validation"][label] = files[a:b]
        per_split_files["test"][label] = files[b:]
    os.makedirs(args.out_dir, exist_ok=True)
    labels = sorted(classes)
    used = {s: {} for s in SPLITS}
    for split in SPLITS:
        examples = []
        per_class = counts[split] // len(labels)
        for label in labels:
            files = per_split_files[split][label]
            taken = 0
            attempts = 0
            while taken < per_class:
                attempts += 1
                if attempts > per_class * 50:
                    sys.exit(f"{args.task}: too few readable {label} files for {split}")
                path = files[rng.randrange(len(files))]
                try:
                    data = read(path)
                except (OSError, EOFError):
                    continue
                if len(data) < args.min_bytes // 2:
                    continue
                text = window(data, rng, args.min_bytes, args.max_bytes)
                examples.append({"text": text.decode("latin-1"), "label": label})
                used[split][path] = used[split].get(path, 0) + 1
                taken += 1
        rng.shuffle(examples)
        with open(os.path.join(args.out_dir, f"{split}.jsonl"), "w") as f:
            for e in examples:
                f.write(json.dumps(e) + "\n")
    with open(os.path.join(args.out_dir, "task.json"), "w") as f:
        json.dump({"task": args.task, "labels": labels, "seed": args.seed,
                   "counts": counts,
                   "files": {s: len(used[s]) for s in SPLITS},
                   "available_files": {l: len(v) for l, v in classes.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
