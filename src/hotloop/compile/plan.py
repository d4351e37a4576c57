"""Plan a policy target of any family: candidates per stage on its sub-engines, checked and timed.

`PolicySource` is what is compiled: the family, the fp32 model, the fixed engine shape, one real
observation and the noise the final actions are compared under, plus what a policy wrapper needs at load
(`policy` dict). Everything family-specific goes through `hotloop.families.protocol.PolicyFamily`: the
sub-engines and recipes, the stages (a loop stage: its step engine once per table row, or its loop
engine), the pipeline that chains runners into actions, the config as data for the manifest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from hotloop.compile.backends import FILE_BACKENDS, get_backend
from hotloop.compile.backends.base import PreparedFiles, Runner
from hotloop.compile.backends.eager import TorchRunner
from hotloop.compile.backends.lean_int8 import LEAN, QUANTIZER
from hotloop.compile.backends.quantize import STATIC
from hotloop.compile.bucket_plan import BucketRunners, bucket_name, plan_buckets
from hotloop.compile.calibration_memory import drop_unneeded, ensure_capture
from hotloop.compile.chain import loop_stage, pipeline, stage_call
from hotloop.compile.peak_memory import PeakMeter, planning_memory
from hotloop.compile.planner import (
    FINAL_BLOCK,
    Candidate,
    PlanConfig,
    candidate_specs,
    check_finite,
    choose,
    interleaved,
    most_accurate,
    plan_summary,
    safe_prepare,
    slower_than_reference,
    stats_dict,
    time_candidate,
)
from hotloop.compile.search import (
    PROBE_CALLS,
    Eta,
    RooflineBounds,
    best_p99,
    cached_slower,
    cannot_win,
    give_up_ms,
    needs_bounds,
    search_order,
)
from hotloop.compile.timing_cache import summary as timing_cache_summary
from hotloop.compile.validate import compare_actions, compare_outputs
from hotloop.errors import ConfigError
from hotloop.families.protocol import Pipeline, PolicyFamily, PolicySource, SubEngine, constants_of
from hotloop.measure.stages import StageTimer


class EngineSets:
    """Sub-engines built once per (dtype, recipe) (bf16 copies the model once per recipe)."""

    def __init__(self, family: PolicyFamily, model: nn.Module, shape: Any) -> None:
        self.family, self.model, self.shape = family, model, shape
        self._sets: dict[tuple[torch.dtype, str], dict[str, SubEngine]] = {}
        self.calibration_inputs: dict[int, Any] = {}  # per engine set, for static int8 candidates
        self._reference: dict[tuple[str, int], tuple[Tensor, ...]] = {}
        self.released: set[str] = set()  # sub-engines whose fp32 weights were freed to fit
        self._lookups: dict[tuple[str, torch.dtype], Tensor] = {}

    def reference_outputs(self, sub: str, row: int, inputs: list[Tensor]) -> tuple[Tensor, ...]:
        """The fp32 sub-engine's outputs for `inputs` (row `row` of the step table), computed once and
        shared by every candidate of that sub-engine (the reference does not change between them)."""
        if (sub, row) not in self._reference:
            out = self.get(torch.float32)[sub].module(*inputs)
            self._reference[sub, row] = out if isinstance(out, tuple) else (out,)
        return self._reference[sub, row]

    def release(self, sub: str, keep: list[str]) -> int:
        """Free the fp32 weights only sub-engine `sub` uses (not those of the sub-engines in `keep`):
        they become meta tensors in the model and in every module sharing them. Returns the bytes freed.
        Used when a full-size model and its compiled stages do not fit together (see `plan_policy`)."""
        from hotloop.compile.memory_fit import release_module_weights

        engines = self.get(torch.float32)
        freed = release_module_weights(engines[sub].module, [engines[k].module for k in keep])
        self.released.add(sub)
        return freed

    def copy_bytes(self, dtype: torch.dtype, variant: str) -> int:
        """Bytes the engine set (dtype, variant) would copy from the model if built now: 0 once built,
        and for the fp32 plain set, which shares the model's weights."""
        if (dtype, variant) in self._sets or (dtype, variant) == (torch.float32, "plain"):
            return 0
        from hotloop.compile.memory_fit import weight_bytes

        return weight_bytes(self.model) * torch.finfo(dtype).bits // 32

    def built_keys(self) -> list[tuple[torch.dtype, str]]:
        """The (dtype, variant) engine sets built so far."""
        return list(self._sets)

    def get(self, dtype: torch.dtype, variant: str = "plain") -> dict[str, SubEngine]:
        if (dtype, variant) not in self._sets:
            self._sets[dtype, variant] = self.family.build_subengines(self.model, self.shape, dtype, variant)
        return self._sets[dtype, variant]

    def shipped_lookups(self, chosen: dict[str, Candidate]) -> dict[str, Tensor]:
        """The lookup tables a lean artifact of `chosen` ships, in its stages' precisions (made once per
        precision); {} when the plan keeps torch runners (its artifact holds the source weights)."""
        from hotloop.families.lookup import lookup_dtype, stored_table

        if not lean_plan(self.family, chosen):
            return {}
        constants = constants_of(self.get(torch.float32))
        out = {}
        for name, sub in self.family.lookup_tables.items():
            dtype = lookup_dtype(chosen[self.family.stage_of(sub).name].precision)
            if (name, dtype) not in self._lookups:
                self._lookups[name, dtype] = stored_table(constants[name], dtype)
            out[name] = self._lookups[name, dtype]
        return out


