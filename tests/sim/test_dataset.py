import json

import numpy as np
import pytest

from hotloop.datasets.lerobot_v3 import Dataset
from hotloop.datasets.recorder import record
from hotloop.errors import ConfigError


def test_record_and_read_back(tmp_path):
    out = tmp_path / "ds"
    result = record("conveyor-pick", 3, out, seed=5)
    assert result["successes"] == 3
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 3
    assert (out / "data" / "chunk-000" / "file-000.parquet").is_file()
    assert (out / "meta" / "episodes" / "chunk-000" / "file-000.parquet").is_file()
    ds = Dataset(out)
    assert len(ds) == 3 and ds.image_keys == ["top"] and ds.fps == 10.0
    frames = 0
    for ep in ds:
        t = ep.meta["length"]
        frames += t
        assert ep.state.shape == (t, 10) and ep.action.shape == (t, 4)
        assert ep.images["top"].shape == (t, 64, 64, 3) and ep.images["top"].dtype == np.uint8
        assert ep.meta["success"] is True and ep.task.startswith("pick up")
    assert frames == info["total_frames"] == result["frames"]
    assert [e["seed"] for e in ds.episodes] == [5, 6, 7]
    with pytest.raises(ConfigError, match="already holds a dataset"):
        record("conveyor-pick", 1, out)


def test_reader_errors_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="info.json is missing"):
        Dataset(tmp_path)
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text(
        json.dumps(
            {
                "codebase_version": "v3.0",
                "fps": 10,
                "features": {"observation.images.top": {"dtype": "video"}},
            }
        )
    )
    with pytest.raises(ConfigError, match="video"):
        Dataset(tmp_path)


def test_recovery_starts_change_only_the_start(tmp_path):
    plain = record("conveyor-pick", 2, tmp_path / "plain", seed=20, action_noise=0.01)
    mixed = record("conveyor-pick", 2, tmp_path / "mixed", seed=20, action_noise=0.01, recovery_starts=1.0)
    info = json.loads((tmp_path / "mixed" / "meta" / "info.json").read_text())
    assert info["recorder"]["recovery_starts"] == 1.0
    a, b = Dataset(tmp_path / "plain"), Dataset(tmp_path / "mixed")
    for i in range(2):
        sa, sb = a.episode(i).state[0], b.episode(i).state[0]
        assert sa[7] == pytest.approx(sb[7])  # same seed, same belt speed
        assert not np.allclose(sa[[0, 4]], sb[[0, 4]])  # gripper and box start elsewhere
    assert plain["episodes"] == mixed["episodes"] == 2
    # The episode row says how to replay it: the same seed and reset options give the same first state.
    from hotloop.sim.tasks import make_task

    row = b.episodes[1]
    assert a.episodes[1]["reset_options"] == ""
    obs, _ = make_task("conveyor-pick").reset(seed=row["seed"], options=json.loads(row["reset_options"]))
    np.testing.assert_allclose(obs["state"], b.episode(1).state[0], atol=1e-6)
