"""`--strategy draft --draft-from STUDENT` (FLASH's design, `hotloop.realtime.draft`): a onestep student's
fresh chunk as the draft, on the teacher's prefix cache, checked by the teacher's velocity network; the
executing chunk's first d rows held; the work it is charged; the source the statistics name; and the
refusals, through the real CLI. The teacher is the shipped demo:conveyor (pi0.5-nano); a student is its
own weights (the teacher's one-step sampler) or those weights with the denoising side changed, written as
the onestep recipe writes an artifact (manifest, weights.safetensors, `compression.applied`)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hotloop.errors import ConfigError
from hotloop.realtime.draft import (
    DRAFT_KEY,
    MAX_TOLERANCE,
    STUDENT,
    TOLERANCE_KEY,
    VERIFY_TIMES,
    DraftCost,
    accepted_prefix,
    min_rows,
    summarize_calls,
)
from hotloop.realtime.rtc import DELAY_KEY, GUIDED_KEY, MODE_KEY, PREV_ACTIONS_KEY
from hotloop.realtime.scheduler import ChunkScheduler, Completion
from hotloop.realtime.strategies import StrategyConfig, make_strategy

STEPS = 10  # the demo's own loop


@pytest.fixture(autouse=True, scope="module")
def _single_intra_op_thread() -> Any:
    """One torch thread: the demo's tiny calls take milliseconds, and two threads on a busy 2-core machine
    spin against each other (a call then takes seconds)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- a student artifact, as `hotloop compress demo:conveyor --recipe onestep` writes one ------------------


def write_student(
    dest: Path,
    state: dict[str, torch.Tensor],
    cfg: Any,
    *,
    applied: tuple[str, ...] = ("onestep",),
    num_steps: int = 1,
    lean: bool = False,
) -> Path:
    """An artifact folder with the fields `hotloop.runtime.draft_student.read_student` reads, written by the
    artifact writer the recipe uses (checked files, the manifest's schema and version)."""
    from hotloop.compile.artifact import LEAN, TABLES, ArtifactWriter, base_manifest

    writer = ArtifactWriter(dest)
    if lean:
        from safetensors.torch import save_file

        save_file({"time": torch.zeros(1)}, str(writer.path(TABLES)))
        fields: dict[str, Any] = {"layout": LEAN, "tables": TABLES, "weights": None}
    else:
        fields = {"weights": writer.write_weights(state)}
    manifest = base_manifest(
        kind="pi",
        target="demo:conveyor",
        config=dataclasses.asdict(cfg),
        shape={"batch": 1, "num_steps": num_steps},
        sub_engines=[{"name": "denoise_step", "backend": "eager", "precision": "fp32"}],
        policy={"kind": "demo:conveyor", "horizon": 16, "action_dim": 4, "zero_noise": True},
        **fields,
    )
    manifest["compression"] = {"recipe": list(applied), "applied": list(applied)}
    return writer.commit(manifest)


def _teacher() -> Any:
    from hotloop.demos.conveyor import load_demo_policy

    return load_demo_policy()


def _changed_expert(state: dict[str, torch.Tensor], scale: float, seed: int = 0) -> dict[str, torch.Tensor]:
    """The teacher's weights with every tensor of the denoising side (outside vision and the VLM) redrawn
    at `scale`: a student that proposes other chunks on the same prefix."""
    from hotloop.families.pi.draft_student import PREFIX_MODULES

    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in state.items():
        if k.split(".")[0] in PREFIX_MODULES:
            out[k] = v.clone()
        else:
            out[k] = scale * torch.randn(v.shape, generator=g, dtype=v.dtype)
    return out


