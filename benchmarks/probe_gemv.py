"""How fast the CPU plugin reads a compressed weight at decode (one row in, M = 1), per weight form,
beside ggml's own Q4_0 kernel and a plain memory read: what bounds the lean form's decode.

A chain of ``--layers`` [11008, 4096] weights (a Llama-2-7B FFN matrix each; 24 of them are 610 MB
of Q4_0, more than the caches hold) is run one row at a time, each form in its own fresh process,
and the rate at which its weight bytes are read is printed in GB/s (the form's own bytes: i4 and
f16 scales per 32 are Q4_0's 4.5 bits).  Forms:

- ``i4g32``: the lean form's Q4_0 (i4, f16 scale per 32), the device's default precision;
  ``-f32``: at f32; ``-dq0``: no dynamic int8 quantization of the activation; ``-dq32``: at
  f32 with it per 32 (llama.cpp's own Q4_0 x Q8_0 scheme).
- ``u4zp``: u4 with a zero point 8 (GenAI's Q4_0).
- ``i4g128`` and ``i4pc``: coarser scales (per 128, per row): not the file's blocks, so lossy,
  shown for what fewer scale bytes would buy; ``i8g32``: Q8_0.
- ``ggml-q4_0``: ggml's mul_mat on the same Q4_0 bytes (ggml-python, its CPU backend).
- ``read``: numpy summing the same number of bytes (one thread): the memory's own rate.

Run on a quiet machine: ``python benchmarks/probe_gemv.py [--layers 24] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _util import fc_chain, load_average, machine, spread  # noqa: E402

N, K = 11008, 4096
THREADS = 2

#: form -> (container, group, zero point, properties)
FORMS: dict[str, tuple[str, int, bool, dict[str, str]]] = {
    "i4g32": ("i4", 32, False, {}),
    "i4g32-f32": ("i4", 32, False, {"INFERENCE_PRECISION_HINT": "f32"}),
    "i4g32-dq0": ("i4", 32, False, {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}),
    "i4g32-f32-dq32": (
        "i4",
        32,
        False,
        {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "32"},
    ),
    "u4zp": ("u4", 32, True, {}),
    "i4g128": ("i4", 128, False, {}),
    "i4pc": ("i4", K, False, {}),
    "i8g32": ("i8", 32, False, {}),
}


def form_bytes(container: str, group: int) -> int:
    """Bytes of one weight in ``container`` with an f16 scale per ``group``."""
    bits = 8 if container == "i8" else 4
    return N * K * bits // 8 + N * (K // group) * 2


def run_openvino(form: str, layers: int, steps: int) -> dict[str, object]:
    import numpy as np
    import openvino as ov

    container, group, zp, props = FORMS[form]
    model = fc_chain(container, group, zp, layers, N, K, rows=1)
    rng = np.random.default_rng(0)
    properties = {"INFERENCE_NUM_THREADS": str(THREADS), "PERFORMANCE_HINT": "LATENCY", **props}
    compiled = ov.Core().compile_model(model, "CPU", properties)
    del model
    request = compiled.create_infer_request()
    row = {"x": rng.standard_normal((1, K)).astype(np.float32)}
    for _ in range(3):
        request.infer(row)
    t0 = time.perf_counter()
    for _ in range(steps):
        request.infer(row)
    per = (time.perf_counter() - t0) / steps
    return {
        "seconds": per,
        "bytes": layers * form_bytes(container, group),
        "precision": compiled.get_property("INFERENCE_PRECISION_HINT").to_string(),
        "dq": str(compiled.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE")),
    }


def run_ggml(layers: int, steps: int) -> dict[str, object]:
    import numpy as np

    from ovkit.oracle import QuantArray, ggml_benchmark_program

    rng = np.random.default_rng(0)
    inputs: dict[str, Any] = {"x": rng.standard_normal((1, K)).astype(np.float32)}
    for i in range(layers):
        blocks = np.empty((N * K // 32, 18), np.uint8)
        blocks[:, :2] = np.full((len(blocks), 1), np.float16(0.01)).view(np.uint8)
        blocks[:, 2:] = rng.integers(0, 256, (len(blocks), 16), dtype=np.uint8)
        inputs[f"w{i}"] = QuantArray("q4_0", (N, K), blocks.tobytes())

    def program(b: Any, t: dict[str, Any]) -> Any:
        cur = t["x"]
        for i in range(layers):
            cur = b.view_1d(b.mul_mat(t[f"w{i}"], cur), K, 0)
        return cur

    result = ggml_benchmark_program(program, inputs, n_runs=steps, warmup=3, n_threads=THREADS)
    return {
        "seconds": result.median_s,
        "bytes": layers * form_bytes("i4", 32),
        "precision": "ggml",
        "dq": "q8_0",
    }


def run_read(layers: int, steps: int) -> dict[str, object]:
    import numpy as np

    total = layers * form_bytes("i4", 32)
    data = np.random.default_rng(0).integers(0, 2**63, total // 8, dtype=np.uint64)
    data.sum()
    t0 = time.perf_counter()
    for _ in range(steps):
        data.sum()
    return {"seconds": (time.perf_counter() - t0) / steps, "bytes": total, "precision": "-", "dq": "-"}


def child(form: str, layers: int, steps: int) -> dict[str, object]:
    if form == "ggml-q4_0":
        return run_ggml(layers, steps)
    if form == "read":
        return run_read(layers, steps)
    return run_openvino(form, layers, steps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=24, help="weights in the chain (default 24)")
    parser.add_argument("--steps", type=int, default=10, help="timed rows per process (default 10)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per form (default 3)")
    parser.add_argument("--forms", default=",".join([*FORMS, "ggml-q4_0", "read"]))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.layers, args.steps)))
        return 0
    print(f"{machine()}; {THREADS} threads; [{N}, {K}] x {args.layers}; load average {load_average()}")
    print("| form | precision | dynamic quantization | ms per row | GB/s |")
    print("| --- | --- | --- | ---: | ---: |")
    for form in args.forms.split(","):
        rates, times, last = [], [], {}
        for _ in range(args.repeat):
            argv = [
                sys.executable,
                __file__,
                "--child",
                form,
                "--layers",
                str(args.layers),
                "--steps",
                str(args.steps),
            ]
            out = subprocess.run(argv, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"| {form} | failed: {out.stderr.strip().splitlines()[-1:]} | | | |")
                break
            last = json.loads(out.stdout.strip().splitlines()[-1])
            times.append(float(last["seconds"]) * 1e3)
            rates.append(int(last["bytes"]) / float(last["seconds"]) / 1e9)
        else:
            print(
                f"| {form} | {last['precision']} | {last['dq']} | {spread(times, 2).replace(' s', '')} | {spread(rates, 1).replace(' s', '')} |"
            )
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
