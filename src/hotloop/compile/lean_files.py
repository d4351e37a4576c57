"""A lean artifact's own small files (`hotloop.compile.artifact`): the tables its pipeline feeds, and its
lookup tables, memory-mapped.

A lookup table is read through `np.memmap` over the safetensors file's data (copy-on-write, so torch may
hold it as a writable tensor; nothing is ever written): gathering a prompt's rows touches their pages
only, so a 1 GB token embedding costs the engine a few hundred KiB of resident memory, and the kernel
shares and drops those pages like any file's. The safetensors layout is fixed by its specification: an
8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the data.
"""

from __future__ import annotations

import json
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
    "I64": (np.int64, torch.int64),
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


def mapped_tensor(path: Path, name: str) -> Tensor:
    """Tensor `name` of the safetensors file `path`, memory-mapped (not read): see the module doc."""
    try:
        with path.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > 100 * 2**20:
                raise ValueError(f"header of {size} bytes")
            header = json.loads(f.read(size))
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
    array = np.memmap(path, dtype=np_dtype, mode="c", offset=8 + size + begin, shape=shape)
    tensor = torch.from_numpy(array)
    return tensor.view(torch_dtype) if torch_dtype == torch.bfloat16 else tensor
