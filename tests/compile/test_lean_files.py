"""A lean artifact's lookup table is read by rows, never mapped or kept: gathering a prompt's rows adds
only them to the resident set. The rows come back in float32 from the stored precision (fp32, fp16, int8 rows with a scale)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from hotloop.compile.lean_files import FileRows, mapped_state_dict
from hotloop.errors import CheckpointError
from hotloop.families.lookup import lookup_dtype, lookup_rows, stored_table
from hotloop.process_memory import release_free_heap, resident_bytes
from hotloop.runtime.memory import MIB

ROWS, WIDTH = 32768, 1024  # float16: 64 MiB


def _table_file(path: Path) -> np.ndarray:
    """A (ROWS, WIDTH) float16 safetensors file written 1 MiB at a time (the test never holds it whole);
    returns a few of its rows to check against."""
    header = json.dumps(
        {"t": {"dtype": "F16", "shape": [ROWS, WIDTH], "data_offsets": [0, ROWS * WIDTH * 2]}}
    )
    header += " " * (-len(header) % 8)
    rng = np.random.default_rng(0)
    per_chunk = (1 << 20) // (WIDTH * 2)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(header)) + header.encode())
        for _ in range(ROWS // per_chunk):
            f.write(rng.standard_normal((per_chunk, WIDTH)).astype(np.float16).tobytes())
    return np.fromfile(path, dtype=np.float16, count=3 * WIDTH, offset=8 + len(header)).reshape(3, WIDTH)


def test_gathering_rows_of_a_table_file_keeps_only_those_rows(tmp_path: Path) -> None:
    first = _table_file(tmp_path / "t.safetensors")
    table = FileRows(tmp_path / "t.safetensors", "t")
    ids = torch.randint(0, ROWS, (2, 200), generator=torch.Generator().manual_seed(0))
    lookup_rows(table, ids[:1])  # the libraries' one-time costs (allocator arenas, kernels) paid here
    release_free_heap()  # else the whole read below can land in free heap pages that are still resident
    before = resident_bytes()
    rows = lookup_rows(table, ids[1:])
    gathered = resident_bytes() - before
    assert rows.shape == (1, 200, WIDTH) and rows.dtype == torch.float32
    assert torch.equal(lookup_rows(table, torch.tensor([0, 2]))[1], torch.from_numpy(first[2]).float())
    assert gathered < 4 * MIB, f"{gathered / MIB:.1f} MiB resident after gathering 200 rows of a 64 MiB table"
    assert lookup_rows(table, ids[:, :0]).shape == (2, 0, WIDTH)
    with pytest.raises(IndexError, match="row ids must lie in"):
        table[torch.tensor([ROWS])]
    # The same table read whole (what a graph constant costs): the measurement sees it.
    whole = (tmp_path / "t.safetensors").read_bytes()
    assert resident_bytes() - before > 48 * MIB and len(whole) > ROWS * WIDTH * 2


def test_a_truncated_or_foreign_file_is_one_checkpoint_error(tmp_path: Path) -> None:
    _table_file(tmp_path / "t.safetensors")
    data = (tmp_path / "t.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        FileRows(tmp_path / "cut.safetensors", "t")
    (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        mapped_state_dict(tmp_path / "junk.safetensors")


def test_mapped_weights_equal_what_safetensors_reads(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    state = {
        "w": torch.randn(5, 7),
        "b": torch.randn(3).to(torch.bfloat16),
        "i": torch.arange(4),
        "m": torch.tensor([True, False, True]),  # odd-sized: the next tensor may be misaligned
        "h": torch.randn(2, 3).half(),
    }
    save_file(state, str(tmp_path / "w.safetensors"))
    mapped = mapped_state_dict(tmp_path / "w.safetensors")
    read = load_file(str(tmp_path / "w.safetensors"))
    assert set(mapped) == set(read)
    for name, tensor in read.items():
        assert mapped[name].dtype == tensor.dtype and torch.equal(mapped[name], tensor), name


@pytest.mark.parametrize("precision,dtype,min_cos", [("fp32", torch.float32, 0.999999), ("bf16", torch.float16, 0.99999),
                                                     ("int8", torch.int8, 0.9999), ("int4-weight", torch.int8, 0.9999)])  # fmt: skip
def test_stored_tables_give_back_rows_close_to_the_source(
    precision: str, dtype: torch.dtype, min_cos: float
) -> None:
    table = torch.randn(500, 64, generator=torch.Generator().manual_seed(0)) * 0.02
    assert lookup_dtype(precision) == dtype
    stored = stored_table(table, dtype)
    ids = torch.arange(500).reshape(5, 100)
    got, want = lookup_rows(stored, ids), table[ids]
    cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0)
    assert got.dtype == torch.float32 and got.shape == want.shape and float(cos) >= min_cos - 1e-7
    if dtype == torch.int8:
        assert stored.shape == (500, 64 + 4)  # each row's scale beside it
        assert float((got - want).abs().max()) <= float(table.abs().max()) / 127 + 1e-6
