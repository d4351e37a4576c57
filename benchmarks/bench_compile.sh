#!/usr/bin/env bash
# The compile targets of issue 8, measured on a quiet machine: pi05:small planned under a 100 ms budget
# (reference and plan timed interleaved inside `hotloop compile`), then the artifact benched against the
# fp32 eager reference, profiled, and the compiled demo policy evaluated in closed loop beside the reference.
# Usage: benchmarks/bench_compile.sh [OUT_DIR] [BACKENDS] [EPISODES]
#   BACKENDS defaults to eager,onnxruntime,openvino (add inductor: minutes of compile per candidate).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/compile}
backends=${2:-eager,onnxruntime,openvino}
episodes=${3:-100}
hl=.venv/bin/hotloop
mkdir -p "$out"
# Exit code 3 = budget not met (the best plan is still written): keep going and report it.
$hl compile pi05:small --budget-ms 100 --tolerance cos:0.995 --backends "$backends" --iters 30 \
  -o "$out/pi05-small" --json "$out/compile-pi05-small.json" || [ $? -eq 3 ]
$hl bench "$out/pi05-small" --compare pi05:small --iters 200 --json "$out/bench-pi05-small.json"
# The mixed plan (static int8 where it measures faster, calibrated on recorded episodes): docs/compile.md.
$hl record --task conveyor-pick --episodes 8 -o "$out/calib" --quiet
$hl compile pi05:small --budget-ms 100 --tolerance cos:0.995 --backends openvino --precisions bf16,int8 \
  --calibration "$out/calib" --calibration-frames 64 --variants plain --views 1 --threads 2 --iters 20 \
  -o "$out/pi05-small-int8" --json "$out/compile-pi05-small-int8.json" || [ $? -eq 3 ]
$hl bench "$out/pi05-small-int8" --compare pi05:small --prompt-tokens 20 --threads 2 --iters 60 \
  --json "$out/bench-pi05-small-int8.json"
$hl profile "$out/pi05-small" --top 10 --json "$out/profile-pi05-small.json"
$hl compile demo:conveyor --budget-ms 100 --backends "$backends" -o "$out/demo" \
  --json "$out/compile-demo.json" || [ $? -eq 3 ]
$hl eval "$out/demo" --episodes "$episodes" --latency fixed:0 --json "$out/eval-demo-compiled.json"
$hl eval demo:conveyor --episodes "$episodes" --latency fixed:0 --json "$out/eval-demo-reference.json"
.venv/bin/python - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
c = json.loads((out / "compile-pi05-small.json").read_text())
print(f"pi05:small plan {c['plan']}")
print(f"  reference p50 {c['reference_latency_ms']['p50']:.1f} ms, plan p50 {c['plan_latency_ms']['p50']:.1f} ms, "
      f"speedup p50 {c['speedup_p50']:.2f}x p99 {c['speedup_p99']:.2f}x, action cos {c['action_cos_min']:.6f}, "
      f"budget met {c['budget_met']}")
for name in ("compiled", "reference"):
    r = json.loads((out / f"eval-demo-{name}.json").read_text())
    lo, hi = r["success_ci95"]
    print(f"demo:conveyor {name}: {r['successes']}/{r['episodes']} (Wilson 95 % {lo:.2f}-{hi:.2f})")
PY
