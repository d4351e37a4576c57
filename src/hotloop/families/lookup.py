"""Row lookups in a table constant, outside any graph (pi's token embedding).

A prompt reads a few hundred rows of a vocabulary-sized table (pi0.5: 257,152 x 2048, a quarter of its
weights). Inside a compiled graph that table is a constant the backend keeps resident; outside, a
loaded artifact maps it from its own file and gathers only the rows a prompt names, so only their pages
are read (`hotloop.compile.lookup_tables`). The table is stored in the plan's precision:

| stored as | when the consuming stage runs | rows come back as |
|---|---|---|
| float32 (V, W) | fp32 | the rows themselves |
| float16 (V, W) | bf16 (the precision OpenVINO already stores bf16 graph weights in) | float32 |
| int8 (V, W + 4) | a quantized precision: each row's symmetric int8 values followed by its float32 | float32, |
|                 | scale's 4 bytes, so one row is one contiguous read | q * scale |
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

SCALE_BYTES = 4  # a float32 scale after each int8 row


def lookup_dtype(precision: str) -> torch.dtype:
    """The dtype a lookup table is stored in for a consuming stage of `precision`."""
    if precision == "fp32":
        return torch.float32
    if precision in ("bf16", "fp16"):
        return torch.float16
    return torch.int8


class RowTable(Protocol):
    """A table read by rows: a tensor, or a loaded artifact's file (`hotloop.compile.lean_files.FileRows`)."""

    dtype: torch.dtype
    shape: torch.Size

    def __getitem__(self, ids: Tensor) -> Tensor: ...


def lookup_rows(table: Tensor | RowTable, ids: Tensor) -> Tensor:
    """Rows `ids` (any shape of int64) of `table` as float32, shape ids.shape + (W,)."""
    rows = table[ids]
    if table.dtype != torch.int8:
        return rows.float()
    width = table.shape[-1] - SCALE_BYTES
    scale = rows[..., width:].contiguous().view(torch.float32)  # (..., 1)
    return rows[..., :width].float() * scale


def stored_table(table: Tensor, dtype: torch.dtype) -> Tensor:
    """`table` (V, W, any float dtype) as stored for `dtype` (see the module doc); fp32 rows are the
    table itself when it already is fp32 (no copy)."""
    if dtype != torch.int8:
        return table.detach().to(dtype)
    out = torch.empty(table.shape[0], table.shape[1] + SCALE_BYTES, dtype=torch.int8)
    chunk = 16384  # rows at a time: a full-size table's float32 copy is 2 GB
    for start in range(0, table.shape[0], chunk):
        rows = table[start : start + chunk].detach().float()
        scale = rows.abs().amax(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny) / 127.0
        out[start : start + chunk, : table.shape[1]] = (
            torch.round(rows / scale).clamp(-127, 127).to(torch.int8)
        )
        out[start : start + chunk, table.shape[1] :] = scale.view(torch.int8).reshape(
            rows.shape[0], SCALE_BYTES
        )
    return out
