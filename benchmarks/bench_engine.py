"""The execution engine: steady-state overhead, cache hits, a transformer block, ovkit vs ggml CPU.

Run: ``python benchmarks/bench_engine.py`` (``--quick`` for fewer repetitions).  Every ratio is
measured in the same run against its baseline, interleaved so both see the same machine load:

1. ``Graph.compute`` of a compiled graph vs the same OpenVINO model driven directly (Parameters
   bound once with shared tensors, then ``infer()``): 8x8 add and 512x512 matmul.
   Targets: <= 1.10x on the matmul, <= 15 us added per call on the tiny graph (median of the
   per-round differences, with their quartiles; the load average is printed before and after).
2. A cache hit vs a cold compile of the same structure (a hit must not compile).
3. A transformer block (RMS norm, Q/K/V mul_mat, ROPE, flash attention over a KV cache, SwiGLU
   FFN): tokens/s for prefill and for one-token decode with a stateful KV cache (OpenVINO
   variables) vs the same decode with the KV cache round-tripping through the host.
4. ovkit (OpenVINO CPU) vs ggml's CPU backend (ggml-python) on mul_mat, soft_max and rms_norm.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import report  # noqa: E402


def interleaved(
    fns: dict[str, Callable[[], object]],
    rounds: int,
    per_round: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Seconds per call of each fn in ``rounds`` short alternating blocks (all samples).

    The machine is shared (2 cores, other jobs running): fine-grained alternation gives every
    fn the same share of disturbances, and :func:`paired` compares neighbouring blocks.  With
    ``clock=time.process_time`` it measures the CPU time this process spent (all its threads),
    which waiting for a core does not inflate."""
    for fn in fns.values():
        for _ in range(max(3, per_round)):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = clock()
            for _ in range(per_round):
                fn()
            samples[name].append((clock() - t0) / per_round)
    return samples


def paired(
    samples: dict[str, list[float]], ours: str = "ovkit", base: str = "raw"
) -> tuple[float, float, float, float, tuple[float, float]]:
    """(median ours, median base, median of per-round ratios, median of per-round differences,
    their spread: the quartiles of the per-round differences): ratios of neighbouring blocks
    cancel slow periods that hit both sides."""
    a, b = samples[ours], samples[base]
    ratio = statistics.median(x / y for x, y in zip(a, b, strict=True))
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    q1, _, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else (diffs[0],) * 3
    return statistics.median(a), statistics.median(b), ratio, statistics.median(diffs), (q1, q3)


