from __future__ import annotations

import gc
import threading

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest

from ovkit.devices import list_devices
from ovkit.simulate import PROFILES, SimulatedCore, UnknownProfileError, get_profile


def _model(n: int = 256) -> ov.Model:
    x = ops.parameter([1, n], np.float32, name="x")
    w = ops.constant(np.full((n, n), 0.5, np.float32))
    return ov.Model([ops.matmul(x, w, False, False)], [x], "sim")


def _used(core: SimulatedCore, name: str) -> int:
    return next(d for d in list_devices(core) if d.name == name).used_bytes


def test_every_profile_is_labelled_and_lists_cpu() -> None:
    for name in PROFILES:
        core = SimulatedCore(name)
        assert core.simulated and "CPU" in core.available_devices
        assert all(d.simulated for d in list_devices(core))


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
