"""The whole test-backend-ops catalogue (the shipped 9,747 rows) on the CPU against ggml, timed.

Run: ``python benchmarks/bench_catalogue.py [--sample N] [--workers 2] [--policy none] [--out CSV]``.
Prints the wall time against the 10-minute budget (``budget ratio`` < 1 meets it), cases per
second, the totals per status, the share of all rows that pass, the upstream-accepted rows
passing, the per-op table (with each op's seconds) and the slowest rows; the same run as
``ovkit test-ops --catalogue test-backend-ops --policy none`` without the per-case lines.
The machine's other load shows in the wall time: ``cpu`` is this run's own processor time.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUDGET_S = 600.0


def _cpu_seconds() -> float:
    """Processor time of this process and its finished children (the workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv: list[str] | None = None) -> int:
    from ovkit.catalogue import run

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, help="a case list CSV (default: the shipped half)")
    ap.add_argument("--sample", type=int, help="a stratified sample of about N rows (default: every row)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--policy", choices=("none", "upstream"), default="none")
    ap.add_argument("--out", type=Path, help="also write every result as CSV here")
    args = ap.parse_args(argv)
    rows = run.read_rows(args.cases)
    if args.sample:
        rows = run.stratified(rows, args.sample)
    t0, c0 = time.perf_counter(), _cpu_seconds()
    df = run.run(rows, args.policy, workers=args.workers)
    wall, cpu = time.perf_counter() - t0, _cpu_seconds() - c0
    if args.out:
        df.to_csv(args.out, index=False)
    counts = df["status"].value_counts()
    ok = int(counts.get("OK", 0))
    accepted = df[df["accepted"]]
    print(f"rows {len(df)}  workers {args.workers}  policy {args.policy}")
    print(f"wall {wall:.1f} s  ({len(df) / wall:.2f} cases/s)  budget ratio {wall / BUDGET_S:.2f} (10 min)")
    print(f"cpu {cpu:.1f} s  ({cpu / max(1, len(df)) * 1e3:.0f} ms a case; wall/cpu x workers "
          f"{wall * args.workers / max(cpu, 1e-9):.2f}: > 1 is waiting, e.g. for other load)")  # fmt: skip
    print("status: " + ", ".join(f"{s} {int(n)}" for s, n in counts.items()))
    print(f"pass vs ggml: {ok}/{len(df)} rows = {100 * ok / max(1, len(df)):.1f} %")
    print(f"upstream-accepted rows passing: {int((accepted['status'] == 'OK').sum())}/{len(accepted)}")
    table = run.per_op(df)
    table["seconds"] = df.groupby("op")["seconds"].sum().round(1)
    print(table.to_string())
    print("\nslowest rows (wall seconds in the worker):")
    for _, r in df.nlargest(10, "seconds").iterrows():
        print(f"  {r['seconds']:8.2f}  {r['status']:16s} {r['case'][:120]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
