"""Episodes on disk in the LeRobotDataset v3 layout, and a reader for them.

Layout (see docs/dataset.md)::

    DIR/meta/info.json                              codebase_version "v3.0", fps, features, paths
    DIR/meta/stats.json                             per-feature mean/std/min/max (numeric features)
    DIR/meta/tasks.parquet                          task_index, task (the prompt)
    DIR/meta/episodes/chunk-000/file-000.parquet    one row per episode: length, row range, success, seed
    DIR/data/chunk-000/file-000.parquet             one row per frame

Frames are stored as PNG bytes inside the data parquet (a `{bytes, path}` struct, the way LeRobot and
Hugging Face `datasets` store `image` features), so a dataset is a handful of files with no video codec
needed. Video-encoded LeRobot datasets (`dtype: "video"`) are recognised and refused with a clear message.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError, DatasetError
from hotloop.io import atomic_write_json

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _unpng(data: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.uint8)


@dataclass
class EpisodeBuffer:
    states: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    images: dict[str, list[bytes]] = field(default_factory=dict)


class DatasetWriter:
    """Collects episodes frame by frame; `finish()` writes the whole dataset (atomically per file)."""

    def __init__(
        self,
        root: str | Path,
        *,
        fps: float,
        robot_type: str,
        state_names: list[str],
        action_names: list[str],
        image_keys: list[str],
        image_shape: tuple[int, int, int],
    ) -> None:
        self.root = Path(root)
        if (self.root / "meta" / "info.json").exists():
            raise ConfigError(f"{self.root} already holds a dataset; pick a new -o directory or delete it")
        self.fps = fps
        self.robot_type = robot_type
        self.state_names = state_names
        self.action_names = action_names
        self.image_keys = image_keys
        self.image_shape = image_shape
        self.tasks: dict[str, int] = {}
        self._rows: dict[str, list[Any]] = {
            k: []
            for k in [
                "observation.state",
                "action",
                "timestamp",
                "frame_index",
                "episode_index",
                "index",
                "task_index",
            ]
        }
        for key in image_keys:
            self._rows[f"observation.images.{key}"] = []
        self._episodes: list[dict[str, Any]] = []
        self._current = EpisodeBuffer()

    def add_frame(self, obs: dict[str, Any], action: np.ndarray) -> None:
        self._current.states.append(np.asarray(obs["state"], dtype=np.float32))
        self._current.actions.append(np.asarray(action, dtype=np.float32))
        for key in self.image_keys:
            self._current.images.setdefault(key, []).append(_png(obs["images"][key]))

    def end_episode(self, task: str, **extra: Any) -> None:
        ep = self._current
        if not ep.states:
            raise ConfigError("an episode needs at least one frame")
        task_index = self.tasks.setdefault(task, len(self.tasks))
        episode_index = len(self._episodes)
        start = len(self._rows["index"])
        n = len(ep.states)
        for i in range(n):
            self._rows["observation.state"].append(ep.states[i].tolist())
            self._rows["action"].append(ep.actions[i].tolist())
            self._rows["timestamp"].append(i / self.fps)
            self._rows["frame_index"].append(i)
            self._rows["episode_index"].append(episode_index)
            self._rows["index"].append(start + i)
            self._rows["task_index"].append(task_index)
            for key in self.image_keys:
                self._rows[f"observation.images.{key}"].append({"bytes": ep.images[key][i], "path": None})
        self._episodes.append(
            {
                "episode_index": episode_index,
                "tasks": [task],
                "length": n,
                "data/chunk_index": 0,
                "data/file_index": 0,
                "dataset_from_index": start,
                "dataset_to_index": start + n,
                "meta/episodes/chunk_index": 0,
                "meta/episodes/file_index": 0,
                **extra,
            }
        )
        self._current = EpisodeBuffer()

    def finish(self, extra_info: dict[str, Any] | None = None) -> Path:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._episodes:
            raise ConfigError("no episodes were recorded; nothing to write")
        root = self.root
        image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        types = {
            "observation.state": pa.list_(pa.float32()),
            "action": pa.list_(pa.float32()),
            "timestamp": pa.float32(),
            "frame_index": pa.int64(),
            "episode_index": pa.int64(),
            "index": pa.int64(),
            "task_index": pa.int64(),
        }
        arrays = {k: pa.array(v, type=types.get(k, image_type)) for k, v in self._rows.items()}
        _write_parquet(pa.table(arrays), root / DATA_PATH.format(chunk_index=0, file_index=0), pq)
        _write_parquet(
            pa.Table.from_pylist(self._episodes), root / EPISODES_PATH.format(chunk_index=0, file_index=0), pq
        )
        tasks = sorted(self.tasks.items(), key=lambda kv: kv[1])
        _write_parquet(
            pa.table({"task_index": [i for _, i in tasks], "task": [t for t, _ in tasks]}),
            root / "meta" / "tasks.parquet",
            pq,
        )
        states = np.asarray(self._rows["observation.state"], dtype=np.float32)
        actions = np.asarray(self._rows["action"], dtype=np.float32)
        atomic_write_json(
            root / "meta" / "stats.json",
            {"observation.state": _stats(states), "action": _stats(actions)},
        )
        h, w, c = self.image_shape
        features: dict[str, Any] = {
            "observation.state": {"dtype": "float32", "shape": [states.shape[1]], "names": self.state_names},
            "action": {"dtype": "float32", "shape": [actions.shape[1]], "names": self.action_names},
            "timestamp": {"dtype": "float32", "shape": [1], "names": None},
            "frame_index": {"dtype": "int64", "shape": [1], "names": None},
            "episode_index": {"dtype": "int64", "shape": [1], "names": None},
            "index": {"dtype": "int64", "shape": [1], "names": None},
            "task_index": {"dtype": "int64", "shape": [1], "names": None},
        }
        for key in self.image_keys:
            features[f"observation.images.{key}"] = {
                "dtype": "image",
                "shape": [h, w, c],
                "names": ["height", "width", "channels"],
            }
        info = {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": self.robot_type,
            "total_episodes": len(self._episodes),
            "total_frames": len(self._rows["index"]),
            "total_tasks": len(self.tasks),
            "chunks_size": 1000,
            "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 500,
            "fps": self.fps,
            "splits": {"train": f"0:{len(self._episodes)}"},
            "data_path": DATA_PATH,
            "video_path": None,
            "features": features,
            **(extra_info or {}),
        }
        atomic_write_json(root / "meta" / "info.json", info)  # last: its presence marks a complete dataset
        return root


def _write_parquet(table: Any, path: Path, pq: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


def _stats(x: np.ndarray) -> dict[str, list[float]]:
    return {
        "mean": x.mean(0).tolist(),
        "std": x.std(0).tolist(),
        "min": x.min(0).tolist(),
        "max": x.max(0).tolist(),
        "count": [int(x.shape[0])],
    }


@dataclass
class Episode:
    index: int
    task: str
    state: np.ndarray  # (T, state_dim) float32
    action: np.ndarray  # (T, action_dim) float32
    images: dict[str, np.ndarray]  # key -> (T, H, W, 3) uint8
    meta: dict[str, Any]


class Dataset:
    """Reads a LeRobot v3-layout dataset with image (not video) features.

    Every file is checked as it is read: a garbage `info.json`, a missing or truncated parquet, a
    non-numeric fps or a missing column becomes one `DatasetError` naming the file and the fix.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        info_path = self.root / "meta" / "info.json"
        if not info_path.is_file():
            raise DatasetError(
                f"{self.root} is not a dataset: {info_path} is missing (record one with `hotloop record`)"
            )
        self.info: dict[str, Any] = _read_json_object(info_path)
        version = self.info.get("codebase_version", "")
        if not isinstance(version, str) or not version.startswith("v3"):
            raise DatasetError(
                f"{info_path}: codebase_version {version!r} is not v3.x; convert it with LeRobot first"
            )
        features = self.info.get("features")
        if not isinstance(features, dict) or not all(isinstance(f, dict) for f in features.values()):
            raise DatasetError(f"{info_path}: 'features' must be an object of feature objects")
        self.features: dict[str, Any] = features
        videos = [k for k, f in self.features.items() if f.get("dtype") == "video"]
        if videos:
            raise DatasetError(
                f"{self.root}: features {videos} are video-encoded; this reader needs image features "
                "(re-record, or decode the videos to PNG frames first)"
            )
        missing = [k for k in ("observation.state", "action") if k not in self.features]
        if missing:
            raise DatasetError(f"{info_path}: 'features' lacks {', '.join(missing)}; not a robot dataset")
        self.image_keys = [
            k.removeprefix("observation.images.")
            for k in self.features
            if k.startswith("observation.images.")
        ]
        fps = self.info.get("fps")
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps) or fps <= 0:
            raise DatasetError(f"{info_path}: 'fps' must be a positive number (got {fps!r})")
        self.fps = float(fps)
        self.widths = {
            k: _feature_width(info_path, k, self.features[k]) for k in ("observation.state", "action")
        }
        _check_data_path(info_path, self.info.get("data_path"))
        ep_files = sorted((self.root / "meta" / "episodes").rglob("*.parquet"))
        if not ep_files:
            raise DatasetError(
                f"{self.root}: no episode files under meta/episodes/; the dataset is incomplete"
            )
        self.episodes: list[dict[str, Any]] = []
        for f in ep_files:
            rows = _read_parquet(f).to_pylist()
            for row in rows:
                lacking = [k for k in _EPISODE_COLUMNS if not isinstance(row.get(k), int)]
                if lacking:
                    raise DatasetError(f"{f}: episode rows need integer {', '.join(lacking)}")
            self.episodes.extend(rows)
        _check_unique_episodes(self.episodes, ep_files)
        self.episodes.sort(key=lambda e: e["episode_index"])
        tasks = _read_parquet(self.root / "meta" / "tasks.parquet").to_pylist()
        try:
            self.tasks = {int(t["task_index"]): str(t["task"]) for t in tasks}
        except (KeyError, TypeError, ValueError):
            raise DatasetError(
                f"{self.root / 'meta' / 'tasks.parquet'}: needs columns task_index (int) and task (text)"
            ) from None
        stats_path = self.root / "meta" / "stats.json"
        self.stats: dict[str, Any] = _read_json_object(stats_path) if stats_path.exists() else {}
        _check_stats(stats_path, self.stats, self.widths)
        self._tables: dict[tuple[int, int], Any] = {}

    def __len__(self) -> int:
        return len(self.episodes)

    def _table(self, chunk: int, file: int) -> Any:
        key = (chunk, file)
        if key not in self._tables:
            path = self.root / self.info["data_path"].format(chunk_index=chunk, file_index=file)
            table = _read_parquet(path)
            lacking = [c for c in _FRAME_COLUMNS if c not in table.column_names]
            lacking += [
                f"observation.images.{k}"
                for k in self.image_keys
                if f"observation.images.{k}" not in table.column_names
            ]
            if lacking:
                raise DatasetError(f"{path}: missing columns {', '.join(lacking)}")
            self._tables[key] = table
        return self._tables[key]

    def episode(self, i: int, images: bool = True) -> Episode:
        meta = self.episodes[i]
        table = self._table(int(meta["data/chunk_index"]), int(meta["data/file_index"]))
        rows = table.filter(_equal(table, "episode_index", int(meta["episode_index"])))
        where = f"{self.root}: episode {meta['episode_index']}"
        if rows.num_rows == 0:
            raise DatasetError(f"{where} has no frames in its data file; the dataset is incomplete")
        try:
            state = np.asarray(rows.column("observation.state").to_pylist(), dtype=np.float32)
            action = np.asarray(rows.column("action").to_pylist(), dtype=np.float32)
        except (TypeError, ValueError):
            raise DatasetError(
                f"{where}: observation.state and action must be number lists of one length"
            ) from None
        if state.ndim != 2 or action.ndim != 2:
            raise DatasetError(f"{where}: observation.state and action must be number lists of one length")
        for key, column in (("observation.state", state), ("action", action)):
            if column.shape[1] != self.widths[key]:  # a model would be built for one width, fed another
                raise DatasetError(
                    f"{where}: {key} rows hold {column.shape[1]} numbers but meta/info.json's features say "
                    f"{self.widths[key]}; the data and its description disagree (re-record the dataset)"
                )
        for key, column in (("observation.state", state), ("action", action)):
            _check_finite_column(where, rows, key, column)
        length = meta.get("length")
        if isinstance(length, int) and not isinstance(length, bool) and rows.num_rows != length:
            raise DatasetError(
                f"{where} has {rows.num_rows} frames in its data file but its episode row says length "
                f"{length} (frames duplicated or lost in a copy or merge?); re-record or repair the dataset"
            )
        imgs: dict[str, np.ndarray] = {}
        if images:
            for key in self.image_keys:
                cells = rows.column(f"observation.images.{key}").to_pylist()
                try:
                    imgs[key] = np.stack([_unpng(c["bytes"]) for c in cells])
                except Exception as exc:  # PIL raises many types on damaged image bytes
                    raise DatasetError(
                        f"{where}: image {key!r} cannot be decoded ({type(exc).__name__})"
                    ) from None
        task_index = int(rows.column("task_index")[0].as_py())
        return Episode(int(meta["episode_index"]), self.tasks.get(task_index, ""), state, action, imgs, meta)

    def __iter__(self) -> Any:
        for i in range(len(self)):
            yield self.episode(i)