@pytest.fixture(scope="module")
def students(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """own: the teacher's weights at K = 1 (its one-step sampler); garbage: the denoising side redrawn;
    prefix: one VLM tensor changed; tiny: pi05:tiny's sizes; pruned: a recipe without onestep; lean: no
    PyTorch weights."""
    from hotloop.families.pi.targets import build_model
    from hotloop.models.configs import get_pi_config

    root = tmp_path_factory.mktemp("students")
    teacher = _teacher().pi.model
    cfg, state = teacher.cfg, {k: v.clone() for k, v in teacher.state_dict().items()}
    prefix = {k: v.clone() for k, v in state.items()}
    name = next(k for k in prefix if k.startswith("vlm.") and prefix[k].ndim == 2)
    prefix[name][0, 0] += 1e-3
    tiny = build_model(get_pi_config("pi05:tiny"), torch.float32, "cpu", 0)
    return {
        "own": write_student(root / "own", state, cfg),
        "garbage": write_student(root / "garbage", _changed_expert(state, 3.0), cfg),
        "prefix": write_student(root / "prefix", prefix, cfg),
        "tiny": write_student(root / "tiny", tiny.state_dict(), tiny.cfg),
        "pruned": write_student(root / "pruned", state, cfg, applied=("prune:0.5",)),
        "lean": write_student(root / "lean", state, cfg, lean=True),
    }


def _with_student(path: Path) -> Any:
    """The demo teacher, adapted to conveyor-pick as eval runs it, holding the student at `path`."""
    from hotloop.closedloop.adapter import adapt
    from hotloop.closedloop.workers import use_draft_student
    from hotloop.sim.tasks import make_task

    demo = _teacher()
    use_draft_student(demo, str(path), "demo:conveyor")
    env = make_task("conveyor-pick")
    spec = env.task_spec
    env.close()
    return adapt(demo, spec)


@pytest.fixture(scope="module")
def plain() -> Any:
    """The demo teacher without a student, and the task it is asked about."""
    from hotloop.closedloop.adapter import adapt
    from hotloop.sim.tasks import make_task

    env = make_task("conveyor-pick")
    yield adapt(_teacher(), env.task_spec), env
    env.close()


@pytest.fixture(scope="module")
def own(students: dict[str, Path]) -> Any:
    return _with_student(students["own"])


@pytest.fixture(scope="module")
def garbage(students: dict[str, Path]) -> Any:
    return _with_student(students["garbage"])


def _ask(policy: Any, obs: dict, prev: np.ndarray, delay: int, mode: str = "draft", tolerance=None) -> dict:
    keys = {PREV_ACTIONS_KEY: prev, DELAY_KEY: delay, MODE_KEY: mode}
    if tolerance is not None:
        keys[TOLERANCE_KEY] = tolerance
    return policy.infer({**obs, **keys})


def _executing(plain: Any, seed: int, shift: int = 2) -> tuple[dict, np.ndarray]:
    """An observation and the executing chunk's rows from it on: the teacher's own chunk from the start of
    `seed`, `shift` rows already executed (the scheduler's `a.actions[a.next_index:]`)."""
    policy, env = plain
    obs, _ = env.reset(seed=seed)
    policy.reset()
    return obs, policy.infer(obs)["actions"][shift:]


# ---- the method's pieces -----------------------------------------------------------------------------------


def test_rows_before_the_held_ones_count_as_accepted_and_the_prefix_ends_at_the_first_bad_row_after():
    errors = np.array([5.0, 5.0, 0.01, 0.02, 0.5, 0.0])
    assert accepted_prefix(errors, 0.1) == 0
    assert accepted_prefix(errors, 0.1, held=2) == 4
    assert accepted_prefix(errors, 0.1, held=5) == 6 and accepted_prefix(errors, 0.1, held=9) == 6
    assert accepted_prefix(np.array([0.0, float("nan"), 0.0]), 0.1, held=1) == 1  # NaN is over


def test_the_students_steps_are_charged_as_check_evaluations():
    cost = DraftCost(encode=100.0, step=10.0, token_step=20.0, num_steps=10)
    assert cost.fraction(1, loop=False, drafts=1) == pytest.approx(120 / 300)
    assert cost.fraction(1, loop=True, drafts=2) == pytest.approx(330 / 300)
    assert cost.fraction(1, loop=False, drafts=1) - cost.fraction(1, loop=False) == pytest.approx(10 / 300)
    assert cost.describe(drafts=1)["speculative_fraction"] == pytest.approx(0.4)


def test_a_student_strategy_refuses_an_answer_from_the_shifted_draft_and_the_other_way_round():
    assert make_strategy("draft", StrategyConfig(16)).describe()["draft_source"] == "shifted"
    assert (
        make_strategy("draft", StrategyConfig(16, draft_source=STUDENT)).describe()["draft_source"] == STUDENT
    )
    with pytest.raises(ConfigError, match="draft_source"):
        StrategyConfig(16, draft_source="teacher")
    for want, answered in ((STUDENT, {"work": 0.5}), ("shifted", {"work": 0.5, "source": STUDENT})):
        sched = ChunkScheduler(
            lambda h, w=want: make_strategy("draft", StrategyConfig(h, draft_source=w)), period=5, tick_s=0.02
        )
        sched.started(0)
        sched.completed(Completion(0, 10, {"actions": np.zeros((16, 4))}), np.zeros(4))
        for now in range(10, 20, 5):
            sched.next_segment(now, np.zeros(4), dict)
        assert sched.guidance(20)[MODE_KEY] == "draft"
        sched.started(20, guided=True)
        out = {"actions": np.zeros((9, 4)), GUIDED_KEY: True, MODE_KEY: "draft", DRAFT_KEY: answered}
        with pytest.raises(ConfigError, match=f"asked for a {want} draft.*--draft-from"):
            sched.completed(Completion(20, 25, out), np.zeros(4))


def test_the_draft_source_is_counted():
    calls = [{"rows": 16, "accepted": 12, "speculative": True, "work": 0.5, "source": STUDENT}]
    assert summarize_calls(calls)["source"] == STUDENT
    assert summarize_calls([{"rows": 16, "accepted": 3, "work": 1.0}])["source"] == "shifted"  # older answers
    assert summarize_calls([*calls, {"rows": 16, "accepted": 3, "work": 1.0}])["source"] == "mixed"


def test_the_prefix_modules_are_those_the_onestep_student_leaves_frozen():
    from hotloop.families.pi.compression.step_distill import PREFIX_MODULES as FROZEN
    from hotloop.families.pi.draft_student import PREFIX_MODULES

    assert PREFIX_MODULES == FROZEN


# ---- the policy: the demo teacher with a student beside it ----------------------------------------------------


@pytest.mark.parametrize("delay", [0, 2])
def test_the_teachers_own_one_step_student_at_the_largest_tolerance_is_the_answer(own, plain, delay):
    """(a) The student is the teacher's one-step sampler; at the largest tolerance every call is speculative,
    and the answer is the executing chunk's d rows (the robot runs them meanwhile), then the student's
    one-step chunk for this observation handed over from the executing chunk by `rtc-soft`'s soft mask:
    row i is W_i prev_i + (1 - W_i) student_i over the overlap, the student's alone after it."""
    from hotloop.closedloop.adapter import adapt
    from hotloop.demos.conveyor import DemoConveyorPolicy
    from hotloop.realtime.rtc import prefix_weights

    one_step = adapt(DemoConveyorPolicy.load(num_steps=1), plain[1].task_spec)  # the teacher at K = 1, x = 0
    for seed in (0, 3):
        obs, prev = _executing(plain, seed)
        n = len(prev)
        out = _ask(own, obs, prev, delay, tolerance=MAX_TOLERANCE)
        stats = out[DRAFT_KEY]
        assert stats["source"] == STUDENT and stats["speculative"] and stats["accepted"] == 16
        assert stats["held"] == delay and stats["draft_evals"] == 1 and stats["evals"] == len(VERIFY_TIMES)
        want = one_step.infer(obs)["actions"]
        assert out["actions"].shape == want.shape == (16, 4)
        # Affine maps (normalisation, the robot's frame) commute with a blend whose weights sum to one, so
        # the model-space blend is the robot-space one.
        w = prefix_weights(delay, n, 16)[:, None]
        blend = w[:n] * prev + (1.0 - w[:n]) * want[:n]
        np.testing.assert_allclose(out["actions"][:n], blend, atol=1e-5)
        np.testing.assert_array_equal(out["actions"][n:], want[n:])
        assert not np.allclose(want[:8], prev[:8], atol=1e-3)  # a fresh chunk, not the executing one
        assert not np.allclose(out["actions"][delay:n], want[delay:n], atol=1e-3)  # handed over, not cut


def test_a_garbage_student_takes_the_full_path_and_the_answer_is_rtc_softs(garbage, plain):
    """(b) No student row passes: every call runs the full path, and its answer is `rtc-soft`'s for the same
    executing chunk and delay (nothing but the executing chunk's d rows held)."""
    for seed, delay in ((0, 0), (1, 2), (4, 3)):
        obs, prev = _executing(plain, seed)
        out = _ask(garbage, obs, prev, delay)
        stats = out[DRAFT_KEY]
        assert stats["source"] == STUDENT and not stats["speculative"] and stats["accepted"] == delay
        assert stats["evals"] == len(VERIFY_TIMES) + STEPS and stats["draft_evals"] == 1
        soft = _ask(plain[0], obs, prev, delay, mode="soft-prefix")
        np.testing.assert_array_equal(out["actions"], soft["actions"])


def test_a_student_prefix_too_short_to_answer_is_held_on_the_full_path(own, plain, monkeypatch):
    """A student whose first 5 rows are the teacher's own plan and the rest 8 cm off in x: 5 rows accepted,
    fewer than half the chunk, so the full path runs with those 5 rows held exactly."""
    from hotloop.families.pi.sampling import denoise

    obs, prev = _executing(
        plain, 2, shift=0
    )  # the executing chunk is the teacher's plan here: the blend keeps rows 0-4
    pi = own.policy.pi
    stats_x = pi.norm_stats
    off = stats_x.normalize(np.array([[0.08, 0, 0, 0]]), "actions") - stats_x.normalize(
        np.zeros((1, 4)), "actions"
    )
    proposed: dict[str, torch.Tensor] = {}

    def propose(cache, state, noise):  # the teacher's own 10-step chunk in model space, rows 5 on moved
        x = denoise(pi.model, cache, state, torch.zeros_like(noise), STEPS)
        x[:, 5:, 0] += float(off[0, 0])
        proposed["x"] = x
        return x

    monkeypatch.setattr(pi.draft_student, "propose", propose)
    out = _ask(own, obs, prev, 0)
    stats = out[DRAFT_KEY]
    assert stats["accepted"] == 5 and not stats["speculative"] and stats["held"] == 0
    assert min_rows(16, 0) > 5
    raw = np.asarray(obs["state"], dtype=np.float32)
    student = own.policy.to_env(stats_x.unnormalize(proposed["x"][0, :16, :4].numpy(), "actions"), raw)
    np.testing.assert_allclose(out["actions"][:5], student[:5], atol=1e-5)  # held exactly
    assert not np.allclose(out["actions"][5:], student[5:], atol=1e-3)  # the loop's, not the student's


def test_vision_and_prefix_run_once_per_call_and_the_students_expert_once(own, plain, monkeypatch):
    """(c) One vision and one prefix per call, on either path; the student's expert K = 1 times (on the
    teacher's cache), the teacher's K check evaluations, plus its N loop steps on the full path."""
    pi = own.policy.pi
    calls = {"vision": 0, "prefix": 0, "teacher": 0, "student": 0}
    for key, obj, name in (
        ("vision", pi.model, "vision"),
        ("prefix", pi.model, "prefix"),
        ("teacher", pi.model, "denoise_step"),
        ("student", pi.draft_student.model, "denoise_step"),
    ):
        original = getattr(obj, name)

        def counted(*args, _key=key, _original=original, **kwargs):
            calls[_key] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(obj, name, counted)
    obs, prev = _executing(plain, 0)
    assert _ask(own, obs, prev, 2, tolerance=MAX_TOLERANCE)[DRAFT_KEY]["speculative"]
    assert calls == {"vision": 1, "prefix": 1, "teacher": len(VERIFY_TIMES), "student": 1}
    assert not _ask(own, obs, prev, 2, tolerance=1e-9)[DRAFT_KEY]["speculative"]
    assert calls == {"vision": 2, "prefix": 2, "teacher": 2 * len(VERIFY_TIMES) + STEPS, "student": 2}


def test_the_work_includes_the_students_step(own, plain):
    """(e) The work fraction counts the student's step (one expert evaluation, the teacher's size) on both
    paths: a step more than the same path with the shifted draft."""
    cost = own.policy.pi.draft_cost(STEPS)
    obs, prev = _executing(plain, 0)
    fast = _ask(own, obs, prev, 2, tolerance=MAX_TOLERANCE)[DRAFT_KEY]
    slow = _ask(own, obs, prev, 2, tolerance=1e-9)[DRAFT_KEY]
    assert fast["speculative"] and not slow["speculative"]
    assert fast["work"] == pytest.approx(cost.fraction(len(VERIFY_TIMES), False, drafts=1), abs=1e-6)
    assert slow["work"] == pytest.approx(cost.fraction(len(VERIFY_TIMES), True, drafts=1), abs=1e-6)
    shifted = _ask(plain[0], obs, prev, 2, tolerance=1e-9)[DRAFT_KEY]  # no student: the shifted draft
    assert shifted["source"] == "shifted" and not shifted["speculative"]
    assert slow["work"] - shifted["work"] == pytest.approx(cost.step / cost.full, abs=1e-5)
    assert 0 < cost.step / cost.full < 0.1


def test_a_student_whose_prefix_or_sizes_differ_is_refused_naming_the_flag(students):
    from hotloop.closedloop.workers import use_draft_student

    for key, message in (
        ("prefix", r"its vlm\..* differs from the teacher's"),
        ("tiny", "the student's sizes are not the teacher's"),
        ("pruned", r"not a onestep student \(its recipe applied prune:0\.5\)"),
        ("lean", "a lean plan"),
    ):
        with pytest.raises(ConfigError, match=rf"^--draft-from {re.escape(str(students[key]))}: {message}"):
            use_draft_student(_teacher(), str(students[key]), "demo:conveyor")
    with pytest.raises(ConfigError, match=r"--draft-from .*cannot hold a student beside it"):

        class Shifted:  # a policy that checks drafts but holds no student (SmolVLA's case)
            supports_draft = True

        use_draft_student(Shifted(), str(students["own"]), "demo:conveyor-smolvla")


# ---- the CLI ---------------------------------------------------------------------------------------------------


def _eval(*args: str):
    import typer
    from typer.testing import CliRunner

    from hotloop.closedloop.commands import add_commands

    app = typer.Typer()
    add_commands(app)
    return CliRunner().invoke(app, ["eval", *args])


def test_eval_refuses_a_bad_student_in_one_line_before_any_episode(students, tmp_path):
    """(d) Each refusal is one `error:` line naming --draft-from, exit 2, before any episode."""
    base = ["--latency", "fixed:200", "--episodes", "1", "--workers", "0", "--quiet"]
    cases = [
        ("demo:conveyor", "draft", tmp_path / "absent", "no such folder"),
        ("demo:conveyor", "draft", students["pruned"], "not a onestep student"),
        ("demo:conveyor", "draft", students["lean"], "a lean plan"),
        ("demo:conveyor", "draft", students["tiny"], "the student's sizes are not the teacher's"),
        ("demo:conveyor", "draft", students["prefix"], "differs from the teacher's"),
        ("demo:conveyor", "async", students["own"], "does nothing with --strategy async; it is for draft"),
        ("demo:conveyor", "rtc-soft,async", students["own"], "does nothing with --strategy rtc-soft,async"),
        ("demo:conveyor-act", "draft", students["own"], "--strategy draft checks each chunk"),
    ]
    for target, strategy, student, message in cases:
        r = _eval(target, "--strategy", strategy, "--draft-from", str(student), *base)
        errors = [line for line in r.output.splitlines() if line.startswith("error:")]
        assert r.exit_code == 2, (student, r.output)
        assert len(errors) == 1 and "--draft-from" in errors[0] and message in errors[0], (student, r.output)
        assert "success" not in r.output  # no episode ran


def test_eval_with_a_student_runs_and_its_json_says_so(students, tmp_path):
    out = tmp_path / "student.json"
    r = _eval(
        "demo:conveyor", "--strategy", "draft,async", "--draft-from", str(students["own"]),
        "--draft-tolerance", str(MAX_TOLERANCE), "--latency", "fixed:200", "--episodes", "1", "--workers", "0",
        "--quiet", "--json", str(out),
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    draft, other = json.loads(out.read_text())["runs"]
    assert draft["strategy"]["draft_source"] == STUDENT and draft["request"]["draft_from"] == str(
        students["own"]
    )
    d = draft["draft"]
    assert d["source"] == STUDENT and d["calls"] > 0 and d["speculative_calls"] == d["calls"]
    assert draft["inference"]["by_path"]["speculative"]["simulated_ms"]["max"] < 200  # charged its work
    assert other["strategy"]["name"] == "async" and other["request"]["draft_from"] is None
    assert "draft (student)" in r.output


def test_a_sweep_spec_gives_the_student_to_its_draft_cells_only(students):
    from hotloop.closedloop.spec import expand

    cells = expand(
        {"target": "demo:conveyor", "strategy": ["draft", "async"], "draft_from": str(students["own"])},
        "SPEC s",
    )
    assert {c.request.strategy: c.request.draft_from for c in cells} == {
        "draft": str(students["own"]),
        "async": None,
    }
    with pytest.raises(ConfigError, match="--draft-from .*not a onestep student"):
        expand(
            {"target": "demo:conveyor", "strategy": "draft", "draft_from": str(students["pruned"])}, "SPEC s"
        )


def test_a_student_the_onestep_recipe_wrote_drafts_for_its_teacher(tmp_path):
    """The real recipe's artifact (`hotloop compress demo:conveyor --recipe onestep`, 2 steps: 6 s here):
    its prefix tensors are the teacher's bit for bit, so `--draft-from` takes it, and every draft call of
    the episode is the student's."""
    from typer.testing import CliRunner

    from hotloop.cli import app
    from hotloop.datasets.recorder import record

    record("conveyor-pick", 2, tmp_path / "rec", image_size=64, seed=5)
    student = tmp_path / "student"
    r = CliRunner().invoke(
        app,
        ["compress", "demo:conveyor", "--recipe", "onestep", "--data", str(tmp_path / "rec"), "--distill-steps", "2",
         "--distill-episodes", "0", "--episodes", "0", "--calibration-frames", "4", "--eval-observations", "2",
         "--bench-iters", "2", "--backends", "eager", "--threads", "1", "--tolerance", "cos:0.01", "--quiet",
         "-o", str(student)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    out = tmp_path / "run.json"
    r = _eval(
        "demo:conveyor", "--strategy", "draft", "--draft-from", str(student), "--latency", "fixed:200",
        "--episodes", "1", "--workers", "0", "--quiet", "--json", str(out),
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    run = json.loads(out.read_text())
    assert run["draft"]["source"] == STUDENT and run["draft"]["calls"] > 0
    assert all(
        p is None or p in ("speculative", "full") for p in run["per_episode"][0]["per_inference"]["path"]
    )
