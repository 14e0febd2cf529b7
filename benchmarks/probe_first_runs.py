"""What a second start pays after the compiled-model cache's import: the first run of each prompt
length against its second run, in a fresh process whose lean model came from
``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR``.

``Model``'s warm-up runs a 2-token prefill and a decode step (the plugin packs the weights it
reads on a run's first use).  At ``precision="device"`` (bf16 here) that covers every length; at
``"exact"`` (f32) a prompt of 8 or more tokens pays about as much again on its first run, the
plugin packing the weights a second time for its large-batch kernels.

    python benchmarks/probe_first_runs.py [--model smollm2-135m | FILE.gguf] [--precision exact] [-r 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import load_average, machine  # noqa: E402

LENGTHS = (1, 3, 8, 64)


def child(path: str, precision: str) -> None:
    """One start: load (imported from the cache), then each prompt length twice."""
    from ovkit.model import Model

    t0 = time.perf_counter()
    model = Model(path, n_ctx=256, n_threads=2, precision=precision)
    model.eval([5])  # the import and Model's warm-up
    line = [f"load + warm-up {time.perf_counter() - t0:.2f} s"]
    for n in LENGTHS:
        times = []
        for _ in range(2):
            model.reset()
            t = time.perf_counter()
            model.eval(list(range(10, 10 + n)))
            times.append(time.perf_counter() - t)
        line.append(f"{n} tokens {times[0]:.3f} then {times[1]:.3f} s")
    print("; ".join(line), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="a name ovkit.model.fetch knows, or a .gguf")
    ap.add_argument("--precision", default="device", help="Model(precision=): device, exact or ggml")
    ap.add_argument("-r", "--repetitions", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.precision)
        return 0
    from ovkit.model.fetch import real_model

    path = args.model if args.model.endswith(".gguf") else str(real_model(args.model))
    print(f"{machine()}; {Path(path).name}, precision={args.precision}; load {load_average()}")
    with tempfile.TemporaryDirectory(prefix="ovkit-first-runs-") as cache:
        env = {**os.environ, "GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR": cache}
        for rep in range(args.repetitions + 1):  # the first start fills the cache
            out = subprocess.run(
                [sys.executable, __file__, "--child", path, "--precision", args.precision],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            print(f"  {'first start (fills the cache)' if rep == 0 else 'second start'}: {out}")
    print(f"load after {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