def lean_plan(family: PolicyFamily, chosen: dict[str, Candidate]) -> bool:
    """Whether `chosen` is written as a lean artifact: the family can load one, and every stage runs
    from its own files."""
    return family.capabilities.lean_artifact and all(c.backend in FILE_BACKENDS for c in chosen.values())


def candidate_need(cand: Candidate, source: PolicySource, sets: EngineSets) -> Any:
    """The memory preparing `cand` is estimated to take (`hotloop.compile.memory_fit`)."""
    from hotloop.compile.memory_fit import estimated_need

    dtype = get_backend(cand.backend).graph_dtype(cand.precision)
    return estimated_need(
        cand.backend,
        cand.precision,
        sets.get(torch.float32)[cand.sub_engine].module,
        source.shape.num_steps if _is_loop_engine(source.family, cand.sub_engine) else 1,
        sets.copy_bytes(dtype, cand.variant),
        lean=cand.options.get(QUANTIZER) == LEAN,
    )


def choose_quantizer(
    cand: Candidate, source: PolicySource, sets: EngineSets, limit_gb: float | None
) -> str | None:
    """For an OpenVINO static int8 candidate whose NNCF quantization would not fit in the memory left
    (`memory_fit.headroom` under `--plan-memory-gb`), the lean quantizer (`backends.lean_int8`: no copy of
    the fp32 weights), set in its options; returns why, or None when NNCF fits (or for another kind)."""
    from hotloop.compile.memory_fit import GIB, headroom, refusal

    if cand.backend != "openvino" or cand.precision not in STATIC or QUANTIZER in cand.options:
        return None
    available = headroom(limit_gb)
    nncf = candidate_need(cand, source, sets)
    if refusal(nncf, available) is None:
        return None
    cand.options[QUANTIZER] = LEAN
    return (
        f"NNCF's static int8 needs about {nncf.bytes / GIB:.1f} GiB ({nncf.why}), {available / GIB:.1f} GiB "
        "available: quantized in place by hotloop's lean quantizer instead"
    )


# Backends whose candidates are compiled and run once in a child process before the planner prepares them
# (`hotloop.compile.crash_probe`): OpenVINO's CPU plugin has killed the process on some graphs.
PROBED_BACKENDS = ("openvino",)


def _is_loop_engine(family: PolicyFamily, sub: str) -> bool:
    loop = family.loop_of(sub)
    return loop is not None and sub == loop.loop


def check_candidate(
    cand: Candidate,
    source: PolicySource,
    sets: EngineSets,
    ref_runners: dict[str, Any],
    ref_actions: Tensor,
    config: PlanConfig,
    give_up_ms: float | None = None,
) -> None:
    """Numerics (per output, per step for the step engine; then final actions), then latency (cut short
    above `give_up_ms`: the candidate is then rejected as slower than the stage's best)."""
    from hotloop.compile.memory_fit import headroom, refusal

    ref_engines = sets.get(torch.float32)
    dtype = get_backend(cand.backend).graph_dtype(cand.precision)
    if sets.released and sets.copy_bytes(dtype, cand.variant):
        cand.status = "unavailable"
        cand.reason = (
            f"builds a {cand.variant} {str(dtype).removeprefix('torch.')} copy of the whole model, whose "
            f"{', '.join(sorted(sets.released))} weights were released to fit: not tried"
        )
        return
    too_big = refusal(
        candidate_need(cand, source, sets), headroom(config.plan_memory_gb), config.plan_memory_gb
    )
    if too_big is not None:
        cand.status, cand.reason = "unavailable", too_big
        return
    own = sets.get(dtype, cand.variant)
    graph = own[cand.sub_engine]
    extra: dict[str, Any] = {}
    if cand.precision not in ("fp32", "bf16"):
        from hotloop.compile.backends.base import BackendError
        from hotloop.compile.calibration_inputs import plan_options

        try:
            extra = plan_options(
                cand.precision, cand.sub_engine, cand.variant, own, source, config, sets.calibration_inputs
            )
        except BackendError as exc:
            cand.status, cand.reason = "unavailable", str(exc)
            return
    if cand.backend in PROBED_BACKENDS:
        extra = {**extra, "probe": True}
    runner = safe_prepare(cand, graph, config.threads, extra)
    if runner is None:
        return
    ref = ref_engines[cand.sub_engine]
    loop = source.family.loop_of(cand.sub_engine)
    ref_constants, own_constants = constants_of(ref_engines), constants_of(own)
    inputs = list(ref.example_inputs)
    is_step = loop is not None and cand.sub_engine == loop.step
    rows = range(source.shape.num_steps) if is_step else range(1)
    worst: list[Any] | None = None
    with torch.no_grad():
        for k in rows:
            if is_step:
                assert loop is not None
                inputs[ref.input_names.index(loop.row_input)] = ref_constants[loop.table][k]
            want = sets.reference_outputs(cand.sub_engine, k, inputs)
            got_inputs = list(inputs)
            if loop is not None:  # the recipe's own tables, same steps
                if is_step:
                    got_inputs[ref.input_names.index(loop.row_input)] = own_constants[loop.table][k]
                for name, value in own_constants.items():
                    if name in ref.input_names:
                        got_inputs[ref.input_names.index(name)] = value
            got = runner(*got_inputs)
            if not check_finite(cand, got, ref.output_names):
                return
            agreement = compare_outputs(ref.output_names, want, got)
            if worst is None or min(a.cosine for a in agreement) < min(a.cosine for a in worst):
                worst = agreement
    cand.outputs = worst or []
    runners = dict(ref_runners)
    if loop is not None:
        runners.pop(loop.step if cand.sub_engine == loop.loop else loop.loop, None)
    runners[cand.sub_engine] = runner
    loop_set = own if loop is not None else None
    actions = pipeline(source, ref_engines, runners, loop_set).sample(source.obs, source.noise)
    cand.action = compare_actions(ref_actions, actions)
    violation = config.tolerance.violation(cand.action)
    if violation:
        cand.status, cand.reason = "rejected", violation
        return
    finished = time_candidate(
        cand,
        stage_call(
            loop,
            cand.sub_engine,
            runner,
            source.shape.num_steps,
            own_constants[loop.table] if loop is not None else None,
        ),
        config,
        give_up_ms,
    )
    if not finished:
        assert cand.latency is not None and give_up_ms is not None
        cand.status = "rejected"
        cand.reason = (
            f"slower: median {cand.latency.p50:.2f} ms over {PROBE_CALLS} calls, above "
            f"{give_up_ms:.2f} ms (1.25 x the stage's best p99); timing stopped"
        )
        return
    cand.status, cand.reason, cand.runner = "accepted", "", runner


