"""``ovkit list-devices`` as a whole process vs the floor: importing openvino and asking the Core.

Run: ``python benchmarks/bench_list_devices.py``.  Target: ratio <= 1.3x.
"""

from __future__ import annotations

import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import process_seconds, report  # noqa: E402

FLOOR = [sys.executable, "-c", "import openvino; openvino.Core().available_devices"]


def main(repeat: int = 15) -> None:
    exe = shutil.which("ovkit") or str(Path(sys.executable).with_name("ovkit"))
    ovkit_cmd = [exe, "list-devices"]
    process_seconds(FLOOR, 2)  # warm the page cache
    process_seconds(ovkit_cmd, 2)
    floor, ours = [], []
    for _ in range(repeat):  # interleaved, so both see the same machine load
        floor += process_seconds(FLOOR, 1)
        ours += process_seconds(ovkit_cmd, 1)
    report(
        "ovkit list-devices (process, median)",
        statistics.median(ours),
        "floor",
        statistics.median(floor),
        target=1.3,
    )


if __name__ == "__main__":
    main()
