from __future__ import annotations

import gc
import threading

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest

from ovkit.devices import list_devices
from ovkit.memory import GIB, MIB
from ovkit.simulate import PROFILES, SimulatedCore, UnknownProfileError, get_profile


def _model(n: int = 256) -> ov.Model:
    x = ops.parameter([1, n], np.float32, name="x")
    w = ops.constant(np.full((n, n), 0.5, np.float32))
    return ov.Model([ops.matmul(x, w, False, False)], [x], "sim")


def _used(core: SimulatedCore, name: str) -> int:
    return next(d for d in list_devices(core=core) if d.name == name).used_bytes


def test_every_profile_is_labelled_and_lists_cpu() -> None:
    for name in PROFILES:
        core = SimulatedCore(name)
        assert core.simulated and "CPU" in core.available_devices
        assert all(d.simulated for d in list_devices(core=core))


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(UnknownProfileError, match="unknown simulation profile 'mars'.*laptop"):
        get_profile("mars")


def test_unknown_device_raises_like_openvino() -> None:
    core = SimulatedCore("laptop")
    with pytest.raises(RuntimeError, match='Device with "FOO" name is not registered'):
        core.get_property("FOO", "FULL_DEVICE_NAME")
    with pytest.raises(RuntimeError, match='Device with "GPU.3" name is not registered'):
        core.compile_model(_model(), "GPU.3")


@pytest.mark.parametrize("device", ["GPU", "NPU"])
def test_a_model_compiled_for_a_simulated_device_runs_on_the_real_cpu_and_counts_as_allocated(
    device: str,
) -> None:
    core = SimulatedCore("laptop")
    before = _used(core, device)
    compiled = core.compile_model(_model(), device)
    assert compiled.get_property("EXECUTION_DEVICES") == ["CPU"]  # really the CPU plugin
    out = compiled({"x": np.ones((1, 256), np.float32)})[0]
    assert np.allclose(out, 128.0)
    assert _used(core, device) == before + 256 * 256 * 4
    del compiled, out
    gc.collect()
    assert _used(core, device) == before


def test_activity_moves_allocations_with_the_clock() -> None:
    now = [0.0]
    core = SimulatedCore("laptop", activity=True, clock=lambda: now[0])
    first = _used(core, "GPU")
    now[0] = 4.0
    second = _used(core, "GPU")
    assert first != second and min(first, second) >= 0
    assert _used(SimulatedCore("laptop"), "GPU") == 0  # no activity unless asked


def test_supported_properties_answer_in_openvinos_shape() -> None:
    props = SimulatedCore("laptop").get_property("GPU", "SUPPORTED_PROPERTIES")
    assert props["GPU_DEVICE_TOTAL_MEM_SIZE"] == "RO" and "GPU_MEMORY_STATISTICS" in props


