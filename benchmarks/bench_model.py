"""Whole-model speed: ``ovkit bench`` on the synthetic ~150 M llama and the real models, against
issue 22's targets.

A thin caller of :mod:`ovkit.model.bench` (llama-bench's pp/tg on ovkit, llama.cpp's CPU build and
the real OpenVINO backend, one run, load average printed): the synthetic llama (n_embd 1024,
8 layers, n_ff 2816, 16/4 heads, vocab 32000) in Q8_0 and Q4_0, or the fetched real models
(``python -m ovkit.model.fetch``).  Targets: decode >= 1.5x llama.cpp CPU and >= 2x the real
backend, prefill >= 4x llama.cpp CPU and >= 1.2x the real backend; a missed target is printed
with the factor it is missed by.  Measure on a quiet machine: the report says when it was not.

    python benchmarks/bench_model.py                       # q8_0 and q4_0, pp512 / tg128, 5 reps
    python benchmarks/bench_model.py --quick               # a 4-layer model, pp128 / tg16, 2 reps
    python benchmarks/bench_model.py --real smollm2-135m,gemma3-270m --precision device
    python benchmarks/bench_model.py --quick --profile --types q4_0   # + where ovkit's time goes
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ovkit.model import Model
from ovkit.model.bench import BenchReport, BenchSettings, bench
from ovkit.model.fetch import MODELS, MissingModelError, real_model
from ovkit.model.precision import PRECISIONS
from ovkit.model.synthetic import synthetic

SIZES = {"n_embd": 1024, "n_layer": 8, "n_ff": 2816, "n_head": 16, "n_head_kv": 4, "n_vocab": 32000}
#: (test kind, baseline) -> the ratio ovkit must reach.
TARGETS = {
    ("tg", "llama.cpp"): 1.5,
    ("tg", "upstream"): 2.0,
    ("pp", "llama.cpp"): 4.0,
    ("pp", "upstream"): 1.2,
}


def missed_targets(report: BenchReport) -> int:
    """Print each target's ratio and verdict; the number missed."""
    missed = 0
    for test, _ in report.settings.tests():
        for (kind, base), target in TARGETS.items():
            ratio = report.ratio(test, "ovkit", base) if test.startswith(kind) else None
            if ratio is None:
                continue
            verdict = "met" if ratio >= target else f"MISSED by {target / ratio:.2f}x"
            missed += ratio < target
            print(f"  {test} ovkit / {base}: {ratio:.2f}x (target {target}x: {verdict})")
    return missed


def op_shares(path: Path, n_prompt: int) -> None:
    """Where ovkit's prefill and decode time goes (OpenVINO's per-node counters, per ggml op)."""
    from ovkit.model import profile

    model = Model(path, n_ctx=n_prompt + 8, profiling=True)
    model.generate([1 + (i * 7919) % (model.hp.n_vocab - 1) for i in range(n_prompt)], 4)
    t = profile.op_times(model)
    for graph, grp in t.groupby("graph", sort=False):
        top = ", ".join(f"{r.ggml_op} {r.share:.0%}" for r in grp.head(4).itertuples())
        print(f"  profile {graph}: {top} (of {grp['time_us'].sum() / 1e3:.1f} ms)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="q8_0,q4_0")
    ap.add_argument("--quick", action="store_true", help="4 layers, pp128 / tg16, 2 repetitions")
    ap.add_argument("--profile", action="store_true", help="also print ovkit's time per ggml op")
    ap.add_argument("--precision", default="exact", choices=tuple(PRECISIONS))
    ap.add_argument(
        "--real", metavar="NAMES", help=f"real models instead of synthetic ones ({', '.join(MODELS)})"
    )
    args = ap.parse_args(argv)
    reals: dict[str, Path] = {}
    for name in args.real.split(",") if args.real else []:
        try:
            reals[name] = real_model(name)
        except (MissingModelError, RuntimeError) as exc:  # not fetched (or unknown): say how
            print(f"error: {exc}", file=sys.stderr)
            return 2
    sizes = dict(SIZES, n_layer=4) if args.quick else SIZES
    n_prompt, n_gen, reps = (128, 16, 2) if args.quick else (512, 128, 5)
    missed = 0
    with tempfile.TemporaryDirectory(prefix="ovkit-bench-model-") as tmp:
        for what in list(reals) or args.types.split(","):
            path = reals.get(what) or synthetic(
                "llama", Path(tmp) / f"llama-{what}.gguf", weight_type=what, **sizes
            )
            print(f"\n{what}:")
            settings = BenchSettings(
                path, n_prompt, n_gen, reps, precision=args.precision, against=("llama.cpp", "upstream")
            )
            report = bench(settings, progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
            print(report.to_markdown())
            missed += missed_targets(report)
            if args.profile:
                op_shares(path, n_prompt)
    return 0 if missed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
