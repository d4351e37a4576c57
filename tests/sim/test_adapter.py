"""The adapter between what a policy consumes and what a task provides (hotloop.closedloop.adapter)."""

import numpy as np
import pytest

from hotloop.closedloop.adapter import AdaptedPolicy, adapt, plan, resize_with_pad
from hotloop.errors import ConfigError
from hotloop.policy_spec import ImageSpec, PolicySpec, TaskSpec

GANTRY = TaskSpec(
    name="reach",
    images=(ImageSpec("top", 64, 64),),
    state_names=tuple(f"s{i}" for i in range(10)),
    action_names=("target_x", "target_y", "target_z", "grip"),
    ee_state=(0, 1, 2),
    action_low=(-0.4, -0.2, 0.1, 0.0),
    action_high=(0.4, 0.2, 0.3, 1.0),
)
NO_EE = TaskSpec(name="pusht", images=(), state_names=("x", "y"), action_names=("tx", "ty"))


class Recorder:
    """Returns a fixed chunk and keeps the observation it was given."""

    def __init__(self, spec, chunk):
        self.spec = spec
        self.chunk = np.asarray(chunk, dtype=np.float32)
        self.seen = None

    def reset(self):
        pass

    def infer(self, obs):
        self.seen = obs
        return {"actions": self.chunk}


def _obs(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "images": {"top": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)},
        "state": rng.normal(size=10).astype(np.float32),
        "prompt": "move",
    }


def test_a_pi_style_policy_gets_resized_stacked_views_padded_state_and_cropped_actions():
    spec = PolicySpec(
        images=(ImageSpec("*", 56, 56), ImageSpec("*", 56, 56)),
        min_views=1,
        images_as="array",
        state_dim=32,
        action_dim=32,
        action_meaning="any",
        horizon=5,
    )
    chunk = np.arange(5 * 32, dtype=np.float32).reshape(5, 32)
    inner = Recorder(spec, chunk)
    policy = adapt(inner, GANTRY)
    obs = _obs()
    out = policy.infer(obs)
    seen = inner.seen
    assert seen["images"].shape == (1, 56, 56, 3) and seen["images"].dtype == np.uint8  # one view present
    assert np.array_equal(seen["state"][:10], obs["state"]) and not seen["state"][10:].any()
    assert seen["state"].shape == (32,)
    assert "prompt" not in seen  # it has no tokenizer: the text is not passed
    assert np.array_equal(out["actions"], chunk[:, :4])


def test_a_named_view_the_task_lacks_is_named_in_the_error():
    spec = PolicySpec(images=(ImageSpec("wrist", 64, 64),), min_views=1, action_dim=4)
    with pytest.raises(ConfigError, match=r"cannot adapt .*'wrist'.*\['top'\]"):
        plan(spec, GANTRY)


def test_an_optional_named_view_is_dropped_and_the_required_one_kept():
    spec = PolicySpec(
        images=(ImageSpec("top", 32, 32), ImageSpec("wrist", 32, 32)), min_views=1, action_dim=4
    )
    inner = Recorder(spec, np.zeros((2, 4)))
    adapt(inner, GANTRY).infer(_obs())
    assert list(inner.seen["images"]) == ["top"] and inner.seen["images"]["top"].shape == (32, 32, 3)


def test_a_policy_that_needs_state_cannot_run_on_a_task_without_one():
    stateless = TaskSpec(
        name="pixels", images=(ImageSpec("top", 64, 64),), state_names=(), action_names=("a",)
    )
    with pytest.raises(ConfigError, match="state of 8 numbers"):
        plan(PolicySpec(state_dim=8, action_dim=1), stateless)


def test_a_trained_policy_with_too_few_actions_is_refused_and_an_untrained_one_padded():
    with pytest.raises(ConfigError, match="returns 3 action dimension.*target_x, target_y, target_z, grip"):
        plan(PolicySpec(action_dim=3, action_meaning="absolute"), GANTRY)
    inner = Recorder(PolicySpec(action_dim=3, action_meaning="any", horizon=2), np.ones((2, 3)))
    out = adapt(inner, GANTRY).infer(_obs())["actions"]
    assert out.shape == (2, 4) and np.allclose(out[:, 3], 0.5)  # grip at the middle of its range


