"""A non-finite value in a recorded dataset is named where the user finds it (episode, frame, dataset row,
and the entry of the state or action vector), by every train-demo family, before any training."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from hotloop.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rec") / "ds"
    args = ["record", "--task", "conveyor-pick", "--episodes", "2", "--views", "top,wrist", "-o", str(out)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return out


def _poison(dataset: Path, column: str, row: int, entry: int, value: float) -> None:
    path = next((dataset / "data").rglob("*.parquet"))
    table = pq.read_table(path)
    cells = table.column(column).to_pylist()
    cells[row][entry] = value
    i = table.column_names.index(column)
    pq.write_table(table.set_column(i, column, pa.array(cells, type=table.schema.field(column).type)), path)


@pytest.mark.parametrize(
    ("family", "column", "entry", "value"),
    [
        ("pi", "action", 2, float("nan")),
        ("act", "observation.state", 5, float("inf")),
        ("diffusion", "action", 0, float("-inf")),
        ("smolvla", "observation.state", 1, float("nan")),
    ],
)
def test_train_demo_names_the_episode_frame_and_entry(
    recorded: Path, tmp_path: Path, family: str, column: str, entry: int, value: float
) -> None:
    dataset = Path(shutil.copytree(recorded, tmp_path / "ds"))
    first_length = (
        pq.read_table(next((dataset / "data").rglob("*.parquet")))
        .column("episode_index")
        .to_pylist()
        .count(0)
    )
    row = first_length + 3  # the fourth frame of episode 1
    _poison(dataset, column, row, entry, value)
    out = tmp_path / "out"
    res = runner.invoke(app, ["train-demo", "--family", family, "--dataset", str(dataset), "-o", str(out)])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output[-2000:]
    assert f"episode 1, frame 3 (dataset row {row}): {column}[{entry}] is {value}" in lines[0], lines[0]
    assert not (out / "model.safetensors").exists()
