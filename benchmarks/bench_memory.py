"""Peak RSS of a ``Model`` per model size and per compiled shape bucket (issue 22's memory item).

Each model runs in a fresh process (``python benchmarks/bench_memory.py``; ``--quick``: the 4-layer
synthetic model only; ``--real smollm2-135m,gemma3-270m``: the fetched real models instead of the
synthetic llama): RSS after reading the GGUF and building ``Model``, then after compiling and
running each of three shape buckets (an 8-token prefill, the decode step, a decode step at
n_kv 512), and the process's peak RSS; each as MiB and as a multiple of the GGUF file.  The
target: peak <= 2x the file + KV cache + compute buffers, flat in the number of buckets.  RSS does
not depend on the machine's load, so the figures hold on a busy machine (the times do not).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

MIB = 2**20
#: The synthetic llama of issue 22 (Q4_0, n_embd 1024) at 4, 8 and 16 layers.
SYNTHETIC = {"n_embd": 1024, "n_ff": 2816, "n_head": 16, "n_head_kv": 4, "n_vocab": 32000}
LAYERS = (4, 8, 16)
N_CTX = 768  # room for the third bucket (n_kv 512)


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def measure(path: str) -> dict[str, object]:
    """In this process: RSS at each step of loading ``path`` and compiling three buckets."""
    from ovkit.model import Model

    steps: list[tuple[str, int]] = [("start", _rss())]
    model = Model(path, n_ctx=N_CTX, n_threads=2)
    steps.append(("Model()", _rss()))
    prompt = [1 + (i * 7919) % (model.hp.n_vocab - 1) for i in range(8)]
    model.eval(prompt, last_only=True)  # bucket 1: the 8-token prefill
    steps.append(("1 bucket (prefill 8)", _rss()))
    model.eval([3], last_only=True)  # bucket 2: decode, n_kv 256
    steps.append(("2 buckets (+ decode)", _rss()))
    model.reset()
    model.n_past = 300  # bucket 3: decode at position 300, n_kv 512 (the cache is zeros: fine)
    model.eval([3], last_only=True)
    steps.append(("3 buckets (+ decode n_kv 512)", _rss()))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"file": os.path.getsize(path), "steps": steps, "peak": peak, "buckets": len(model.sessions())}


def run_child(path: str) -> dict[str, object]:
    """``measure(path)`` in a fresh interpreter (peak RSS is per process)."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", path], check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def show(name: str, r: dict[str, object]) -> None:
    file = int(r["file"])  # type: ignore[call-overload]
    print(f"{name}: GGUF {file / MIB:,.0f} MiB")
    base = None
    for label, rss in r["steps"]:  # type: ignore[attr-defined]
        base = rss if base is None else base
        print(
            f"  {label:<32} RSS {rss / MIB:8,.0f} MiB   above start {(rss - base) / MIB:8,.0f} MiB"
            f"  ({(rss - base) / file:5.1f}x the file)"
        )
    peak = int(r["peak"])  # type: ignore[call-overload]
    print(f"  {'peak':<32} RSS {peak / MIB:8,.0f} MiB   ({(peak - base) / file:5.1f}x the file above start)")  # type: ignore[operator]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the 4-layer synthetic model only")
    p.add_argument("--real", default="", help="comma-separated fetched models (ovkit.model.fetch names)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    if args.real:
        from ovkit.model.fetch import real_model

        for name in args.real.split(","):
            show(name, run_child(str(real_model(name.strip()))))
        return
    from ovkit.model.synthetic import synthetic

    with tempfile.TemporaryDirectory() as d:
        for n_layer in LAYERS[:1] if args.quick else LAYERS:
            path = synthetic(
                "llama", Path(d) / f"llama-{n_layer}.gguf", weight_type="q4_0", n_layer=n_layer, **SYNTHETIC
            )  # type: ignore[arg-type]
            show(f"synthetic llama Q4_0, {n_layer} layers", run_child(str(path)))


if __name__ == "__main__":
    main()