def _release_runners(candidates: list[Candidate], stage: str) -> None:
    """Keep only the runners the plan can still use (the fastest of the stage, the most accurate, and
    the fastest of each precision, which the whole-plan check falls back through): each holds its own
    copy of the weights, and a full-size model cannot keep a dozen."""
    keep = {id(choose(candidates, stage)), id(most_accurate(candidates, stage))}
    for precision in {c.precision for c in candidates if c.stage == stage}:
        keep.add(id(choose([c for c in candidates if c.precision == precision], stage)))
    for c in candidates:
        if c.stage == stage and c.runner is not None and id(c) not in keep:
            c.runner = None


def _keep_two_runners(candidates: list[Candidate], stage: str) -> bool:
    """Drop every runner of `stage` but its fastest and its most accurate (the whole-plan check then
    falls back to the most accurate only); whether any was dropped."""
    keep = {id(choose(candidates, stage)), id(most_accurate(candidates, stage))}
    dropped = False
    for c in candidates:
        if c.stage == stage and c.runner is not None and id(c) not in keep:
            c.runner, dropped = None, True
    return dropped


@dataclass
class Plan:
    candidates: list[Candidate]
    chosen: dict[str, Candidate]
    result: dict[str, Any]
    buckets: list[BucketRunners] = field(default_factory=list)  # extra prompt-length buckets
    weights: WeightsSnapshot | None = None  # set when fp32 weights were released to fit
    # A lean plan's own tables (`hotloop.compile.artifact`): what its pipeline feeds, the lookup tables
    # as shipped (the whole-plan check ran on them); both empty for a plan with torch runners.
    tables: dict[str, Tensor] = field(default_factory=dict)
    lookups: dict[str, Tensor] = field(default_factory=dict)


def worst_agreement(
    pipe: Pipeline,
    checks: list[tuple[Any, Tensor]],
    refs: list[Tensor],
    tolerance: Any,
) -> Any:
    """The plan's agreement with the reference on its worst check: the lowest-cosine one that breaks
    `tolerance`, else the lowest-cosine one."""
    found = [compare_actions(ref, pipe.sample(o, n)) for ref, (o, n) in zip(refs, checks, strict=True)]
    broken = [a for a in found if tolerance.violation(a) is not None]
    return min(broken or found, key=lambda a: a.cosine)


def repair_plan(
    chosen: dict[str, Candidate],
    candidates: list[Candidate],
    evaluate: Callable[[dict[str, Candidate]], tuple[Any, Any]],
    current: tuple[Any, Any],
    tolerance: Any,
    log: Callable[[str], None] = lambda s: None,
) -> tuple[dict[str, Candidate], Any, Any]:
    """Bring a plan whose stages passed one by one, but not together, within `tolerance`: stage by stage,
    least accurate first, take the fastest other candidate of the stage that does it (a bf16 stage before
    an fp32 one), else the stage's most accurate and go on. `evaluate(plan)` -> (pipeline, agreement);
    `current` is the plan's own. Only candidates whose runner is still held are tried."""
    chosen = dict(chosen)
    pipe, agreement = current
    for stage in sorted(chosen, key=lambda s: chosen[s].action.cosine):  # type: ignore[union-attr]
        if tolerance.violation(agreement) is None:
            break
        others = [
            c
            for c in candidates
            if c.stage == stage and c.status == "accepted" and c.runner is not None and c is not chosen[stage]
        ]
        for alt in sorted(others, key=lambda c: c.latency.p99):  # type: ignore[union-attr]
            trial_pipe, found = evaluate({**chosen, stage: alt})
            if tolerance.violation(found) is None:
                log(f"plan outside tolerance ({agreement.cosine:.6f}); {stage} -> {alt.label}")
                chosen[stage], pipe, agreement = alt, trial_pipe, found
                break
        if tolerance.violation(agreement) is None:
            break
        safer = most_accurate(candidates, stage)
        if safer is not None and safer is not chosen[stage]:
            log(f"plan outside tolerance ({agreement.cosine:.6f}); {stage} -> {safer.label}")
            chosen[stage] = safer
            pipe, agreement = evaluate(chosen)
    return chosen, pipe, agreement