def _check_finite_column(where: str, rows: Any, key: str, column: np.ndarray) -> None:
    """Refuse a state or action column holding NaN or inf, naming the first bad value by the frame it is
    in (frame_index within the episode, the dataset's row `index`) and its position in the vector: where
    a user finds it in the data file, before any model sees (and averages, chunks or shifts) it."""
    bad = ~np.isfinite(column)
    if not bad.any():
        return
    row, col = (int(i) for i in np.argwhere(bad)[0])
    frame = _cell(rows, "frame_index", row)
    index = _cell(rows, "index", row)
    at = f"frame {frame if frame is not None else row}" + (
        f" (dataset row {index})" if index is not None else ""
    )
    raise DatasetError(
        f"{where}, {at}: {key}[{col}] is {column[row, col]}; hotloop reads no non-finite state or action: "
        "fix or drop that episode"
    )


def _cell(rows: Any, column: str, row: int) -> int | None:
    if column not in rows.column_names:
        return None
    value = rows.column(column)[row].as_py()
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


_EPISODE_COLUMNS = ("episode_index", "data/chunk_index", "data/file_index")
# Format widths in `data_path` ({chunk_index:03d}): LeRobot writes 3; a huge one ({chunk_index:999999999d})
# would build a gigabyte file name before any check could see it.
_MAX_PATH_WIDTH = 20


