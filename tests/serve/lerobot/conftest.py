"""The `--protocol lerobot` tests' servers run in the test's process: one intra-op thread for their policies
while a module runs (its servers are module fixtures), as the LeRobot side's processes get (lerobot_env)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="module")
def _single_intra_op_thread() -> Iterator[None]:
    """Tiny policies gain nothing from a second thread; on a 2-core box beside another xdist worker and the
    LeRobot processes, two OpenMP threads spin at their barriers. Restored after the module."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