def load_average() -> str:
    """The machine's load average (1, 5, 15 min) and its core count: figures taken under a
    load near the core count or above are inflated (the machine is shared)."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


# ---------------------------------------------------------------------------------------------
# 1. steady state vs raw OpenVINO
# ---------------------------------------------------------------------------------------------
def steady_state(quick: bool) -> dict[str, float]:
    import openvino as ov

    from ovkit.engine import GRAPH_RUN_CONFIG, RunConfig, get_engine
    from ovkit.graph import Graph
    from ovkit.runtime import default_core

    out: dict[str, float] = {}
    rng = np.random.default_rng(0)
    print(f"steady state: {load_average()} (before)", flush=True)

    # None = Graph.compute's default (f32; one thread for tiny graphs): the raw side compiles the
    # same model with the configuration the engine resolved, read back from the engine.
    cases: tuple[tuple[str, int, str, int, RunConfig | None], ...] = (
        ("8x8 add (default: 1 thread)", 8, "add", 50, None),
        ("8x8 add, 2 threads both sides", 8, "add", 50, GRAPH_RUN_CONFIG),
        ("512x512 matmul", 512, "mul_mat", 1, None),
    )
    for label, n, kind, per_round, config in cases:
        g = Graph()
        a = g.input("a", (n, n))
        b = g.input("b", (n, n))
        y = g.add(a, b) if kind == "add" else g.mul_mat(a, b)
        feed = {
            "a": rng.standard_normal((n, n), dtype=np.float32),
            "b": rng.standard_normal((n, n), dtype=np.float32),
        }
        g.compute(y, feed, config=config)  # compile through the engine

        runner = get_engine().last_runner
        assert runner is not None
        model, names = g.to_model([y])
        compiled = default_core().compile_model(model, "CPU", runner.graph.run_config.properties())
        request = compiled.create_infer_request()
        bound = [
            feed[name].reshape(tuple(p.get_shape())) for name, p in zip(names, compiled.inputs, strict=True)
        ]
        for i, arr in enumerate(bound):
            request.set_input_tensor(i, ov.Tensor(arr, shared_memory=True))
        np.testing.assert_allclose(
            g.compute(y, feed, config=config),
            np.asarray(request.infer()[0]).reshape(y.shape),
            rtol=1e-5,
            atol=1e-5,
        )

        fns = {
            "raw": request.infer,
            "ovkit": lambda g=g, y=y, feed=feed, config=config: g.compute(y, feed, config=config),
        }
        rounds = 60 if quick else 300
        # CPU time needs blocks long enough for the process clock's resolution.
        clocks = {
            "wall": paired(interleaved(fns, rounds, per_round)),
            "CPU time": paired(
                interleaved(fns, max(10, rounds // 10), per_round * 10, clock=time.process_time)
            ),
        }
        for clock_name, (ours, raw, ratio, added, (q1, q3)) in clocks.items():
            line = (
                f"compute {label} ({clock_name}) {ours * 1e6:10.2f} us vs raw OpenVINO infer {raw * 1e6:10.2f} us"
                f"  paired ratio {ratio:5.2f}x, added {added * 1e6:8.2f} us/call"
                f" (quartiles {q1 * 1e6:.2f}..{q3 * 1e6:.2f})"
            )
            if kind == "mul_mat":
                line += f"  (target <= 1.10x: {'met' if ratio <= 1.10 else 'NOT met'})"
            else:
                line += f"  (target <= 15 us added: {'met' if added * 1e6 <= 15 else 'NOT met'})"
            print(line, flush=True)
            out[f"{label} {clock_name} ratio"] = ratio
            out[f"{label} {clock_name} added_us"] = added * 1e6
    print(f"steady state: {load_average()} (after)", flush=True)
    return out


# ---------------------------------------------------------------------------------------------
# 2. cache hit vs cold compile
# ---------------------------------------------------------------------------------------------
def cache_hit_vs_cold(quick: bool) -> dict[str, float]:
    from ovkit.engine import get_engine
    from ovkit.graph import Graph

    engine = get_engine()
    x = np.random.default_rng(1).standard_normal((64, 256), dtype=np.float32)
    w = np.random.default_rng(2).standard_normal((256, 256), dtype=np.float32)

    def first_compute() -> float:
        """Seconds of the first compute of a fresh graph object (the structure key, not the
        object's identity, must hit)."""
        g = Graph()
        y = g.rms_norm(g.mul_mat(g.constant(w), g.input("x", (64, 256))), 1e-6)
        t0 = time.perf_counter()
        g.compute(y, {"x": x})
        return time.perf_counter() - t0

    colds, hits = [], []
    for _ in range(3 if quick else 7):
        engine.clear()
        before = engine.stats().compiles
        colds.append(first_compute())
        hits.append(first_compute())
        assert engine.stats().compiles == before + 1, "a cache hit compiled"
    cold, hit = statistics.median(colds), statistics.median(hits)
    report("first compute, new graph object, cache hit", hit, "cold compile", cold, "ms")
    print(f"{'':45} compiles on hits: 0 (checked); cold/hit = {cold / hit:.1f}x", flush=True)
    return {"cold_ms": cold * 1e3, "hit_ms": hit * 1e3}


# ---------------------------------------------------------------------------------------------
# 3. transformer block
# ---------------------------------------------------------------------------------------------
def transformer(quick: bool) -> dict[str, float]:
    from ovkit.decoder_layer import CACHE_NAMES, BlockConfig, block_inputs, block_weights, transformer_block
    from ovkit.engine import graph_session

    cfg = BlockConfig()  # d=512, 8 query / 4 KV heads of 64, ff=1408, ctx=256
    weights = block_weights(cfg)
    n_prefill, n_decode = 64, 16 if quick else 48
    xs = np.random.default_rng(3).standard_normal((n_prefill + n_decode, cfg.d)).astype(np.float32)
    prefill_in = block_inputs(cfg, xs[:n_prefill], 0)
    decode_in = [
        block_inputs(cfg, xs[n_prefill + i : n_prefill + i + 1], n_prefill + i) for i in range(n_decode)
    ]
    gp, outp, states_p = transformer_block(cfg, n_prefill, weights)
    gd, outd, states_d = transformer_block(cfg, 1, weights)
    modes = {"stateful": True, "stateless (host KV)": False}
    prefill = {k: graph_session(gp, [outp], states_p, stateful=v) for k, v in modes.items()}
    decode = {k: graph_session(gd, [outd], states_d, stateful=v) for k, v in modes.items()}
    prefill_t: dict[str, list[float]] = {k: [] for k in modes}
    decode_t: dict[str, list[float]] = {k: [] for k in modes}
    for _ in range(2 if quick else 5):  # both modes alternate, so they see the same machine load
        for k in modes:
            prefill[k].reset_state()
            t0 = time.perf_counter()
            prefill[k].compute(prefill_in)
            prefill_t[k].append(time.perf_counter() - t0)
    for k in modes:
        decode[k].compute(decode_in[0])  # first infer of the decode model (warm-up), then restart
        for name in CACHE_NAMES:
            decode[k].set_state(name, prefill[k].state(name))
    finals: dict[str, np.ndarray] = {}
    for feed in decode_in:
        for k in modes:
            t0 = time.perf_counter()
            (finals[k],) = decode[k].compute(feed)
            decode_t[k].append(time.perf_counter() - t0)
    np.testing.assert_allclose(finals["stateful"], finals["stateless (host KV)"], rtol=1e-5, atol=1e-5)
    results: dict[str, float] = {}
    for k in modes:
        filled = int(np.count_nonzero(decode[k].state(CACHE_NAMES[0]).any(axis=1)))
        assert filled == n_prefill + n_decode, (
            f"KV cache holds {filled} rows, expected {n_prefill + n_decode}"
        )
        prefill_s, decode_s = statistics.median(prefill_t[k]), statistics.median(decode_t[k])
        results[f"prefill_tok_s {k}"] = n_prefill / prefill_s
        results[f"decode_tok_s {k}"] = 1 / decode_s
        print(
            f"transformer block d={cfg.d} heads={cfg.heads}/{cfg.kv_heads} ff={cfg.ff} ctx={cfg.ctx} [{k}]: "
            f"prefill {n_prefill} tok {n_prefill / prefill_s:8.1f} tok/s "
            f"({cfg.flops_per_token() * n_prefill / prefill_s / 1e9:.1f} GFLOPS), "
            f"decode {1 / decode_s:7.1f} tok/s ({decode_s * 1e3:.2f} ms/token, median), KV rows {filled}",
            flush=True,
        )
    report(
        "decode per token, stateful KV (OV variables)",
        1 / results["decode_tok_s stateful"],
        "host round-trip KV",
        1 / results["decode_tok_s stateless (host KV)"],
        "ms",
    )
    return results


# ---------------------------------------------------------------------------------------------
# 4. ovkit vs ggml CPU
# ---------------------------------------------------------------------------------------------
def versus_ggml(quick: bool) -> dict[str, float]:
    from ovkit import oracle
    from ovkit.graph import Graph
    from ovkit.ops.table import max_nmse

    if not oracle.ggml_available():
        print("ovkit vs ggml: skipped (ggml-python is not installed)", flush=True)
        return {}
    rng = np.random.default_rng(4)
    cases: list[tuple[str, dict[str, tuple[int, ...]], Callable[[Any, dict[str, Any]], Any]]] = [
        (
            "mul_mat 2048x2048 x 32",
            {"a": (2048, 2048), "b": (32, 2048)},
            lambda g, x: g.mul_mat(x["a"], x["b"]),
        ),
        ("mul_mat 512x512 x 512", {"a": (512, 512), "b": (512, 512)}, lambda g, x: g.mul_mat(x["a"], x["b"])),
        ("soft_max 512x4096", {"a": (512, 4096)}, lambda g, x: g.soft_max(x["a"])),
        ("rms_norm 512x4096", {"a": (512, 4096)}, lambda g, x: g.rms_norm(x["a"], 1e-6)),
    ]
    out: dict[str, float] = {}
    runs = 3 if quick else 7
    for label, shapes, program in cases:
        feed = {n: rng.standard_normal(s, dtype=np.float32) for n, s in shapes.items()}
        g = Graph()
        leaves = {n: g.input(n, s) for n, s in shapes.items()}
        y = program(g, leaves)
        ours = g.compute(y, feed)
        theirs = oracle.ggml_program(program, feed)
        verdict = oracle.compare(ours, np.asarray(theirs), max_nmse(label.split()[0]))
        samples_ov, samples_ggml = [], []
        for _ in range(3):  # alternating blocks; each runtime's idle threads settle in between
            g.compute(y, feed)  # warm
            for _ in range(runs):
                t0 = time.perf_counter()
                g.compute(y, feed)
                samples_ov.append(time.perf_counter() - t0)
            time.sleep(0.2)
            samples_ggml += oracle.ggml_benchmark_program(program, feed, n_runs=runs, warmup=2).times_s
            time.sleep(0.2)
        ov_s, gg_s = statistics.median(samples_ov), statistics.median(samples_ggml)
        report(
            f"{label} ovkit/OpenVINO CPU ({'OK' if verdict.ok else 'MISMATCH'})",
            ov_s,
            "ggml CPU (2 threads)",
            gg_s,
            "ms",
        )
        out[label] = ov_s / gg_s
    return out


SECTIONS: dict[str, Callable[[bool], dict[str, float]]] = {
    "steady": steady_state,
    "cache": cache_hit_vs_cold,
    "transformer": transformer,
    "ggml": versus_ggml,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("sections", nargs="*", help=f"run only these sections ({', '.join(SECTIONS)})")
    args, _ = parser.parse_known_args(argv)
    # benchmarks/run.py runs this file with its own argv (e.g. "engine"): other words are not ours.
    chosen = [name for name in args.sections if name in SECTIONS]
    for name in chosen or list(SECTIONS):
        print(f"-- {name}", flush=True)
        try:
            SECTIONS[name](args.quick)
        except Exception as exc:  # report and go on: one broken section must not hide the others
            first = str(exc).strip().splitlines()
            print(f"{name}: FAILED: {type(exc).__name__}: {first[0] if first else ''}", flush=True)


if __name__ == "__main__":
    main()
