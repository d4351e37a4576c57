#!/usr/bin/env bash
# Per-stage latency of the reference VLA on this machine: pi05:small at 1 and 2 views, then one pi05:full
# inference (slow on CPU) with its peak resident memory.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/bench}
mkdir -p "$out"
for views in 1 2; do
  .venv/bin/hotloop bench pi05:small --views "$views" --warmup 3 --iters 30 --quiet --json "$out/pi05_small_v$views.json"
done
/usr/bin/time -v .venv/bin/hotloop bench pi05:full --warmup 0 --iters 1 --quiet --dtype bfloat16 \
  --json "$out/pi05_full_bf16.json" 2> "$out/pi05_full_time.txt"
grep "Maximum resident" "$out/pi05_full_time.txt"
