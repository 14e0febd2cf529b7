"""How many OpenVINO nodes a real model's decode step is, and what compiling them costs:
``python benchmarks/probe_graph_nodes.py [--model smollm2-135m] [--repeat 3] [--backend]``.

Builds the model's decode-step graph (one token, n_kv 256) as ``Model`` does and prints its
OpenVINO op counts by type, before and after ``share_constants`` (what the engine compiles).
Then compiles it in fresh processes with ``Model``'s compile properties (exact f32): as
translated (constants unshared), as the engine compiles it, and with the plugin's snippets off
(its fused element-wise kernels), ``--repeat`` times interleaved, and prints each
compile's seconds, the process's RSS after it and the median decode-step time of the compiled model
alone (zero inputs, 5 x 50 runs).  ``--backend``: the real backend's own model for the same file
(llama-cpp-python's OpenVINO build, ``GGML_OPENVINO_DUMP_IR``) counted and compiled the same way
(one model with dynamic shapes: no step time).
The load average is printed with every figure: compile times vary by a second on a shared machine.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _util import load_average, seconds, spread


def counts(model: Any) -> collections.Counter[str]:
    """OpenVINO ops of ``model`` by type."""
    return collections.Counter(op.get_type_name() for op in model.get_ordered_ops())


def decode_model(name: str) -> Any:
    """The ``openvino.Model`` of ``name``'s decode step, translated as the engine would."""
    from ovkit.engine import get_engine
    from ovkit.model import Model
    from ovkit.model.fetch import real_model
    from ovkit.model.runner import _Bucket

    m = Model(str(real_model(name)), n_ctx=768, n_threads=2)
    shape = m.shape(1, 8)
    bucket = _Bucket(shape, *m.build(shape))
    return get_engine(m.core).plan(bucket.graph, m._outputs(bucket), m.device, m._configs[1]).factory()


def backend_model(name: str, into: Path) -> Path:
    """The real backend's dumped model of ``name`` (an 8-token prompt, then one token)."""
    from ovkit.model.fetch import real_model
    from ovkit.model.reference import upstream_env

    code = (
        f"import llama_cpp; llm = llama_cpp.Llama({str(real_model(name))!r}, n_ctx=768, "
        "n_gpu_layers=-1, n_threads=2, flash_attn=True, verbose=False); llm.eval([1, 2, 3, 4, 5, 6, 7, 8])"
    )
    env = {**upstream_env(), "GGML_OPENVINO_DUMP_IR": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=env, cwd=into)
    return max(into.glob("model_*.xml"), key=lambda p: p.stat().st_mtime)


def compile_child(xml: str, snippets: bool) -> dict[str, float]:
    """In this process: compile ``xml`` with Model's properties, time it and a decode step."""
    import numpy as np
    import openvino as ov
    import psutil

    from ovkit.engine import RunConfig

    core = ov.Core()
    model = core.read_model(xml)
    props = RunConfig(inference_precision="f32", num_threads=2).properties("CPU")
    if not snippets:
        props["SNIPPETS_MODE"] = "DISABLE"
    t0 = time.perf_counter()
    compiled = core.compile_model(model, "CPU", props)
    compile_s = time.perf_counter() - t0
    rss = psutil.Process().memory_info().rss / 2**20  # not the peak: a fork inherits the parent's
    if any(port.get_partial_shape().is_dynamic for port in compiled.inputs):  # the backend's
        return {"compile": compile_s, "rss_mib": rss, "step_ms": math.nan}
    request = compiled.create_infer_request()
    for port in compiled.inputs:
        zeros = np.zeros(list(port.get_shape()), port.get_element_type().to_dtype())
        request.set_tensor(port, ov.Tensor(zeros))
    runs = seconds(lambda: [request.infer() for _ in range(50)], repeat=5)  # after a warm-up 50
    return {"compile": compile_s, "rss_mib": rss, "step_ms": statistics.median(runs) / 50 * 1e3}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m", help="a fetched model (ovkit.model.fetch name)")
    p.add_argument("--repeat", type=int, default=3, help="compiles per variant, interleaved")
    p.add_argument("--backend", action="store_true", help="the real backend's model too")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(compile_child(args.child[0], args.child[1] == "on")))
        return
    import openvino as ov

    from ovkit.engine.ov_model import share_constants

    with tempfile.TemporaryDirectory(prefix="ovkit-nodes-") as d:
        model = decode_model(args.model)
        before = counts(model)
        variants = {"ovkit, unshared": (Path(d) / "unshared.xml", "on")}
        ov.save_model(model, variants["ovkit, unshared"][0], compress_to_fp16=False)
        share_constants(model)
        after = counts(model)
        print(f"{args.model} decode step (1 token, n_kv 256), OpenVINO ops by type:")
        print(f"  translated {before.total():,} ({before['Constant']:,} constants)")
        print(f"  compiled   {after.total():,} ({after['Constant']:,} constants) after share_constants")
        print("  " + ", ".join(f"{k} {v}" for k, v in after.most_common(12)))
        ov.save_model(model, Path(d) / "ovkit.xml", compress_to_fp16=False)
        variants["ovkit"] = (Path(d) / "ovkit.xml", "on")
        variants["ovkit, snippets off"] = (Path(d) / "ovkit.xml", "off")
        if args.backend:
            xml = backend_model(args.model, Path(d))
            theirs = counts(ov.Core().read_model(xml))
            print(f"  backend    {theirs.total():,} ({theirs['Constant']:,} constants), its dumped model")
            variants["backend"] = (xml, "on")
        runs: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
        for _ in range(args.repeat):
            for label, (path, snippets) in variants.items():
                out = subprocess.run(
                    [sys.executable, __file__, "--child", str(path), snippets],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                runs[label].append(json.loads(out.strip().splitlines()[-1]))
        print(
            f"compile with Model's properties (exact f32), {args.repeat} fresh processes each, load {load_average()}:"
        )
        for label, rs in runs.items():
            print(
                f"  {label:<22} compile {spread([r['compile'] for r in rs], 2)}"
                f"  RSS {statistics.median(r['rss_mib'] for r in rs):5.0f} MiB"
                f"  decode step {statistics.median(r['step_ms'] for r in rs):5.2f} ms"
            )


if __name__ == "__main__":
    main()
