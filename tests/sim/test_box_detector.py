import mujoco
import numpy as np
import pytest

from hotloop.errors import ConfigError
from hotloop.perception.box_detector import ColourBoxDetector, PinholeCamera
from hotloop.sim.tasks import make_task
from hotloop.sim.tasks.conveyor import BOX_HALF
from hotloop.sim.tasks.gantry import BELT_TOP


@pytest.fixture(scope="module")
def scene():
    env = make_task("conveyor-pick")
    env.reset(seed=0)
    cam = PinholeCamera.from_env(env)
    yield env, cam, ColourBoxDetector(cam, BELT_TOP + BOX_HALF)
    env.close()


def _place(env, box_xy, gripper_xyz):
    env.data.qpos[env._box_qpos : env._box_qpos + 7] = [*box_xy, BELT_TOP + BOX_HALF, 1, 0, 0, 0]
    env.data.qpos[env._gripper_qpos] = gripper_xyz
    mujoco.mj_forward(env.model, env.data)
    return env.render()


def test_projection_and_back_projection_agree(scene):
    _, cam, _ = scene
    for point in ([0.1, -0.05, 0.08], [-0.3, 0.06, 0.08], [0.25, 0.0, 0.12]):
        pixel = cam.project(np.array(point))
        np.testing.assert_allclose(cam.ray_to_plane(pixel, point[2]), point, atol=1e-12)


def test_detects_the_box_on_the_belt_within_millimetres(scene):
    env, _, det = scene
    errors = []
    for x in np.linspace(-0.3, 0.3, 7):
        for y in (-0.06, 0.0, 0.06):
            image = _place(env, (x, y), [x + 0.3 if x < 0 else x - 0.3, 0.1, 0.3])  # gripper out of the way
            d = det.detect(image)
            assert d.position is not None, (x, y, d)
            errors.append(d.position - env.box_pos())
    err = np.abs(np.asarray(errors))
    # One pixel is ~13 mm on the belt at 64 px; the silhouette model keeps the centroid to a few mm.
    assert err[:, :2].max() < 0.009 and err[:, :2].mean() < 0.004


def test_hidden_or_absent_box_is_no_detection(scene):
    env, _, det = scene
    assert det.detect(_place(env, (0.1, 0.0), [0.1, 0.0, 0.095])).position is None  # under the gripper
    assert det.detect(_place(env, (0.44, 0.0), [-0.2, 0.1, 0.3])).position is None  # out of view
    with pytest.raises(ConfigError, match="64x64"):
        det.detect(np.zeros((32, 32, 3), dtype=np.uint8))
