#!/usr/bin/env bash
# conveyor-pick through the layered chain (camera -> colour box detector -> Kalman tracker -> demo policy ->
# controller) against the same chain on the simulator's box state, and what injected perception latency
# costs each, with and without the tracker predicting over the known latency. Closed-loop success is
# simulated time, so it does not depend on the machine; the per-layer wall times in the budget tables do.
# Usage: benchmarks/bench_perception_pipeline.sh [OUT_DIR] [EPISODES]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/pipeline}
episodes=${2:-50}
mkdir -p "$out"
point() {  # strategy, pipeline spec, name
  .venv/bin/hotloop eval demo:conveyor --strategy "$1" --latency fixed:0 --pipeline "$2" \
    --episodes "$episodes" --quiet --json "$out/$3.json" --plot "$out/$3.png"
}
point sync "truth" sync_truth
point sync "detector" sync_detector
for ms in 0 200 300; do
  point async "truth:perception=$ms" "async_truth_p$ms"
  point async "detector:perception=$ms" "async_detector_p$ms"
done
# predict=1 is for strategies that hold while thinking: the plan starts when it arrives
point sync "truth:perception=100" sync_truth_p100
point sync "truth:perception=100,predict=1" sync_truth_p100_predict
.venv/bin/python - "$out" <<'PY'
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    r = json.loads(f.read_text())
    lo, hi = r["success_ci95"]
    p = r["pipeline"]
    print(f"{f.stem:32s} {r['successes']:3d}/{r['episodes']} ({100*lo:.0f}-{100*hi:.0f}%)  "
          f"estimate error p50 {p['estimate_error_mm']['p50']:.1f} mm  breaking layer: {p['budget']['breaking_layer']}")
PY
