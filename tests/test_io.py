import json

import numpy as np
import pytest

from hotloop.io import atomic_write_json


def test_atomic_json_writes_whole_file_and_leaves_no_temp(tmp_path):
    path = atomic_write_json(tmp_path / "sub" / "r.json", {"a": np.float32(1.5), "b": np.arange(3)})
    assert json.loads(path.read_text()) == {"a": 1.5, "b": [0, 1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]


def test_failed_write_keeps_previous_file(tmp_path):
    path = atomic_write_json(tmp_path / "r.json", {"ok": 1})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_json_never_holds_nan_or_infinity(tmp_path):
    import math

    path = atomic_write_json(
        tmp_path / "r.json",
        {"a": math.nan, "b": [1.0, math.inf, np.float32("-inf")], "c": np.array([np.nan, 2.0])},
    )
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"a": None, "b": [1.0, None, None], "c": [None, 2.0]}
