"""Single-token matmuls with quantized weights: OpenVINO CPU (ovkit forms) vs ggml's CPU backend.

For every type of issue 5 the same raw ggml blocks (m x k, quantized by ggml itself) feed
ggml-python's ``ggml_mul_mat`` and OpenVINO models built from :class:`ovkit.quant.QuantizedWeight`
in the ``fast`` form (ovkit's default), the ``upstream`` form (upstream's subgraph, rounded integer
zero points) and the ``upstream_bias`` form (upstream with ``use_bias``: exact f16 zero points),
in the same run with the same thread count.  Rounds are interleaved; each time is the fastest
single run over all rounds (the least disturbed by other processes on a shared machine).

    python benchmarks/bench_quant.py                  # m=4096 k=14336, n=1 and n=8
    python benchmarks/bench_quant.py --m 1024 --k 4096 --types q4_0,q4_K --rounds 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ovkit import oracle, quant

TARGET = 0.7


def ov_runner(qw: quant.QuantizedWeight, n: int, threads: int) -> tuple[Any, list[str]]:
    """Compile ``x @ W.T`` on the real CPU device; returns the infer request and the FC precisions."""
    import openvino as ov
    import openvino.opset13 as ops

    from ovkit.runtime import get_core

    x = ops.parameter([n, qw.k], ov.Type.f32, name="x")
    model = ov.Model([qw.ov_mul_mat(x.output(0))], [x])
    cfg = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads}
    compiled = get_core().compile_model(model, "CPU", cfg)
    fcs = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if info["layerType"].astype(str) in ("FullyConnected", "MatMul"):
            fcs.append(f"{info['layerType'].astype(str)}:{info['runtimePrecision'].astype(str)}")
    return compiled.create_infer_request(), fcs


def dense_runner(w: np.ndarray, n: int, threads: int) -> Any:
    """The same matmul with dense f32 weights (what an unfused decompression costs)."""
    import openvino as ov
    import openvino.opset13 as ops

    from ovkit.runtime import get_core

    x = ops.parameter([n, w.shape[1]], ov.Type.f32, name="x")
    model = ov.Model([ops.matmul(x, ops.constant(w), False, True)], [x])
    cfg = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
    return get_core().compile_model(model, "CPU", cfg).create_infer_request()


def time_ov(req: Any, x: np.ndarray, reps: int) -> float:
    """Fastest of ``reps`` runs (after one warm-up run)."""
    req.infer({0: x}, share_inputs=True, share_outputs=True)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        req.infer({0: x}, share_inputs=True, share_outputs=True)
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", type=int, default=4096)
    p.add_argument("--k", type=int, default=14336)
    p.add_argument("--n", default="1,8", help="comma-separated batch sizes")
    p.add_argument("--types", default=",".join(quant.QUANT_TYPES))
    p.add_argument("--threads", type=int, default=oracle.DEFAULT_N_THREADS)
    p.add_argument("--reps", type=int, default=10, help="timed runs per round")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (min of medians)")
    p.add_argument("--forms", default=",".join(quant.FORMS), help="decompression forms to time")
    p.add_argument("--no-dense", action="store_true", help="skip the dense f32 OpenVINO matmul column")
    args = p.parse_args(argv)
    if not oracle.ggml_available():
        print("ggml-python is not importable: no baseline to compare against", file=sys.stderr)
        return 2
    import ggml

    ns = [int(v) for v in args.n.split(",")]
    types = [quant.quant_spec(t).name for t in args.types.split(",")]
    forms = [f for f in args.forms.split(",") if f]
    if "fast" not in forms:
        forms.insert(0, "fast")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((args.m, args.k), dtype=np.float32)
    rows = []
    dense: dict[int, float] = {}
    if not args.no_dense:
        for n in ns:
            x = rng.standard_normal((n, args.k), dtype=np.float32)
            req = dense_runner(w, n, args.threads)
            dense[n] = min(time_ov(req, x, args.reps) for _ in range(args.rounds))
            del req
    for qtype in tqdm(types, desc="types", file=sys.stderr):
        qw = quant.quantize(qtype, w)
        qa = oracle.QuantArray(qtype, qw.shape, qw.raw)
        for n in ns:
            x = rng.standard_normal((n, args.k), dtype=np.float32)
            ref = oracle.ggml_call("mul_mat", qa, x, n_threads=args.threads)
            runners = {f: ov_runner(qw.with_form(f), n, args.threads) for f in forms}  # type: ignore[arg-type]
            best: dict[str, float] = {}
            for _ in range(args.rounds):
                g = oracle.ggml_benchmark(
                    lambda ctx, a, b: ggml.ggml_mul_mat(ctx, a, b),
                    qa,
                    x,
                    n_runs=args.reps,
                    n_threads=args.threads,
                )
                best["ggml"] = min(best.get("ggml", 1e9), g.min_s)
                for f, (req, _) in runners.items():
                    best[f] = min(best.get(f, 1e9), time_ov(req, x, args.reps))
            row: dict[str, Any] = {"type": qtype, "n": n, "ggml_ms": best["ggml"] * 1e3}
            if n in dense:
                row["ov_f32_ms"] = dense[n] * 1e3
            for f, (req, fcs) in runners.items():
                out = req.infer({0: x})[0]
                row[f"{f}_ms"] = best[f] * 1e3
                row[f"{f}_ratio"] = best[f] / best["ggml"]
                row[f"{f}_nmse"] = oracle.nmse(np.asarray(out), ref)
                row[f"{f}_kernels"] = " ".join(fcs)
            rows.append(row)
            del runners
    import pandas as pd

    df = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 30)
    cols = (
        ["type", "n", "ggml_ms"]
        + (["ov_f32_ms"] if dense else [])
        + [c for f in forms for c in (f"{f}_ms", f"{f}_ratio", f"{f}_nmse")]
    )
    print(f"m={args.m} k={args.k} threads={args.threads} (ratio = OpenVINO time / ggml time, same run)")
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print()
    print(df[["type", "n"] + [f"{f}_kernels" for f in forms]].to_string(index=False))
    n1 = df[df["n"] == 1]
    if len(n1):
        ok = n1["fast_ratio"] <= TARGET
        print(
            f"\nn=1 fast form at or below {TARGET}x ggml: {int(ok.sum())}/{len(n1)} types"
            + ("" if ok.all() else f" (not: {', '.join(n1.loc[~ok, 'type'])})")
        )
    return 0


if __name__ == "__main__":
    # benchmarks/run.py runs this file with its own argv (bench names): use the defaults then
    via_runner = Path(sys.argv[0]).name == "run.py"
    status = main([] if via_runner else None)
    if status:
        raise SystemExit(status)
