"""Prefill and decode speed per ``Model(shapes=)`` mode, interleaved in one process.

``python benchmarks/bench_shapes.py [--real smollm2-135m] [-p 128] [-n 32] [-r 3]
[--shapes lean,buckets]``: every mode's model is compiled first, then each repetition
times pp (a fresh cache, the prompt, the last position's logits) and tg (``n`` decode steps after
a 16-token prompt) on every mode in turn, so the modes share the machine's load and their ratios
mean something on a busy machine (the absolute tok/s do not; the load average is printed).
Without ``--real``: the 4-layer synthetic llama Q4_0 of ``bench_memory.py``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--real", default="", help="a fetched model (ovkit.model.fetch name)")
    p.add_argument("-p", type=int, default=128, help="prompt tokens of pp")
    p.add_argument("-n", type=int, default=32, help="decode steps of tg")
    p.add_argument("-r", type=int, default=3, help="repetitions")
    p.add_argument("--shapes", default="lean,buckets", help="comma-separated modes")
    args = p.parse_args(argv)
    from ovkit.model import Model

    with tempfile.TemporaryDirectory() as d:
        if args.real:
            from ovkit.model.fetch import real_model

            path = real_model(args.real)
        else:
            from bench_memory import SYNTHETIC

            from ovkit.model.synthetic import synthetic

            path = synthetic("llama", Path(d) / "llama.gguf", weight_type="q4_0", n_layer=4, **SYNTHETIC)  # type: ignore[arg-type]
        modes = [m for m in args.shapes.split(",") if m]
        n_ctx = max(args.p, 16 + args.n) + 1
        models = {m: Model(path, n_ctx=n_ctx, n_threads=2, shapes=m) for m in modes}
        tokens = [1 + (i * 7919) % (models[modes[0]].hp.n_vocab - 1) for i in range(n_ctx)]

        def pp(model: Model) -> tuple[float, float]:
            model.reset()
            t0, c0 = time.perf_counter(), time.process_time()
            model.eval(tokens[: args.p], last_only=True)
            return args.p / (time.perf_counter() - t0), args.p / (time.process_time() - c0)

        def tg(model: Model) -> tuple[float, float]:
            model.reset()
            model.eval(tokens[:16], last_only=True)
            t0, c0 = time.perf_counter(), time.process_time()
            for t in tokens[16 : 16 + args.n]:
                model.eval([t], last_only=True)
            return args.n / (time.perf_counter() - t0), args.n / (time.process_time() - c0)

        for m in modes:  # compile every model a run uses, and warm up
            pp(models[m])
            tg(models[m])
        load0 = os.getloadavg()
        got: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(args.r):
            for m in modes:
                got.setdefault((m, "pp"), []).append(pp(models[m]))
                got.setdefault((m, "tg"), []).append(tg(models[m]))
        load1 = os.getloadavg()
    print(f"{Path(path).name}: pp{args.p} / tg{args.n}, {args.r} interleaved repetitions, n_ctx {n_ctx}")
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f} (2 cores): compare ratios, not tok/s")
    print("wall tok/s, and tokens per CPU-second of this process (less sensitive to the load)")
    base = modes[-1]
    for m in modes:
        cells = []
        for test in ("pp", "tg"):
            v, b = np.array(got[(m, test)]), np.array(got[(base, test)])
            cells.append(
                f"{test} {v[:, 0].mean():7.1f} ± {v[:, 0].std():5.1f} tok/s ({v[:, 0].mean() / b[:, 0].mean():4.2f}x)"
                f" {v[:, 1].mean():7.1f} tok/cpu-s ({v[:, 1].mean() / b[:, 1].mean():4.2f}x)"
            )
        print(f"  {m:<8} {len(models[m].sessions())} compiled  " + "  ".join(cells) + f"  (x: / {base})")


if __name__ == "__main__":
    main()
