"""Absurd --memory-cap-mb values are refused at the flag by every command that takes it (bench, serve,
eval, and a sweep spec's memory_cap_mb), before any model is built: below 1 MiB, above this machine's
physical memory (a cap that can never be reached caps nothing), infinite or NaN."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.errors import ConfigError
from hotloop.targets import TargetOptions, check_cap

TOTAL_MB = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
ABSURD = ["1e30", "inf", "nan", "0.001", "-5", str(int(TOTAL_MB * 2))]


@pytest.mark.parametrize("value", ABSURD)
@pytest.mark.parametrize("command", ["bench", "serve", "eval"])
def test_every_command_refuses_an_absurd_cap_in_one_line(command: str, value: str, tmp_path) -> None:
    art = tmp_path / "art"  # not even there: the flag is refused first
    res = CliRunner().invoke(app, [command, str(art), "--memory-cap-mb", value])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert "--memory-cap-mb must be a number of MiB from 1 to this machine's" in lines[0], lines[0]


def test_the_bounds_themselves() -> None:
    check_cap(1.0)
    check_cap(TOTAL_MB)
    assert TargetOptions(memory_cap_mb=2048).memory_cap_mb == 2048
    with pytest.raises(ConfigError, match=f"{TOTAL_MB:,.0f} MiB of memory"):
        check_cap(TOTAL_MB + 1)