def plan_policy(
    source: PolicySource, config: PlanConfig, log: Callable[[str], None] = lambda s: None
) -> Plan:
    """Candidates checked and timed per stage, the fastest plan within tolerance, timed against the
    reference. A plan that had to release fp32 weights to fit (`_make_room`) carries their snapshot in
    `Plan.weights`, removed by `write_artifact` (or here, if planning fails)."""
    spilled: list[WeightsSnapshot] = []
    try:
        return _plan(source, config, log, spilled)
    except BaseException:
        for snapshot in spilled:
            snapshot.discard()
        raise


def _plan(
    source: PolicySource, config: PlanConfig, log: Callable[[str], None], spilled: list[WeightsSnapshot]
) -> Plan:
    family = source.family
    sets = EngineSets(family, source.model, source.shape)
    ref_engines = sets.get(torch.float32)
    ref_runners: dict[str, Any] = {n: TorchRunner(e, "fp32", e.module) for n, e in ref_engines.items()}
    for spec in family.stages:  # the reference runs each loop with its step engine
        if spec.loop is not None:
            ref_runners.pop(spec.loop.loop)
    ref_pipeline = pipeline(source, ref_engines, ref_runners)
    ref_actions = ref_pipeline.sample(source.obs, source.noise).clone()
    checks = source.checks
    # Every reference the plan is judged against, taken now: a full-size model may have to release a
    # finished stage's fp32 weights before the last stages fit (`_make_room`).
    check_refs = [ref_actions, *_check_references(source, ref_pipeline, ref_actions)]
    subs = tuple(s for stage in family.stages for s in stage.sub_engines)
    variants = tuple(v for v in config.variants if v in family.capabilities.recipes) or ("plain",)
    candidates = list(candidate_specs(config, subs, variants, source.stage_of))
    pending = [c for c in candidates if c.status == "pending"]
    stage_names = [s.name for s in family.stages]
    cache = config.timing_cache
    if cache is not None:
        _key_candidates(pending, ref_engines, config, log)
    bounds = None
    if config.search == "fast":
        if needs_bounds(config.precisions):
            bounds = RooflineBounds.of(family, source.cfg, source.shape, stage_names)
        pending = search_order(pending, stage_names, bounds)
    eta = Eta(len(pending))
    snapshot: WeightsSnapshot | None = None
    skipped_by_cache: list[str] = []
    calibration_memory: list[dict[str, Any]] = []  # each capture's measured memory
    for i, cand in enumerate(pending):
        lean = choose_quantizer(cand, source, sets, config.plan_memory_gb)
        if lean is not None and cand.graph_digest is not None:
            # keyed before the quantizer was chosen: a lean timing must not be found (or kept) as NNCF's
            _key_candidate(cand, cand.graph_digest, config)
        why = cannot_win(cand, bounds, best_p99(candidates, cand.stage))
        if why is None and (why := cached_slower(cand, candidates)) is not None:
            skipped_by_cache.append(cand.label)
        if why is not None:
            cand.status, cand.reason = "skipped", why
            log(f"[{i + 1}/{len(pending)}] {cand.label}: skipped, {why}")
            continue
        log(f"[{i + 1}/{len(pending)}] {cand.label} ({eta.line(i)})")
        finished = {c.stage for c in pending[:i]} - {c.stage for c in pending[i:]}
        if lean is not None:
            log(f"    {lean}")
        snapshot = _make_room(cand, finished, candidates, source, sets, ref_runners, snapshot, config, log)
        if snapshot is not None and not spilled:
            spilled.append(snapshot)
        t0 = time.perf_counter()
        captured = ensure_capture(cand, source, sets, config, log)
        if isinstance(captured, str):
            cand.status, cand.reason = "unavailable", captured
            log(f"    {cand.status} {cand.reason}")
            continue
        if captured is not None:
            calibration_memory.append({"before": cand.label, **captured})
        meter = PeakMeter.start(candidate_need(cand, source, sets).bytes)
        check_candidate(
            cand, source, sets, ref_runners, ref_actions, config, give_up_ms(cand, candidates, config.search)
        )
        cand.memory = meter.finish()
        drop_unneeded(sets, pending[i + 1 :], config, log)
        eta.add(time.perf_counter() - t0)
        if cache is not None and cand.cache_key is not None:
            cache.record(cand.cache_key, cand)
        lat = f" p50 {cand.latency.p50:.2f} / p99 {cand.latency.p99:.2f} ms" if cand.latency else ""
        cos = f" action cos {cand.action.cosine:.6f}" if cand.action else ""
        log(f"    {cand.status}{lat}{cos} {cand.reason} (checked in {time.perf_counter() - t0:.1f} s)")
        if cand.status != "accepted":
            cand.runner = None
        _release_runners(candidates, cand.stage)
    chosen: dict[str, Candidate] = {}
    for stage in [s.name for s in family.stages]:
        best = choose(candidates, stage)
        if best is None:  # cannot happen while eager fp32 is tried (it shares the model's weights)
            why = "; ".join(f"{c.label}: {c.status} ({c.reason})" for c in candidates if c.stage == stage)
            raise ConfigError(f"no candidate for stage {stage} was accepted ({why}); add --backends eager")
        chosen[stage] = best
    # Errors of several stages add up: check the whole plan, fall back stage by stage if needed.
    plan_pipe = _plan_pipeline(source, sets, chosen)
    agreement = worst_agreement(plan_pipe, checks, check_refs, config.tolerance)

    def evaluate(trial: dict[str, Candidate]) -> tuple[Any, Any]:
        pipe = _plan_pipeline(source, sets, trial)
        return pipe, worst_agreement(pipe, checks, check_refs, config.tolerance)

    chosen, plan_pipe, agreement = repair_plan(
        chosen, candidates, evaluate, (plan_pipe, agreement), config.tolerance, log
    )
    buckets: list[BucketRunners] = []
    if config.buckets and not family.capabilities.prompt_buckets:
        log(f"prompt buckets skipped: family {family.name} has none")
    elif sets.released and config.buckets:
        log(
            f"prompt buckets skipped: the fp32 {', '.join(sorted(sets.released))} reference was released to fit"
        )
    elif config.buckets:
        buckets = plan_buckets(source, sets, chosen, ref_pipeline, config, log)
    timed_names = ["plan"] if sets.released else ["reference", "plan"]
    log(
        f"timing {' and '.join(timed_names)}"
        + (" (the fp32 reference was released to fit)" if sets.released else " interleaved")
        + f" ({config.iterations} rounds)"
    )
    stage_samples: dict[str, dict[str, list[float]]] = {"reference": {}, "plan": {}}
    timers = {"reference": StageTimer(), "plan": StageTimer()}

    def timed(name: str, pipe: Pipeline) -> Callable[[], None]:
        def run() -> None:
            timer = timers[name]
            timer.begin_iteration()
            pipe.sample(source.obs, source.noise, timer=timer)
            host, _ = timer.end_iteration()
            for stage, ms in host.items():
                stage_samples[name].setdefault(stage, []).append(ms)

        return run

    pipes = {"reference": ref_pipeline, "plan": plan_pipe}
    samples = interleaved(
        {n: timed(n, pipes[n]) for n in timed_names},
        config.warmup,
        config.iterations,
        block=FINAL_BLOCK,
        untimed={n: _untimed(pipes[n], source) for n in timed_names},
    )
    ref_lat = stats_dict(samples["reference"], stage_samples["reference"]) if "reference" in samples else None
    plan_lat = stats_dict(samples["plan"], stage_samples["plan"])
    final_check: dict[str, Any] = {"planned": plan_summary(chosen), "planned_latency_ms": plan_lat}
    final_check["written"] = "plan"
    if slower_than_reference(ref_lat, plan_lat) and not _is_reference_plan(chosen, source):
        # The search's figures did not hold against the reference: the faster one is the answer.
        assert ref_lat is not None
        log(
            f"the plan ran slower than the fp32 eager reference in the final check, p50 "
            f"{plan_lat['p50']:.2f} against {ref_lat['p50']:.2f} ms: writing the reference instead"
        )
        chosen = _reference_plan(source, candidates, ref_runners)
        plan_pipe, plan_lat, final_check["written"] = ref_pipeline, ref_lat, "reference"
        agreement = worst_agreement(plan_pipe, checks, check_refs, config.tolerance)
        if buckets:
            buckets = plan_buckets(source, sets, chosen, ref_pipeline, config, log)
    violation = config.tolerance.violation(agreement)
    result = {
        "target": source.target,
        "budget_ms": config.budget_ms,
        "tolerance": config.tolerance.spec,
        "candidates": [c.to_dict() for c in candidates],
        "plan": plan_summary(chosen),
        "reference_latency_ms": ref_lat,
        "plan_latency_ms": plan_lat,
        "speedup_p50": ref_lat["p50"] / plan_lat["p50"] if ref_lat else None,
        "speedup_p99": ref_lat["p99"] / plan_lat["p99"] if ref_lat else None,
        "released_for_memory": sorted(sets.released),
        "memory": planning_memory(candidates, calibration_memory),
        "action_cos_min": agreement.cosine,
        "action_max_abs_normalized": agreement.max_abs_normalized,
        "plan_checked_observations": len(checks),
        "plan_within_tolerance": violation is None,
        "budget_met": None if config.budget_ms is None else plan_lat["p99"] <= config.budget_ms,
        "shape": asdict(source.shape),
        "iterations": config.iterations,
        "prompt_buckets": [*(b.bucket for b in buckets), *_prompt_slots(source)],
        "buckets": [b.to_dict() for b in buckets],
        "timing_cache": None if cache is None else timing_cache_summary(cache, candidates, skipped_by_cache),
        "final_check": final_check,
    }
    if cache is not None and skipped_by_cache:
        log(f"timing cache: {len(skipped_by_cache)} candidates skipped on its word ({cache.path})")
    lookups = sets.shipped_lookups(chosen)
    tables: dict[str, Tensor] = {}
    if lean_plan(family, chosen):
        tables = constants_of(_loop_set(source, sets, chosen) or ref_engines)
        tables = {k: v for k, v in tables.items() if k not in family.lookup_tables}
    return Plan(candidates, chosen, result, buckets, snapshot, tables, lookups)


