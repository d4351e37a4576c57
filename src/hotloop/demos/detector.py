"""`demo:detector`: the shipped learned box detector of conveyor-pick's perception layer, as a bench target.

One timed inference is what the pipeline's perception layer pays per frame: resample a rendered 64 px
top-camera frame to the detector's input resolution, run the network (eager torch), decode the peak and
back-project it onto the belt. The detector is not a policy (it cannot drive the robot by itself): in
closed loop it runs inside `--pipeline detector:model=learned`. See docs/perception.md.
"""

from __future__ import annotations

from typing import Any


def build_bench(config_name: str, options: Any) -> Any:
    from hotloop.perception.box_detector import PinholeCamera
    from hotloop.perception.learned_detector import LearnedBoxDetector, load_detector
    from hotloop.sim.tasks import make_task
    from hotloop.sim.tasks.conveyor import BOX_HALF
    from hotloop.sim.tasks.gantry import BELT_TOP
    from hotloop.targets import BenchCase

    options.reject_unsupported(f"demo:{config_name}", set())
    model = load_detector()
    env = make_task("conveyor-pick")
    obs, _ = env.reset(seed=options.seed)
    camera = PinholeCamera.from_env(env)
    env.close()
    detector = LearnedBoxDetector(model, camera, BELT_TOP + BOX_HALF, model.config.resolution)
    image = obs["images"]["top"]

    def run(timer: Any) -> Any:
        return detector.detect(image)

    return BenchCase(
        name=f"demo:{config_name}",
        run=run,
        info={
            "parameters": model.parameters,
            "dtype": "float32",
            "stored_dtype": model.meta.get("stored_dtype", "float32"),
            "resolution": model.config.resolution,
            "camera_px": camera.size,
        },
    )
