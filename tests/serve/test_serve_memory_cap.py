"""`hotloop serve ART --memory-cap-mb`: a compiled pi05:tiny artifact served over real websockets with its
resident-memory cap. Over the cap at load: refused before the server listens. Over it while serving: the
request gets an error reply that names the cap (or the fallback engine answers), and /healthz turns 503."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from serve_helpers import healthz
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.client import PolicyClient, ServerError
from hotloop.runtime.memory import MIB
from hotloop.serve.policies import load_served_policy, serve_policy
from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread
from hotloop.serve.spec import zero_observation
from hotloop.targets import TargetOptions

runner = CliRunner()


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("serve-cap") / "art"
    args = ["compile", "pi05:tiny", "-o", str(out), "--budget-ms", "1e5", "--backends", "eager"]
    args += ["--precisions", "fp32", "--variants", "plain", "--iters", "1", "--warmup", "0"]
    res = runner.invoke(app, [*args, "--threads", "1", "--quiet"])
    assert res.exit_code == 0, res.output
    return out


def test_an_engine_over_its_cap_while_serving_gets_an_error_reply_and_healthz_503(art: Path) -> None:
    served = load_served_policy(str(art), TargetOptions(memory_cap_mb=4096))
    engine = served.policy.engine
    obs = zero_observation(served.observation_spec)
    with ServerThread(PolicyServer(served, ServeConfig(port=0))) as server:
        with PolicyClient(port=server.port) as client:
            assert client.infer(obs)["actions"].shape[0] > 0  # under the cap: served
            assert healthz(server.port) == (200, f"OK load_s={served.load_s:.3f}\n")  # ready, and how fast
            # Tighten the cap below what the engine already holds: its next call breaches it.
            engine.memory.cap_mb = engine.memory.footprint / MIB - 1  # below what it holds in any case
            with pytest.raises(ServerError) as err:
                client.infer(obs)
            assert "MemoryCapError" in str(err.value) and "--memory-cap-mb" in str(err.value)
            assert str(art) in str(err.value)
        code, reason = healthz(server.port)
        assert code == 503 and "over its memory cap" in reason and "--memory-cap-mb" in reason


def test_with_a_fallback_engine_the_fallback_answers_a_breach(art: Path) -> None:
    served = load_served_policy(str(art), TargetOptions(memory_cap_mb=4096))
    small = serve_policy("small", load_served_policy(str(art), TargetOptions()).policy)
    engine = served.policy.engine
    obs = zero_observation(served.observation_spec)
    with ServerThread(PolicyServer(served, ServeConfig(port=0), fallback=small)) as server:
        with PolicyClient(port=server.port) as client:
            engine.memory.cap_mb = engine.memory.footprint / MIB - 1  # below what it holds in any case
            reply = client.infer(obs)
            assert reply["fallback"] == "small" and np.isfinite(reply["actions"]).all()
        assert healthz(server.port)[0] == 503


def test_over_the_cap_at_load_is_one_line_before_listening(art: Path) -> None:
    # A fresh interpreter, as a user runs it: in this warm test process a second load of the artifact can
    # grow the resident set by less than 1 MiB (the allocator reuses freed pages), and the server would
    # then listen forever. The timeout turns such a regression into a failure, not a hung suite.
    cmd = [sys.executable, "-m", "hotloop", "serve", str(art), "--port", "0", "--memory-cap-mb", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    line = (res.stdout + res.stderr).strip().splitlines()[-1]
    assert line.startswith("error:") and "--memory-cap-mb 1" in line and str(art) in line


@pytest.mark.parametrize(
    "args, needle",
    [
        (["serve", "toy:mlp", "--memory-cap-mb", "100"], "--memory-cap-mb caps a compiled artifact"),
    ],
)
def test_memory_cap_bad_input_exits_2(args: list[str], needle: str) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and needle in res.output


def test_a_cap_that_is_not_a_positive_number_is_refused_before_loading(art: Path) -> None:
    res = runner.invoke(app, ["serve", str(art), "--port", "0", "--memory-cap-mb", "0"])
    assert (
        res.exit_code == 2 and "--memory-cap-mb must be a number of MiB from 1 to this machine" in res.output
    )
