"""What the CPU plugin's first inference costs per weight type: the floor under every cold and
second start of an OpenVINO LLM (ovkit's lean form and GenAI alike).

A stack of FullyConnected layers with compressed weights (i4 as ovkit's Q4_0, u4 with a scalar
zero point 8 as GenAI's Q4_0, i8 as Q8_0; f16 scales per 32) is compiled in a fresh process per
type; the first 32-row inference (when the plugin reorders the weights into its kernels' layout),
the first one-row inference and the steady 32-row one are timed, and the reorder's rate in
weights per second printed (first minus steady).  Run on a quiet machine:

    python benchmarks/probe_weight_packing.py [--layers 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import fc_chain, load_average, spread  # noqa: E402

N, K = 8640, 3200  # an OpenLLaMA-3B FFN weight


def child(kind: str, layers: int) -> dict[str, float | str]:
    """Compile and time one stack of ``layers`` weights of ``kind`` (runs in its own process)."""
    import numpy as np
    import openvino as ov

    model = fc_chain(kind, 32, kind == "u4", layers, N, K)
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": 2})
    request = compiled.create_infer_request()
    out: dict[str, float | str] = {}
    for name, rows in (("first32", 32), ("first1", 1), ("steady32", 32)):
        t0 = time.perf_counter()
        request.infer({"x": np.ones((rows, K), np.float32)})
        out[name] = time.perf_counter() - t0
    out["precision"] = compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.layers)))
        return 0
    print(f"load average before: {load_average()}")
    weights = args.layers * N * K
    for kind in ("i4", "u4", "i8"):
        runs = []
        for _ in range(args.repeat):
            cmd = [sys.executable, __file__, "--child", kind, "--layers", str(args.layers)]
            runs.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
        reorder = [r["first32"] - r["steady32"] for r in runs]
        rate = sorted(weights / s / 1e6 for s in reorder)
        print(
            f"{kind}: first 32-row inference {spread([r['first32'] for r in runs], 2)}, steady "
            f"{spread([r['steady32'] for r in runs], 3)}; reorder of {weights / 1e6:.0f} M weights at "
            f"{rate[len(rate) // 2]:.0f} M/s [{rate[0]:.0f}-{rate[-1]:.0f}] ({runs[0]['precision']})"
        )
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
