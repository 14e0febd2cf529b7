"""``ovkit check`` against the real backend: predicted and measured peak host RSS, and the header-only
check's own time and memory.

For each model and context (SmolLM2 as fetched by ``python -m ovkit.model.fetch``; random-weight
llama files of TinyLlama's 1.1 B and Llama-3.2-3B's shapes in Q4_0, written by
``ovkit.model.synthetic(random_blocks=True)`` once into ``$OVKIT_BENCH_DIR`` (default ``~/.cache/ovkit/bench``); each at
``-c 512`` and ``-c 4096``) a fresh process imports the OpenVINO build of llama-cpp-python
(``scripts/install-upstream``), loads the model on ``OPENVINO0`` (every layer), creates the context,
decodes a prompt of one micro-batch (512 tokens, ``-c 512``: 504) and ``--gen`` (8) single tokens,
and reads ``/proc/self/status`` after each step: ``VmRSS`` and ``VmHWM`` (the peak so far).  The predicted
figures are ``ovkit.check``'s for the CPU device, from the header alone.  Target: the peak within
±15 % of the measured one.  One measurement runs at a time (they are heavy: up to 6 GiB).

``--header-only``: the 13 B-shaped header-only file checked in a fresh process, its wall time and
peak RSS (targets: under 2 s and 200 MiB).

Run: ``python benchmarks/bench_check.py [--models smollm2,1.1b,3b] [--ctx 512,4096]``.
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

sys.path.insert(0, str(Path(__file__).parent))
from _util import load_average  # noqa: E402

MIB = 2**20
#: Random-weight llama shapes (Q4_0): TinyLlama-1.1B and Llama-3.2-3B (tied output head).
SHAPES: dict[str, dict[str, object]] = {
    "1.1b": {
        "n_embd": 2048, "n_layer": 22, "n_head": 32, "n_head_kv": 4, "n_ff": 5632, "n_vocab": 32000,
        "n_ctx_train": 2048,
    },
    "3b": {
        "n_embd": 3072, "n_layer": 28, "n_head": 24, "n_head_kv": 8, "n_ff": 8192, "n_vocab": 128256,
        "n_ctx_train": 131072, "tied_output": True, "rope_freq_base": 500000.0,
    },
    "13b": {
        "n_embd": 5120, "n_layer": 40, "n_head": 40, "n_head_kv": 40, "n_ff": 13824, "n_vocab": 32000,
        "n_ctx_train": 4096,
    },
}  # fmt: skip

#: Run in the child: the OpenVINO llama_cpp, every step's RSS and peak from /proc/self/status.
CHILD = r"""
import ctypes, json, sys, time
import llama_cpp as L

def status():
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out

path, n_ctx, n_prompt, n_gen, fa = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
steps = []
def step(name, t0):
    steps.append({"step": name, "seconds": time.perf_counter() - t0, **status()})

t0 = time.perf_counter()
L.llama_backend_init()
step("init", t0)
mp = L.llama_model_default_params()
mp.n_gpu_layers = 999
t0 = time.perf_counter()
model = L.llama_model_load_from_file(path.encode(), mp)
if not model:
    print(json.dumps({"steps": steps, "failed": "load"})); sys.exit(0)
step("load", t0)
cp = L.llama_context_default_params()
cp.n_ctx = n_ctx
cp.n_batch = 512
cp.n_ubatch = 512
cp.n_threads = cp.n_threads_batch = 2
cp.flash_attn_type = fa
t0 = time.perf_counter()
ctx = L.llama_init_from_model(model, cp)
if not ctx:
    print(json.dumps({"steps": steps, "failed": "context"})); sys.exit(0)
step("context", t0)
n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
toks = (L.llama_token * n_prompt)(*[1 + (i * 7919) % (n_vocab - 1) for i in range(n_prompt)])
t0 = time.perf_counter()
rc = L.llama_decode(ctx, L.llama_batch_get_one(toks, n_prompt))
step("prompt", t0)
if rc != 0:
    print(json.dumps({"steps": steps, "failed": f"decode {rc}"})); sys.exit(0)
one = (L.llama_token * 1)(3)
t0 = time.perf_counter()
for _ in range(n_gen):
    rc = L.llama_decode(ctx, L.llama_batch_get_one(one, 1))
    if rc != 0:
        break
