"""Single-token matmuls with quantized weights: OpenVINO CPU (ovkit forms) vs ggml's CPU backend.

For every quantized type upstream extracts the same raw ggml blocks (m x k, quantized by ggml itself) feed
ggml-python's ``ggml_mul_mat`` and OpenVINO models built from :class:`ovkit.quant.QuantizedWeight`
in the ``fast`` form (ovkit's default), the ``upstream`` form (upstream's subgraph, rounded integer
zero points) and the ``upstream_bias`` form (upstream with ``use_bias``: exact f16 zero points),
in the same run with the same thread count.

Two clocks per run: wall time and the process's CPU time (``time.process_time``: every thread's
CPU seconds, insensitive to other processes preempting this one).  With 1 thread the CPU time is
the cleanest comparison on a shared machine; with more threads it also counts spinning workers.
Rounds are interleaved; each figure is the fastest single run over all rounds.

    python benchmarks/bench_quant.py                  # m=4096 k=14336, n=1,8, threads 1 and 2
    python benchmarks/bench_quant.py --m 1024 --k 4096 --types q4_0,q4_K --threads 2 --rounds 3
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ovkit import oracle, quant

TARGET = 0.7
Timing = tuple[float, float]  # (wall seconds, process CPU seconds) of the fastest runs


def variant(qw: quant.QuantizedWeight, form: str, n: int) -> tuple[quant.QuantizedWeight, dict[str, Any]]:
    """The weight and compile hints of one column: a decompression form, or ``policy`` (the fast
    form after upstream's CPU requantization policy for a ``blk.0.ffn_down.weight``)."""
    if form == "policy":
        w = qw.with_form("fast").apply_policy("CPU")
        return w, quant.compile_hints([w], n)
    w = qw.with_form(form)  # type: ignore[arg-type]
    return w, quant.compile_hints([w], n) if form == "fast" else {}


def ov_runner(
    qw: quant.QuantizedWeight, n: int, threads: int, hints: dict[str, Any]
) -> tuple[Any, list[str]]:
    """Compile ``x @ W.T`` on the real CPU device; returns the infer request and the FC precisions."""
    import openvino as ov
    import openvino.opset13 as ops

    from ovkit.runtime import get_core

    x = ops.parameter([n, qw.k], ov.Type.f32, name="x")
    model = ov.Model([qw.ov_mul_mat(x.output(0))], [x])
    cfg = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads, **hints}
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


class GgmlMatmul:
    """``ggml_mul_mat`` of the raw blocks on ggml's CPU backend (graph built and inputs set once)."""

    def __init__(self, qtype: str, raw: bytes, m: int, k: int, x: np.ndarray, threads: int) -> None:
        g = self.g = oracle.ggml_module()
        tid = oracle.type_id(qtype)
        n = x.shape[0]
        params = g.ggml_init_params(
            mem_size=g.ggml_tensor_overhead() * 8 + g.ggml_graph_overhead(), mem_buffer=None, no_alloc=True
        )
        self.ctx = g.ggml_init(params)
        self.backend = g.ggml_backend_cpu_init()
        g.ggml_backend_cpu_set_n_threads(self.backend, threads)
        self.a = g.ggml_new_tensor_2d(self.ctx, tid, k, m)
        self.b = g.ggml_new_tensor_2d(self.ctx, g.GGML_TYPE_F32, k, n)
        self.c = g.ggml_mul_mat(self.ctx, self.a, self.b)
        self.gf = g.ggml_new_graph(self.ctx)
        g.ggml_build_forward_expand(self.gf, self.c)
        self.buffer = g.ggml_backend_alloc_ctx_tensors(self.ctx, self.backend)
        src = (ctypes.c_uint8 * len(raw)).from_buffer_copy(raw)
        g.ggml_backend_tensor_set(self.a, ctypes.cast(src, ctypes.c_void_p), 0, len(raw))
        xc = np.ascontiguousarray(x, dtype=np.float32)
        g.ggml_backend_tensor_set(self.b, ctypes.c_void_p(xc.ctypes.data), 0, xc.nbytes)
        self.shape = (n, m)

    def run(self) -> None:
        if self.g.ggml_backend_graph_compute(self.backend, self.gf) != 0:
            raise RuntimeError("ggml_backend_graph_compute failed")

    def result(self) -> np.ndarray:
        out = np.empty(self.shape, np.float32)
        self.g.ggml_backend_tensor_get(self.c, ctypes.c_void_p(out.ctypes.data), 0, out.nbytes)
        return out

    def close(self) -> None:
        self.g.ggml_backend_buffer_free(self.buffer)
        self.g.ggml_backend_free(self.backend)
        self.g.ggml_free(self.ctx)


