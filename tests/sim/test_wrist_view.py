"""The gantry's wrist camera: rendered only on request, moves with the gripper, reaches a policy by name."""

import mujoco
import numpy as np
import pytest

from hotloop.closedloop.adapter import adapt, request_views
from hotloop.errors import ConfigError
from hotloop.policy_spec import ImageSpec, PolicySpec
from hotloop.sim.tasks import make_task
from hotloop.sim.tasks.gantry import GantryConfig

BOX_RGB = np.array([0.1, 0.6, 0.9]) * 255  # conveyor-pick's box colour


def box_centroid(image: np.ndarray) -> np.ndarray:
    """(row, col) of the pixels of the box's colour (any shade of it: lit faces differ)."""
    rgb = image.astype(np.float64)
    # Bluish pixels: blue clearly above red, the belt (dark grey), stripes (yellow) and fingers (orange) are not.
    mask = (rgb[..., 2] > rgb[..., 0] + 60) & (rgb[..., 2] > 60)
    assert mask.sum() >= 4, "the box is not in the view"
    rows, cols = np.nonzero(mask)
    return np.array([rows.mean(), cols.mean()])


def place(env, gripper_xyz, box_xy=None) -> None:
    env.data.qpos[env._gripper_qpos] = gripper_xyz
    if box_xy is not None:
        env.data.qpos[env._box_qpos : env._box_qpos + 2] = box_xy
    mujoco.mj_forward(env.model, env.data)


@pytest.fixture()
def env():
    e = make_task("conveyor-pick", views=("top", "wrist"))
    yield e
    e.close()


def test_wrist_view_is_rendered_only_when_asked_and_the_top_view_is_unchanged(env):
    plain = make_task("conveyor-pick")
    try:
        obs, _ = plain.reset(seed=3)
        assert set(obs["images"]) == {"top"}
        assert [i.key for i in plain.task_spec.images] == ["top"]
        assert [i.key for i in plain.task_spec.optional_images] == ["wrist"]
        both, _ = env.reset(seed=3)
        assert list(both["images"]) == ["top", "wrist"]
        assert both["images"]["wrist"].shape == (64, 64, 3) and both["images"]["wrist"].dtype == np.uint8
        # The wrist camera does not change the top view's pixels (demo:conveyor sees what it always saw).
        np.testing.assert_array_equal(both["images"]["top"], obs["images"]["top"])
        assert env.observation_space["images"]["wrist"].shape == (64, 64, 3)
    finally:
        plain.close()


def test_wrist_view_moves_with_the_gripper(env):
    env.reset(seed=3)
    place(env, [0.0, 0.0, 0.13], box_xy=[0.0, 0.0])
    base = box_centroid(env.render("wrist"))
    top = box_centroid(env.render("top"))
    # The gripper moves 2 cm along +x over a still box: the box slides the other way across the wrist image
    # (image right is +x), while the top camera, fixed to the world, sees the box where it was.
    place(env, [0.02, 0.0, 0.13])
    moved = box_centroid(env.render("wrist"))
    assert moved[1] - base[1] < -3.0
    np.testing.assert_allclose(box_centroid(env.render("top")), top, atol=0.5)
    # Gripper and box move together by 10 cm: the box stays put in the wrist image.
    place(env, [0.10, 0.0, 0.13], box_xy=[0.10, 0.0])
    np.testing.assert_allclose(box_centroid(env.render("wrist")), base, atol=1.0)
    # Lower over the box: it fills more of the view.
    place(env, [0.0, 0.0, 0.10], box_xy=[0.0, 0.0])
    near = env.render("wrist").astype(np.float64)
    place(env, [0.0, 0.0, 0.20])
    far = env.render("wrist").astype(np.float64)

    def blue(img: np.ndarray) -> int:
        return int(((img[..., 2] > img[..., 0] + 60) & (img[..., 2] > 60)).sum())

    assert blue(near) > 2 * blue(far)


def test_unknown_views_are_refused_by_name():
    with pytest.raises(ConfigError, match="views .*top, wrist.*side"):
        GantryConfig(views=("top", "side"))
    with pytest.raises(ConfigError, match="views"):
        GantryConfig(views=("top", "top"))
    plain = make_task("conveyor-pick")
    with pytest.raises(ConfigError, match="view"):
        plain.set_views(["belly"])
    with pytest.raises(ConfigError, match="view"):
        plain.render("belly")
    plain.close()


def _spec(*keys: str) -> PolicySpec:
    return PolicySpec(
        images=tuple(ImageSpec(k, 64, 64) for k in keys),
        min_views=len(keys),
        images_as="array",
        state_dim=10,
        action_dim=4,
    )


class _Policy:
    def __init__(self, spec: PolicySpec) -> None:
        self.spec = spec


def test_a_policy_naming_the_wrist_view_turns_it_on_and_others_leave_the_task_alone():
    top_only = make_task("conveyor-pick")
    assert request_views(top_only, _Policy(_spec("top"))) == ()
    assert [i.key for i in top_only.task_spec.images] == ["top"]
    top_only.close()

    env = make_task("conveyor-pick")
    policy = _Policy(_spec("top", "wrist"))
    with pytest.raises(ConfigError, match="wrist"):  # the adapter alone cannot find it: not rendered yet
        adapt(policy, env.task_spec)
    assert request_views(env, policy) == ("wrist",)
    adapted = adapt(policy, env.task_spec)
    obs, _ = env.reset(seed=1)
    images = adapted.observation(obs)["images"]
    assert images.shape == (2, 64, 64, 3)
    np.testing.assert_array_equal(images[1], obs["images"]["wrist"])
    env.close()


def test_recorded_views_reach_the_dataset(tmp_path):
    from hotloop.datasets.lerobot_v3 import Dataset
    from hotloop.datasets.recorder import record

    record("conveyor-pick", 1, tmp_path / "d", seed=5, views=("top", "wrist"))
    ep = Dataset(tmp_path / "d").episode(0)
    assert set(ep.images) == {"top", "wrist"}
    assert ep.images["wrist"].shape[1:] == (64, 64, 3)
    assert not np.array_equal(ep.images["wrist"], ep.images["top"])
