"""How busy each device is (issue 21, item 7): each source against a fixture tree (a fake /proc and
/sys under tmp_path), "not available here" where absent, simulated devices labelled, and the real
CPU figure moving while work runs, cheaply per tick."""

from __future__ import annotations

import os
import resource
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ovkit import utilisation as ut
from ovkit.devices import list_devices
from ovkit.simulate import SimulatedCore


@dataclass(frozen=True)
class Dev:
    """The three fields the meter reads of an ``ovkit.devices.Device``."""

    name: str
    device_class: str
    simulated: bool = False


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _cpu(root: Path, busy: int, idle: int, utime: int, stime: int) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice, then two CPUs
    _write(root / "proc/stat", f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1\ncpu1 1 0 0 1\nintr 5\n")
    _write(root / "proc/self/stat", f"42 (py (thon)) R 1 1 1 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0\n")


def _card(root: Path, n: int, pdev: str, driver: str) -> None:
    dev = root / f"sys/devices/pci0000:00/{pdev}"
    dev.mkdir(parents=True, exist_ok=True)
    (root / "sys/bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
    if not (dev / "driver").exists():
        (dev / "driver").symlink_to(root / "sys/bus/pci/drivers" / driver)
    card = root / f"sys/class/drm/card{n}"
    card.mkdir(parents=True, exist_ok=True)
    if not (card / "device").exists():
        (card / "device").symlink_to(dev)


def _client(root: Path, pid: int, fd: int, lines: dict[str, str]) -> None:
    link = root / f"proc/{pid}/fd/{fd}"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to("/dev/dri/renderD128")
    _write(root / f"proc/{pid}/fdinfo/{fd}", "".join(f"{k}:\t{v}\n" for k, v in lines.items()))


def _npu(root: Path, busy_us: int, driver: str = "intel_vpu") -> None:
    dev = root / "sys/devices/pci0000:00/0000:00:0b.0"
    dev.mkdir(parents=True, exist_ok=True)
    (root / "sys/bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
    if not (dev / "driver").exists():
        (dev / "driver").symlink_to(root / "sys/bus/pci/drivers" / driver)
    _write(dev / "npu_busy_time_us", f"{busy_us}\n")
    accel = root / "sys/class/accel/accel0"
    accel.mkdir(parents=True, exist_ok=True)
    if not (accel / "device").exists():
        (accel / "device").symlink_to(dev)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_cpu_from_proc_stat_and_own_stat(tmp_path: Path) -> None:
    clock = Clock()
    _cpu(tmp_path, busy=100, idle=900, utime=10, stime=0)
    meter = ut.UtilisationMeter(tmp_path, clock)
    _cpu(tmp_path, busy=130, idle=970, utime=10 + 30, stime=10)  # 30 of 100 jiffies busy
    clock.t += 1.0  # this process: 40 ticks = 0.4 s of 2 CPUs x 1 s
    (cpu,) = meter.sample([Dev("CPU", "CPU")])
    assert cpu.share == pytest.approx(0.3) and cpu.text == "30%"
    ticks = os.sysconf("SC_CLK_TCK")
    assert cpu.detail["this process"] == pytest.approx(40 / ticks / 2)
    assert cpu.source == "/proc/stat, /proc/self/stat"


def test_i915_clients_by_engine_counted_once_per_client(tmp_path: Path) -> None:
    clock = Clock()
    _cpu(tmp_path, 1, 1, 0, 0)
    _card(tmp_path, 0, "0000:00:02.0", "i915")
    base = {"drm-driver": "i915", "drm-pdev": "0000:00:02.0", "drm-engine-capacity-video": "2"}

    def clients(render_a: int, render_b: int, video: int) -> None:
        a = {
            **base,
            "drm-client-id": "7",
            "drm-engine-render": f"{render_a} ns",
            "drm-engine-video": f"{video} ns",
        }
        _client(tmp_path, 100, 4, a)
        _client(tmp_path, 100, 9, a)  # the same client through a dup'd fd: counted once
        _client(tmp_path, 200, 3, {**base, "drm-client-id": "8", "drm-engine-render": f"{render_b} ns"})

    clients(0, 0, 0)
    meter = ut.UtilisationMeter(tmp_path, clock)
    clients(250_000_000, 150_000_000, 500_000_000)
    clock.t += 1.0
    (gpu,) = meter.sample([Dev("GPU", "GPU")])
    assert gpu.detail == pytest.approx({"render": 0.4, "video": 0.25})  # video: 2 engines
    assert gpu.share == pytest.approx(0.4) and "DRM fdinfo (i915 0000:00:02.0)" in gpu.source


def test_xe_cycles_over_total_cycles(tmp_path: Path) -> None:
    _cpu(tmp_path, 1, 1, 0, 0)
    _card(tmp_path, 1, "0000:03:00.0", "xe")

    def client(cycles: int, total: int) -> None:
        _client(tmp_path, 300, 5, {"drm-driver": "xe", "drm-pdev": "0000:03:00.0", "drm-client-id": "1",
                                   "drm-cycles-rcs": str(cycles), "drm-total-cycles-rcs": str(total)})  # fmt: skip

    client(1000, 10_000)
    meter = ut.UtilisationMeter(tmp_path, Clock())
    client(1000 + 6000, 10_000 + 8000)
    (gpu,) = meter.sample([Dev("GPU.1", "GPU")])
    assert gpu.share == pytest.approx(0.75) and gpu.detail_text == "rcs 75%"


def test_a_gpu_nobody_uses_is_idle_not_unknown(tmp_path: Path) -> None:
    _cpu(tmp_path, 1, 1, 0, 0)
    _card(tmp_path, 0, "0000:00:02.0", "i915")
    clock = Clock()
    meter = ut.UtilisationMeter(tmp_path, clock)
    clock.t += 1
    (gpu,) = meter.sample([Dev("GPU", "GPU")])
    assert gpu.share == 0.0


def test_npu_from_sysfs_busy_time(tmp_path: Path) -> None:
    clock = Clock()
    _cpu(tmp_path, 1, 1, 0, 0)
    _npu(tmp_path, 1_000_000)
    meter = ut.UtilisationMeter(tmp_path, clock)
    _npu(tmp_path, 1_000_000 + 200_000)
    clock.t += 0.5
    (npu,) = meter.sample([Dev("NPU", "NPU")])
    assert npu.share == pytest.approx(0.4) and "npu_busy_time_us" in npu.source


def test_absent_sources_say_not_available_here(tmp_path: Path) -> None:
    _npu(tmp_path, 5, driver="some_other_accel")  # an accel device that is not intel_vpu
    meter = ut.UtilisationMeter(tmp_path, Clock())
    cpu, gpu, npu = meter.sample([Dev("CPU", "CPU"), Dev("GPU", "GPU"), Dev("NPU", "NPU")])
    assert cpu.share is None and cpu.text == "not available here" and "proc/stat" in cpu.source
    assert gpu.text == "not available here" and "no Intel GPU bound to i915/xe" in gpu.source
    assert npu.text == "not available here" and "no intel_vpu device" in npu.source


def test_simulated_devices_are_labelled_and_not_measured() -> None:
    meter = ut.UtilisationMeter()
    busy = {b.device: b for b in meter.sample(list_devices(core=SimulatedCore("laptop")))}
    for name in ("GPU", "NPU"):
        assert busy[name].share is None and busy[name].simulated
        assert busy[name].text == "simulated: not measured" and "no busy counter" in busy[name].source
    assert (
        busy["CPU"].simulated and "this machine's CPU, where the simulated devices run" in busy["CPU"].source
    )


def _spin(stop: threading.Event) -> None:
    a = np.random.default_rng(0).standard_normal((200, 200))
    while not stop.is_set():
        a = np.tanh(a @ a.T * 1e-3)


def test_cpu_utilisation_moves_while_work_runs_cheaply_per_tick() -> None:
    """This machine's CPU: this process's share rises while a busy thread runs, and one sample
    costs at most 2 ms of kernel CPU."""
    devices = [Dev("CPU", "CPU")]
    meter = ut.UtilisationMeter()
    time.sleep(0.3)
    (quiet,) = meter.sample(devices)
    stop = threading.Event()
    worker = threading.Thread(target=_spin, args=(stop,), daemon=True)
    worker.start()
    try:
        time.sleep(0.8)
        (busy,) = meter.sample(devices)
    finally:
        stop.set()
        worker.join()
    assert busy.share is not None and 0 < busy.share <= 1
    assert busy.detail["this process"] > quiet.detail["this process"] + 0.05, (quiet, busy)
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_stime
    for _ in range(20):
        meter.sample(devices)
    per_tick = (resource.getrusage(resource.RUSAGE_THREAD).ru_stime - before) / 20
    assert per_tick <= 0.002, f"{per_tick * 1000:.2f} ms of kernel CPU per tick"
