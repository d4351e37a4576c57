"""benchmarks/gpu_check.sh (issue 37) without a GPU: its dry run lists every step the issue asks for, each
hotloop command it prints parses with hotloop's own CLI parser and checks, and a real run on this CPU
records each step, skips the GPU ones once check-cuda fails, writes its summary and exits 1."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from hotloop.cli import app
from hotloop.compile.backends import check_backend_names, check_precision_names
from hotloop.targets import TargetOptions, find_target

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
STEP = re.compile(r"^step (?P<name>\S+) \(timeout (?P<timeout>\d+) s, min (?P<min>\d+) s\): (?P<cmd>.*)$")


@dataclass
class Step:
    name: str
    timeout: int
    min: int
    argv: list[str]

    def flag(self, name: str) -> str | None:
        """The value after the last `name` (`python -m pytest ... -m gpu`: gpu)."""
        at = [i for i, a in enumerate(self.argv) if a == name]
        return self.argv[at[-1] + 1] if at else None


def _script_env(out: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_")}
    return {**env, "OUT": str(out), **extra}


@pytest.fixture(scope="module")
def dry(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[Step], Path, Path]:
    out = tmp_path_factory.mktemp("gpu-check-out")
    venv = out.parent / "gpu-venv-never-made"
    res = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run"],
        env=_script_env(out, GPU_VENV=str(venv)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    steps = [
        Step(m["name"], int(m["timeout"]), int(m["min"]), shlex.split(m["cmd"]))
        for line in res.stdout.splitlines()
        if (m := STEP.match(line))
    ]
    return res.stdout, steps, out, venv


def _hotloop(steps: list[Step], command: str, target: str | None = None) -> list[Step]:
    return [
        s
        for s in steps
        if Path(s.argv[0]).name == "hotloop"
        and s.argv[1] == command
        and (target is None or s.argv[2] == target)
    ]


def test_script_is_valid_bash() -> None:
    res = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_dry_run_runs_nothing_and_fits_the_budget(dry: tuple[str, list[Step], Path, Path]) -> None:
    stdout, steps, out, venv = dry
    assert not any(out.iterdir()) and not venv.exists()  # nothing written, no venv made
    budget = int(re.search(r"budget (\d+) s", stdout).group(1))  # type: ignore[union-attr]
    assert budget <= 8 * 60
    names = [s.name for s in steps]
    assert len(names) == len(set(names)) >= 15
    for s in steps:
        assert 0 < s.min <= s.timeout <= 600, s  # the device tool's limit per command


def test_install_is_the_makefiles_with_a_cuda_torch_and_tensorrt(
    dry: tuple[str, list[Step], Path, Path],
) -> None:
    _, steps, _, venv = dry
    pip = [s for s in steps if s.argv[1:4] == ["-m", "pip", "install"]]
    assert pip and all(s.argv[0] == f"{venv}/bin/python" for s in pip)
    lock = (ROOT / "requirements-lock.txt").read_text()
    torch_version = re.search(r"^torch==(\S+)$", lock, re.M).group(1)  # type: ignore[union-attr]
    # `===` refuses the CPU machines' local `+cpu` build of the same release.
    assert any(f"torch==={torch_version}" in s.argv for s in pip)
    tensorrt = [a for s in pip for a in s.argv if a.startswith("tensorrt")]
    assert tensorrt and "<11" in tensorrt[0]  # TensorRT 11 removed the BuilderFlag.BF16 the backend sets
    makefile_extras = re.search(r"-e '(\.\[[^\]]+\])'", (ROOT / "Makefile").read_text()).group(1)  # type: ignore[union-attr]
    assert any(makefile_extras in s.argv for s in pip)
    order = [s.name for s in steps]
    assert order.index("install-torch-cuda") < order.index("install-hotloop") < order.index("check-cuda")


def test_gpu_test_tier_is_every_test_marked_gpu(dry: tuple[str, list[Step], Path, Path]) -> None:
    _, steps, _, _ = dry
    (tier,) = [s for s in steps if "pytest" in s.argv]
    marked = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if "pytest.mark.gpu" in p.read_text()
    }
    assert marked >= {"tests/measure/test_stages_cuda.py", "tests/compile/backends/test_conformance.py"}
    assert tier.flag("-m") == "gpu" and marked <= set(tier.argv)


def test_steps_cover_the_issue(dry: tuple[str, list[Step], Path, Path]) -> None:
    _, steps, _, _ = dry
    assert _hotloop(steps, "doctor")
    small = _hotloop(steps, "bench", "pi05:small")
    assert {(s.flag("--device"), s.flag("--dtype")) for s in small} >= {
        ("cuda", "float32"),
        ("cuda", "bfloat16"),
    }
    graphs = [s for s in steps if s.argv[1:2] == ["benchmarks/gpu_cuda_graph.py"]]
    assert graphs and graphs[0].flag("--device") == "cuda" and graphs[0].flag("--target") == "pi05:small"
    compiles = _hotloop(steps, "compile", "pi05:small")
    backends = {b for s in compiles for b in (s.flag("--backends") or "").split(",")}
    assert backends >= {"eager", "inductor", "tensorrt"}
    assert all("bf16" in (s.flag("--precisions") or "").split(",") for s in compiles)
    # Every compiled plan is benched, after its compile.
    names = [s.name for s in steps]
    for c in _hotloop(steps, "compile"):
        (bench,) = [s for s in _hotloop(steps, "bench") if s.argv[2] == c.flag("-o")]
        assert names.index(c.name) < names.index(bench.name)
    # pi05:full bf16 and its plan, last, each under its own timeout.
    full = [s for s in steps if "pi05:full" in s.argv or "pi05-full" in " ".join(s.argv)]
    assert {s.argv[1] for s in full} == {"bench", "compile"}
    assert all(s.flag("--dtype") in (None, "bfloat16") for s in full)
    assert names[-len(full) :] == [s.name for s in full]


def _check_hotloop_command(argv: list[str], artifacts: set[str | None]) -> None:
    """`hotloop CMD ARGS` through the CLI's own parser (options, types, required arguments) and the value
    checks of --backends / --precisions / --dtype / --device and the target's name, without running it."""
    group = typer.main.get_command(app)
    command = group.commands[argv[1]]  # type: ignore[attr-defined]
    with command.make_context(argv[1], list(argv[2:])) as ctx:
        params = ctx.params
    for flag in ("--backends", "--precisions"):
        if flag in argv:
            check = check_backend_names if flag == "--backends" else check_precision_names
            check(argv[argv.index(flag) + 1].split(","), flag)
    target = params.get("target")
    if target is not None and target not in artifacts:  # an artifact folder is written by a compile before
        find_target(target)
    if argv[1] == "bench":
        TargetOptions(dtype=params["dtype"], device=params["device"])


