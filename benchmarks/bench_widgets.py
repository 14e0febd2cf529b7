"""Widgets: one refresh of the live device table (4 devices), and kernel responsiveness while it refreshes.

Run: ``python benchmarks/bench_widgets.py`` (``--quick`` for fewer repetitions).

1. ``DeviceTable.refresh()`` on a simulated machine with 4 devices (CPU, GPU.0, GPU.1, NPU): the
   device query (``take_snapshot``) and the HTML render, vs the bare device query
   (``ovkit.list_devices``) as the baseline.  Also the real ``openvino.Core`` of this machine.
2. A real Jupyter kernel (jupyter_client): the time to execute a trivial cell (``1 + 1``, request
   to reply) while nothing refreshes (baseline), while a live ``DeviceTable`` refreshes at 10 Hz on
   its thread, and while a full ``ovkit.dashboard()`` (table + matplotlib charts) refreshes at its
   default 1 Hz.  Idle and live runs are interleaved in rounds so both see the same machine load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _util import median_seconds, report  # noqa: E402

import ovkit  # noqa: E402
from ovkit.simulate import PROFILES, Profile, SimulatedCore  # noqa: E402
from ovkit.widgets import DeviceTable  # noqa: E402
from ovkit.widgets.data import take_snapshot  # noqa: E402


def four_device_profile() -> Profile:
    """The workstation (CPU, GPU.1, GPU.0) plus the laptop's NPU: 4 physical devices."""
    ws, laptop = PROFILES["workstation"], PROFILES["laptop"]
    npu = next(d for d in laptop.devices if d.id == "NPU")
    return Profile(
        "four-devices", "workstation + NPU", (*ws.devices, npu), ws.host_total_bytes, ws.host_available_bytes
    )


def bench_refresh(repeat: int) -> None:
    print("== one refresh of the device table ==")
    for label, core in (
        ("simulated", SimulatedCore(four_device_profile())),
        ("this machine", None),
    ):
        table = DeviceTable(core, auto_refresh=False)
        n = len(table.rows)
        t_refresh = median_seconds(table.refresh, repeat, warmup=3)
        t_snapshot = median_seconds(lambda c=core: take_snapshot(c), repeat, warmup=3)
        t_list = median_seconds(lambda c=core: ovkit.list_devices(c), repeat, warmup=3)
        report(f"table.refresh() [{label}, {n} devices]", t_refresh, "list_devices", t_list)
        report(f"  of which the device query [{label}]", t_snapshot, "list_devices", t_list)
        table.close()
    # The whole dashboard with live data: the table plus the matplotlib charts that changed.
    core = SimulatedCore(four_device_profile(), activity=True)
    board = ovkit.dashboard(core, auto_refresh=False, op_explorer=False)
    t_board = median_seconds(board.refresh, max(5, repeat // 20), warmup=2)
    t_list = median_seconds(lambda: ovkit.list_devices(core), repeat, warmup=3)
    report("dashboard.refresh() [simulated, live, 4 devices]", t_board, "list_devices", t_list)
    board.close()


KERNEL_SETUP = """
import sys; sys.path.insert(0, {bench_dir!r})
import ovkit
from bench_widgets import four_device_profile
from ovkit.simulate import SimulatedCore
from ovkit.widgets import DeviceTable
core = SimulatedCore(four_device_profile(), activity=True)
live = None
"""

SCENARIOS: dict[str, tuple[str, str]] = {
    # name -> (code that starts the refresh, code that stops it)
    "idle": ("live = None", "None"),
    "table @10 Hz": ("live = DeviceTable(core, interval=0.1)", "live.close()"),
    "dashboard @1 Hz": ("live = ovkit.dashboard(core, interval=1.0, op_explorer=False)", "live.close()"),
}


def _shell_reply(kc: Any, msg_id: str, timeout: float) -> Any:
    """The shell reply to request ``msg_id`` (skipping replies to earlier requests)."""
    while True:
        reply = kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def _execute(kc: Any, code: str, timeout: float = 60.0) -> float:
    """Seconds from execute request to the shell reply (the kernel ran the cell)."""
    t0 = time.perf_counter()
    reply = _shell_reply(kc, kc.execute(code, silent=False, store_history=False), timeout)
    elapsed = time.perf_counter() - t0
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"kernel cell failed: {code!r}: {reply['content']}")
    return elapsed


def bench_kernel(rounds: int, seconds: float) -> None:
    from jupyter_client.manager import start_new_kernel

    print("== kernel responsiveness: time to execute `1 + 1` ==")
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        _execute(kc, KERNEL_SETUP.format(bench_dir=str(Path(__file__).parent)))
        times: dict[str, list[float]] = {name: [] for name in SCENARIOS}
        ticks: dict[str, list[int]] = {name: [] for name in SCENARIOS}
        for _ in range(rounds):
            for name, (start, stop) in SCENARIOS.items():
                _execute(kc, start)
                time.sleep(0.5)  # let the refresh thread reach its steady state
                _execute(kc, "_t0 = live.refresher.ticks if live is not None else 0")
                end = time.perf_counter() + seconds
                while time.perf_counter() < end:
                    times[name].append(_execute(kc, "1 + 1"))
                _execute(kc, "_ticks = (live.refresher.ticks - _t0) if live is not None else 0")
                ticks[name].append(_kernel_value(kc, "_ticks"))
                _execute(kc, stop)
        base = statistics.median(times["idle"])
        for name, values in times.items():
            med = statistics.median(values)
            p90 = sorted(values)[int(0.9 * (len(values) - 1))]
            report(f"trivial cell, {name} (median)", med, "idle", base)
            rate = sum(ticks[name]) / (rounds * seconds)
            print(f"{'':47}p90 {p90 * 1e3:.3f} ms over {len(values)} cells; refreshes {rate:.1f}/s meanwhile")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _kernel_value(kc: Any, expr: str) -> int:
    reply = _shell_reply(kc, kc.execute("", user_expressions={"v": expr}), 30.0)
    data = reply["content"]["user_expressions"]["v"]
    return int(data["data"]["text/plain"]) if data.get("status") == "ok" else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args, _ = parser.parse_known_args()  # benchmarks/run.py passes its own argv
    bench_refresh(repeat=50 if args.quick else 300)
    bench_kernel(rounds=2 if args.quick else 4, seconds=2.0 if args.quick else 5.0)


if __name__ == "__main__":
    main()