def _check_references(source: PolicySource, ref_pipeline: Pipeline, first: Tensor) -> list[Tensor]:
    """The fp32 actions for `source.plan_checks`: the caller's (`check_actions`) where given, one per
    check and of the pipeline's shape (`first`: its actions for `source.obs`), else sampled here."""
    given = source.check_actions
    if (
        given is not None
        and len(given) == len(source.plan_checks)
        and all(a.shape == first.shape for a in given)
    ):
        return list(given)
    return [ref_pipeline.sample(o, n).clone() for o, n in source.plan_checks]


def _untimed(pipe: Pipeline, source: PolicySource) -> Callable[[], Any]:
    """A call of `pipe` that records no stage times (the final check's untimed calls)."""
    return lambda: pipe.sample(source.obs, source.noise)


def _reference_subs(source: PolicySource) -> dict[str, str]:
    """Stage -> the sub-engine the reference runs it with (a loop stage: its step engine)."""
    return {s.name: (s.loop.step if s.loop is not None else s.sub_engines[0]) for s in source.family.stages}


def _is_reference_plan(chosen: dict[str, Candidate], source: PolicySource) -> bool:
    subs = _reference_subs(source)
    return all(
        (c.backend, c.precision, c.variant, c.sub_engine) == ("eager", "fp32", "plain", subs[stage])
        for stage, c in chosen.items()
    )


