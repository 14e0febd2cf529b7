"""How fast OpenVINO's CPU plugin can run a model's matmuls here at best, against the speed
issue's targets: ``python benchmarks/probe_speed_bounds.py [--model smollm2-135m] [-p 512]
[-n 128] [-r 3] [--precision exact|device]`` (run it on a quiet machine: the load average is
printed before and after).

Measured in one run, 2 threads everywhere:

* llama.cpp CPU's pp and tg (the side ``ovkit bench`` runs: ``ovkit.model.bench.run_llama``);
* OpenVINO's matmul rate here: one 2048x2048x2048 MatMul on the CPU plugin, GFLOP/s, in f32
  (``--precision exact``) or the device's default precision (``device``: bf16 on CPUs with
  avx512_bf16 or AMX), as the matmuls below;
* the model's weight matmuls alone: every ``blk.*`` weight of the GGUF as ovkit builds it for the
  precision (its compressed constant, ``QuantizedWeight.ov_mul_mat``) applied to p tokens (the
  prefill) and to 1 token (a decode step), plus the output head on one token, in one compiled
  model without attention, norms or anything else between them.

Then the bounds: the prefill target (4x llama.cpp's pp) needs the matmuls' flops at a rate that
is compared with OpenVINO's matmul rate; the decode target (1.5x llama.cpp's tg) allows a whole step
of ``1 / (1.5 x tg)``, compared with the time of the matmuls alone.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _util import load_average, seconds

from ovkit.engine import RunConfig

#: compile properties per --precision, as Model compiles: exact f32, or the device's default
CONFIGS: dict[str, dict[str, Any]] = {
    name: {"NUM_STREAMS": 1, **RunConfig(inference_precision=hint, num_threads=2).properties("CPU")}
    for name, hint in (("exact", "f32"), ("device", None))
}
PREFILL_TARGET, DECODE_TARGET = 4.0, 1.5  # the speed issue's factors over llama.cpp CPU


def _timed(run: Callable[[], object], reps: int) -> tuple[float, float, float]:
    """Median, min and max seconds of ``reps`` calls after two untimed ones."""
    times = seconds(run, reps, warmup=2)
    return statistics.median(times), min(times), max(times)


def matmul_rate(reps: int, config: dict[str, Any], size: int = 2048) -> float:
    """GFLOP/s of one ``size``-cubed f32 MatMul compiled with ``config`` on the CPU plugin (its
    best kernel here for that precision)."""
    import openvino as ov
    import openvino.opset13 as ops

    a = ops.parameter([size, size], ov.Type.f32)
    b = ops.constant(np.random.default_rng(0).standard_normal((size, size)).astype(np.float32))
    compiled = ov.Core().compile_model(ov.Model([ops.matmul(a, b, False, True)], [a]), "CPU", config)
    request = compiled.create_infer_request()  # one request, as the matmuls' own timing uses
    x = np.random.default_rng(1).standard_normal((size, size)).astype(np.float32)
    median, _, _ = _timed(lambda: request.infer({0: x}), reps)
    return 2 * size**3 / median / 1e9


def matmuls_only(
    weights: dict[str, Any], head: Any, n_tokens: int, config: dict[str, Any]
) -> tuple[Any, dict[int, np.ndarray], float]:
    """One compiled model of every ``blk.*`` weight's matmul over ``n_tokens`` rows and the output
    head over one row; its feeds by input width, and its flops per call."""
    import openvino as ov
    import openvino.opset13 as ops

    from ovkit.quant import QuantizedWeight

    params: dict[int, Any] = {}
    sums, flops = [], 0.0
    axes = ops.constant(np.array([0, 1, 2], np.int64))

    def apply(w: Any, rows_in: int) -> None:
        nonlocal flops
        k = w.shape[-1]
        key = k * 10_000 + rows_in
        if key not in params:
            params[key] = ops.parameter([1, rows_in, k], ov.Type.f32)
        x = params[key].output(0)
        y = w.ov_mul_mat(x) if isinstance(w, QuantizedWeight) else ops.matmul(x, ops.constant(w), False, True)
        sums.append(ops.reduce_sum(y, axes, False))  # a scalar out: no big output copies
        flops += 2.0 * rows_in * w.shape[0] * k

    for name, w in weights.items():
        # the layers' 2-D weights are the matmuls (the norms' weights are vectors)
        if name.startswith("blk.") and name.endswith(".weight") and len(w.shape) == 2 and min(w.shape) >= 32:
            apply(w, n_tokens)
    apply(head, 1)
    model = ov.Model([ops.concat([ops.unsqueeze(s, 0) for s in sums], 0)], list(params.values()))
    compiled = ov.Core().compile_model(model, "CPU", config)
    rng = np.random.default_rng(2)
    feeds = {
        i: rng.standard_normal(tuple(p.get_partial_shape().to_shape())).astype(np.float32)
        for i, p in enumerate(params.values())
    }
    return compiled, feeds, flops


def main(argv: list[str] | None = None) -> None:
    from ovkit.model import Model
    from ovkit.model.bench import BenchSettings, n_vocab_of, run_llama
    from ovkit.model.fetch import real_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m", help="a fetched model name (ovkit.model.fetch)")
    p.add_argument("-p", type=int, default=512, help="prompt tokens (llama-bench's pp)")
    p.add_argument("-n", type=int, default=128, help="generated tokens (llama-bench's tg)")
    p.add_argument("-r", type=int, default=3, help="repetitions")
    p.add_argument(
        "--precision",
        default="exact",
        choices=sorted(CONFIGS),
        help="the Model(precision=) whose weights are built and the precision everything is compiled in",
    )
    args = p.parse_args(argv)
    path = Path(real_model(args.model))
    print(f"{args.model}: load average before {load_average()}")

    s = BenchSettings(path, n_prompt=args.p, n_gen=args.n, reps=args.r, threads=2)
    llama = {r.test: r for r in run_llama(s, "llama.cpp", s.tokens(n_vocab_of(path)))}
    pp, tg = llama[f"pp{args.p}"], llama[f"tg{args.n}"]
    if pp.error or tg.error:
        raise SystemExit(f"llama.cpp did not run: {pp.error or tg.error}")
    print(
        f"  llama.cpp CPU: pp{args.p} {pp.mean:.1f} ± {pp.std:.1f} tok/s, tg{args.n} {tg.mean:.1f} ± {tg.std:.1f} tok/s"
    )

    from ovkit.runtime import default_core, default_precision

    config = CONFIGS[args.precision]
    ran = "f32" if args.precision == "exact" else default_precision("CPU", core=default_core())
    rate = matmul_rate(args.r, config)
    print(f"  OpenVINO's MatMul in {ran} (2048 cubed, 2 threads): {rate:.0f} GFLOP/s")

    model = Model(path, precision=args.precision)
    weights = model.weights
    head = weights.get("output.weight", weights["token_embd.weight"])
    for n_tokens, label in ((args.p, "prefill"), (1, "decode step")):
        compiled, feeds, flops = matmuls_only(weights, head, n_tokens, config)
        request = compiled.create_infer_request()
        med, lo, hi = _timed(lambda request=request, feeds=feeds: request.infer(feeds), args.r)
        print(
            f"  the model's matmuls alone, {label} ({n_tokens} token(s)): {med * 1e3:.1f} ms "
            f"(min {lo * 1e3:.1f}, max {hi * 1e3:.1f}), {flops / med / 1e9:.0f} GFLOP/s"
        )
        if n_tokens > 1:
            need_rate = flops / n_tokens * PREFILL_TARGET * pp.mean / 1e9
            print(
                f"    prefill target {PREFILL_TARGET:g}x llama.cpp = {PREFILL_TARGET * pp.mean:.0f} tok/s needs the "
                f"matmuls alone at {need_rate:.0f} GFLOP/s: {need_rate / rate:.2f}x OpenVINO's MatMul rate, "
                f"the matmuls alone take {med * PREFILL_TARGET * pp.mean / n_tokens:.2f}x the whole prefill's time "
                f"({'reachable' if need_rate <= rate else 'out of reach'} in {ran} on this CPU)"
            )
        else:
            allowed = 1 / (DECODE_TARGET * tg.mean)
            print(
                f"    decode target {DECODE_TARGET:g}x llama.cpp = {DECODE_TARGET * tg.mean:.0f} tok/s allows "
                f"{allowed * 1e3:.1f} ms per whole step; the matmuls alone take {med / allowed:.2f}x that "
                f"({'reachable' if med <= allowed else 'out of reach'} with these kernels)"
            )
    print(f"load average after {load_average()}")


if __name__ == "__main__":
    main()
