"""Where a compiled model's memory goes in OpenVINO's CPU plugin: ``python
benchmarks/probe_plugin_memory.py [--model smollm2-135m] [--nodes 500]``.

Two probes, each in this process (RSS does not depend on the machine's load):

* a chain of ``--nodes`` small element-wise blocks (no weights to speak of), compiled with the
  plugin's snippets on (its default: each fused block a ``Subgraph`` with its own JIT kernel) and
  off (``SNIPPETS_MODE=DISABLE``): the plugin's memory per node;
* a real model's first two shape buckets (a 128-token prefill and the decode step) with the
  default compile properties and with ``SNIPPETS_MODE=DISABLE``, each in a fresh process: RSS
  after ``Model()`` and after the two buckets, the compiled models' constants, and the tokens.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys


def _rss_mib() -> int:
    import psutil

    gc.collect()
    return int(psutil.Process().memory_info().rss) >> 20


def chain(nodes: int, snippets: str) -> tuple[int, int]:
    """RSS added by one compiled chain of ``nodes`` element-wise blocks, and its Subgraph count."""
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    def i64(v: object) -> object:
        return ops.constant(np.array(v, np.int64))

    rng = np.random.default_rng(0)
    p = ops.parameter([1, 8, 576], np.float32)
    h = p
    for _ in range(nodes):
        a = ops.multiply(h, ops.constant(rng.random(576, dtype=np.float32)))
        h = ops.add(ops.exp(ops.negative(a)), h)
        # a reduction between the blocks keeps them apart (one fused block per iteration)
        h = ops.reduce_sum(ops.reshape(h, i64([1, 8, 18, 32]), False), i64([3]), True)
        h = ops.reshape(
            ops.multiply(h, ops.constant(np.ones((1, 1, 18, 32), np.float32))), i64([1, 8, 576]), False
        )
    model = ov.Model([h], [p])
    before = _rss_mib()
    compiled = ov.Core().compile_model(
        model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "SNIPPETS_MODE": snippets}
    )
    compiled(np.ones((1, 8, 576), np.float32))
    added = _rss_mib() - before
    kinds = [
        op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()
    ]
    return added, kinds.count("Subgraph")


def model_child(name: str, snippets: str) -> dict[str, object]:
    """In this process: a real model's first two buckets compiled with ``snippets``."""
    import ovkit.engine.engine as engine_module
    from ovkit.model import Model
    from ovkit.model.fetch import real_model

    if snippets != "default":
        plain = engine_module.compile_properties

        def with_snippets(*args: object, **kw: object) -> dict[str, object]:
            props = plain(*args, **kw)  # type: ignore[arg-type]
            props["SNIPPETS_MODE"] = snippets
            return props

        engine_module.compile_properties = with_snippets  # type: ignore[assignment]
    model = Model(real_model(name), n_ctx=512, n_threads=2)
    after_model = _rss_mib()
    prompt = [1 + (i * 7919) % (model.hp.n_vocab - 1) for i in range(128)]
    gen = model.generate(prompt, 8)
    return {"model": after_model, "buckets": _rss_mib(), "tokens": list(gen.tokens)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m", help="a fetched real model (ovkit.model.fetch)")
    p.add_argument("--nodes", type=int, default=500, help="element-wise blocks in the chain probe")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(model_child(*args.child)))
        return
    for snippets in ("ENABLE", "DISABLE"):
        added, subgraphs = chain(args.nodes, snippets)
        print(
            f"chain of {args.nodes} element-wise blocks, SNIPPETS_MODE={snippets}: +{added} MiB "
            f"({subgraphs} Subgraph nodes; {added * 1024 / args.nodes:.0f} KiB per block)"
        )
    for snippets in ("default", "DISABLE"):
        out = subprocess.run(
            [sys.executable, __file__, "--child", args.model, snippets],
            capture_output=True,
            text=True,
            check=True,
        )
        got = json.loads(out.stdout.splitlines()[-1])
        print(
            f"{args.model}, snippets {snippets}: RSS {got['model']} MiB after Model(), "
            f"{got['buckets']} MiB after a 128-token prefill and 8 decode steps (2 buckets); "
            f"last tokens {got['tokens'][-4:]}"
        )


if __name__ == "__main__":
    main()