def test_each_printed_command_parses(dry: tuple[str, list[Step], Path, Path]) -> None:
    _, steps, _, _ = dry
    artifacts = {s.flag("-o") for s in _hotloop(steps, "compile")}
    hotloop = [s for s in steps if Path(s.argv[0]).name == "hotloop"]
    assert len(hotloop) >= 10
    for s in hotloop:
        _check_hotloop_command(s.argv, artifacts)
    script = importlib.util.spec_from_file_location(
        "gpu_cuda_graph", ROOT / "benchmarks" / "gpu_cuda_graph.py"
    )
    assert script is not None and script.loader is not None
    module = importlib.util.module_from_spec(script)
    script.loader.exec_module(module)
    graphs = [s for s in steps if s.argv[1:2] == ["benchmarks/gpu_cuda_graph.py"]]
    assert graphs
    for s in graphs:
        module.parse_args(s.argv[2:])  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["bench", "pi05:small", "--backend", "tensorrt"], "No such option: --backend"),
        (["bench", "pi05:small", "--iters", "many"], "valid integer"),
        (
            ["compile", "pi05:small", "-o", "art", "--precisions", "fp16"],
            "--precisions: unknown precision 'fp16'",
        ),
        (["compile", "pi05:small", "-o", "art", "--backends", "trt"], "--backends"),
        (["bench", "pi05:smal"], "pi05:small"),
    ],
)
def test_the_command_check_refuses_what_hotloop_would(args: list[str], needle: str) -> None:
    with pytest.raises(Exception, match=re.escape(needle)):
        _check_hotloop_command(["hotloop", *args], set())


