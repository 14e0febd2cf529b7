"""A small model's decode on one runtime three ways, in one process, steps interleaved: ovkit's
lean model, OpenVINO GenAI's pipeline on the same ``.gguf``, and the ``ov.Model`` GenAI builds
from it (saved with ``enable_save_ov_model``) compiled here with ovkit's CPU properties.

Interleaving puts every side under the same machine at the same moment, so the ratios hold on a
VM whose speed drifts between fresh-process runs.  Also printed: each compiled graph's node
count and its FullyConnected kernels with their weight and zero-point types.

    python benchmarks/probe_small_decode.py [--model smollm2-135m] [--steps 32] [--repeat 6]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import load_average, machine  # noqa: E402


def genai_model(gguf: Path, workdir: Path, threads: int) -> tuple[Any, Path]:
    """GenAI's pipeline over ``gguf`` (SDPA, as ovkit's lean form) and the IR it saved beside it."""
    import openvino_genai as genai

    link = workdir / gguf.name
    link.symlink_to(gguf)
    pipe = genai.LLMPipeline(
        str(link), "CPU", INFERENCE_NUM_THREADS=threads, ATTENTION_BACKEND="SDPA", enable_save_ov_model=True
    )
    return pipe, workdir / "openvino_model.xml"


def executed(compiled: Any) -> tuple[int, collections.Counter[str]]:
    """Nodes in a compiled (and run) model's graph, and its FullyConnected kernels by kernel and
    input types (weights, zero point)."""
    ops = compiled.get_runtime_model().get_ops()
    kernels: collections.Counter[str] = collections.Counter()
    for n in ops:
        rt = n.get_rt_info()
        if rt["layerType"].astype(str).startswith("FullyConnected"):
            types = [str(n.input_value(i).get_element_type()) for i in range(n.get_input_size())]
            kernels[f"{rt['primitiveType'].astype(str)} weights {types[1]} zp {types[-1]}"] += 1
    return len(ops), kernels


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="a name ovkit.model.fetch knows, or a .gguf")
    ap.add_argument("--steps", type=int, default=32, help="decode steps per timed run")
    ap.add_argument("--repeat", type=int, default=6, help="timed runs per side (after one warm-up)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import openvino as ov
    import openvino_genai as genai

    from ovkit.gguf import read_gguf
    from ovkit.model import lean
    from ovkit.model.fetch import real_model
    from ovkit.model.limits import model_hparams

    gguf = Path(args.model) if args.model.endswith(".gguf") else real_model(args.model)
    core = ov.Core()
    props = lean.compile_properties(False, args.threads)
    with tempfile.TemporaryDirectory(prefix="ovkit-small-decode-") as tmp:
        pipe, xml = genai_model(gguf.resolve(), Path(tmp), args.threads)
        ir = core.compile_model(core.read_model(xml), "CPU", props)
    request = ir.create_infer_request()
    g = read_gguf(gguf)
    session, _ = lean.compile_lean(g, model_hparams(g), "CPU", core=core, exact=False, n_threads=args.threads)
    config = genai.GenerationConfig()
    config.max_new_tokens = config.min_new_tokens = args.steps
    config.do_sample, config.ignore_eos = False, True

    def pipeline() -> None:
        pipe.generate(ov.Tensor(np.array([[5]], np.int64)), config)

    def genai_ir() -> None:
        request.reset_state()
        for i in range(args.steps):
            request.infer(
                {
                    "input_ids": np.array([[5 + i]], np.int64),
                    "attention_mask": np.ones((1, i + 1), np.int64),
                    "position_ids": np.array([[i]], np.int64),
                    "beam_idx": np.zeros(1, np.int32),
                }
            )

    def ovkit() -> None:
        session.reset()
        for i in range(args.steps):
            session.run(np.array([5 + i], np.int64), np.array([0]))

    sides = {"ovkit lean": ovkit, "GenAI pipeline": pipeline, "GenAI's IR here": genai_ir}
    rates: dict[str, list[float]] = {k: [] for k in sides}
    print(
        f"{machine()}; {gguf.name}, {args.steps} decode steps, {args.threads} threads; load {load_average()}"
    )
    for rep in range(args.repeat + 1):
        for name, fn in sides.items():
            t0 = time.perf_counter()
            fn()
            if rep:  # the first round warms every side up
                rates[name].append(args.steps / (time.perf_counter() - t0))
    for name, v in rates.items():
        print(f"  {name:16s} {np.median(v):6.1f} tok/s [{min(v):.1f}-{max(v):.1f}]")
    for name, compiled in (("ovkit lean", session.compiled), ("GenAI's IR", ir)):
        n, kernels = executed(compiled)
        print(
            f"  {name}: {n} nodes in its compiled graph; "
            + "; ".join(f"{c} x {k}" for k, c in kernels.items())
        )
    print(f"load after {load_average()} (pid {os.getpid()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