def _reference_plan(
    source: PolicySource, candidates: list[Candidate], ref_runners: dict[str, Any]
) -> dict[str, Candidate]:
    """The fp32 eager reference as a plan, stage by stage, on the reference's own runners (what the final
    check timed): the search's eager fp32 candidate of the stage where there is one, else one made."""
    chosen: dict[str, Candidate] = {}
    for stage, sub in _reference_subs(source).items():
        cand = next(
            (
                c
                for c in candidates
                if (c.stage, c.sub_engine, c.backend, c.precision, c.variant)
                == (stage, sub, "eager", "fp32", "plain")
            ),
            None,
        )
        if cand is None:
            cand = Candidate(stage, sub, "eager", "fp32")
            candidates.append(cand)
        cand.status, cand.runner = "accepted", ref_runners[sub]
        cand.reason = "the final check timed the plan slower: the reference is written"
        chosen[stage] = cand
    return chosen


def _key_candidate(cand: Candidate, digest: str, config: PlanConfig) -> None:
    """`cand`'s identity in the timing cache from its graph and its options as they stand, and in a fast
    search its trusted cached timing."""
    from hotloop.compile.timing_cache import candidate_key

    cand.graph_digest = digest
    cand.cache_key = candidate_key(digest, cand, config.calibration, config.fp32_layers)
    cache = config.timing_cache
    cand.cached = cache.lookup(cand.cache_key) if config.search == "fast" and cache is not None else None


def _key_candidates(
    pending: list[Candidate],
    ref_engines: dict[str, SubEngine],
    config: PlanConfig,
    log: Callable[[str], None],
) -> None:
    """Each candidate's identity in the timing cache, and in a fast search its trusted cached timing."""
    from hotloop.compile.timing_cache import graph_digests

    cache = config.timing_cache
    t0 = time.perf_counter()
    digests = graph_digests(ref_engines)
    held = untrusted = 0
    for cand in pending:
        _key_candidate(cand, digests[cand.sub_engine], config)
        if cand.cache_key in cache.entries:
            held += 1
            untrusted += not cache.trusted(cache.entries[cand.cache_key])
    use = "" if config.search == "fast" else "; --search full reads none of them"
    high = f", {untrusted} of them timed at a high load (not trusted)" if untrusted else ""
    log(
        f"timing cache: {held} of {len(pending)} candidates timed here before{high}{use} ({cache.path}; "
        f"sub-engines hashed in {time.perf_counter() - t0:.1f} s)"
    )


def _prompt_slots(source: PolicySource) -> list[int]:
    """The full prompt's slots, for families whose prefix has a prompt length (their last bucket)."""
    return [source.shape.prompt_slots] if source.family.capabilities.prompt_buckets else []


