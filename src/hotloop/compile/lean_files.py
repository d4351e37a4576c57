"""An artifact's tensor files read without copies (`hotloop.compile.artifact`): a lean artifact's tables and
lookup tables, a weights-layout artifact's source weights.

A lookup table is read by rows with `pread` (`FileRows`): a prompt's gather reads its distinct rows and
keeps nothing else, so a 1 GB token embedding costs the engine a few hundred KiB. Source weights (a
weights-layout artifact) are mapped through `np.memmap` (copy-on-write, so torch may hold them as
writable tensors; nothing is ever written): file-backed pages the kernel shares and can drop, never a
second anonymous copy. The safetensors layout is fixed by its specification: an
8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the data.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hotloop.errors import CheckpointError

# safetensors dtype -> (numpy dtype read from the file, torch dtype it is viewed as)
_DTYPES: dict[str, tuple[Any, torch.dtype]] = {
    "F32": (np.float32, torch.float32),
    "F16": (np.float16, torch.float16),
    "BF16": (np.int16, torch.bfloat16),
    "I8": (np.int8, torch.int8),
    "F64": (np.float64, torch.float64),
    "I64": (np.int64, torch.int64),
    "I32": (np.int32, torch.int32),
    "U8": (np.uint8, torch.uint8),
    "BOOL": (np.bool_, torch.bool),
}


def lookup_file(name: str) -> str:
    return f"{name}.safetensors"


def save_tensors(path: Path, tensors: dict[str, Tensor]) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(path))


def read_tables(path: Path) -> dict[str, Tensor]:
    """The float tables of `path` (small: read whole)."""
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own types
        raise CheckpointError(
            f"{path}: not a tables file ({type(exc).__name__}: {str(exc)[:200]}); recompile the artifact"
        ) from None


class FileRows:
    """A (V, W) table of a safetensors file, read by rows with `pread`: `rows[ids]` -> a tensor of shape
    ids.shape + (W,) in the table's dtype. Nothing of the table is mapped or kept: a prompt's gather
    reads its distinct rows (a few hundred KiB) and holds only them. (Mapping the file instead made
    whole page-cache folios resident per row touched: 200 rows of a 64 MiB table cost 40 MiB of
    resident memory on Linux 6.18, growing toward the whole table as prompts vary, which an engine's
    memory cap would then count as growth.)"""

    def __init__(self, path: Path, name: str) -> None:
        size, header = _header(path)
        try:
            info = header[name]
            self._np_dtype, self.dtype = _DTYPES[info["dtype"]]
            begin, end = (int(x) for x in info["data_offsets"])
            self.shape = torch.Size(int(d) for d in info["shape"])
            if len(self.shape) != 2 or end - begin != self.shape.numel() * np.dtype(self._np_dtype).itemsize:
                raise ValueError(
                    f"a lookup table is (rows, width); data offsets do not match {list(self.shape)}"
                )
            if 8 + size + end > path.stat().st_size:
                raise ValueError("the file is truncated")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(
                f"{path}: cannot read table {name!r} ({type(exc).__name__}: {exc}); recompile the artifact"
            ) from None
        self.path, self.name = path, name
        self._row_bytes = self.shape[1] * np.dtype(self._np_dtype).itemsize
        self._start = 8 + size + begin
        self._fd = os.open(path, os.O_RDONLY)

    def __getitem__(self, ids: Tensor) -> Tensor:
        flat = ids.reshape(-1).tolist()
        distinct = sorted(set(flat))
        if distinct and (distinct[0] < 0 or distinct[-1] >= self.shape[0]):
            raise IndexError(f"row ids must lie in [0, {self.shape[0]}) for table {self.name!r}")
        n = self._row_bytes
        buf = bytearray(len(distinct) * n)
        view = memoryview(buf)
        for i, row in enumerate(distinct):
            if os.preadv(self._fd, [view[i * n : (i + 1) * n]], self._start + row * n) != n:
                raise CheckpointError(
                    f"{self.path}: short read of table {self.name!r}; recompile the artifact"
                )
        # Gathered in numpy (one thread): torch's parallel index kernel took 29 ms here beside other jobs.
        rows = np.frombuffer(buf, dtype=self._np_dtype).reshape(len(distinct), self.shape[1])
        where = {row: i for i, row in enumerate(distinct)}
        out = torch.from_numpy(rows[np.fromiter((where[r] for r in flat), np.int64, len(flat))])
        out = out.view(self.dtype) if self.dtype == torch.bfloat16 else out
        return out.reshape(*ids.shape, self.shape[1])

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


def mapped_state_dict(path: Path) -> dict[str, Tensor]:
    """Every tensor of the safetensors file `path`, memory-mapped: a weights-layout artifact's source
    weights cost file-backed pages the kernel shares and can drop, never a second anonymous copy."""
    size, header = _header(path)
    return {name: _mapped(path, size, header, name) for name in header if name != "__metadata__"}


def _header(path: Path) -> tuple[int, dict[str, Any]]:
    try:
        with path.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > 100 * 2**20:
                raise ValueError(f"header of {size} bytes")
            header = json.loads(f.read(size))
        if not isinstance(header, dict):
            raise ValueError("the header is not an object")
    except (OSError, ValueError, struct.error) as exc:
        raise CheckpointError(
            f"{path}: not a safetensors file ({type(exc).__name__}: {exc}); recompile the artifact"
        ) from None
    return size, header


def _mapped(path: Path, size: int, header: dict[str, Any], name: str) -> Tensor:
    try:
        info = header[name]
        np_dtype, torch_dtype = _DTYPES[info["dtype"]]
        begin, end = (int(x) for x in info["data_offsets"])
        shape = tuple(int(d) for d in info["shape"])
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * np.dtype(np_dtype).itemsize or 8 + size + end > path.stat().st_size:
            raise ValueError("data offsets do not match the shape, or the file is truncated")
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        raise CheckpointError(
            f"{path}: cannot map table {name!r} ({type(exc).__name__}: {exc}); recompile the artifact"
        ) from None
    if count == 0:
        return torch.empty(shape, dtype=torch_dtype)
    offset = 8 + size + begin
    array: np.ndarray = np.memmap(path, dtype=np_dtype, mode="c", offset=offset, shape=shape)
    if offset % np.dtype(np_dtype).itemsize:  # misaligned after an odd-sized tensor: read it instead
        array = np.array(array)
    tensor = torch.from_numpy(array)
    return tensor.view(torch_dtype) if torch_dtype == torch.bfloat16 else tensor
