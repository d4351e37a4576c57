"""Detector training frames from the chain's own closed loop (`hotloop.train.detector_rollouts`)."""

import numpy as np
import pytest

from hotloop.errors import ConfigError
from hotloop.perception.detector_data import concat_frames, render_frames
from hotloop.perception.detector_eval import evaluate_learned
from hotloop.perception.learned_detector import load_detector
from hotloop.sim.tasks.conveyor import BOX_HALF
from hotloop.sim.tasks.gantry import BELT_TOP
from hotloop.train.detector_rollouts import rollout_frames

PLANE_Z = BELT_TOP + BOX_HALF


def test_the_chains_own_frames_are_labelled_like_the_experts():
    frames, summary = rollout_frames([5], size=64, progress=False)
    assert summary["episodes"] == 1 and summary["successes"] in (0, 1) and summary["errors"] == 0
    assert summary["pipeline"] == "detector:model=learned" and frames.images.shape[1:] == (64, 64, 3)
    # The camera runs at its own rate through the whole episode: many more frames than decisions.
    assert len(frames) >= 20 and frames.visible.mean() > 0.5
    first = int(np.flatnonzero(frames.visible & frames.on_belt)[0])
    back = frames.camera.ray_to_plane(frames.centre[first] * 64, PLANE_Z)
    np.testing.assert_allclose(back[:2], frames.box_pos[first, :2], atol=1e-4)
    # The images are of the labelled instant: the shipped detector finds the box where the label says.
    accuracy = evaluate_learned(load_detector(), frames, 64, PLANE_Z)
    assert accuracy.detection_rate > 0.8 and accuracy.centre_mm_p50 < 6.0
    # They join the expert's frames (same size) and refuse another size.
    expert = render_frames([3], size=64, recovery_starts=0.0, progress=False)
    joined = concat_frames([expert, frames])
    assert len(joined) == len(expert) + len(frames)
    np.testing.assert_array_equal(joined.images[len(expert) :], frames.images)
    with pytest.raises(ConfigError, match="different sizes"):
        concat_frames([expert, render_frames([3], size=32, recovery_starts=0.0, progress=False)])


def test_a_chain_without_a_detector_or_a_model_that_does_not_load_is_refused_before_work(tmp_path):
    from hotloop.train.detector_demo import TrainDetectorConfig

    with pytest.raises(ConfigError, match="--rollout-pipeline"):
        TrainDetectorConfig(rollouts=2, rollout_pipeline="truth")
    with pytest.raises(ConfigError, match="--rollouts"):
        TrainDetectorConfig(rollouts=-1)
    with pytest.raises(ConfigError):
        TrainDetectorConfig(rollouts=2, rollout_pipeline=f"detector:model={tmp_path / 'missing'}")
    TrainDetectorConfig(rollout_pipeline="truth")  # not used without --rollouts
