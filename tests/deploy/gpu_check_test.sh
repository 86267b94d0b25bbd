#!/usr/bin/env bash
# scripts/gpu-check up to its no-GPU exit: where no NVIDIA GPU is, it must say so in one line,
# write nothing and exit 3. Where a GPU is, this test is skipped (exit 77): the check itself runs
# there, for minutes.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "a GPU is here: run scripts/gpu-check itself"
  exit 77
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
text="$(OUT="$out/gpu-out" "$root/scripts/gpu-check" 2>&1)"
status=$?
echo "$text"
[ "$status" -eq 3 ] || { echo "FAIL: exit status $status, expected 3"; exit 1; }
[ "$(printf '%s\n' "$text" | wc -l)" -eq 1 ] || { echo "FAIL: more than one line"; exit 1; }
printf '%s' "$text" | grep -q "no NVIDIA GPU" || { echo "FAIL: does not say why"; exit 1; }
[ ! -e "$out/gpu-out" ] || { echo "FAIL: wrote $out/gpu-out"; exit 1; }
echo "OK: gpu-check exits 3 without a GPU"