def test_a_run_without_a_gpu_records_each_step_and_skips_the_gpu_ones(tmp_path: Path) -> None:
    """For real on this CPU, with the test's own venv as the GPU venv (no install): check-cuda fails, the
    GPU steps are skipped with that reason, doctor runs, the summary is written, the exit is 1."""
    out = tmp_path / "out"
    env = _script_env(
        out,
        GPU_VENV=str(Path(sys.executable).parent.parent),
        GPU_CHECK_SKIP_INSTALL="1",
        PYTHON=sys.executable,
    )
    res = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    rows = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]
    status = {r[0]: r[1] for r in rows}
    assert status["check-cuda"] == "failed" and status["doctor"] == "ok"
    assert status["install-torch-cuda"].startswith("skipped: GPU_CHECK_SKIP_INSTALL=1")
    gpu_steps = ("tests-gpu", "bench-small-float32", "compile-small-best", "bench-full-bfloat16-3view")
    for name in gpu_steps:
        assert status[name] == "skipped: no CUDA torch (see logs/check-cuda.log)", name
    assert (out / "logs" / "check-cuda.log").read_text().strip()
    summary = (out / "summary.md").read_text()
    assert "| check-cuda | failed | 1 |" in summary and "doctor: cuda:" in summary
    assert not (out / "artifacts").exists()


def test_a_bad_setting_is_refused_before_anything_runs(tmp_path: Path) -> None:
    for env, needle in (
        ({"GPU_CHECK_BUDGET_S": "soon"}, "GPU_CHECK_BUDGET_S='soon'"),
        ({"GPU_CHECK_SKIP_INSTALL": "yes"}, "GPU_CHECK_SKIP_INSTALL='yes'"),
        ({"GPU_CHECK_SKIP_INSTALL": "1", "GPU_VENV": str(tmp_path / "none")}, "has no bin/python"),
    ):
        res = subprocess.run(
            ["bash", str(SCRIPT)], env=_script_env(tmp_path / "out", **env), capture_output=True, text=True
        )
        assert res.returncode == 2 and needle in res.stderr and res.stderr.count("\n") == 1, res.stderr
        assert not (tmp_path / "out").exists()
    res = subprocess.run(["bash", str(SCRIPT), "--dry"], capture_output=True, text=True)
    assert res.returncode == 2 and "--dry-run" in res.stderr


def _load_script(name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_graphs_helper_and_summary_on_this_cpu(tmp_path: Path) -> None:
    """The CUDA Graph helper on pi05:tiny on the CPU (the uncaptured loop timed; the capture refused with
    its reason) and a real bench JSON, read back by the summary into its tables."""
    from typer.testing import CliRunner

    graphs = _load_script("gpu_cuda_graph")
    args = ["--target", "pi05:tiny", "--device", "cpu", "--iters", "3", "--warmup", "1"]
    assert graphs.main([*args, "--json", str(tmp_path / "graphs-small-bfloat16.json")]) == 0  # type: ignore[attr-defined]
    bench = ["bench", "pi05:tiny", "--iters", "3", "--warmup", "1", "--quiet"]
    res = CliRunner().invoke(app, [*bench, "--json", str(tmp_path / "bench-small-cuda-float32.json")])
    assert res.exit_code == 0, res.output
    summary = _load_script("gpu_check_summary")
    assert summary.main([str(tmp_path)]) == 0  # type: ignore[attr-defined]
    data = json.loads((tmp_path / "summary.json").read_text())
    (row,) = data["benches"]
    assert (
        row["what"] == "pi05:small eager fp32 (cuda)"
        and row["host_ms"]["p50"] > 0
        and row["device_ms"] is None
    )
    (g,) = data["graphs"]
    assert g["graphs_off"]["host_ms"]["p50"] > 0 and g["graphs_off"]["device_ms"] is None
    assert g["graphs_on"] is None and "CUDA" in g["graphs_on_reason"]
    text = (tmp_path / "summary.md").read_text()
    assert "| pi05:tiny bfloat16 graphs on | - | - | - | - |" in text
    assert summary.main([str(tmp_path / "missing")]) == 2  # type: ignore[attr-defined]