def test_ee_delta_actions_become_absolute_targets_and_need_an_end_effector():
    inner = Recorder(PolicySpec(state_dim=10, action_dim=4, action_meaning="ee_delta"), [[0.1, 0, 0, 1]])
    obs = _obs()
    out = adapt(inner, GANTRY).infer(obs)["actions"]
    assert np.allclose(out[0, :3], obs["state"][:3] + [0.1, 0, 0]) and out[0, 3] == 1
    with pytest.raises(ConfigError, match="end-effector"):
        plan(PolicySpec(state_dim=2, action_dim=2, action_meaning="ee_delta"), NO_EE)


def test_actions_of_the_wrong_shape_are_named():
    inner = Recorder(PolicySpec(action_dim=4), np.zeros((3, 5)))
    with pytest.raises(ConfigError, match=r"\(3, 5\).*\(horizon, 4\)"):
        adapt(inner, GANTRY).infer(_obs())


def test_a_policy_without_a_spec_gets_the_task_observation_unchanged():
    class Plain:
        def reset(self):
            pass

        def infer(self, obs):
            return {"actions": np.zeros((1, 4))}

    plain = Plain()
    assert adapt(plain, GANTRY) is plain
    assert isinstance(adapt(Recorder(PolicySpec(action_dim=4), np.zeros((1, 4))), GANTRY), AdaptedPolicy)


def test_resize_with_pad_keeps_the_aspect_ratio():
    image = np.full((32, 64, 3), 200, dtype=np.uint8)  # wide
    out = resize_with_pad(image, 56, 56)
    assert out.shape == (56, 56, 3)
    assert (out[:10] == 0).all() and (out[-10:] == 0).all()  # black bands above and below
    assert (out[20:36] == 200).all()  # the picture, unchanged in colour
    square = image[:, :32]
    assert resize_with_pad(square, 32, 32) is square  # already the size: untouched


def test_rtc_guidance_reaches_the_policy_in_its_own_action_space_and_its_answer_comes_back():
    """`--strategy rtc` sends the executing chunk's actions (task space, absolute) with the observation;
    the adapter must hand them to the policy (ee deltas again) and return its `rtc_guided` answer."""
    from hotloop.realtime.rtc import DELAY_KEY, GUIDED_KEY, MAX_GUIDANCE_WEIGHT_KEY, PREV_ACTIONS_KEY

    class Guided(Recorder):
        def infer(self, obs):
            return {**super().infer(obs), GUIDED_KEY: PREV_ACTIONS_KEY in obs}

    inner = Guided(PolicySpec(state_dim=10, action_dim=4, action_meaning="ee_delta"), [[0.1, 0, 0, 1]])
    obs = _obs()
    prev = np.array([[0.2, 0.1, 0.15, 1.0], [0.25, 0.1, 0.15, 0.0]], dtype=np.float32)
    out = adapt(inner, GANTRY).infer(
        {**obs, PREV_ACTIONS_KEY: prev, DELAY_KEY: 1, MAX_GUIDANCE_WEIGHT_KEY: 5.0}
    )
    assert out[GUIDED_KEY] is True
    seen = inner.seen
    assert seen[DELAY_KEY] == 1 and seen[MAX_GUIDANCE_WEIGHT_KEY] == 5.0
    np.testing.assert_allclose(seen[PREV_ACTIONS_KEY][:, :3], prev[:, :3] - obs["state"][:3], atol=1e-6)
    np.testing.assert_array_equal(seen[PREV_ACTIONS_KEY][:, 3], prev[:, 3])
    assert GUIDED_KEY in adapt(inner, GANTRY).infer(obs) and PREV_ACTIONS_KEY not in inner.seen


def test_rtc_cannot_guide_a_policy_whose_extra_actions_the_task_drops():
    from hotloop.realtime.rtc import PREV_ACTIONS_KEY

    inner = Recorder(PolicySpec(action_dim=6, action_meaning="absolute"), np.zeros((2, 6)))
    with pytest.raises(ConfigError, match="--strategy rtc cannot guide.*--strategy async"):
        adapt(inner, GANTRY).infer({**_obs(), PREV_ACTIONS_KEY: np.zeros((2, 4), dtype=np.float32)})
