"""Per-op time of one decode step (or of the prefill) of a real model (OpenVINO's own per-node
counters of a second, warmed-up run, which a busy machine slows but does not reorder):
``python benchmarks/profile_decode.py [--model smollm2-135m] [--n-ctx 512]
[--prompt 126] [--graph prefill] [--node-types] [--precision device]``; a decode profile also
prints the step's wall time (``Model.eval``), which the nodes' own times do not cover.  The share
column is what to compare; ``--node-types`` splits each ggml op by the OpenVINO node types and
kernels that run it."""

from __future__ import annotations

import argparse
import statistics
import time

from _util import load_average


def main(argv: list[str] | None = None) -> None:
    from ovkit.model import Model, profile
    from ovkit.model.fetch import real_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--n-ctx", type=int, default=512)
    p.add_argument("--prompt", type=int, default=126, help="prompt tokens before the decode steps")
    p.add_argument("--graph", choices=("decode", "prefill"), default="decode", help="the graph to show")
    p.add_argument("--node-types", action="store_true", help="per OpenVINO node type and kernel too")
    p.add_argument("--precision", default="exact", help="Model(precision=): exact, device or ggml")
    p.add_argument("--steps", type=int, default=10, help="decode steps timed for the wall time")
    args = p.parse_args(argv)
    model = Model(
        real_model(args.model),
        n_ctx=args.n_ctx,
        profiling=True,
        n_threads=2,
        precision=args.precision,
    )
    prompt = [1 + (i * 7919) % (model.hp.n_vocab - 1) for i in range(args.prompt)]
    model.generate(prompt, 4)  # compiles and warms up every bucket
    model.reset()
    model.generate(prompt, 4)  # the profiled run: each bucket's counters hold its last run
    walls = []
    if args.graph == "decode":  # the decode step's wall time, beside what its nodes sum to
        for _ in range(args.steps):
            t0 = time.perf_counter()
            model.eval([prompt[0]], last_only=True)
            walls.append(time.perf_counter() - t0)
    # without --node-types the call older trees have too (the script can profile any commit)
    t = profile.op_times(model, node_types=True) if args.node_types else profile.op_times(model)
    t = t[t["graph"].str.startswith(args.graph)]
    by_op = t.groupby("ggml_op", as_index=False)[["time_us", "nodes"]].sum()
    by_op = by_op.sort_values("time_us", ascending=False)
    total = by_op["time_us"].sum()
    print(
        f"{args.model}, n_ctx {args.n_ctx}, {args.prompt}-token prompt: "
        f"{'one decode step' if args.graph == 'decode' else 'the prefill'}, "
        f"{total / 1e3:.1f} ms summed over {int(by_op['nodes'].sum())} nodes, precision={args.precision}"
    )
    if walls:
        print(
            f"  wall time per decode step (Model.eval, {len(walls)} steps): median "
            f"{statistics.median(walls) * 1e3:.1f} ms, min {min(walls) * 1e3:.1f}, max {max(walls) * 1e3:.1f}; "
            f"load average {load_average()}"
        )
    for _, row in by_op.iterrows():
        print(
            f"  {row['ggml_op']:<16} {row['time_us'] / 1e3:8.2f} ms  {int(row['nodes']):5d} nodes  "
            f"{row['time_us'] / max(total, 1e-9):6.1%}"
        )
    if args.node_types:
        print("per OpenVINO node type and kernel:")
        for _, row in t.sort_values("time_us", ascending=False).head(20).iterrows():
            print(
                f"  {row['ggml_op']:<16} {row['type']:<26} {row['exec_type']:<18} {row['time_us'] / 1e3:8.2f} ms "
                f"{int(row['nodes']):5d} nodes  {row['time_us'] / row['nodes']:7.1f} µs each"
            )


if __name__ == "__main__":
    main()
