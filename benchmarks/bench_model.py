"""Whole-model speed: ovkit vs llama.cpp's CPU backend vs the real OpenVINO backend, same run.

A synthetic llama of about 150 M parameters (n_embd 1024, 8 layers, n_ff 2816, 16/4 heads,
vocab 32000) in Q8_0 and Q4_0: prefill 512 tokens, then 64 greedy decode steps.  ovkit runs on
OpenVINO's CPU (compile excluded: every shape bucket is compiled before the timed runs);
llama.cpp's CPU backend (llama-cpp-python, 2 threads, in a subprocess) is fed the very same
tokens; the real OpenVINO backend (the OpenVINO llama-cpp-python build of
``scripts/install-upstream``, all layers offloaded) is fed them too when installed, otherwise
the benchmark says why it is missing.  All compute logits for every position (``logits_all``).

Targets: decode >= 1.5x llama.cpp CPU and >= 1.5x the real backend; prefill >= 2x llama.cpp CPU.
A missed target is printed with the factor it is missed by.

    python benchmarks/bench_model.py                 # q8_0 and q4_0, prefill 512, decode 64
    python benchmarks/bench_model.py --quick         # a 4-layer model, prefill 128, decode 16
    python benchmarks/bench_model.py --quick --profile --types q4_0   # + where ovkit's time goes
    python benchmarks/bench_model.py --real smollm2-135m,gemma3-270m  # the fetched real models
                                         # (python -m ovkit.model.fetch gets them)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ovkit.model import Model, synthetic
from ovkit.model.fetch import MODELS, MissingModelError, real_model
from ovkit.model.reference import LlamaCppError, run_reference

SIZES = {"n_embd": 1024, "n_layer": 8, "n_ff": 2816, "n_head": 16, "n_head_kv": 4, "n_vocab": 32000}
TARGETS = {
    ("decode", "llama.cpp CPU"): 1.5,
    ("decode", "real backend"): 1.5,
    ("prefill", "llama.cpp CPU"): 2.0,
}


def precisions() -> str:
    """What each side computes in: ovkit asks for exact f32; the real backend compiles with an
    empty CPU config, i.e. OpenVINO's CPU default for this CPU (bf16 only where the CPU has it)."""
    import openvino as ov

    core = ov.Core()
    default = core.get_property("CPU", "INFERENCE_PRECISION_HINT")
    caps = ", ".join(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    return f"real backend: the CPU default, {default.to_string()} here (CPU capabilities: {caps})"


def run_one(path: Path, n_prompt: int, n_predict: int, n_ctx: int) -> dict[str, dict[str, float]]:
    prompt = [1 + (i * 7919) % 31000 for i in range(n_prompt)]
    model = Model(path, n_ctx=n_ctx)
    gen = model.generate(prompt, n_predict)
    used = sorted({s.effective.inference_precision for s in model.sessions()})
    print(f"  inference precision: ovkit {', '.join(map(str, used))} (asked: f32); {precisions()}")
    rows = {"ovkit": {"prefill": gen.prefill_tok_s, "decode": gen.decode_tok_s, "compile_s": gen.compile_s}}
    ref = run_reference(path, prompt, gen.tokens, n_ctx=n_ctx, n_threads=2)
    rows["llama.cpp CPU"] = {"prefill": ref.prefill_tok_s, "decode": ref.decode_tok_s}
    try:
        up = run_reference(path, prompt, gen.tokens, n_ctx=n_ctx, upstream=True)
        rows["real backend"] = {"prefill": up.prefill_tok_s, "decode": up.decode_tok_s}
    except LlamaCppError as exc:  # not installed, or it failed: said, not hidden
        rows["real backend"] = {"error": str(exc).splitlines()[0]}  # type: ignore[dict-item]
    return rows


def op_shares(path: Path, n_prompt: int, n_ctx: int) -> None:
    """Where ovkit's prefill and decode time goes (OpenVINO's per-node counters, per ggml op)."""
    from ovkit.model import profile

    model = Model(path, n_ctx=n_ctx, profiling=True)
    model.generate([1 + (i * 7919) % 31000 for i in range(n_prompt)], 4)
    t = profile.op_times(model)
    for graph, grp in t.groupby("graph", sort=False):
        top = ", ".join(f"{r.ggml_op} {r.share:.0%}" for r in grp.head(4).itertuples())
        print(f"  profile {graph}: {top} (of {grp['time_us'].sum() / 1e3:.1f} ms)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="q8_0,q4_0")
    ap.add_argument("--quick", action="store_true", help="4 layers, prefill 128, decode 16")
    ap.add_argument("--profile", action="store_true", help="also print ovkit's time per ggml op")
    ap.add_argument(
        "--real", metavar="NAMES", help=f"real models instead of synthetic ones ({', '.join(MODELS)})"
    )
    args = ap.parse_args(argv)
    reals: dict[str, Path] = {}
    for name in args.real.split(",") if args.real else []:
        try:
            reals[name] = real_model(name)
        except (MissingModelError, RuntimeError) as exc:  # not fetched (or unknown): say how
            print(f"error: {exc}", file=sys.stderr)
            return 2
    sizes = dict(SIZES, n_layer=4) if args.quick else SIZES
    n_prompt, n_predict = (128, 16) if args.quick else (512, 64)
    n_ctx = 1024
    what = f"real {', '.join(reals)}" if reals else f"synthetic llama {sizes}"
    print(f"model: {what}; prefill {n_prompt}, decode {n_predict}, n_ctx {n_ctx}")
    missed = 0
    with tempfile.TemporaryDirectory(prefix="ovkit-bench-model-") as tmp:
        for wtype in tqdm(list(reals) or args.types.split(","), desc="models", file=sys.stderr):
            path = reals.get(wtype) or synthetic(
                "llama", Path(tmp) / f"llama-{wtype}.gguf", weight_type=wtype, **sizes
            )
            print(f"\n{wtype}:")
            rows = run_one(path, n_prompt, n_predict, n_ctx)
            for name, r in rows.items():
                if "error" in r:
                    print(f"  {name:14} failed: {r['error']}")
                    continue
                print(f"  {name:14} prefill {r['prefill']:8.1f} tok/s   decode {r['decode']:7.1f} tok/s")
            ours = rows["ovkit"]
            for (phase, base), target in TARGETS.items():
                b: Any = rows.get(base)
                if b is None or "error" in b:
                    continue
                ratio = ours[phase] / b[phase]
                verdict = "met" if ratio >= target else f"MISSED by {target / ratio:.2f}x"
                missed += ratio < target
                print(f"  {phase} ovkit / {base}: {ratio:.2f}x (target {target}x: {verdict})")
            if args.profile:
                op_shares(path, n_prompt, n_ctx)
    return 0 if missed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
