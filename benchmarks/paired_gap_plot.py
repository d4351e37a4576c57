"""Paired closed-loop gaps of several plans against one teacher, from `hotloop eval --json` files.

    python benchmarks/paired_gap_plot.py --teacher T_1000.json,T_1200.json \\
        --plan "1 step, 1600 x 64=S_1000.json,S_1200.json" --plan "2 steps=U.json" \\
        --label "async 200 ms" -o gap.png

Every plan is paired with the teacher by episode seed (the seeds both files hold) as `hotloop compare` pairs two eval runs
(`hotloop.measure.compare.paired_success`): the gap is the plan's success minus the teacher's in points, with
its exact 95 % interval and McNemar's exact p on the discordant episodes (only the teacher / only the plan). One eval's
seeds may come in several files (comma-separated, e.g. seeds 1000-1199 and 1200-1999 run apart). The table
goes to stdout, the plot (one row a plan, the band of +-2 points shaded) to `-o`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hotloop.measure.compare import PairedSuccess, paired_success


def load_outcomes(paths: str) -> dict[int, bool]:
    """Seed -> success of every episode in the comma-separated eval JSONs (a later file wins a seed)."""
    out: dict[int, bool] = {}
    for name in paths.split(","):
        path = Path(name)
        if not path.is_file():
            raise SystemExit(f"error: {name!r} is not a file (an eval JSON: hotloop eval ... --json FILE)")
        rows = json.loads(path.read_text()).get("per_episode")
        if not isinstance(rows, list):
            raise SystemExit(f"error: {name!r} has no per_episode list (is it an eval JSON?)")
        for row in rows:
            if row.get("error") is None:  # a crashed episode is no outcome of the policy's
                out[int(row["seed"])] = bool(row["success"])
    return out


def paired_gap(teacher: dict[int, bool], plan: dict[int, bool]) -> PairedSuccess:
    """The plan against the teacher on the seeds both hold (`hotloop compare`'s paired success)."""
    seeds = sorted(set(teacher) & set(plan))
    if not seeds:
        raise SystemExit(
            "error: the plan and the teacher share no episode seed (run both on the same --seed range)"
        )
    return paired_success([teacher[s] for s in seeds], [plan[s] for s in seeds])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", required=True, help="the teacher's eval JSON(s), comma-separated")
    ap.add_argument("--plan", action="append", required=True, metavar="NAME=JSON[,JSON]",
                    help="a plan's name and its eval JSON(s); repeat for each plan")  # fmt: skip
    ap.add_argument("--label", default="", help="what the evals ran (the plot's x-axis title)")
    ap.add_argument("--band", type=float, default=2.0, help="the +- points shaded as 'within' (default 2)")
    ap.add_argument("-o", "--out", type=Path, help="the plot (.png); none: the table only")
    args = ap.parse_args(argv)
    if args.out is not None and not args.out.parent.is_dir():
        raise SystemExit(f"error: -o {args.out}: its folder does not exist")
    teacher = load_outcomes(args.teacher)
    rows = []
    for spec in args.plan:
        name, sep, files = spec.rpartition("=")
        if not sep or not name or not files:
            raise SystemExit(f"error: --plan {spec!r}: give NAME=JSON[,JSON]")
        rows.append((name, paired_gap(teacher, load_outcomes(files))))
    print(
        f"{'plan':<40} {'n':>5} {'teacher':>7} {'plan':>5} {'gap pts':>8} {'95% CI':>15} {'only T/P':>9} {'p':>8}"
    )
    for name, g in rows:
        gap, lo, hi = (100 * x for x in (g.difference.estimate, g.difference.low, g.difference.high))
        teacher_ok, plan_ok = g.both + g.only_baseline, g.both + g.only_now
        print(f"{name:<40} {g.pairs:>5} {teacher_ok:>7} {plan_ok:>5} {gap:>+8.1f} "
              f"{f'{lo:+.1f}..{hi:+.1f}':>15} {f'{g.only_baseline}/{g.only_now}':>9} {g.p_value:>8.2g}")  # fmt: skip
    if args.out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.6))
        ax.axvspan(-args.band, args.band, color="tab:green", alpha=0.12, label=f"within {args.band:g} points")
        ax.axvline(0, color="grey", lw=0.8)
        for i, (_, g) in enumerate(rows):
            gap, lo, hi = (100 * x for x in (g.difference.estimate, g.difference.low, g.difference.high))
            ax.errorbar(gap, i, xerr=[[gap - lo], [hi - gap]], fmt="o", color="tab:blue", capsize=3)
        ax.set_yticks(range(len(rows)), [f"{n} (n={g.pairs})" for n, g in rows])
        ax.invert_yaxis()
        xlabel = "success against the teacher, points (95% CI)"
        ax.set_xlabel(xlabel + ("\n" + args.label if args.label else ""))
        ax.legend(loc="upper left", fontsize=8)
        fig.tight_layout()
        fig.savefig(args.out, dpi=110)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