step("generate", t0)
print(json.dumps({"steps": steps, "failed": None if rc == 0 else f"decode {rc}"}))
"""


def bench_dir() -> Path:
    d = Path(os.environ.get("OVKIT_BENCH_DIR", Path.home() / ".cache" / "ovkit" / "bench"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def model_path(name: str) -> Path:
    """The fetched real model, or the synthetic file of the shape (written once, streaming)."""
    if name == "smollm2":
        from ovkit.model.fetch import real_model

        return real_model("smollm2-135m")
    from ovkit.model.synthetic import synthetic

    path = bench_dir() / f"llama-{name}-q4_0.gguf"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        synthetic("llama", tmp, weight_type="q4_0", random_blocks=True, **SHAPES[name])  # type: ignore[arg-type]
        tmp.rename(path)
    return path


def measure(path: Path, n_ctx: int, n_prompt: int, n_gen: int, flash_attn: bool = True) -> dict[str, object]:
    """One fresh process of the real backend on ``path``: RSS and peak after each step."""
    from ovkit.upstream.build import llama_openvino_env

    env = llama_openvino_env()
    env["GGML_OPENVINO_DEVICE"] = "CPU"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(n_ctx), str(n_prompt), str(n_gen), str(int(flash_attn))],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-3:]
        return {"steps": [], "failed": f"exit {out.returncode}: {' | '.join(tail)}"}
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    result["log"] = [ln for ln in out.stderr.splitlines() if "buffer size" in ln or "n_ctx" in ln]
    return result


def header_only() -> None:
    """The 13 B-shaped header-only file checked in a fresh process: wall time and peak RSS."""
    from ovkit.model.synthetic import synthetic

    with tempfile.TemporaryDirectory() as tmp:
        path = synthetic(
            "llama", Path(tmp) / "13b.gguf", weight_type="q4_0", header_only=True, **SHAPES["13b"]
        )  # type: ignore[arg-type]
        code = (
            "import resource, sys, time\nt0 = time.perf_counter()\nimport ovkit\n"
            "r = ovkit.check(sys.argv[1], 4096)\n"
            "u = resource.getrusage(resource.RUSAGE_SELF)\n"
            "hwm = next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:'))\n"
            "print(time.perf_counter() - t0, u.ru_utime + u.ru_stime, hwm * 1024)"
        )
        size = path.stat().st_size / 2**30
        print(f"13 B-shaped header-only file ({size:.1f} GiB as the table claims), load {load_average()}:")
        for _ in range(3):
            t0 = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
            )
            wall = time.perf_counter() - t0
            inside, cpu, peak = out.stdout.split()
            print(
                f"  process {wall:.2f} s (import + check {float(inside):.2f} s, {float(cpu):.2f} s of CPU), "
                f"peak RSS {int(peak) / MIB:.0f} MiB"
            )
        print("  targets: under 2 s, under 200 MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,1.1b,3b")
    ap.add_argument("--ctx", default="512,4096")
    ap.add_argument("--prompt", type=int, default=None, help="prompt tokens (default: one micro-batch)")
    ap.add_argument("--gen", type=int, default=8)
    ap.add_argument("--header-only", action="store_true", help="time the 13 B-shaped header-only check")
    ap.add_argument("--json", action="store_true", help="also print each measurement as JSON")
    args = ap.parse_args()
    if args.header_only:
        header_only()
        return
    import ovkit

    print(f"peak host RSS of the real backend on the CPU device, load {load_average()}:")
    print(
        f"{'model':9} {'-c':>6} {'file MiB':>9} {'predicted':>10} {'measured':>10} {'error':>7}  steps (RSS MiB)"
    )
    for name in args.models.split(","):
        path = model_path(name)
        for n_ctx in map(int, args.ctx.split(",")):
            pred = ovkit.check(path, n_ctx, device="CPU").devices[0]
            n_prompt = args.prompt or min(512, n_ctx - args.gen)  # the prediction's first decode
            got = measure(path, n_ctx, n_prompt, args.gen)
            steps = got["steps"]
            assert isinstance(steps, list)
            peak = max((s["VmHWM"] for s in steps), default=0)
            err = (pred.host_peak_bytes - peak) / peak * 100 if peak else float("nan")
            trail = ", ".join(f"{s['step']} {s['VmRSS'] / MIB:,.0f}" for s in steps)
            fail = f" FAILED at {got['failed']}" if got["failed"] else ""
            print(
                f"{name:9} {n_ctx:6} {path.stat().st_size / MIB:9,.0f} {pred.host_peak_bytes / MIB:10,.0f} "
                f"{peak / MIB:10,.0f} {err:+6.1f}%  {trail}{fail}"
            )
            if args.json:
                print(json.dumps({"model": name, "n_ctx": n_ctx, **got}))
    print("target: |error| <= 15 %")


if __name__ == "__main__":
    main()
