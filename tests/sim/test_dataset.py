import json

import numpy as np
import pytest

from hotloop.errors import ConfigError
from hotloop.sim.dataset import Dataset
from hotloop.sim.recorder import record


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
