"""The Ray executor: a sweep's episodes as Ray actor tasks, every cell at once over the whole cluster.

One actor per worker slot (`--ray-cpus-per-worker` CPUs, `--ray-memory-mb` reserved, at most
`--max-workers` of them). An actor builds an env and policy once per build key (target, task and what
else makes them: `hotloop.closedloop.workers.build_key`; a sweep's cells that differ in strategy or
latency share one) and keeps the two most recent; the driver hands an actor episodes of the cell it last
ran while any remain. While more episodes are queued than there are actors, the driver keeps two in
flight per actor, so an actor never waits for a round trip; near the end one, so none sits on an episode
another could start. Each result is handed on (appended to the store) as it arrives, after the actor's
next episode is submitted.

Failure, as locally: an episode that raises is an error record (the actor survives). An actor whose
process dies is restarted by Ray once and its in-flight episodes retried once (`max_restarts`,
`max_task_retries`), on whichever node has room; an episode that kills its actor again is an error row
and the slot gets a fresh actor (at most 2 per slot, then the sweep stops as a local one does). Ray is
the scheduler; this module only keeps actors fed.

Where artifacts come from: the target is a path, read by each node itself, so it must be one every node
can read (a shared filesystem). A node that cannot read it, or whose CPU lacks a feature the artifact's
manifest requires (`requires_cpu_features`), refuses the cell by name; its episodes go to other actors,
and a cell every actor refused is reported and left for a `--resume` on other nodes, never run eagerly.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hotloop.closedloop.cells import Cell, Episode
from hotloop.closedloop.execution import ExecOptions, ExecResult, ExecStats, Row, make_row
from hotloop.closedloop.workers import EpisodeJob
from hotloop.errors import ConfigError, HotloopError

IN_FLIGHT_PER_ACTOR = 2
RUNNERS_KEPT = 2  # builds (env and policy) an actor keeps; older ones are closed
REPLACEMENTS_PER_SLOT = 2


def parse_cluster(text: str) -> str:
    """The address for `ray.init` ("local": start one here), or a ConfigError naming the flag."""
    if text == "ray":
        address = os.environ.get("RAY_ADDRESS")
        if not address:
            raise ConfigError(
                "--cluster ray: RAY_ADDRESS is not set; give --cluster ray://HOST:PORT, ray:HOST:PORT or ray:local"
            )
        return address
    if text == "ray:local":
        return "local"
    if text.startswith("ray://"):
        return text
    if text.startswith("ray:") and len(text) > 4:
        return text[4:]  # a GCS address (HOST:PORT) or "auto", as `ray.init(address=...)` takes it
    raise ConfigError(
        f"--cluster {text!r}: use ray:local, ray://HOST:PORT (Ray Client), ray:HOST:PORT (GCS) or ray "
        "(RAY_ADDRESS); leave it out for the local worker pool"
    )


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--cluster ray needs Ray in this environment: pip install 'hotloop[cluster]'"
        ) from None
    return ray


def probe(text: str, address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on an address nothing listens at: `ray.init` would retry it for many minutes."""
    import socket

    hostport = address.removeprefix("ray://").rsplit("/", 1)[0]
    if hostport in ("local", "auto") or ":" not in hostport:
        return
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError) as e:
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise ConfigError(
            f"--cluster {text}: cannot reach {hostport} ({reason}); check the address and that "
            "`ray start --head` runs there"
        ) from None


def connect(text: str) -> tuple[Any, bool]:
    """`ray.init` for `--cluster text`; returns (ray, whether this call started the connection)."""
    address = parse_cluster(text)
    ray = _import_ray()
    if ray.is_initialized():
        return ray, False
    probe(text, address)
    kwargs: dict[str, Any] = {"include_dashboard": False} if address == "local" else {}
    try:
        ray.init(
            address=address,  # "local" starts a new head here even when RAY_ADDRESS is set
            logging_level="WARNING",
            log_to_driver=False,
            configure_logging=True,
            **kwargs,
        )
    except Exception as e:  # noqa: BLE001 - Ray raises several kinds for an address it cannot reach
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(
            f"--cluster {text}: cannot connect to Ray ({reason[:200]}); check the address and that "
            "`ray start --head` runs there"
        ) from None
    return ray, True


def artifact_refusal(target: str, artifact: bool, node: str) -> str | None:
    """Why this node must not run `target` (None: it may): an artifact it cannot read, or one whose
    manifest requires CPU features this node lacks."""
    if not artifact:
        return None
    from hotloop.compile.cpu_features import missing_features
    from hotloop.io import read_json_file

    path = Path(target) / "manifest.json"
    try:
        manifest = read_json_file(path)
    except ValueError as e:
        return (
            f"node {node} cannot read artifact {target} ({type(e).__name__}); give a path every node can read"
        )
    for entry in manifest.get("sub_engines", []) if isinstance(manifest, dict) else []:
        missing = missing_features(list(entry.get("requires_cpu_features", [])))
        if missing:
            return (
                f"node {node} lacks CPU feature {' and '.join(missing)}, which artifact {target} "
                f"(sub-engine {entry.get('name')!r}) requires"
            )
    return None


