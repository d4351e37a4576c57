"""Paired closed-loop gaps of several plans against one teacher, from `hotloop eval --json` files.

    python benchmarks/paired_gap_plot.py --teacher T_1000.json,T_1200.json \\
        --plan "1 step, 1600 x 64=S_1000.json,S_1200.json" --plan "2 steps=U.json" \\
        --label "async 200 ms" -o gap.png

Every plan is paired with the teacher by episode seed (the seeds both files hold): the gap is the plan's
success minus the teacher's in points, its 95 % interval the normal one of a paired difference, its p the
exact McNemar test on the discordant episodes (only the teacher / only the plan succeeded). One eval's
seeds may come in several files (comma-separated, e.g. seeds 1000-1199 and 1200-1999 run apart). The table
goes to stdout, the plot (one row a plan, the band of +-2 points shaded) to `-o`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path


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


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p: the binomial(n, 1/2) tail of the smaller discordant count, doubled."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class PairedGap:
    episodes: int
    teacher: int
    plan: int
    only_teacher: int
    only_plan: int

    @property
    def points(self) -> float:
        return 100.0 * (self.plan - self.teacher) / self.episodes

    @property
    def ci95(self) -> tuple[float, float]:
        """Normal interval of the mean paired difference (d in {-1, 0, 1} per episode), in points."""
        n = self.episodes
        mean = (self.only_plan - self.only_teacher) / n
        var = ((self.only_plan + self.only_teacher) / n - mean**2) / max(1, n - 1)
        half = 1.96 * math.sqrt(max(0.0, var))
        return 100.0 * (mean - half), 100.0 * (mean + half)

    @property
    def p(self) -> float:
        return mcnemar_p(self.only_teacher, self.only_plan)


def paired_gap(teacher: dict[int, bool], plan: dict[int, bool]) -> PairedGap:
    seeds = sorted(set(teacher) & set(plan))
    if not seeds:
        raise SystemExit(
            "error: the plan and the teacher share no episode seed (run both on the same --seed range)"
        )
    return PairedGap(
        len(seeds),
        sum(teacher[s] for s in seeds),
        sum(plan[s] for s in seeds),
        sum(teacher[s] and not plan[s] for s in seeds),
        sum(plan[s] and not teacher[s] for s in seeds),
    )


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
        lo, hi = g.ci95
        print(f"{name:<40} {g.episodes:>5} {g.teacher:>7} {g.plan:>5} {g.points:>+8.1f} "
              f"{f'{lo:+.1f}..{hi:+.1f}':>15} {f'{g.only_teacher}/{g.only_plan}':>9} {g.p:>8.2g}")  # fmt: skip
    if args.out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.6))
        ax.axvspan(-args.band, args.band, color="tab:green", alpha=0.12, label=f"within {args.band:g} points")
        ax.axvline(0, color="grey", lw=0.8)
        for i, (_, g) in enumerate(rows):
            lo, hi = g.ci95
            ax.errorbar(
                g.points, i, xerr=[[g.points - lo], [hi - g.points]], fmt="o", color="tab:blue", capsize=3
            )
        ax.set_yticks(range(len(rows)), [f"{n} (n={g.episodes})" for n, g in rows])
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