def _make_room(
    cand: Candidate,
    finished: set[str],
    candidates: list[Candidate],
    source: PolicySource,
    sets: EngineSets,
    ref_runners: dict[str, Any],
    snapshot: WeightsSnapshot | None,
    config: PlanConfig,
    log: Callable[[str], None],
) -> WeightsSnapshot | None:
    """When `cand` cannot fit beside the fp32 model, release the fp32 weights of finished stages.

    The weights are saved to disk first (the artifact needs them). The stage keeps one runner, its
    fastest accepted candidate, rebuilt from its own saved files: a converted OpenVINO graph shares the
    torch weights' memory, so only a runner loaded from files lets them go. That runner becomes the
    stage's reference, so later candidates are checked against the fp32 actions with this stage already
    compiled (stricter). The reference cannot be timed afterwards."""
    import gc

    from hotloop.compile.memory_fit import GIB, available_bytes, headroom, refusal

    def fits() -> bool:
        return refusal(candidate_need(cand, source, sets), headroom(config.plan_memory_gb)) is None

    for stage in [s.name for s in source.family.stages]:  # first the runners the plan can do without
        if fits():
            return snapshot
        if stage in finished and _keep_two_runners(candidates, stage):
            gc.collect()
            log(f"    kept only the fastest and the most accurate {stage} runners, to fit")
    for stage in [s.name for s in source.family.stages]:
        if fits():
            break
        best = choose(candidates, stage)
        if stage not in finished or best is None or best.runner is None or best.backend not in FILE_BACKENDS:
            continue
        if best.sub_engine in sets.released:
            continue
        if snapshot is None:
            # A plan on file backends alone is written lean (no source weights): only their hash is kept.
            lean = source.family.capabilities.lean_artifact and set(config.backends) <= set(FILE_BACKENDS)
            if not lean:
                log("    saving the fp32 weights to disk before releasing any (the artifact needs them)")
            snapshot = WeightsSnapshot.take(source.model.state_dict(), save=not lean)
        before = available_bytes()
        graph = sets.get(torch.float32)[best.sub_engine]
        # Saved first, then every holder of the old runner and of the converted graph dropped, then the
        # weights released, and only then loaded back: the old and new compiled engines never coexist.
        prepared = best.runner.save(snapshot.folder / best.sub_engine)
        for c in candidates:
            if c.stage == stage:
                c.runner = None
        graph.conversions.clear()
        ref_runners.pop(best.sub_engine, None)
        keep = [n for n in sets.get(torch.float32) if n != best.sub_engine and n not in sets.released]
        sets.release(best.sub_engine, keep)
        gc.collect()
        best.runner = _loaded(best, graph, snapshot.folder / best.sub_engine, prepared, config.threads)
        ref_runners[best.sub_engine] = best.runner
        freed = available_bytes() - before
        log(
            f"    released the fp32 {stage} weights ({freed / GIB:.1f} GiB freed); it now runs as {best.label}"
        )
    return snapshot


def _loaded(
    cand: Candidate, graph: SubEngine, folder: Path, prepared: PreparedFiles, threads: int | None
) -> Runner:
    """`cand`'s runner loaded back from the files it saved into `folder`, as `Engine.load` would."""
    options = dict(prepared.options)
    if threads is not None and cand.backend in ("onnxruntime", "openvino"):
        options["threads"] = threads
    return get_backend(cand.backend).load(
        graph, cand.precision, folder, PreparedFiles(prepared.files, options)
    )


