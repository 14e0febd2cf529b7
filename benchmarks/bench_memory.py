"""Peak RSS of a ``Model`` per model size and per shape bucket, and the time to the first token.

Each model runs in a fresh process per ``Model(shapes=)`` mode (``python benchmarks/bench_memory.py``;
``--quick``: the 4-layer synthetic model only; ``--real smollm2-135m,gemma3-270m``: the fetched
real models instead of the synthetic llama; ``--shapes lean,buckets``: the modes;
``--precision device``: ``Model(precision=)``): RSS
after reading the GGUF and building ``Model``, then after running each of six shape buckets (an
8-token prefill, the decode step, a decode step at n_kv 512, prefills of 101, 200 and 300 tokens:
with static buckets the last two pass ``Model``'s ``max_buckets``, 4) with the seconds OpenVINO
spent compiling for each, the number of compiled models, and the process's peak RSS; each RSS as
MiB and as a multiple of the GGUF file.  The
target: peak <= 2x the file + KV cache + compute buffers, flat in the number of buckets.  RSS does
not depend on the machine's load, so those figures hold on a busy machine (the times do not).

``--ttft``: the wall time from a fresh process's start to the first token of an 8-token prompt
(reading the GGUF, building, compiling, the prefill), cold and on a second start with each cache
(OpenVINO's model cache, ``GGML_OPENVINO_CACHE_DIR``, and the backend's blob cache,
``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR``; a fresh directory the first start fills), and the real
backend's cold figure (llama-cpp-python's OpenVINO build) next to them; each three times, the
median and the range printed (a single start varies by a second or more on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import load_average, peak_rss, spread

MIB = 2**20
#: The synthetic llama of issue 22 (Q4_0, n_embd 1024) at 4, 8 and 16 layers.
SYNTHETIC = {"n_embd": 1024, "n_ff": 2816, "n_head": 16, "n_head_kv": 4, "n_vocab": 32000}
LAYERS = (4, 8, 16)
N_CTX = 768  # room for the third bucket (n_kv 512)


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def measure(path: str, shapes: str, precision: str = "exact") -> dict[str, object]:
    """In this process: RSS at each step of loading ``path`` and running four shape buckets."""
    import psutil

    from ovkit.engine import get_engine
    from ovkit.model import Model

    steps: list[tuple[str, int, float]] = [("start", _rss(), 0.0)]
    model = Model(path, n_ctx=N_CTX, n_threads=2, shapes=shapes, precision=precision)
    engine = get_engine(model.core)
    compiled = engine.stats().compile_seconds

    def step(label: str) -> None:
        """RSS now and the seconds OpenVINO spent compiling since the last step."""
        nonlocal compiled
        total = engine.stats().compile_seconds
        steps.append((label, _rss(), total - compiled))
        compiled = total

    step("Model()")
    long = [1 + (i * 7919) % (model.hp.n_vocab - 1) for i in range(300)]
    prompt = long[:101]
    model.eval(prompt[:8], last_only=True)  # bucket 1: the 8-token prefill
    ttft = time.time() - psutil.Process().create_time()  # from the process's start
    step("1 bucket (prefill 8)")
    model.eval([3], last_only=True)  # bucket 2: decode, n_kv 256
    step("2 buckets (+ decode)")
    model.reset()
    model.n_past = 300  # bucket 3: decode at position 300, n_kv 512 (the cache is zeros: fine)
    model.eval([3], last_only=True)
    step("3 buckets (+ decode n_kv 512)")
    model.reset()
    model.eval(prompt, last_only=True)  # bucket 4: a 101-token prefill
    step("4 buckets (+ prefill 101)")
    for n in (200, 300):  # buckets 5 and 6: longer prompts (static buckets keep at most max_buckets)
        model.reset()
        model.eval(long[:n], last_only=True)
        step(f"{len(steps) - 1} buckets (+ prefill {n})")
    peak = peak_rss()
    return {
        "file": os.path.getsize(path),
        "steps": steps,
        "peak": peak,
        "models": len(model.sessions()),
        "ttft": ttft,
    }


def run_child(
    path: str, shapes: str, env: dict[str, str] | None = None, precision: str = "exact"
) -> dict[str, object]:
    """``measure(path, shapes, precision)`` in a fresh interpreter (peak RSS and the start are per
    process)."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", path, "--shapes", shapes, "--precision", precision],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def show(name: str, shapes: str, r: dict[str, object], precision: str = "exact") -> None:
    file = int(r["file"])  # type: ignore[call-overload]
    print(
        f"{name}: GGUF {file / MIB:,.0f} MiB, shapes={shapes}, precision={precision}: "
        f"{r['models']} compiled model(s) at the end"
    )
    base = None
    for label, rss, compile_s in r["steps"]:  # type: ignore[attr-defined]
        base = rss if base is None else base
        compiled = f"  compile {compile_s:4.1f} s" if compile_s else ""
        print(
            f"  {label:<32} RSS {rss / MIB:8,.0f} MiB   above start {(rss - base) / MIB:8,.0f} MiB"
            f"  ({(rss - base) / file:5.1f}x the file){compiled}"
        )
    peak = int(r["peak"])  # type: ignore[call-overload]
    print(f"  {'peak':<32} RSS {peak / MIB:8,.0f} MiB   ({(peak - base) / file:5.1f}x the file above start)")  # type: ignore[operator]