def best_of(fn: Any, reps: int) -> Timing:
    """Fastest wall time and fastest CPU time of ``reps`` calls (after warm-up calls and a pause,
    so the other runtime's worker threads have gone idle)."""
    time.sleep(0.02)
    for _ in range(3):
        fn()
    wall, cpu = [], []
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu)


def ov_call(req: Any, x: np.ndarray) -> Any:
    return lambda: req.infer({0: x}, share_inputs=True, share_outputs=True)


def merge(a: Timing | None, b: Timing) -> Timing:
    return b if a is None else (min(a[0], b[0]), min(a[1], b[1]))


def measure(
    args: argparse.Namespace, forms: list[str], threads: int, w: np.ndarray, rng: np.random.Generator
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    ns = [int(v) for v in args.n.split(",")]
    dense: dict[int, Timing] = {}
    if not args.no_dense:
        for n in ns:
            x = rng.standard_normal((n, args.k), dtype=np.float32)
            req = dense_runner(w, n, threads)
            dense[n] = best_of(ov_call(req, x), args.reps)
            del req
    for qtype in tqdm(args.type_list, desc=f"threads={threads}", file=sys.stderr):
        qw = quant.quantize(qtype, w, name="blk.0.ffn_down.weight")
        for n in ns:
            x = rng.standard_normal((n, args.k), dtype=np.float32)
            gm = GgmlMatmul(qtype, qw.raw, args.m, args.k, x, threads)
            runners = {}
            for f in forms:
                wf, hints = variant(qw, f, n)
                runners[f] = ov_runner(wf, n, threads, hints)
            best: dict[str, Timing] = {}
            for _ in range(args.rounds):
                best["ggml"] = merge(best.get("ggml"), best_of(gm.run, args.reps))
                for f, (req, _) in runners.items():
                    best[f] = merge(best.get(f), best_of(ov_call(req, x), args.reps))
            gm.run()
            ref = gm.result()
            gm.close()
            gw, gc = best["ggml"]
            row: dict[str, Any] = {
                "type": qtype,
                "n": n,
                "threads": threads,
                "ggml_ms": gw * 1e3,
                "ggml_cpu_ms": gc * 1e3,
            }
            if n in dense:
                row["ov_f32_ms"] = dense[n][0] * 1e3
            for f, (req, fcs) in runners.items():
                out = np.asarray(req.infer({0: x})[0])
                fw, fc = best[f]
                row[f"{f}_ms"] = fw * 1e3
                row[f"{f}_cpu_ms"] = fc * 1e3
                row[f"{f}_ratio"] = fw / gw
                row[f"{f}_cpu_ratio"] = fc / gc
                row[f"{f}_nmse"] = oracle.nmse(out, ref)
                row[f"{f}_kernels"] = " ".join(fcs)
            rows.append(row)
            del runners
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", type=int, default=4096)
    p.add_argument("--k", type=int, default=14336)
    p.add_argument("--n", default="1,8", help="comma-separated batch sizes")
    p.add_argument("--types", default=",".join(quant.QUANT_TYPES))
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (both ggml and OpenVINO)")
    p.add_argument("--reps", type=int, default=10, help="timed runs per round")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    p.add_argument(
        "--forms", default=",".join([*quant.FORMS, "policy"]), help="decompression forms to time (+ policy)"
    )
    p.add_argument("--no-dense", action="store_true", help="skip the dense f32 OpenVINO matmul column")
    p.add_argument("--plot", metavar="PNG", help="also draw the fast form's ratios to this PNG file")
    args = p.parse_args(argv)
    if not oracle.ggml_available():
        print("ggml-python is not importable: no baseline to compare against", file=sys.stderr)
        return 2
    args.type_list = [quant.quant_spec(t).name for t in args.types.split(",")]
    forms = [f for f in args.forms.split(",") if f]
    if "fast" not in forms:
        forms.insert(0, "fast")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((args.m, args.k), dtype=np.float32)
    rows: list[dict[str, Any]] = []
    for threads in [int(t) for t in args.threads.split(",")]:
        rows += measure(args, forms, threads, w, rng)

    import pandas as pd

    df = pd.DataFrame(rows)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    fmt = {"float_format": lambda v: f"{v:.3g}", "index": False}
    print(f"m={args.m} k={args.k}; ratio = OpenVINO / ggml on the same blocks in the same run")
    print("\nfast form (ovkit default):")
    cols = [
        "type",
        "n",
        "threads",
        "ggml_ms",
        "fast_ms",
        "fast_ratio",
        "ggml_cpu_ms",
        "fast_cpu_ms",
        "fast_cpu_ratio",
        "fast_nmse",
    ]
    if "ov_f32_ms" in df:
        cols.insert(4, "ov_f32_ms")
    print(df[cols].to_string(**fmt))  # type: ignore[arg-type]
    others = [f for f in forms if f != "fast"]
    if others:
        print(
            "\nother forms (wall ratio, CPU-time ratio, NMSE vs ggml); policy = fast + upstream's CPU requant:"
        )
        ocols = ["type", "n", "threads"] + [
            c for f in others for c in (f"{f}_ratio", f"{f}_cpu_ratio", f"{f}_nmse")
        ]
        print(df[ocols].to_string(**fmt))  # type: ignore[arg-type]
    print("\nFullyConnected kernels in the compiled runtime model:")
    first = df[df["threads"] == df["threads"].iloc[0]]
    print(first[["type", "n"] + [f"{f}_kernels" for f in forms]].to_string(index=False))
    print()
    for threads, group in df[df["n"] == 1].groupby("threads"):
        for form in [f for f in ("fast", "policy") if f in forms]:
            for clock, col in (("wall", f"{form}_ratio"), ("CPU time", f"{form}_cpu_ratio")):
                ok = group[col] <= TARGET
                missing = "" if ok.all() else f" (not: {', '.join(group.loc[~ok, 'type'])})"
                print(
                    f"n=1, threads={threads}, {clock}: {form} at or below {TARGET}x ggml for "
                    f"{int(ok.sum())}/{len(group)} types{missing}"
                )
    if args.plot:
        plot(df, args.plot)
        print(f"\nplot: {args.plot}")
    return 0


def plot(df: Any, path: str) -> None:
    """Bar chart of the fast form's ratio to ggml per type (n=1, n=8; each thread count) + target."""
    from matplotlib.figure import Figure

    groups = sorted({(int(t), int(n)) for t, n in zip(df["threads"], df["n"], strict=True)})
    types = list(dict.fromkeys(df["type"]))
    fig = Figure(figsize=(max(6, 1.2 * len(types)), 4))
    ax = fig.subplots()
    width = 0.8 / max(1, len(groups))
    for i, (threads, n) in enumerate(groups):
        sel = df[(df["threads"] == threads) & (df["n"] == n)].set_index("type")
        col = "fast_cpu_ratio" if threads == 1 else "fast_ratio"
        xs = [j + i * width for j in range(len(types))]
        ax.bar(xs, [float(sel.loc[t, col]) for t in types], width, label=f"n={n}, {threads} thread(s), {col}")
    ax.axhline(TARGET, color="red", linestyle="--", label=f"target {TARGET}x")
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(types))], types)
    ax.set_ylabel("OpenVINO time / ggml time")
    ax.set_title("Quantized matmul, OpenVINO CPU (ovkit fast form) vs ggml, same blocks")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    # benchmarks/run.py runs this file with its own argv (bench names): use the defaults then
    via_runner = Path(sys.argv[0]).name == "run.py"
    status = main([] if via_runner else None)
    if status:
        raise SystemExit(status)