def test_a_model_freed_while_the_core_is_busy_does_not_deadlock() -> None:
    # The garbage collector may run a compiled model's finalizer while this very thread is inside
    # get_property (holding the core's lock); the release must queue, not wait for the lock.
    core = SimulatedCore("laptop")
    compiled = core.compile_model(_model(), "GPU")
    assert _used(core, "GPU") == 256 * 256 * 4
    done = threading.Event()

    def free_while_locked() -> None:
        nonlocal compiled
        with core._lock:
            del compiled
            gc.collect()
        done.set()

    worker = threading.Thread(target=free_while_locked, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert done.is_set(), "releasing a model while the core's lock is held deadlocked"
    assert _used(core, "GPU") == 0


# -- figures that move with what they measure, or say they are simulated (issue 21, item 5) -------
def _live(core: SimulatedCore, name: str) -> tuple[int, int, int, str, str]:
    d = next(d for d in list_devices(core=core) if d.name == name)
    live = d.live
    assert live.total_bytes is not None and live.used_bytes is not None and live.free_bytes is not None
    return live.total_bytes, live.used_bytes, live.free_bytes, live.rule.label, live.explain()


def test_simulated_host_ram_says_so_and_moves_with_what_ovkit_compiles_there() -> None:
    core = SimulatedCore("laptop")
    total, used, free, label, explain = _live(core, "CPU")
    assert label == "simulated host RAM − MemAvailable" and "simulated: a fixed value" in explain
    assert (total, free) == (core.profile.host_total_bytes, 24 * GIB)
    compiled = core.compile_model(_model(), "CPU")  # runs on the real CPU, held by the simulated one
    assert _live(core, "CPU")[1:3] == (used + 256 * 256 * 4, free - 256 * 256 * 4)
    del compiled
    gc.collect()
    assert _live(core, "CPU")[1:3] == (used, free)


def test_real_host_ram_keeps_the_measured_rule() -> None:
    cpu = next(d for d in list_devices() if d.name == "CPU")
    assert cpu.live.rule.label == "host RAM − MemAvailable" and "simulated" not in cpu.live.explain()


def test_an_igpu_and_npu_never_show_more_free_than_the_host_has() -> None:
    core = SimulatedCore("laptop")
    host_free = _live(core, "CPU")[2]
    for name in ("GPU", "NPU"):
        total, used, free, label, explain = _live(core, name)
        assert total > host_free and free == host_free, name  # 28.6 / 30.9 GiB totals, 24 GiB host
        assert label.endswith("free ≤ MemAvailable") and "shares host RAM" in explain
    compiled = core.compile_model(_model(), "NPU")  # the NPU's allocation comes out of host RAM
    assert (
        _live(core, "GPU")[2] == _live(core, "NPU")[2] == _live(core, "CPU")[2] == host_free - 256 * 256 * 4
    )
    del compiled
    # the list line keeps the backend's own figure (free = total - allocations)
    assert (
        "(29276 MiB, 29276 MiB free)"
        in next(d for d in list_devices(core=core) if d.name == "GPU").list_line()
    )


def test_a_discrete_gpu_is_not_capped_by_host_ram() -> None:
    core = SimulatedCore("workstation")
    total, used, free, label, _ = _live(core, "GPU.1")
    assert free == total - used == 16 * GIB - 1600 * MIB and "MemAvailable" not in label
    assert _live(core, "GPU.0")[2] == 28 * GIB  # the iGPU: its own total, below the host's 52 GiB
    compiled = core.compile_model(_model(), "GPU.1")
    assert _live(core, "CPU")[2] == 52 * GIB  # dGPU memory is not host RAM
    del compiled


def test_device_buffers_on_a_simulated_gpu_count_as_its_allocations() -> None:
    from ovkit import buffers

    core = SimulatedCore("laptop")
    base = core.get_property("GPU", "GPU_MEMORY_STATISTICS").get("usm_device", 0)
    _, gpu_used, _, _, _ = _live(core, "GPU")
    _, cpu_used, _, _, _ = _live(core, "CPU")
    kv = buffers.alloc_buffer("GPU", 8 * MIB, "kv_cache", core=core)  # a GPU KV cache: device memory
    weights = buffers.alloc_buffer("GPU", 4 * MIB, "weights", core=core)  # host memory, as upstream
    assert kv.is_device_side and not weights.is_device_side
    assert core.get_property("GPU", "GPU_MEMORY_STATISTICS")["usm_device"] == base + 8 * MIB
    assert _live(core, "GPU")[1] == gpu_used + 8 * MIB and _live(core, "CPU")[1] == cpu_used + 8 * MIB
    kv.free()
    assert _live(core, "GPU")[1] == gpu_used and _live(core, "CPU")[1] == cpu_used
    lost = buffers.alloc_buffer("GPU", 2 * MIB, "kv_cache", core=core)
    assert _live(core, "GPU")[1] == gpu_used + 2 * MIB
    del lost  # collected without free(): given back all the same
    gc.collect()
    assert _live(core, "GPU")[1] == gpu_used
    weights.free()
