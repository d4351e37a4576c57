"""`hotloop demo`: the acceleration ladder, one rung per capability, written to one report.

Each rung measures something and returns a `Rung`; later issues add rungs (compiled backends,
quantization, real-time runners) to `RUNGS` without touching the report code. A rung that fails is
recorded in the report with its error and the others still run: nothing already measured is lost.
"""

from __future__ import annotations

import html
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hotloop
from hotloop.errors import ConfigError
from hotloop.io import atomic_write_json, atomic_write_text
from hotloop.measure.fingerprint import machine_fingerprint


@dataclass
class Rung:
    title: str
    summary: dict[str, Any]
    plots: list[Path] = field(default_factory=list)
    html: str = ""
    error: str | None = None
    seconds: float = 0.0
    name: str = ""  # its key in RUNGS, set by run_demo: what the headline reads it by


@dataclass(frozen=True)
class DemoConfig:
    out_dir: Path = Path("hotloop-report")
    full: bool = False
    progress: bool = True
    only: tuple[str, ...] = ()  # rung names to run (default: all)
    history: Path | None = None  # append the report here; show the previous demo run's figures
    overwrite: bool = False  # --overwrite: write the report into a folder holding other files


def _bench_rung(
    title: str,
    target: str,
    out_dir: Path,
    warmup: int,
    iterations: int,
    progress: bool,
    compare: str | None = None,
    **options: Any,
) -> Rung:
    from hotloop.measure.bench import BenchConfig, run_bench
    from hotloop.measure.report import plot_latency, write_json
    from hotloop.targets import TargetOptions, default_targets

    registry = default_targets()
    opts = TargetOptions(**options)
    case = registry.get(target).build_bench(target, opts)
    other = registry.get(compare).build_bench(compare, opts) if compare else None
    result = run_bench(case, BenchConfig(warmup=warmup, iterations=iterations, progress=progress), other)
    stem = target.replace(":", "_")
    write_json(result, out_dir / f"bench_{stem}.json")
    plot = plot_latency(result, out_dir / f"bench_{stem}.png")
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td>"
        + "".join(f"<td>{getattr(s, q):.3f}</td>" for q in ("p50", "p90", "p95", "p99", "max"))
        + "</tr>"
        for name, s in result.stages.items()
    )
    lat = result.latency
    body = (
        f"<p>{iterations} iterations after {warmup} warm-up; control rate {lat.rate_hz_p50:.1f} Hz at p50, "
        f"{lat.rate_hz_p99:.1f} Hz at p99; jitter warning: {result.jitter_warning}.</p>"
        "<table><tr><th>stage (ms)</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>max</th></tr>"
        f"{rows}</table>"
    )
    return Rung(
        title=title,
        summary=result.to_dict() | {"samples_ms": None, "stage_samples_ms": None},
        plots=[plot],
        html=body,
    )


def rung_harness(config: DemoConfig) -> Rung:
    return _bench_rung("Latency harness: toy:mlp", "toy:mlp", config.out_dir, 20, 200, config.progress)


def rung_vla(config: DemoConfig) -> Rung:
    iterations = 30 if config.full else 8
    return _bench_rung(
        "Reference VLA: pi05:small, fp32 eager", "pi05:small", config.out_dir, 2, iterations, config.progress
    )


def rung_closed_loop(config: DemoConfig) -> Rung:
    from hotloop.demo.closed_loop_rung import run_rung

    out = run_rung(config.out_dir, config.full, progress=config.progress)
    return Rung(
        title=out["title"],
        summary=out["summary"],
        plots=[Path(p) for p in out.get("plots", [])],
        html=out.get("html", ""),
    )


def rung_compile(config: DemoConfig) -> Rung:
    from hotloop.demo.compile_rung import run_rung

    out = run_rung(config.out_dir, config.full, progress=config.progress)
    return Rung(title=out["title"], summary=out["summary"], html=out["html"])


def rung_compression(config: DemoConfig) -> Rung:
    from hotloop.demo.compression_rung import run_compression_rung

    out = run_compression_rung(config.out_dir, config.full, progress=config.progress)
    return Rung(
        title=out["title"], summary=out["summary"], plots=[Path(p) for p in out["plots"]], html=out["html"]
    )


def rung_families(config: DemoConfig) -> Rung:
    from hotloop.demo.families_rung import run_rung

    out = run_rung(config.out_dir, config.full, progress=config.progress)
    return Rung(
        title=out["title"], summary=out["summary"], plots=[Path(p) for p in out["plots"]], html=out["html"]
    )


def rung_robustness(config: DemoConfig) -> Rung:
    from hotloop.demo.robustness_rung import run_rung

    out = run_rung(config.out_dir, config.full, progress=config.progress)
    return Rung(
        title=out["title"], summary=out["summary"], plots=[Path(p) for p in out["plots"]], html=out["html"]
    )


