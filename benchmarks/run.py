"""Run every benchmark (``benchmarks/bench_*.py``) in turn: ``python benchmarks/run.py [name ...]``."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main(names: list[str]) -> None:
    for path in sorted(HERE.glob("bench_*.py")):
        if names and path.stem.removeprefix("bench_") not in names:
            continue
        print(f"== {path.stem} ==", flush=True)
        runpy.run_path(str(path), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
