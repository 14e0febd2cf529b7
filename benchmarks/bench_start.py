"""Start: process start to first token for ovkit's lean model (cold, first start filling
``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR``, second start importing from it) against llama.cpp's
cold start (issue 32's target: a second start with the cache <= 2x llama.cpp's cold start).

Each start is its own fresh process (``ovkit bench``'s child: load, a prompt of ``--prompt``
tokens, the time its first token comes back); every repetition runs llama.cpp cold, ovkit cold,
ovkit's first start on an empty cache directory and its second start on it, interleaved, and the
median and range are printed with the load average before and after.  The file is in the page
cache for every start after the first (a warm file, as on a second start of a real user).
Measure on a quiet machine.

    python benchmarks/bench_start.py                       # smollm2, 3 repetitions
    python benchmarks/bench_start.py --models smollm2,gemma3,1.1b -r 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _util import load_average, spread
from bench_scale import add_model_args, model_files

from ovkit.gguf import read_gguf
from ovkit.model.bench import BenchSettings, run_side
from ovkit.model.limits import model_hparams

CACHE_VAR = "GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR"
#: The target: ovkit's second start at most this many times llama.cpp's cold start.
TARGET = 2.0


@contextmanager
def cache_dir(path: Path | None) -> Iterator[None]:
    """``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR`` set to ``path`` (unset for None) in the
    environment the children inherit."""
    saved = os.environ.pop(CACHE_VAR, None)
    if path is not None:
        os.environ[CACHE_VAR] = str(path)
    try:
        yield
    finally:
        os.environ.pop(CACHE_VAR, None)
        if saved is not None:
            os.environ[CACHE_VAR] = saved


def start(s: BenchSettings, side: str, tokens: list[int], n_ctx: int) -> float:
    """One fresh process's seconds from its start to its first token (ValueError: it failed)."""
    _, run = run_side(s, side, tokens, n_ctx)
    if run.error:
        raise ValueError(run.error)
    return run.cold_s


def entries(directory: Path) -> dict[str, int]:
    """The cache directory's lean entries and their mtimes (a rewrite shows as a new mtime)."""
    return {p.name: p.stat().st_mtime_ns for p in directory.glob("lean-*")}


def measure(name: str, path: Path, args: argparse.Namespace) -> list[str]:
    hp = model_hparams(read_gguf(path))
    s = BenchSettings(path, args.prompt, 0, 1, args.threads, True, args.precision, ())
    tokens = s.tokens(hp.n_vocab)
    n_ctx = args.prompt + 17  # room for the child's greedy check
    times: dict[str, list[float]] = {
        k: [] for k in ("llama.cpp cold", "ovkit cold", "ovkit first", "ovkit second")
    }
    problems: list[str] = []
    for rep in range(args.repetitions):
        print(f"  {name}: repetition {rep + 1}/{args.repetitions}", file=sys.stderr, flush=True)
        try:
            with cache_dir(None):
                times["llama.cpp cold"].append(start(s, "llama.cpp", tokens, n_ctx))
                times["ovkit cold"].append(start(s, "ovkit", tokens, n_ctx))
            with tempfile.TemporaryDirectory(prefix="ovkit-start-") as tmp, cache_dir(Path(tmp)):
                times["ovkit first"].append(start(s, "ovkit", tokens, n_ctx))
                written = entries(Path(tmp))
                times["ovkit second"].append(start(s, "ovkit", tokens, n_ctx))
                if not written:
                    problems.append("the first start wrote no lean entry")
                elif entries(Path(tmp)) != written:
                    problems.append("the second start did not import (it rewrote the entry)")
        except ValueError as exc:
            return [f"{name}: {exc}"]
    base = statistics.median(times["llama.cpp cold"])
    second = statistics.median(times["ovkit second"])
    lines = [f"{name} ({path.name}, {args.precision}, {args.prompt}-token prompt, {args.threads} threads):"]
    for what, values in times.items():
        lines.append(
            f"  {what:<15} {spread(values, 2)}  ({statistics.median(values) / base:.2f}x llama.cpp cold)"
        )
    ratio = second / base
    verdict = "met" if ratio <= TARGET else f"MISSED by {ratio / TARGET:.2f}x"
    lines.append(f"  second start / llama.cpp cold = {ratio:.2f}x <= {TARGET}x: {verdict}")
    lines += [f"  note: {p}" for p in dict.fromkeys(problems)]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(ap, "smollm2")
    ap.add_argument("--precision", default="device", help="ovkit's precision (device: the CPU's own)")
    ap.add_argument("--prompt", type=int, default=8, help="prompt tokens before the first token")
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()
    import openvino as ov

    cpu = ov.Core().get_property("CPU", "FULL_DEVICE_NAME")
    print(f"{cpu} ({platform.machine()}, {os.cpu_count()} cores); load average {load_average()}")
    for name, path in model_files(args):
        print("\n".join(measure(name, path, args)), flush=True)
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
