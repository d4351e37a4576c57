from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from hotloop.errors import CheckpointError
from hotloop.families.pi.compression.distill import DistillConfig, distill
from hotloop.families.pi.compression.prune import PruneConfig, prune
from hotloop.families.pi.targets import build_model, random_observation, resolve_config
from hotloop.nn.resumable import CHECKPOINT
from hotloop.targets import TargetOptions


@pytest.fixture(scope="module")
def pair():  # type: ignore[no-untyped-def]
    cfg = resolve_config("pi05:tiny", TargetOptions())
    teacher = build_model(cfg, torch.float32, "cpu", 0)
    obs = random_observation(cfg, 6, "cpu", 0)
    actions = (
        torch.randn(6, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(1)) * 0.5
    )
    student, _ = prune(teacher, obs, actions, PruneConfig(0.5, 0.5, 0.5, 0.5, 0.5))
    return teacher, student, obs, actions


CONFIG = DistillConfig(
    steps=12, batch=4, lr=1e-3, checkpoint_every=3, feature_layers=("vision", "vlm.0", "expert.last")
)


def test_distillation_reduces_the_students_loss(pair) -> None:  # type: ignore[no-untyped-def]
    teacher, student, obs, actions = pair
    s = copy.deepcopy(student)
    report = distill(teacher, s, obs, actions, CONFIG)
    assert report["steps"] == 12
    assert report["loss_after"]["total"] < report["loss_before"]["total"]
    # on observations alone the targets are the teacher's own chunks
    s2 = copy.deepcopy(student)
    report = distill(teacher, s2, obs, None, CONFIG)
    assert report["targets"] == "teacher actions"
    assert report["loss_after"]["total"] < report["loss_before"]["total"]


def test_interrupted_distillation_resumes_where_it_stopped(pair, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    teacher, student, obs, actions = pair
    straight = copy.deepcopy(student)
    distill(teacher, straight, obs, actions, CONFIG, tmp_path / "a")

    def interrupt(step: int, loss: float) -> None:
        if step == 7:  # after the step-6 checkpoint, mid-way to the next one
            raise KeyboardInterrupt

    first = copy.deepcopy(student)
    with pytest.raises(KeyboardInterrupt):
        distill(teacher, first, obs, actions, CONFIG, tmp_path / "b", on_step=interrupt)
    saved = torch.load(tmp_path / "b" / CHECKPOINT, weights_only=False)
    assert saved["step"] == 7  # the interrupted run kept its finished steps
    resumed = copy.deepcopy(student)  # a fresh process: the student starts from the pruned weights again
    steps_run: list[int] = []
    report = distill(
        teacher, resumed, obs, actions, CONFIG, tmp_path / "b", on_step=lambda s, _: steps_run.append(s)
    )
    assert steps_run == list(range(8, 13))
    assert report["steps"] == 12
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_a_checkpoint_of_another_run_is_refused(pair, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    teacher, student, obs, actions = pair
    distill(teacher, copy.deepcopy(student), obs, actions, DistillConfig(steps=1, batch=2), tmp_path)
    with pytest.raises(CheckpointError, match="another run"):
        distill(teacher, copy.deepcopy(student), obs, actions, DistillConfig(steps=2, batch=2), tmp_path)