RUNGS: dict[str, Callable[[DemoConfig], Rung]] = {
    "harness": rung_harness,
    "vla": rung_vla,
    "compile": rung_compile,
    "closed-loop": rung_closed_loop,
    "compression": rung_compression,
    "families": rung_families,
    "robustness": rung_robustness,
}


# The compression and families rungs compile and evaluate several candidates, the robustness rung runs
# two plans at eight points (minutes on 2 cores): they run under `--full` or when named with `--rung`, so
# the default demo stays a few minutes on a fresh machine.
OPT_IN_RUNGS = ("compression", "families", "robustness")


def selected_rung_names(only: tuple[str, ...], full: bool = False) -> list[str]:
    unknown = [name for name in only if name not in RUNGS]
    if unknown:
        raise ConfigError(f"unknown demo rung(s) {', '.join(unknown)}; known: {', '.join(RUNGS)}")
    default = tuple(RUNGS) if full else tuple(n for n in RUNGS if n not in OPT_IN_RUNGS)
    return list(only or default)


def selected_rungs(only: tuple[str, ...], full: bool = False) -> list[Callable[[DemoConfig], Rung]]:
    return [RUNGS[name] for name in selected_rung_names(only, full)]


def run_demo(config: DemoConfig, log: Callable[[str], None] = print) -> list[Rung]:
    from hotloop.demo.previous import previous_demo
    from hotloop.measure.history import check_history_dir
    from hotloop.output_dir import Marker, claim_output_dir

    names = selected_rung_names(config.only, config.full)
    # Before minutes of measuring, not at the first write:
    claimed = claim_output_dir(
        config.out_dir, "--out", "demo", overwrite=config.overwrite, markers=[Marker("report.json", "rungs")]
    )
    check_history_dir(config.history)
    previous = previous_demo(config.history)
    claimed.create()
    rungs: list[Rung] = []
    for name in names:
        make_rung = RUNGS[name]
        start = time.monotonic()
        try:
            rung = make_rung(config)
        except Exception as exc:
            rung = Rung(title=make_rung.__name__, summary={}, error=f"{type(exc).__name__}: {exc}")
            log(f"rung {make_rung.__name__} failed: {rung.error}\n{traceback.format_exc()}")
        rung.seconds, rung.name = time.monotonic() - start, name
        rungs.append(rung)
        log(f"{rung.title}: {'FAILED' if rung.error else 'done'} in {rung.seconds:.1f} s")
        write_report(config, rungs, previous)  # after every rung: an interrupted demo keeps what finished
    if config.history is not None:
        import json

        from hotloop.measure.history import append_run

        report = json.loads((config.out_dir / "report.json").read_text())
        run = append_run(config.history, "demo", "demo", report)
        log(f"recorded as #{run.number} in {config.history} ({run.path.name})")
    return rungs


def read_headline(out_dir: Path) -> list[str]:
    """The headline lines of the report written to `out_dir` (report.json's `headline`)."""
    import json

    return list(json.loads((Path(out_dir) / "report.json").read_text())["headline"])


def write_report(
    config: DemoConfig, rungs: list[Rung], previous: tuple[str, dict[str, Any]] | None = None
) -> tuple[Path, Path]:
    from hotloop.demo.headline import headline_lines
    from hotloop.demo.previous import previous_html

    env = machine_fingerprint()
    report: dict[str, Any] = {
        "hotloop_version": hotloop.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "full": config.full,
        "env": env,
        "rungs": [
            {
                "name": r.name,
                "title": r.title,
                "seconds": r.seconds,
                "error": r.error,
                "summary": r.summary,
                "plots": [p.name for p in r.plots],
            }
            for r in rungs
        ],
    }
    headline = headline_lines(report)
    report["headline"] = headline  # what `hotloop demo` ends its output with, too
    json_path = atomic_write_json(config.out_dir / "report.json", report)
    sections = []
    for r in rungs:
        status = f"<p class='err'>failed: {html.escape(r.error)}</p>" if r.error else ""
        images = "".join(f"<img src='{html.escape(p.name)}' alt='{html.escape(p.name)}'>" for p in r.plots)
        sections.append(
            f"<section><h2>{html.escape(r.title)}</h2><p>{r.seconds:.1f} s</p>{status}{r.html}"
            f"{previous_html(r.title, r.summary, previous) if not r.error else ''}{images}</section>"
        )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>hotloop report</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}img{max-width:100%}.err{color:#b00}"
        ".headline pre{background:#f4f4f4;padding:8px;font-size:1.05em}"
        "</style></head><body><h1>hotloop report</h1>"
        f"<p>hotloop {hotloop.__version__}, commit {html.escape(str(env.get('git_commit')))}, "
        f"{html.escape(str(env.get('cpu_model')))}, {env.get('cpu_count')} CPUs</p>"
        f"<section class='headline'><pre>{html.escape(chr(10).join(headline))}</pre></section>"
        + "".join(sections)
        + "</body></html>"
    )
    html_path = atomic_write_text(config.out_dir / "report.html", page)
    return json_path, html_path