@dataclass
class WeightsSnapshot:
    """A temporary folder holding the source's fp32 weights (saved before any are released, with their
    hash) and the graphs of runners rebuilt from files; `write_artifact` moves the weights into the
    artifact."""

    folder: Path
    sha256: str

    @property
    def weights(self) -> Path:
        return self.folder / "weights.safetensors"

    @classmethod
    def take(cls, state: dict[str, Tensor], save: bool = True) -> WeightsSnapshot:
        """The weights' hash, and with `save` the weights themselves (a lean plan needs only the hash:
        at pi05:full that skips writing 13.4 GB)."""
        import tempfile

        from hotloop.compile.artifact import sha256_state_dict
        from hotloop.io import save_tensors

        folder = Path(tempfile.mkdtemp(prefix="hotloop-plan-"))
        snapshot = cls(folder, sha256_state_dict(state))
        if save:
            save_tensors({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(snapshot.weights))
        return snapshot

    def discard(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


def _plan_pipeline(source: PolicySource, sets: EngineSets, chosen: dict[str, Candidate]) -> Pipeline:
    """The plan's runners chained as its artifact will run them (a lean one's lookup tables as shipped)."""
    runners = {c.sub_engine: c.runner for c in chosen.values()}
    return pipeline(
        source,
        sets.get(torch.float32),
        runners,
        _loop_set(source, sets, chosen),
        sets.shipped_lookups(chosen),
    )


def _loop_set(
    source: PolicySource, sets: EngineSets, chosen: dict[str, Candidate]
) -> dict[str, SubEngine] | None:
    """The engine set the loop stage's runner was built from (its tables are the plan's)."""
    looped = loop_stage(source.family)
    if looped is None:
        return None
    d = chosen[looped]
    return sets.get(get_backend(d.backend).graph_dtype(d.precision), d.variant)


def write_artifact(
    source: PolicySource, plan: Plan, out: Path, config: PlanConfig, extra: dict[str, Any] | None = None
) -> Path:
    """Weights + per-stage graphs + manifest, written atomically into `out`; `extra` adds manifest
    fields (the compression work's `precision_plan` and `compression`)."""
    from hotloop.compile.artifact import (
        ArtifactWriter,
        base_manifest,
        entry_for,
        planned_fields,
        sha256_state_dict,
    )

    writer = ArtifactWriter(out, overwrite=config.overwrite)
    try:
        layout: dict[str, Any] = {}
        weights: str | None
        if lean_plan(
            source.family, plan.chosen
        ):  # only what runs: no source weights, the pipeline's tables in small files
            from hotloop.compile.artifact import LEAN, TABLES
            from hotloop.compile.lean_files import lookup_file, save_tensors

            save_tensors(writer.path(TABLES), plan.tables)
            for name, table in plan.lookups.items():
                save_tensors(writer.path(lookup_file(name)), {name: table})
            lookups = {name: lookup_file(name) for name in plan.lookups}
            layout = {"layout": LEAN, "tables": TABLES, "lookups": lookups}
            weights = None
            weights_sha = plan.weights.sha256 if plan.weights is not None else _source_sha(source)
        elif plan.weights is not None:  # some weights were released: the snapshot holds them all
            import shutil

            from hotloop.compile.artifact import WEIGHTS

            assert plan.weights.weights.is_file(), "a plan on file backends alone is written lean"

            shutil.move(str(plan.weights.weights), str(writer.path(WEIGHTS)))
            writer.path(WEIGHTS).chmod(0o644)  # as the other files (the temporary file was private)
            weights, weights_sha = WEIGHTS, plan.weights.sha256
        else:
            state = source.model.state_dict()
            weights, weights_sha = writer.write_weights(state), sha256_state_dict(state)
        subs = []
        for stage, cand in plan.chosen.items():
            assert cand.runner is not None
            folder = writer.tmp / cand.sub_engine
            prepared = cand.runner.save(folder)
            files = [f"{cand.sub_engine}/{f}" for f in prepared.files]
            options = {**cand.options, **prepared.options}
            requires = get_backend(cand.backend).required_features(cand.precision, options)
            entry = entry_for(cand.sub_engine, cand.runner, files, options, requires)
            entry["stage"] = stage
            entry["variant"] = cand.variant
            subs.append(entry)
        for bucket in plan.buckets:  # one entry and folder per bucket's engines (pi: prefix, denoise)
            for stage in source.family.capabilities.bucket_stages:
                cand = plan.chosen[stage]
                name = bucket_name(cand.sub_engine, bucket.bucket)
                runner = bucket.runners[cand.sub_engine]
                prepared = runner.save(writer.tmp / name)
                options = {**cand.options, **prepared.options}
                requires = get_backend(cand.backend).required_features(cand.precision, options)
                entry = entry_for(name, runner, [f"{name}/{f}" for f in prepared.files], options, requires)
                entry.update(stage=stage, variant=cand.variant, bucket=bucket.bucket)
                subs.append(entry)
        graph_bytes = sum((writer.tmp / f).stat().st_size for e in subs for f in e["files"])
        manifest = base_manifest(
            **layout,
            memory={
                "weights_mb": round(graph_bytes / 2**20, 1),  # the floor of any --memory-cap-mb
                "planning": plan.result.get("memory"),
                "candidates": {c.label: c.memory for c in plan.candidates if c.memory is not None},
            },
            kind=source.family.name,
            target=source.target,
            family=source.family.variant(source.cfg),
            config=source.family.config_to_dict(source.cfg),
            shape=asdict(source.shape),
            weights=weights,
            source_weights_sha256=weights_sha,
            sub_engines=subs,
            **planned_fields(config, plan.result, ("buckets",)),
            compile_s={c.sub_engine: c.compile_s for c in plan.chosen.values()},
            prompt_buckets=plan.result["prompt_buckets"],
            policy=source.policy,
            precision_plan=precision_plan(source.family, plan, config),
            compression=compression_entry(config),
        )
        from hotloop.lerobot.plugin_files import write_plugin_files

        # A LeRobot checkpoint's plan also loads in LeRobot's own loop (config.json + its processors).
        write_plugin_files(writer.tmp, source.family.name, source.policy)
        return writer.commit({**manifest, **(extra or {})})
    except BaseException:
        writer.abort()
        raise
    finally:
        if plan.weights is not None:  # the runners' files stay mapped while they live (POSIX unlink)
            plan.weights.discard()


def _source_sha(source: PolicySource) -> str:
    """The source weights' hash (names, dtypes, shapes, bytes), which a lean artifact names but does not hold."""
    from hotloop.compile.artifact import sha256_state_dict

    return sha256_state_dict(source.model.state_dict())


def precision_plan(family: PolicyFamily, plan: Plan, config: PlanConfig) -> dict[str, Any]:
    """Per sub-engine: backend, precision, and for quantized ones the layers kept fp32 (mixed plans,
    named by the step engine for a loop stage: the loop runs the step's layers)."""
    from hotloop.nn.fake_quant import PROTECTED

    out: dict[str, Any] = {}
    for cand in plan.chosen.values():
        entry: dict[str, Any] = {"backend": cand.backend, "precision": cand.precision}
        if cand.precision not in ("fp32", "bf16"):
            loop = family.loop_of(cand.sub_engine)
            key = loop.step if loop is not None else cand.sub_engine
            entry["fp32_layers"] = list(config.fp32_layers.get(key, []))
            entry["fp32_always"] = list(PROTECTED)
        out[cand.sub_engine] = entry
    return out


def compression_entry(config: PlanConfig) -> dict[str, Any] | None:
    if config.calibration is None and not config.fp32_layers:
        return None
    return {
        "calibration": None if config.calibration is None else config.calibration.manifest_entry(),
        "mixed_precision": bool(config.fp32_layers),
    }