class EpisodeActor:
    """A worker slot (made a Ray actor by `ray.remote` in `run_on_ray`, so importing this needs no Ray)."""

    def __init__(self) -> None:
        import ray

        from hotloop.closedloop.workers import RunnerCache

        ctx = ray.get_runtime_context()
        self.node = f"{ray.util.get_node_ip_address()}/{ctx.get_node_id()[:6]}"
        self.runners = RunnerCache(kept=RUNNERS_KEPT)
        self.free = time.perf_counter()  # when it last finished something (dispatch: idle since)

    def where(self) -> dict[str, Any]:
        return {"node": self.node, "pid": os.getpid()}

    def run(self, cell: str, job: EpisodeJob, seed: int, artifact: bool) -> dict[str, Any]:
        import traceback

        from hotloop.closedloop.workers import _crash_record, _describe

        got = time.perf_counter()
        wait_s = max(0.0, got - self.free)
        if not self.runners.holds(job):
            why = artifact_refusal(job.target, artifact, self.node)
            if why is not None:
                return {"kind": "refused", "why": why, "node": self.node}
        try:
            runner, build_s = self.runners.get(job)
        except HotloopError as e:
            return {"kind": "config_error", "why": str(e), "node": self.node}
        except Exception as e:  # noqa: BLE001 - report why the worker cannot start
            return {"kind": "init_error", "why": _describe(e), "node": self.node}
        t1 = time.perf_counter()
        try:
            record = runner.run(seed)
        except HotloopError as e:
            return {"kind": "config_error", "why": str(e), "node": self.node}
        except Exception:  # noqa: BLE001 - as the local worker: a crash is an error episode
            record = _crash_record(seed, traceback.format_exc(limit=3))
        self.free = time.perf_counter()
        timing = {"pid": os.getpid(), "episode_s": self.free - t1, "build_s": build_s, "wait_s": wait_s}
        return {"kind": "done", "record": record, "timing": timing, "node": self.node}


@dataclass
class _Slot:
    actor: Any
    generation: int = 0
    cell: str | None = None  # the cell it last ran (affinity)
    in_flight: int = 0
    replaced: int = 0
    refused: frozenset[str] = frozenset()