def _feature_width(info_path: Path, key: str, feature: dict[str, Any]) -> int:
    """The length of a state / action vector as `features` states it: `shape` is [one positive integer]."""
    shape = feature.get("shape")
    if (
        not isinstance(shape, list)
        or len(shape) != 1
        or isinstance(shape[0], bool)
        or not isinstance(shape[0], int)
        or not 1 <= shape[0] <= 1_000_000
    ):
        raise DatasetError(
            f"{info_path}: features[{key!r}]['shape'] must be [N], N a positive integer (got {shape!r})"
        )
    return int(shape[0])


def _check_data_path(info_path: Path, data_path: Any) -> None:
    """`data_path` is a pattern of chunk_index and file_index with small integer widths, nothing else."""
    import string

    shown = repr(data_path) if len(repr(data_path)) <= 80 else repr(data_path)[:77] + "..."
    fix = f"'data_path' must be a pattern like {DATA_PATH!r} (got {shown})"
    if not isinstance(data_path, str) or len(data_path) > 1000:
        raise DatasetError(f"{info_path}: {fix}")
    try:
        fields = [
            (name, spec) for _, name, spec, _ in string.Formatter().parse(data_path) if name is not None
        ]
    except ValueError:
        raise DatasetError(f"{info_path}: {fix}") from None
    for name, spec in fields:
        digits = (spec or "").removesuffix("d").lstrip("0")
        if name not in ("chunk_index", "file_index") or not (digits == "" or digits.isdigit()):
            raise DatasetError(f"{info_path}: {fix}")
        if digits and int(digits) > _MAX_PATH_WIDTH:
            raise DatasetError(
                f"{info_path}: 'data_path' pads {name} to {int(digits)} digits; at most {_MAX_PATH_WIDTH} "
                f"(LeRobot writes {DATA_PATH!r})"
            )


