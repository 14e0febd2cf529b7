"""The weight forms tried for a decode step's matmuls, timed in isolation on the CPU plugin:
``python benchmarks/probe_matmul_forms.py [--reps 5]`` (run it on a quiet machine: the load
average is printed before and after).

* a Q4_1 weight (1536x576) in ovkit's form (a signed i4 FullyConnected plus the bias term, a small
  f32 MatMul over the activations' group sums) against one ``u4`` FullyConnected with an f32 zero
  point ``-bias/scale`` (one node), per inference of a model holding only that weight;
* the bias term alone, as a MatMul against a Multiply + ReduceSum, per node in a 60-node model;
* a chain of 60 compressed i4 FullyConnected (576x576, 1536x576, 576x1536: SmolLM2's shapes) with 1
  and 2 threads, per node: what one decode step's matmuls cost the plugin;
* ``import_model`` of a compiled SmolLM2 bucket's exported blob (the blob cache's second start).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _util import load_average

CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": 1}


def _i64(values: Any) -> Any:
    import openvino.opset13 as ops

    return ops.constant(np.array(values, np.int64))


def _timed(run: Callable[[], object], reps: int, per: int = 1) -> tuple[float, float]:
    """Median and spread (max - min) of ``reps`` rounds of 50 calls, in µs per call / ``per``."""
    for _ in range(10):
        run()
    rounds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(50):
            run()
        rounds.append((time.perf_counter() - t0) / 50 / per * 1e6)
    return statistics.median(rounds), max(rounds) - min(rounds)


def _compiled(outputs: list[Any], params: list[Any], threads: int = 2) -> Any:
    import openvino as ov

    return ov.Core().compile_model(
        ov.Model(outputs, params), "CPU", {**CONFIG, "INFERENCE_NUM_THREADS": threads}
    )


def q4_1_forms(reps: int) -> None:
    import openvino as ov
    import openvino.opset13 as ops

    from ovkit import quant

    rows, k = 1536, 576
    rng = np.random.default_rng(0)
    weight = quant.quantize("q4_1", (rng.standard_normal((rows, k)) + 0.5).astype(np.float32))
    dec = weight.decoded
    q = dec.q.reshape(rows, k // 32, 32).astype(np.uint8)
    scale, bias = dec.scale.astype(np.float32), dec.bias.astype(np.float32)
    x = rng.standard_normal((1, 1, k)).astype(np.float32)
    for form in ("ovkit (i4 + bias term)", "u4 with an f32 zero point"):
        p = ops.parameter([1, 1, k], np.float32)
        if form.startswith("ovkit"):
            y = weight.ov_mul_mat(p.output(0))
        else:
            t = ov.Tensor(ov.Type.u4, list(q.shape))
            flat = q.reshape(-1)
            t.data.view(np.uint8).reshape(-1)[:] = flat[0::2] | (flat[1::2] << 4)
            zero = np.where(scale != 0, -bias / scale, 0).astype(np.float32)
            w = ops.subtract(ops.convert(ops.constant(t), np.float32), ops.constant(zero[:, :, None]))
            w = ops.reshape(ops.multiply(w, ops.constant(scale[:, :, None])), _i64([rows, k]), False)
            y = ops.matmul(p, w, False, True)
        request = _compiled([y], [p]).create_infer_request()
        med, spread = _timed(lambda request=request: request.infer({0: x}), reps)
        print(f"Q4_1 {rows}x{k}, {form}: {med:.0f} µs per inference (spread {spread:.0f})")


def bias_term_forms(reps: int, nodes: int = 60) -> None:
    import openvino.opset13 as ops

    k, rows = 576, 1536
    groups = k // 32
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 1, k)).astype(np.float32)
    for form in ("MatMul", "Multiply + ReduceSum"):
        p = ops.parameter([1, 1, k], np.float32)
        sums = ops.reduce_sum(ops.reshape(p, _i64([1, 1, groups, 32]), False), _i64([3]), False)
        outs = []
        for _ in range(nodes):
            resid = rng.standard_normal((rows, groups)).astype(np.float32)
            if form == "MatMul":
                outs.append(ops.matmul(sums, ops.constant(resid), False, True))
            else:
                prod = ops.multiply(
                    ops.reshape(sums, _i64([1, 1, 1, groups]), False), ops.constant(resid[None, None])
                )
                outs.append(ops.reduce_sum(prod, _i64([3]), False))
        request = _compiled(outs, [p]).create_infer_request()
        med, spread = _timed(lambda request=request: request.infer({0: x}), reps, nodes)
        print(f"bias term [{rows}x{groups}] as {form}: {med:.1f} µs per node (spread {spread:.1f})")


def i4_chain(reps: int, nodes: int = 60) -> None:
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(2)
    for rows, k in ((576, 576), (1536, 576), (576, 1536)):
        for threads in (1, 2):
            p = ops.parameter([1, 1, k], np.float32)
            outs = []
            for _ in range(nodes):
                t = ov.Tensor(ov.Type.i4, [rows, k // 32, 32])
                raw = t.data.view(np.uint8).reshape(-1)
                raw[:] = rng.integers(0, 256, raw.size, dtype=np.uint8)
                scale = ops.constant((rng.random((rows, k // 32, 1)) * 1e-3).astype(np.float32))
                w = ops.reshape(
                    ops.multiply(ops.convert(ops.constant(t), np.float32), scale), _i64([rows, k]), False
                )
                outs.append(ops.matmul(p, w, False, True))
            request = _compiled(outs, [p], threads).create_infer_request()
            x = rng.standard_normal((1, 1, k)).astype(np.float32)
            med, spread = _timed(lambda request=request, x=x: request.infer({0: x}), reps, nodes)
            print(
                f"i4 FullyConnected {rows}x{k}, {threads} thread(s): {med:.1f} µs per node (spread {spread:.1f})"
            )


def blob_import(reps: int) -> None:
    import openvino as ov

    from ovkit.model import Model
    from ovkit.model.fetch import real_model

    with tempfile.TemporaryDirectory(prefix="ovkit-blobs-") as blobs:
        os.environ["GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR"] = blobs
        try:
            Model(real_model("smollm2-135m")).eval([1, 2, 3, 4, 5, 6, 7, 8], last_only=True)
        finally:
            del os.environ["GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR"]
        (blob,) = (Path(blobs) / f for f in os.listdir(blobs) if f.endswith(".blob"))
        data = blob.read_bytes()
    core = ov.Core()
    seconds = []
    for _ in range(max(2, reps // 2)):
        t0 = time.perf_counter()
        core.import_model(data, "CPU", {})
        seconds.append(time.perf_counter() - t0)
    print(
        f"import_model of SmolLM2's 8-token prefill blob ({len(data) / 2**20:.0f} MiB): "
        f"{statistics.median(seconds):.2f} s (of {', '.join(f'{s:.2f}' for s in seconds)})"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    print(f"load average before: {load_average()}")
    q4_1_forms(args.reps)
    bias_term_forms(args.reps)
    i4_chain(args.reps)
    blob_import(args.reps)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