def upstream_first_token(path: str) -> float:
    """The real backend's wall time from a fresh process's start to the first token (8 tokens)."""
    from ovkit.model.reference import upstream_env

    code = (
        f"import llama_cpp; llm = llama_cpp.Llama({path!r}, n_ctx={N_CTX}, n_gpu_layers=-1, n_threads=2, "
        "flash_attn=True, verbose=False); llm.eval([1, 2, 3, 4, 5, 6, 7, 8])"
    )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=upstream_env())
    return time.perf_counter() - t0


def first_token(name: str, path: str, shapes: str, repeat: int = 3) -> None:
    """Cold and second-start time to the first token with each cache (OpenVINO's model cache,
    ``GGML_OPENVINO_CACHE_DIR``, and the backend's blob cache,
    ``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR``), and the real backend's cold: each ``repeat``
    times, ovkit's and the backend's cold starts interleaved so both see the same load."""
    cold: list[float] = []
    upstream: list[float] = []
    failed = ""
    for _ in range(repeat):
        cold.append(float(run_child(path, shapes)["ttft"]))  # type: ignore[arg-type]
        if not failed:
            try:
                upstream.append(upstream_first_token(path))
            except (RuntimeError, subprocess.CalledProcessError) as exc:
                failed = f"failed ({str(exc).splitlines()[0]})"
    starts = []
    for variable in ("GGML_OPENVINO_CACHE_DIR", "GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR"):
        with tempfile.TemporaryDirectory(prefix="ovkit-model-cache-") as cache:
            env = {**os.environ, variable: cache}
            first = run_child(path, shapes, env)  # fills the cache
            second = [float(run_child(path, shapes, env)["ttft"]) for _ in range(repeat)]  # type: ignore[arg-type]
        starts.append(f"{variable}: first start {first['ttft']:.1f} s, second start {spread(second)}")
    print(
        f"{name}, shapes={shapes}: time to first token (fresh process, 8-token prompt; median "
        f"[range] of {repeat}), load {load_average()}: cold {spread(cold)}; real backend cold "
        f"{failed or spread(upstream)}"
    )
    for line in starts:
        print(f"  {line}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the 4-layer synthetic model only")
    p.add_argument("--real", default="", help="comma-separated fetched models (ovkit.model.fetch names)")
    p.add_argument("--shapes", default="lean,buckets", help="comma-separated Model(shapes=) modes")
    p.add_argument(
        "--ttft", action="store_true", help="time to the first token, cold and with the model cache"
    )
    p.add_argument("--precision", default="exact", help="Model(precision=): exact, device or ggml")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    modes = [m.strip() for m in args.shapes.split(",") if m.strip()]
    if args.child:
        print(json.dumps(measure(args.child, modes[0], args.precision)))
        return

    def each(name: str, path: str) -> None:
        for mode in modes:
            show(name, mode, run_child(path, mode, precision=args.precision), args.precision)
        if args.ttft:
            for mode in modes:
                first_token(name, path, mode)

    if args.real:
        from ovkit.model.fetch import real_model

        for name in args.real.split(","):
            each(name, str(real_model(name.strip())))
        return
    from ovkit.model.synthetic import synthetic

    with tempfile.TemporaryDirectory() as d:
        for n_layer in LAYERS[:1] if args.quick else LAYERS:
            path = synthetic(
                "llama", Path(d) / f"llama-{n_layer}.gguf", weight_type="q4_0", n_layer=n_layer, **SYNTHETIC
            )  # type: ignore[arg-type]
            each(f"synthetic llama Q4_0, {n_layer} layers", str(path))


if __name__ == "__main__":
    main()
