"""ovkit vs the real llama.cpp OpenVINO backend, repeated runs of the same op and the same small graph.

Run: ``python benchmarks/bench_upstream.py [--quick]`` (needs ``scripts/install-upstream``).
In one run, on the same inputs:

- ovkit: ``ovkit.engine.compute_graph`` of the graph, compiled once, then engine cache hits;
- the real backend: ``ggml_backend_graph_compute`` of the same ggml graph on ``OPENVINO0``,
  built once and computed repeatedly (timed inside its child process, so no IPC is counted;
  the backend's naive path recompiles the OpenVINO model on every call);
- ggml's CPU backend (1 thread: its 2-thread barrier spins on a shared machine) on the same
  graph, for scale.

Cases: one single op (MUL_MAT f32 from the test-ops catalogue) and a small graph (a pre-norm MLP
step: rms_norm, mul, mul_mat, silu, add).  Target: ovkit >= 100x faster than the real backend on
the repeated single op.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _ovkit_seconds(c: object, runs: int) -> float:
    from ovkit.catalogue.case import build_ovkit
    from ovkit.engine import compute_graph, get_engine
    from ovkit.upstream import cases

    g, out, feed = build_ovkit(c, cases.ggml_inputs(c))  # type: ignore[arg-type]
    compute_graph(g, [out], feed, "CPU")  # compile once
    misses = get_engine().stats().misses
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        compute_graph(g, [out], feed, "CPU")
        times.append(time.perf_counter() - t0)
    assert get_engine().stats().misses == misses, "a repeated run compiled again"
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs")
    args = ap.parse_args()
    from _util import report

    from ovkit import oracle
    from ovkit.upstream import Isolated, cases

    single = next(c for c in cases.catalogue() if c.op == "MUL_MAT" and dict(c.params)["type"] == "f32")
    graph = cases.find_case(next(c.name for c in cases.EXTRA_CASES if c.op == "GRAPH:MLP"))
    ov_runs, up_runs = (200, 10) if args.quick else (2000, 50)
    print(f"runs: ovkit {ov_runs}, real backend {up_runs} (median seconds per run)", flush=True)
    with Isolated() as worker:
        for label, c, target in (("single op", single, 100.0), ("small graph", graph, None)):
            ours = _ovkit_seconds(c, ov_runs)
            out = worker.call({"cmd": "bench", "name": c.name, "runs": up_runs, "warmup": 2})
            if not out.ok:
                print(f"{label}: the real backend failed: {out.status} {out.detail}", flush=True)
                continue
            theirs = out.reply["median_s"]
            cpu = oracle.ggml_benchmark_program(c.program, cases.ggml_inputs(c), n_runs=up_runs, n_threads=1)
            print(f"{label}: {c.name}", flush=True)
            line = (
                f"  ovkit {ours * 1e6:10.1f} us   real backend {theirs * 1e6:12.1f} us   "
                f"ovkit {theirs / ours:8.1f}x faster"
            )
            if target is not None:
                line += f" (target >= {target:.0f}x: {'met' if theirs / ours >= target else 'NOT met'})"
            print(line, flush=True)
            report("  ovkit / ggml CPU backend (1 thread)", ours, "ggml CPU", cpu.median_s, unit="us")


if __name__ == "__main__":
    main()
