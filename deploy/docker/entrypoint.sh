#!/bin/sh
# Entrypoint of the tsserver images: starts tsserver with the given arguments (the image's
# CMD is "--config /etc/taylorshift/tsserver.yaml").
#
# The images ship the trained demo model at TS_DEMO_CHECKPOINT. Only when that file is missing
# (a volume mounted over its folder without it) is an UNTRAINED model with random weights
# (fixed seed, so every replica gets the same one) written there first, as scripts/run does:
# its answers are meaningless, but the whole API and the dashboards work, and the log says so.
# Set TS_DEMO_CHECKPOINT to "" to fail instead when a configured checkpoint is missing.
set -eu
demo="${TS_DEMO_CHECKPOINT:-}"
if [ -n "$demo" ] && [ ! -f "$demo" ]; then
  echo "entrypoint: $demo is missing (is a volume hiding the image's trained demo model?);" \
    "creating an UNTRAINED model (random weights) in its place" >&2
  mkdir -p "$(dirname "$demo")"
  tsmodel init --out "$demo" --labels 0,1,2,3,4,5,6,7,8,9 \
    --embed-dim 64 --depth 2 --heads 8 --mlp-ratio 2 --max-length 2048 --seed 1 >&2
fi
exec tsserver "$@"
