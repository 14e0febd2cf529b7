"""A model's prefill and decode on one runtime five ways, in one process, runs interleaved:
ovkit's lean model as ``Model`` compiles it, the same with the other choice of activations (bf16
against f32 quantized to int8 per 32, ``lean.DYNAMIC_INT8_FROM_BYTES``), OpenVINO GenAI's
pipeline on the same ``.gguf`` as ``ovkit bench`` runs it (its default attention, prefix caching
off: the anchor every ratio is against) and with SDPA attention, and the ``ov.Model`` GenAI builds
from it (saved with ``enable_save_ov_model``) compiled here with ovkit's bf16 CPU properties.

Interleaving puts every side under the same machine at the same moment, so the ratios hold on a
VM whose speed drifts between fresh-process runs.  Also printed: each compiled graph's node
count and its FullyConnected kernels with their weight and zero-point types.

    python benchmarks/probe_same_process.py [--model smollm2-135m | FILE.gguf] [--prompt 128]
        [--steps 32] [--repeat 6]
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
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens per timed prefill")
    ap.add_argument("--steps", type=int, default=32, help="decode steps per timed run")
    ap.add_argument("--repeat", type=int, default=6, help="timed runs per side (after one warm-up)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import openvino as ov
    import openvino_genai as genai

    from ovkit.gguf import read_gguf
    from ovkit.model import lean
    from ovkit.model.bench import GenAISide
    from ovkit.model.fetch import real_model
    from ovkit.model.limits import model_hparams

    gguf = Path(args.model) if args.model.endswith(".gguf") else real_model(args.model)
    core = ov.Core()
    with tempfile.TemporaryDirectory(prefix="ovkit-same-process-") as tmp:
        pipe, xml = genai_model(gguf.resolve(), Path(tmp), args.threads)
        ir = core.compile_model(core.read_model(xml), "CPU", lean.compile_properties(False, args.threads))
    request = ir.create_infer_request()
    anchor = GenAISide({"path": str(gguf), "threads": args.threads})
    g = read_gguf(gguf)
    hp = model_hparams(g)
    int8 = lean.model_device_bytes(g) >= lean.DYNAMIC_INT8_FROM_BYTES
    names = ("int8 activations", "bf16") if int8 else ("bf16", "int8 activations")
    session = lean.compile_lean(g, hp, "CPU", core=core, exact=False, n_threads=args.threads)
    threshold = lean.DYNAMIC_INT8_FROM_BYTES
    lean.DYNAMIC_INT8_FROM_BYTES = 1 << 62 if int8 else 0  # the other choice, for this side only
    other = lean.compile_lean(g, hp, "CPU", core=core, exact=False, n_threads=args.threads)
    lean.DYNAMIC_INT8_FROM_BYTES = threshold
    n, steps = args.prompt, args.steps

    def prompt(rep: int) -> np.ndarray:  # a new prompt every run: GenAI may reuse a cached prefix
        return ((np.arange(n) * 7 + 31 * rep + 100) % 30000 + 10).astype(np.int64)

    def generation(max_new: int) -> Any:
        config = genai.GenerationConfig()
        config.max_new_tokens = config.min_new_tokens = max_new
        config.do_sample, config.ignore_eos = False, True
        return config

    one, many = generation(1), generation(steps)

    def pipeline(rep: int, decode: bool) -> None:
        ids = np.array([[5 + rep]], np.int64) if decode else prompt(rep)[None]
        pipe.generate(ov.Tensor(ids), many if decode else one)

    def genai_default(rep: int, decode: bool) -> None:
        anchor.generate([5 + rep] if decode else list(prompt(rep)), steps if decode else 1)

    def genai_ir(rep: int, decode: bool) -> None:
        request.reset_state()
        feeds = [[5 + i + rep] for i in range(steps)] if decode else [list(prompt(rep))]
        at = 0
        for ids in feeds:
            request.infer(
                {
                    "input_ids": np.array([ids], np.int64),
                    "attention_mask": np.ones((1, at + len(ids)), np.int64),
                    "position_ids": np.arange(at, at + len(ids), dtype=np.int64)[None],
                    "beam_idx": np.zeros(1, np.int32),
                }
            )
            at += len(ids)

    def ovkit(s: lean.LeanSession) -> Any:
        def run(rep: int, decode: bool) -> None:
            s.reset()
            if not decode:
                s.run(prompt(rep), np.array([n - 1]))
                return
            for i in range(steps):
                s.run(np.array([5 + i + rep], np.int64), np.array([0]))

        return run

    sides = {
        f"ovkit lean ({names[0]}, as Model)": ovkit(session),
        f"ovkit lean ({names[1]})": ovkit(other),
        "GenAI pipeline": genai_default,
        "GenAI pipeline (SDPA)": pipeline,
        "GenAI's IR here (bf16)": genai_ir,
    }
    pp: dict[str, list[float]] = {k: [] for k in sides}
    tg: dict[str, list[float]] = {k: [] for k in sides}
    print(
        f"{machine()}; {gguf.name}, prefill {n} tokens, {steps} decode steps, {args.threads} threads; "
        f"load {load_average()}"
    )
    for rep in range(args.repeat + 1):
        for name, fn in sides.items():
            for decode, rates, count in ((False, pp, n), (True, tg, steps)):
                t0 = time.perf_counter()
                fn(rep, decode)
                if rep:  # the first round warms every side up
                    rates[name].append(count / (time.perf_counter() - t0))
    genai_pp, genai_tg = np.median(pp["GenAI pipeline"]), np.median(tg["GenAI pipeline"])
    for name in sides:
        p, t = pp[name], tg[name]
        print(
            f"  {name:34s} prefill {np.median(p):7.1f} tok/s [{min(p):.1f}-{max(p):.1f}] "
            f"{np.median(p) / genai_pp:4.2f}x GenAI   decode {np.median(t):6.2f} tok/s "
            f"[{min(t):.2f}-{max(t):.2f}] {np.median(t) / genai_tg:4.2f}x GenAI"
        )
    for name, compiled in (("ovkit lean (as Model)", session.compiled), ("GenAI's IR", ir)):
        n, kernels = executed(compiled)
        print(
            f"  {name}: {n} nodes in its compiled graph; "
            + "; ".join(f"{c} x {k}" for k, c in kernels.items())
        )
    print(f"load after {load_average()} (pid {os.getpid()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
