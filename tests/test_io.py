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


def test_new_files_follow_the_umask_and_replaced_files_keep_their_mode(tmp_path):
    import os
    import stat

    old = os.umask(0o027)
    try:
        path = atomic_write_json(tmp_path / "r.json", {"a": 1})
        assert stat.S_IMODE(path.stat().st_mode) == 0o640  # 0666 minus the umask, as open() would give
        path.chmod(0o604)
        atomic_write_json(path, {"a": 2})
        assert stat.S_IMODE(path.stat().st_mode) == 0o604
    finally:
        os.umask(old)


def test_a_symlinked_output_stays_a_link_and_its_target_gets_the_data(tmp_path):
    real_dir = tmp_path / "results"
    real_dir.mkdir()
    real = real_dir / "latest.json"
    real.write_text("{}")
    link = tmp_path / "r.json"
    link.symlink_to(real)
    atomic_write_json(link, {"a": 1})
    assert link.is_symlink() and json.loads(real.read_text()) == {"a": 1}
    assert sorted(p.name for p in real_dir.iterdir()) == ["latest.json"]  # no temporary file left
    dangling = tmp_path / "new.json"
    dangling.symlink_to(real_dir / "fresh.json")
    atomic_write_json(dangling, [1])
    assert dangling.is_symlink() and json.loads((real_dir / "fresh.json").read_text()) == [1]


def test_output_paths_are_checked_before_the_work(tmp_path):
    import os

    from hotloop.errors import ConfigError
    from hotloop.io import check_output_dir, check_output_file

    check_output_file(tmp_path / "new" / "deeper" / "r.json", "--json")  # parents made later: fine
    assert not (tmp_path / "new").exists() and list(tmp_path.iterdir()) == []  # the probe left nothing
    (tmp_path / "file").write_text("x")
    for path, needle in (
        (tmp_path, "--json {} is a directory"),
        (tmp_path / "file" / "r.json", "is a file, not a directory"),
        ("/proc/hotloop.json", "cannot write in /proc"),
        ("/proc/self/r.json", "cannot write in /proc/self"),
    ):
        with pytest.raises(ConfigError, match="^--json ") as e:
            check_output_file(path, "--json")
        assert needle.format(path) in str(e.value)
    with pytest.raises(ConfigError, match="-o .* is a file"):
        check_output_dir(tmp_path / "file", "-o")
    with pytest.raises(ConfigError, match=r"is not empty \(holds file\)"):
        check_output_dir(tmp_path, "-o", must_be_empty=True)
    check_output_dir(tmp_path, "--out")  # a report folder may hold other files
    if os.geteuid() != 0:  # root writes anywhere: the /proc cases above cover it there
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ConfigError, match="cannot write in"):
            check_output_file(locked / "r.json", "--json")


def test_json_never_holds_nan_or_infinity(tmp_path):
    import math

    path = atomic_write_json(
        tmp_path / "r.json",
        {"a": math.nan, "b": [1.0, math.inf, np.float32("-inf")], "c": np.array([np.nan, 2.0])},
    )
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"a": None, "b": [1.0, None, None], "c": [None, 2.0]}
