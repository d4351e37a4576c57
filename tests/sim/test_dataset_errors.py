"""The dataset reader turns every damaged file into one DatasetError naming it (defect 12 of issue 11)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hotloop.datasets.lerobot_v3 import DATA_PATH, Dataset, DatasetWriter
from hotloop.errors import DatasetError, HotloopError

DATA = DATA_PATH.format(chunk_index=0, file_index=0)
EPISODES = "meta/episodes/chunk-000/file-000.parquet"


def write_small_dataset(root: Path, episodes: int = 2, frames: int = 3) -> Path:
    """A real dataset written by DatasetWriter from synthetic frames (no simulator needed)."""
    writer = DatasetWriter(
        root,
        fps=10,
        robot_type="test",
        state_names=["a", "b"],
        action_names=["x"],
        image_keys=["top"],
        image_shape=(4, 4, 3),
    )
    rng = np.random.default_rng(0)
    for _ in range(episodes):
        for _ in range(frames):
            image = rng.integers(0, 255, (4, 4, 3), dtype=np.uint8)
            writer.add_frame({"state": rng.normal(size=2), "images": {"top": image}}, rng.normal(size=1))
        writer.end_episode("push", success=True, seed=0)
    return writer.finish()


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_dataset(tmp_path_factory.mktemp("ds") / "clean")


@pytest.fixture()
def ds(clean: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(clean, tmp_path / "ds"))


def _info(root: Path, **fields: Any) -> None:
    info = json.loads((root / "meta" / "info.json").read_text())
    info.update(fields)
    (root / "meta" / "info.json").write_text(json.dumps(info))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


Damage = Callable[[Path], None]
CASES: list[tuple[str, Damage, str]] = [
    (
        "binary info",
        lambda r: (r / "meta/info.json").write_bytes(b"\x89\xff\x00garbage"),
        r"info.json is not a text file",
    ),
    (
        "bad JSON info",
        lambda r: (r / "meta/info.json").write_text('{"fps": '),
        r"info.json is not valid JSON",
    ),
    (
        "list info",
        lambda r: (r / "meta/info.json").write_text("[1, 2]"),
        r"info.json must hold a JSON object",
    ),
    ("numeric version", lambda r: _info(r, codebase_version=3), r"codebase_version 3 is not v3.x"),
    ("features list", lambda r: _info(r, features=["a"]), r"'features' must be an object of feature objects"),
    ("no action", lambda r: _info(r, features={"observation.state": {}}), r"'features' lacks action"),
    ("text fps", lambda r: _info(r, fps="thirty"), r"'fps' must be a positive number \(got 'thirty'\)"),
    ("zero fps", lambda r: _info(r, fps=0), r"'fps' must be a positive number \(got 0\)"),
    ("null fps", lambda r: _info(r, fps=None), r"'fps' must be a positive number \(got None\)"),
    (
        "bad data_path",
        lambda r: _info(r, data_path="data/{oops}.parquet"),
        r"'data_path' must be a pattern like",
    ),
    (
        "no data parquet",
        lambda r: (r / DATA).unlink(),
        r"file-000.parquet is missing; the dataset is incomplete",
    ),
    ("truncated data", lambda r: _truncate(r / DATA), r"file-000.parquet is not a readable parquet file"),
    (
        "garbage data",
        lambda r: (r / DATA).write_bytes(b"PAR1" + b"\x00" * 50),
        r"is not a readable parquet file",
    ),
    (
        "truncated episodes",
        lambda r: _truncate(r / EPISODES),
        r"episodes/chunk-000/file-000.parquet is not a readable",
    ),
    ("no episodes", lambda r: (r / EPISODES).unlink(), r"no episode files under meta/episodes/"),
    ("no tasks", lambda r: (r / "meta/tasks.parquet").unlink(), r"tasks.parquet is missing"),
    ("bad stats", lambda r: (r / "meta/stats.json").write_text("nope"), r"stats.json is not valid JSON"),
    # issue 24, defects 6 and 7: values that used to crash deep inside, or be read in silence
    (
        "huge data_path width",
        lambda r: _info(r, data_path="data/chunk-{chunk_index:999999999d}/file-{file_index:03d}.parquet"),
        r"'data_path' pads chunk_index to 999999999 digits; at most 20",
    ),
    (
        "data_path field",
        lambda r: _info(r, data_path="data/{chunk_index.real}.parquet"),
        r"'data_path' must be a pattern like",
    ),
    (
        "shape not a width",
        lambda r: _info(r, features={**_features(r), "action": {"dtype": "float32", "shape": "1"}}),
        r"features\['action'\]\['shape'\] must be \[N\]",
    ),
    (
        "stats mean text",
        lambda r: _stats(r, "observation.state", mean="abc"),
        r"observation.state.mean must be a list of 2 finite numbers",
    ),
    (
        "stats std too short",
        lambda r: _stats(r, "action", std=[]),
        r"action.std must be a list of 1 finite numbers",
    ),
    ("stats entry a list", lambda r: _stats(r, "action", whole=[1.0]), r"'action' must be an object"),
    (
        "state narrower than features",
        lambda r: _columns(
            r, lambda t: t.set_column(0, "observation.state", _narrow(t, "observation.state"))
        ),
        r"episode 0: observation.state rows hold 1 numbers but meta/info.json's features say 2",
    ),
    (
        "features wider than state",
        lambda r: (
            (r / "meta/stats.json").unlink(),  # (stats of the old width are refused first)
            _info(r, features={**_features(r), "action": {"dtype": "float32", "shape": [3]}}),
        ),
        r"episode 0: action rows hold 1 numbers but meta/info.json's features say 3",
    ),
    (
        "episode row twice",
        lambda r: _rows(r / EPISODES, lambda rows: rows + rows[:1]),
        r"episode_index 0 listed more than once \(1 episode\(s\)\)",
    ),
    (
        "frames twice",
        lambda r: _rows(r / DATA, lambda rows: rows + [x for x in rows if x["episode_index"] == 0]),
        r"episode 0 has 6 frames in its data file but its episode row says length 3",
    ),
]


def _features(root: Path) -> dict[str, Any]:
    return dict(json.loads((root / "meta" / "info.json").read_text())["features"])


def _stats(root: Path, key: str, whole: Any = None, **fields: Any) -> None:
    path = root / "meta" / "stats.json"
    stats = json.loads(path.read_text())
    stats[key] = whole if whole is not None else {**stats[key], **fields}
    path.write_text(json.dumps(stats))


def _rows(path: Path, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    pq.write_table(pa.Table.from_pylist(change(table.to_pylist()), schema=table.schema), path)


def _columns(root: Path, change: Callable[[Any], Any]) -> None:
    import pyarrow.parquet as pq

    pq.write_table(change(pq.read_table(root / DATA)), root / DATA)


def _narrow(table: Any, column: str) -> Any:
    import pyarrow as pa

    return pa.array([row[:1] for row in table.column(column).to_pylist()], type=pa.list_(pa.float32()))


@pytest.mark.parametrize(("label", "damage", "match"), CASES, ids=[c[0] for c in CASES])
def test_damage_is_named(ds: Path, label: str, damage: Damage, match: str) -> None:
    damage(ds)
    with pytest.raises(DatasetError, match=match):
        Dataset(ds).episode(0)


def test_clean_dataset_reads_and_errors_are_hotloop_errors(ds: Path) -> None:
    data = Dataset(ds)
    assert len(data) == 2 and data.fps == 10.0
    ep = data.episode(1)
    assert ep.state.shape == (3, 2) and ep.action.shape == (3, 1) and ep.images["top"].shape == (3, 4, 4, 3)
    assert issubclass(DatasetError, HotloopError)


# ---- property-based: any info.json content, any truncation ------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 100) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
INFO_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "codebase_version": st.sampled_from(["v3.0", "v2.1", ""]) | JSON,
        "fps": st.sampled_from([10, 0.5, -1, "10"]) | JSON,
        "features": JSON,
        "data_path": st.sampled_from([DATA_PATH, "{chunk_index}", "{x}", "data/{0}"]) | JSON,
    },
)


def _reads_or_names_it(root: Path) -> None:
    try:
        data = Dataset(root)
        for i in range(len(data)):
            data.episode(i)
    except DatasetError as exc:
        assert "\n" not in str(exc) and str(exc), repr(exc)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=INFO_FIELDS, whole=st.none() | JSON)
def test_any_info_json_reads_or_gives_one_line(ds: Path, fields: dict[str, Any], whole: Any) -> None:
    info_path = ds / "meta" / "info.json"
    original = info_path.read_text()
    if whole is not None:
        info_path.write_text(json.dumps(whole))
    else:
        _info(ds, **fields)
    _reads_or_names_it(ds)
    info_path.write_text(original)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from([DATA, EPISODES, "meta/tasks.parquet"]), keep=st.floats(0.0, 1.0))
def test_any_truncated_parquet_reads_or_gives_one_line(ds: Path, which: str, keep: float) -> None:
    path = ds / which
    original = path.read_bytes()
    path.write_bytes(original[: int(len(original) * keep)])
    _reads_or_names_it(ds)
    path.write_bytes(original)


@pytest.mark.parametrize(
    "command",
    [
        ["compress", "pi05:tiny", "--recipe", "quantize", "--quiet", "--data"],
        ["compile", "pi05:tiny", "--budget-ms", "1e5", "--backends", "eager", "--calibration"],
    ],
    ids=["compress", "compile"],
)
def test_compile_and_compress_refuse_a_state_column_features_do_not_describe(
    ds: Path, tmp_path: Path, command: list[str]
) -> None:
    """Issue 24, defect 7: data whose state rows are narrower than `features` says is refused by name
    (it used to be read as it came, for a model sized by `features`)."""
    from typer.testing import CliRunner

    from hotloop.cli import app

    _columns(ds, lambda t: t.set_column(0, "observation.state", _narrow(t, "observation.state")))
    out = tmp_path / "art"
    res = CliRunner().invoke(app, [*command[:2], "-o", str(out), *command[2:], str(ds)])
    assert res.exit_code == 2, res.output
    line = res.output.strip().splitlines()[-1]
    assert line.startswith("error: ") and "observation.state rows hold 1 numbers but" in line, res.output
    assert not out.exists()