def _slot_count(ray: Any, options: ExecOptions, episodes: int) -> int:
    """How many actors fit: per node, its CPUs / cpus-per-worker (and its memory / memory-per-worker)."""
    fits = 0
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        res = node.get("Resources", {})
        n = int(res.get("CPU", 0) // options.cpus_per_worker)
        if options.memory_mb is not None:
            n = min(n, int(res.get("memory", 0) // (options.memory_mb * 2**20)))
        fits += n
    if fits == 0:
        memory = "" if options.memory_mb is None else f" and {options.memory_mb:g} MiB"
        raise ConfigError(
            f"--ray-cpus-per-worker {options.cpus_per_worker:g}{memory}: no node of the cluster has that much "
            "room; lower it, or add nodes"
        )
    if options.max_workers is not None:
        fits = min(fits, options.max_workers)
    return max(1, min(fits, episodes))


def run_on_ray(
    cells: list[Cell], todo: list[Episode], on_row: Callable[[Row], None], options: ExecOptions
) -> ExecResult:
    from hotloop.interrupts import first_interrupt_only

    assert options.cluster is not None
    t_connect = time.perf_counter()
    ray, started = connect(options.cluster)
    connect_s = time.perf_counter() - t_connect
    try:
        with first_interrupt_only():
            return _run(ray, cells, todo, on_row, options, connect_s)
    finally:
        if started:
            ray.shutdown()


def _run(
    ray: Any,
    cells: list[Cell],
    todo: list[Episode],
    on_row: Callable[[Row], None],
    options: ExecOptions,
    connect_s: float,
) -> ExecResult:
    from ray.exceptions import RayActorError

    from hotloop.closedloop.workers import _crash_record, build_key
    from hotloop.progress import Progress
    from hotloop.targets import ARTIFACT_ENTRY, find_target

    artifact = {c.key: find_target(c.request.target) is ARTIFACT_ENTRY for c in cells}
    labels = {c.key: c.label() for c in cells}
    n_slots = _slot_count(ray, options, len(todo)) if todo else 1
    stats = ExecStats(len(todo), "ray", slots=n_slots)
    remote = ray.remote(EpisodeActor)
    actor_options: dict[str, Any] = {
        "num_cpus": options.cpus_per_worker,
        "max_restarts": 1,
        "max_task_retries": 1,
    }
    if options.memory_mb is not None:
        actor_options["memory"] = int(options.memory_mb * 2**20)

    def new_actor() -> Any:
        return remote.options(**actor_options).remote()

    slots = [_Slot(new_actor()) for _ in range(n_slots)] if todo else []
    # Per cell, in cell order: an actor takes the next episode of the cell it ran last, else of the first
    # cell of the same build, else of the first cell it has not refused (O(cells) per episode).
    queue: dict[str, deque[Episode]] = {}
    for ep in todo:
        queue.setdefault(ep.cell, deque()).append(ep)
    pending: dict[Any, tuple[int, int, Episode]] = {}  # ref -> (slot, generation, episode)
    refused: dict[str, str] = {}
    interrupted = False

    builds = {ep.cell: build_key(ep.job) for ep in todo}  # cells one actor build plays

    def take(slot: _Slot) -> Episode | None:
        if slot.cell is not None and slot.cell not in slot.refused and queue.get(slot.cell):
            return queue[slot.cell].popleft()
        held = builds.get(slot.cell) if slot.cell is not None else None
        for same in (True, False):  # a cell of the build it holds first
            for cell, episodes in queue.items():
                if episodes and cell not in slot.refused and (not same or builds[cell] == held):
                    return episodes.popleft()
        return None

    def submit() -> None:
        left = sum(len(q) for q in queue.values())
        for i, slot in enumerate(slots):
            # A second episode only while every actor can still get one: at the end, none waits behind
            # another's queued episode.
            depth = IN_FLIGHT_PER_ACTOR if left > len(slots) else 1
            while slot.actor is not None and slot.in_flight < depth:
                ep = take(slot)
                if ep is None:
                    break
                ref = slot.actor.run.remote(ep.cell, ep.job, ep.seed, artifact[ep.cell])
                pending[ref] = (i, slot.generation, ep)
                slot.cell = ep.cell
                slot.in_flight += 1
                left -= 1

    def deliver(record: dict[str, Any], ep: Episode, timing: dict[str, Any], node: str, slot: int) -> None:
        row = make_row(ep.cell, record, timing, node)
        on_row(row)
        stats.add(row, slot)
        bar.update(1, stats.postfix())

    desc = f"sweep (ray, {n_slots} worker{'s' if n_slots != 1 else ''})"
    bar = Progress(len(todo), desc, "ep", enabled=options.progress)
    try:
        with bar:
            submit()
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for ref in ready:
                    i, generation, ep = pending.pop(ref)
                    slot = slots[i]
                    if slot.generation == generation:
                        slot.in_flight -= 1
                    try:
                        out = ray.get(ref)
                    except RayActorError as e:  # its process died, and Ray's one retry too
                        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else "no message"
                        deliver(
                            _crash_record(
                                ep.seed, f"worker process died in episode seed {ep.seed} ({reason})"
                            ),
                            ep,
                            {},
                            "?",
                            i,
                        )
                        if slot.generation == generation:  # replace it once, not once per lost episode
                            slot.replaced += 1
                            ray.kill(slot.actor, no_restart=True)
                            slot.generation += 1
                            slot.in_flight = 0
                            slot.actor = new_actor() if slot.replaced <= REPLACEMENTS_PER_SLOT else None
                            if all(s.actor is None for s in slots):
                                raise HotloopError(
                                    "evaluation workers keep dying on the cluster; see `ray logs` on its nodes"
                                ) from None
                        continue
                    if out["kind"] == "done":
                        submit()  # the actor's next episode first, then the bookkeeping
                        deliver(out["record"], ep, out["timing"], out["node"], i)
                    elif out["kind"] == "refused":
                        slot.refused = slot.refused | {ep.cell}
                        if all(ep.cell in s.refused for s in slots if s.actor is not None):
                            refused.setdefault(ep.cell, out["why"])
                            queue.pop(ep.cell, None)  # no actor will take these
                        else:
                            queue[ep.cell].appendleft(ep)  # for an actor that has not refused it
                    elif out["kind"] == "config_error":
                        raise ConfigError(f"{labels[ep.cell]}: {out['why']}")
                    else:
                        raise HotloopError(
                            f"evaluation worker could not start on {out['node']}: {out['why']}"
                        )
                submit()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        for slot in slots:
            if slot.actor is not None:
                ray.kill(slot.actor, no_restart=True)
    for key, why in refused.items():
        import typer

        typer.echo(
            f"refused: {labels[key]}: {why} (its episodes did not run; --resume on other nodes)", err=True
        )
    summary = stats.summary(interrupted, {labels[k]: v for k, v in refused.items()})
    summary["connect_s"] = round(connect_s, 3)
    summary["cluster"] = options.cluster
    return ExecResult(interrupted, summary, refused)
