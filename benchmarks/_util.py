"""Small helpers shared by the benchmarks: repeated timing and a uniform result line."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as every benchmark prints them beside its figures."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def peak_rss() -> int:
    """This process's peak RSS in bytes: ``VmHWM``, the high-water mark of this process image
    (``ru_maxrss`` survives exec on Linux, so a child would report its forking parent's)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))


def seconds(fn: Callable[[], object], repeat: int, warmup: int = 1) -> list[float]:
    """Wall times of ``repeat`` runs of ``fn()`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def spread(values: Sequence[float], digits: int = 1) -> str:
    """Median and range of a few timings in seconds, as ``6.1 s [5.9-6.4]``."""
    return f"{statistics.median(values):.{digits}f} s [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def median_seconds(fn: Callable[[], object], repeat: int, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` over ``repeat`` runs after ``warmup`` runs."""
    return statistics.median(seconds(fn, repeat, warmup))


def process_seconds(argv: Sequence[str], repeat: int) -> list[float]:
    """Wall times of running ``argv`` as a whole process ``repeat`` times."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return times


def report(
    name: str,
    value: float,
    baseline_name: str,
    baseline: float,
    unit: str = "ms",
    target: float | None = None,
) -> str:
    """One line: value, baseline, ratio, and the target when there is one."""
    scale = 1e3 if unit == "ms" else 1e6 if unit == "us" else 1.0
    ratio = value / baseline if baseline else float("inf")
    line = f"{name:45} {value * scale:10.3f} {unit}  vs {baseline_name} {baseline * scale:10.3f} {unit}  ratio {ratio:5.2f}x"
    if target is not None:
        line += f"  (target <= {target:.2f}x: {'met' if ratio <= target else 'NOT met'})"
    print(line, flush=True)
    return line


def machine() -> str:
    """The CPU as OpenVINO names it, its widest vector extensions, OpenVINO's version and the CPU's
    default inference precision: what every figure depends on."""
    import openvino as ov

    core = ov.Core()
    name = core.get_property("CPU", "FULL_DEVICE_NAME")
    precision = core.get_property("CPU", "INFERENCE_PRECISION_HINT").to_string()
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split("flags")[1].split("\n")[0].split())
    except (OSError, IndexError):
        flags = set()
    isa = [
        f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_int8") if f in flags
    ]
    return f"{name} [{' '.join(isa) or 'flags unknown'}] (OpenVINO {ov.__version__.split('-')[0]}, CPU default {precision})"


def fc_chain(
    container: str, group: int, zero_point: bool, layers: int, n: int, k: int, rows: int = -1
) -> Any:
    """An ``ov.Model`` of ``layers`` FullyConnected layers with random compressed [n, k] weights as
    the lean form writes them (``container`` i4/u4/i8 with an f16 scale per ``group``; u4 with a
    zero point 8 where ``zero_point``), each output cut back to ``k`` for the next; input ``x``
    [rows, k] (-1: dynamic)."""
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([rows, k], ov.Type.f32, name="x")
    cur = x
    for _ in range(layers):
        if container == "i8":
            w = ops.constant(rng.integers(-128, 127, (n, k // group, group), dtype=np.int8))
        else:
            packed = rng.integers(0, 256, (n, k // group, group // 2), dtype=np.uint8)
            tensor = ov.Tensor(packed, ov.Shape([n, k // group, group]), getattr(ov.Type, container))
            w = ov.op.Constant(tensor, shared_memory=False)
        wf = ops.convert(w, "f16")
        if zero_point:
            wf = ops.subtract(wf, ops.constant(np.float16(8)))
        scale = (rng.random((n, k // group, 1), dtype=np.float32) * 0.01).astype(np.float16)
        wf = ops.convert(
            ops.reshape(ops.multiply(wf, ops.constant(scale)), ops.constant(np.array([n, k])), False), "f32"
        )
        y = ops.matmul(cur, wf, False, True)
        cur = ops.slice(y, np.array([0]), np.array([k]), np.array([1]), np.array([1]))
    return ov.Model([ops.result(cur)], [x])