def _check_unique_episodes(rows: list[dict[str, Any]], files: list[Path]) -> None:
    """Each episode once: a duplicated episode row (a merge or copy gone wrong) would read its frames twice
    and double that episode's weight in training and calibration."""
    seen: dict[int, int] = {}
    for row in rows:
        index = row["episode_index"]
        seen[index] = seen.get(index, 0) + 1
    repeated = sorted(i for i, n in seen.items() if n > 1)
    if repeated:
        shown = ", ".join(str(i) for i in repeated[:5]) + (", ..." if len(repeated) > 5 else "")
        where = files[0].parent.parent if files else "meta/episodes"
        raise DatasetError(
            f"{where}: episode_index {shown} listed more than once ({len(repeated)} episode(s)); each "
            "episode must appear once (remove the duplicate rows, or re-record the dataset)"
        )


def _check_stats(path: Path, stats: dict[str, Any], widths: dict[str, int]) -> None:
    """The state / action entries of stats.json are objects of number lists as long as the feature:
    normalisation reads them as arrays of that width."""
    for key, width in widths.items():
        entry = stats.get(key)
        if entry is None:
            continue
        if not isinstance(entry, dict):
            raise DatasetError(f"{path}: {key!r} must be an object of mean/std/min/max lists")
        for name in ("mean", "std", "min", "max"):
            values = entry.get(name)
            if values is None:
                continue
            if (
                not isinstance(values, list)
                or len(values) != width
                or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                    for v in values
                )
            ):
                shown = repr(values)
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                raise DatasetError(
                    f"{path}: {key}.{name} must be a list of {width} finite numbers, as features says "
                    f"(got {shown}); re-record the dataset or recompute its stats"
                )


_FRAME_COLUMNS = ("observation.state", "action", "episode_index", "task_index")


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DatasetError(f"{path} is not a text file (binary or damaged); re-record the dataset") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}); re-record the dataset"
        ) from None
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path} must hold a JSON object {{...}}, not {type(data).__name__}")
    return data


def _read_parquet(path: Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise DatasetError(f"{path} is missing; the dataset is incomplete (re-record it)")
    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"{path} is not a readable parquet file (truncated or damaged?): {exc}") from None


def _equal(table: Any, column: str, value: int) -> Any:
    import pyarrow.compute as pc

    return pc.equal(table.column(column), value)
