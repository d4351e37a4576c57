import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The tests test the checkout they live in, also where the venv's editable install points at another one
# (git worktrees sharing one venv): its sources first, here and in every child process the tests start.
_CHECKOUT_SOURCES = [
    str(Path(__file__).resolve().parents[1] / "src"),
    str(Path(__file__).resolve().parents[1] / "plugins" / "lerobot_policy_hotloop" / "src"),
]
sys.path[:0] = [p for p in _CHECKOUT_SOURCES if p not in sys.path]
os.environ["PYTHONPATH"] = os.pathsep.join([*_CHECKOUT_SOURCES, os.environ.get("PYTHONPATH", "")]).rstrip(
    os.pathsep
)

# MuJoCo reads its GL backend at import: headless EGL on machines without a display.
os.environ.setdefault("MUJOCO_GL", "egl")
# `hotloop compile` refuses to time on a busy machine; the tests run beside each other (xdist), and time
# nothing they assert on. The refusal itself is tested with its own --max-load.
os.environ.setdefault("HOTLOOP_MAX_LOAD", "inf")
# hotloop's cache (`hotloop compile`'s candidate timings) is never the user's, nor shared between tests:
# the session's own here (for session fixtures), each module's own (module fixtures, which pytest sets up
# before any test's), each test's own. Only named: a folder is made by the first run that writes.
os.environ["HOTLOOP_CACHE_DIR"] = os.path.join(
    tempfile.gettempdir(), f"hotloop-test-cache-{uuid.uuid4().hex}"
)


def _fresh_cache_dir(factory: pytest.TempPathFactory) -> str:
    return str(factory.getbasetemp() / "hotloop-cache" / uuid.uuid4().hex)


@pytest.fixture(autouse=True, scope="module")
def _module_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOTLOOP_CACHE_DIR", _fresh_cache_dir(tmp_path_factory))
        yield


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOTLOOP_CACHE_DIR", _fresh_cache_dir(tmp_path_factory))


DEFAULT_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "


@pytest.fixture
def run_in_child() -> Callable[..., str]:
    """Run `function()` of a test module in a fresh interpreter and return its stderr.

    For scenarios that send SIGINT to their own process: after hundreds of tests the signal can land
    inside a C extension's callback (the suite's interpreter crashed there), so such a scenario runs in a
    child that holds only what it imports, and a crash fails its one test instead of the whole suite.
    """

    def run(test_file: str, function: str, timeout: float = 120.0) -> str:
        here = Path(test_file).parent
        module = Path(test_file).stem
        child = subprocess.run(
            # SIGINT as a terminal leaves it: a suite started in the background of a non-interactive shell
            # inherits SIGINT ignored, and Python then installs no handler of its own to restore.
            [
                sys.executable,
                "-c",
                f"{DEFAULT_SIGINT}import {module} as t; t.{function}(); print('scenario ok')",
            ],
            cwd=here,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert child.returncode == 0 and "scenario ok" in child.stdout, (
            child.stdout[-2000:] + child.stderr[-3000:]
        )
        return child.stderr

    return run


@pytest.fixture
def compile_tiny() -> Callable[..., object]:
    """`compile_tiny(out, backends, precisions="fp32", *extra)` -> the CliRunner result of a quick
    `hotloop compile pi05:tiny` (plain recipe, one thread, one timed call, no warm-up, budget 1e5 ms)."""
    from typer.testing import CliRunner

    from hotloop.cli import app

    def run(out: Path, backends: str, precisions: str = "fp32", *extra: str) -> object:
        args = ["compile", "pi05:tiny", "-o", str(out), "--budget-ms", "1e5", "--backends", backends]
        args += ["--precisions", precisions, "--variants", "plain", "--iters", "1", "--warmup", "0"]
        return CliRunner().invoke(app, [*args, "--threads", "1", *extra])

    return run


@pytest.fixture(autouse=True, scope="session")
def _one_intra_op_thread_per_worker() -> Iterator[None]:
    """Under xdist (`make test`: two workers on two cores) each worker's torch runs one intra-op thread from
    the session's start. The directories' own one-thread fixtures are per test, so the session and module
    fixtures set up before them (trained checkpoints, recorded episodes) ran on every core beside the other
    worker: diffusion's `trained_ckpt` took 67 s that way against 18 s on one thread, with one other job on
    the machine. Tests that set threads themselves still do."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="session")
def _matmul_peaks_measured_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Without a cache that `hotloop doctor` wrote, every bench (and every compress judge, compile's search)
    measures the CPU's matmul peaks again, by design (only doctor writes that cache). A fresh CI machine
    has none, so the suite measured them on each of its ~100 benches, 2-3 s each. Here the first bench at
    a thread count measures them, as doctor would, into this session's own folder (never the user's
    ~/.cache), and the later ones read them. Tests of the measuring and of the cache pass their own folder."""
    from hotloop.measure import roofline

    folder = tmp_path_factory.getbasetemp() / "roofline-peaks"
    read_or_measure = roofline.cached_peaks

    def cached_peaks(cache_dir: Path | None = None, measure: bool = True) -> roofline.MatmulPeaks | None:
        if cache_dir is not None:
            return read_or_measure(cache_dir, measure)
        peaks = read_or_measure(folder, measure)
        if peaks is not None and roofline.load_peaks(folder, peaks.key) is None:
            roofline.save_peaks(folder, peaks)
        return peaks

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(roofline, "cached_peaks", cached_peaks)
        yield


@pytest.fixture
def compress_refuses(tmp_path: Path) -> Callable[..., None]:
    """`compress_refuses(target, recipe, message, *flags)`: `hotloop compress TARGET --recipe RECIPE -o OUT
    *flags` is refused before any work: exit 2, one `error:` line holding `message`, nothing written (no
    artifact, no work folder)."""
    from typer.testing import CliRunner

    from hotloop.cli import app

    out = tmp_path / "a"

    def check(target: str, recipe: str, message: str, *flags: str) -> None:
        res = CliRunner().invoke(app, ["compress", target, "--recipe", recipe, "-o", str(out), *flags])
        assert res.exit_code == 2, (recipe, res.output)
        errors = [line for line in res.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0], (recipe, res.output)
        assert not out.exists() and not (tmp_path / ".a.work").exists(), recipe

    return check


@pytest.fixture
def compress_rows(tmp_path: Path) -> Callable[..., tuple[Path, list[dict[str, Any]]]]:
    """`compress_rows(target, recipe, *flags)`: `hotloop compress TARGET --recipe RECIPE -o OUT --json J
    *flags` succeeds (exit 0); returns OUT and the report's rows (one per step, the reference first)."""
    import json

    from typer.testing import CliRunner

    from hotloop.cli import app

    out, js = tmp_path / "art", tmp_path / "report.json"

    def run(target: str, recipe: str, *flags: str) -> tuple[Path, list[dict[str, Any]]]:
        res = CliRunner().invoke(
            app, ["compress", target, "--recipe", recipe, "-o", str(out), "--json", str(js), *flags]
        )
        assert res.exit_code == 0, res.output
        return out, json.loads(js.read_text())["rows"]

    return run
