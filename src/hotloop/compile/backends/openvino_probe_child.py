"""The OpenVINO probe's child (`backends.openvino._probe`, `hotloop.compile.crash_probe`): compile one saved
graph for the CPU plugin with the given settings and run it once on the given inputs. With `CACHE_DIR` in
the settings the plugin exports its compiled blob there, which the parent's own compile then imports.

Run as a script by its path (`python -P openvino_probe_child.py SPEC.json`; `-P` keeps this folder, whose
`openvino.py` would shadow the real package, off `sys.path`), so that it imports nothing of hotloop or torch: SPEC holds `xml` (the graph file), `config` (the plugin's settings) and `inputs` (an .npz
whose arrays `0`, `1`, ... are the graph's inputs in order). Exit 0: it compiled and ran; 3: it raised
(the parent's own compile raises the real error); a signal: the plugin crashed.
"""

from __future__ import annotations

import json
import sys

RAISED = 3


def main(spec_path: str) -> int:
    import numpy as np
    import openvino as ov

    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    with np.load(spec["inputs"]) as held:
        inputs = [held[str(i)] for i in range(len(held.files))]
    request = ov.Core().compile_model(spec["xml"], "CPU", spec["config"]).create_infer_request()
    request.infer(inputs)
    return 0


if __name__ == "__main__":
    try:
        status = main(sys.argv[1])
    except Exception:  # noqa: BLE001 - reported by status; the parent raises it for real
        status = RAISED
    sys.exit(status)
