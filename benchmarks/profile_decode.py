"""Per-op time of one decode step (or of the prefill) of a real model (OpenVINO's own per-node
counters, which a busy machine slows but does not reorder): ``python benchmarks/profile_decode.py
[--kv host|variables] [--model smollm2-135m] [--n-ctx 512] [--prompt 126] [--graph prefill]``.
The share column is what to compare."""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> None:
    from ovkit.model import Model, profile
    from ovkit.model.fetch import real_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--kv", default="host", help="Model(kv=...): host (the default) or variables")
    p.add_argument("--n-ctx", type=int, default=512)
    p.add_argument("--prompt", type=int, default=126, help="prompt tokens before the decode steps")
    p.add_argument("--graph", choices=("decode", "prefill"), default="decode", help="the graph to show")
    args = p.parse_args(argv)
    model = Model(real_model(args.model), n_ctx=args.n_ctx, profiling=True, n_threads=2, kv=args.kv)
    model.generate([1 + (i * 7919) % (model.hp.n_vocab - 1) for i in range(args.prompt)], 4)
    t = profile.op_times(model)
    t = t[t["graph"].str.startswith(args.graph)]
    total = t["time_us"].sum()
    print(
        f"{args.model}, kv={args.kv}, n_ctx {args.n_ctx}, {args.prompt}-token prompt: "
        f"{'one decode step' if args.graph == 'decode' else 'the prefill'}, "
        f"{total / 1e3:.1f} ms summed over {int(t['nodes'].sum())} nodes"
    )
    for _, row in t.iterrows():
        print(
            f"  {row['ggml_op']:<16} {row['time_us'] / 1e3:8.2f} ms  {int(row['nodes']):5d} nodes  {row['share']:6.1%}"
        )


if __name__ == "__main__":
    main()
