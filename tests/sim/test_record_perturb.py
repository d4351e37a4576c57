"""`hotloop record --perturb`: the perturbed world and sensors are what is stored, the expert's labels
are the clean ones, and a bad spec stops the command before anything is written."""

import json

import numpy as np
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.closedloop.latency import parse_latency
from hotloop.compile.calibration import CalibrationSpec, load_calibration, open_dataset
from hotloop.compile.sources import load_target
from hotloop.datasets.lerobot_v3 import Dataset
from hotloop.datasets.recorder import record
from hotloop.sim.perturb import attach_perturbations
from hotloop.sim.tasks import make_task


def _record(out, *extra):
    base = ["record", "--episodes", "1", "--seed", "500", "--quiet", "-o", str(out)]
    task = () if "--task" in extra else ("--task", "conveyor-pick")
    return CliRunner().invoke(app, [*base, *task, *extra])


class _Still:
    horizon = 1

    def reset(self) -> None:
        pass

    def infer(self, obs):
        return {"actions": np.zeros((1, 4))}


def test_record_stores_the_perturbed_world_and_sensors_with_the_clean_labels(tmp_path):
    runs = {}
    for name, extra in (
        ("plain", ()),
        ("dim", ("--perturb", "lighting:0.3")),
        ("noisy", ("--perturb", "image-noise:0.1,state-noise:0.01")),
        ("shifted", ("--perturb", "camera-shift:0.05")),
    ):
        r = _record(tmp_path / name, *extra)
        assert r.exit_code == 0, r.output
        info = json.loads((tmp_path / name / "meta" / "info.json").read_text())
        runs[name] = (Dataset(tmp_path / name).episode(0), info["recorder"]["perturb"])
    plain, dim, noisy, shifted = (runs[k][0] for k in ("plain", "dim", "noisy", "shifted"))
    assert [runs[k][1] for k in runs] == [
        None,
        "lighting:0.3",
        "image-noise:0.1,state-noise:0.01",
        "camera-shift:0.05",
    ]
    assert plain.meta["success"] and dim.meta["success"] and noisy.meta["success"]
    # A dim room: every stored top frame darker than the same seed's unperturbed one.
    assert (dim.images["top"].mean(axis=(1, 2, 3)) < 0.8 * plain.images["top"].mean(axis=(1, 2, 3))).all()
    # Noisy sensors: the stored images and state change, the scripted expert (reading the simulator's
    # truth) does exactly what it did, so the labels are the clean run's.
    assert np.abs(noisy.images["top"].astype(int) - plain.images["top"]).mean() > 10
    assert 0 < np.abs(noisy.state - plain.state).max() < 0.06
    np.testing.assert_array_equal(noisy.action, plain.action)
    np.testing.assert_array_equal(dim.action, plain.action)  # light and the camera move nothing
    np.testing.assert_array_equal(shifted.action, plain.action)
    # The same seed meets the same perturbed scene in `hotloop eval --perturb`.
    env = make_task("conveyor-pick")
    attach_perturbations(_Still(), env, "camera-shift:0.05", parse_latency("fixed:0"))
    first, _ = env.reset(seed=500)
    env.close()
    np.testing.assert_array_equal(shifted.images["top"][0], first["images"]["top"])
    assert not np.array_equal(shifted.images["top"][0], plain.images["top"][0])
    # A calibration set drawn from it says how its frames were made (in the compiled plan's manifest).
    data = tmp_path / "dim"
    _, adapter = load_target("pi05:tiny", open_dataset(data))
    assert (
        load_calibration(data, adapter, CalibrationSpec(count=2)).manifest_entry()["perturb"]
        == "lighting:0.3"
    )
    assert (
        "perturb"
        not in load_calibration(tmp_path / "plain", adapter, CalibrationSpec(count=2)).manifest_entry()
    )


def test_record_refuses_a_bad_perturbation_before_writing(tmp_path):
    out = tmp_path / "ds"
    for extra, needle in (
        (("--perturb", "fog:1"), "--perturb 'fog:1': unknown perturbation 'fog'"),
        (("--perturb", "lighting:0"), "--perturb 'lighting:0': lighting takes a value in (0, 3]"),
        (("--perturb", "latency-jitter:30"), "no inference to delay"),
        (("--task", "reach", "--perturb", "belt-speed:1.5"), "belt-speed is for conveyor-pick"),
    ):
        r = _record(out, *extra)
        assert r.exit_code == 2, (extra, r.output)
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert len(lines) == 1 and needle in lines[0], (extra, r.output)
        assert not out.exists()


def test_the_expert_grasps_a_resized_box(tmp_path):
    # `box-size` changes the box the expert reads from the simulator: it grips at the box's own width.
    result = record("conveyor-pick", 1, tmp_path / "big", seed=500, perturb="box-size:1.3")
    assert result["successes"] == 1
    info = json.loads((tmp_path / "big" / "meta" / "info.json").read_text())
    assert info["recorder"]["perturb"] == "box-size:1.3"
