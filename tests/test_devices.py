from __future__ import annotations

import os

import openvino as ov
import pytest

from ovkit.devices import DeviceClass, device_class, format_device_list, list_devices
from ovkit.devices_view import device_table
from ovkit.memory import MIB, host_memory
from ovkit.simulate import DeviceProfile, Failure, Profile, SimulatedCore

SEED_LAPTOP = """Available devices:
  CPU: Intel(R) Core(TM) Ultra 7 258V (31623 MiB, 31623 MiB free)
  GPU: Intel(R) Arc(TM) Graphics (iGPU) (29276 MiB, 29276 MiB free)
  NPU: Intel(R) AI Boost (NPU 4000) (31623 MiB, 31623 MiB free)"""


# -- the real OpenVINO runtime on this machine ---------------------------------------------
def test_real_cpu_row_uses_full_device_name_and_system_ram() -> None:
    core = ov.Core()
    devices = list_devices(core=core)
    cpu = next(d for d in devices if d.name == "CPU")
    assert cpu.description == core.get_property("CPU", "FULL_DEVICE_NAME")
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert cpu.total_bytes == ram and cpu.free_bytes == ram  # Linux: free = total, as the backend
    assert cpu.device_class is DeviceClass.CPU and not cpu.simulated and cpu.memory_error is None
    assert 0 < cpu.host_available_bytes <= ram
    assert cpu.list_line() == f"  CPU: {cpu.description} ({ram // MIB} MiB, {ram // MIB} MiB free)"


def test_real_list_only_holds_physical_devices_sorted() -> None:
    names = [d.name for d in list_devices()]
    assert names == sorted(names) and "CPU" in names
    assert not any(n.startswith(("AUTO", "MULTI", "HETERO", "BATCH")) for n in names)


def test_real_device_table_has_one_row_per_device() -> None:
    table = device_table(raw=True)
    assert list(table.index) == [d.name for d in list_devices()]
    assert table.loc["CPU", "total_mib"] == host_memory().total_bytes // MIB
    assert not bool(table.loc["CPU", "simulated"])


# -- the simulated profiles ------------------------------------------------------------------
def test_laptop_reproduces_the_seed_output_exactly() -> None:
    assert format_device_list(list_devices(core=SimulatedCore("laptop"))) == SEED_LAPTOP


def test_virtual_devices_are_dropped_and_the_rest_sorted() -> None:
    core = SimulatedCore("laptop")
    assert core.available_devices[0] == "AUTO"  # the profile lists them unsorted, virtual ones included
    assert [d.name for d in list_devices(core=core)] == ["CPU", "GPU", "NPU"]
    ws = SimulatedCore("workstation")
    assert [d.name for d in list_devices(core=ws)] == ["CPU", "GPU.0", "GPU.1"]  # BATCH dropped too


def test_npu_description_gets_the_architecture_suffix_unless_unreadable() -> None:
    core = SimulatedCore("laptop")
    assert (
        next(d for d in list_devices(core=core) if d.name == "NPU").description
        == "Intel(R) AI Boost (NPU 4000)"
    )
    core.set_property_value("NPU", "DEVICE_ARCHITECTURE", Failure("no arch"))
    assert next(d for d in list_devices(core=core) if d.name == "NPU").description == "Intel(R) AI Boost"


def test_description_falls_back_to_the_id_with_the_reason_kept() -> None:
    npu = next(d for d in list_devices(core=SimulatedCore("npu-name-error")) if d.name == "NPU")
    assert npu.description == "NPU"
    assert "Unsupported configuration key: FULL_DEVICE_NAME" in npu.description_error
    assert npu.list_line() == "  NPU: NPU (31623 MiB, 31623 MiB free)"


def test_gpu_memory_is_total_minus_the_sum_of_memory_statistics() -> None:
    gpu1 = next(d for d in list_devices(core=SimulatedCore("workstation")) if d.name == "GPU.1")
    assert gpu1.device_class is DeviceClass.GPU  # class by prefix: GPU.1 is a GPU
    assert gpu1.total_bytes == 16 * 1024 * MIB
    assert gpu1.used_bytes == (64 + 1536) * MIB  # usm_host counts too: "sum all values"
    assert gpu1.free_bytes == gpu1.total_bytes - gpu1.used_bytes
    assert dict(gpu1.memory_breakdown) == {
        "cl_mem": 0,
        "usm_host": 64 * MIB,
        "usm_shared": 0,
        "usm_device": 1536 * MIB,
    }


def test_gpu_max_alloc_size_is_never_used() -> None:
    core = SimulatedCore("laptop")
    before = next(d for d in list_devices(core=core) if d.name == "GPU")
    core.set_property_value("GPU", "GPU_DEVICE_MAX_ALLOC_MEM_SIZE", 1)
    after = next(d for d in list_devices(core=core) if d.name == "GPU")
    assert (before.total_bytes, before.free_bytes) == (after.total_bytes, after.free_bytes)
    assert "GPU_DEVICE_MAX_ALLOC_MEM_SIZE" not in after.properties


def test_npu_memory_is_total_minus_alloc() -> None:
    core = SimulatedCore("laptop")
    core.set_property_value("NPU", "NPU_DEVICE_ALLOC_MEM_SIZE", 1000 * MIB)
    npu = next(d for d in list_devices(core=core) if d.name == "NPU")
    assert npu.free_bytes == npu.total_bytes - 1000 * MIB and npu.used_bytes == 1000 * MIB


def test_failed_memory_property_gives_zero_zero_with_the_reason() -> None:
    gpu = next(d for d in list_devices(core=SimulatedCore("gpu-memory-error")) if d.name == "GPU")
    assert (gpu.total_bytes, gpu.free_bytes) == (0, 0)
    assert (
        "GPU_DEVICE_TOTAL_MEM_SIZE" in gpu.memory_error and "no supported devices found" in gpu.memory_error
    )
    assert (
        gpu.list_line() == "  GPU: Intel(R) Arc(TM) Graphics (iGPU) (0 MiB, 0 MiB free)"
    )  # reason not in the line


@pytest.mark.parametrize(
    ("prop", "value", "reason"),
    [
        ("GPU_MEMORY_STATISTICS", Failure("boom"), "GPU_MEMORY_STATISTICS: boom"),
        ("GPU_MEMORY_STATISTICS", 5, "expected a map"),
        ("GPU_DEVICE_TOTAL_MEM_SIZE", "lots", "expected a byte count"),
        ("GPU_DEVICE_TOTAL_MEM_SIZE", -1, "expected a byte count >= 0"),
    ],
)
def test_malformed_memory_properties_fall_back_to_zero(prop: str, value: object, reason: str) -> None:
    core = SimulatedCore("laptop")
    core.set_property_value("GPU", prop, value)
    gpu = next(d for d in list_devices(core=core) if d.name == "GPU")
    assert (gpu.total_bytes, gpu.free_bytes) == (0, 0) and reason in gpu.memory_error


def test_missing_property_is_a_kept_reason_too() -> None:
    core = SimulatedCore("laptop")
    core._props["NPU"].pop("NPU_DEVICE_ALLOC_MEM_SIZE")
    npu = next(d for d in list_devices(core=core) if d.name == "NPU")
    assert (npu.total_bytes, npu.free_bytes) == (0, 0) and "NPU_DEVICE_ALLOC_MEM_SIZE" in npu.memory_error


def test_allocations_beyond_total_clamp_free_to_zero() -> None:
    devices = {d.name: d for d in list_devices(core=SimulatedCore("gpu-overcommit"))}
    assert devices["GPU"].free_bytes == 0 and devices["GPU"].memory_clamped
    assert devices["GPU"].used_bytes == 10 * 1024 * MIB > devices["GPU"].total_bytes
    assert devices["NPU"].free_bytes == 0 and devices["NPU"].memory_clamped


def test_other_class_is_listed_with_zero_memory() -> None:
    assert device_class("FPGA") is DeviceClass.OTHER
    assert device_class("NPU.0") is DeviceClass.NPU and device_class("GPU.1") is DeviceClass.GPU
    profile = Profile(
        "custom",
        "a user-defined profile with an unknown device class",
        (
            DeviceProfile("FPGA", {"FULL_DEVICE_NAME": "Some FPGA"}),
            DeviceProfile("CPU", {"FULL_DEVICE_NAME": "x"}),
        ),
        host_total_bytes=8 * 1024 * MIB,
        host_available_bytes=4 * 1024 * MIB,
    )
    devices = list_devices(core=SimulatedCore(profile))
    assert [d.name for d in devices] == ["CPU", "FPGA"]
    fpga = devices[1]
    assert fpga.device_class is DeviceClass.OTHER and (fpga.total_bytes, fpga.free_bytes) == (0, 0)
    assert "no memory rule" in fpga.memory_error
    assert devices[0].total_mib == 8192 and devices[0].host_available_bytes == 4 * 1024 * MIB


def test_empty_device_list_prints_none() -> None:
    assert format_device_list([]) == "Available devices:\n  (none)"


def test_simulated_table_is_labelled_and_json_ready() -> None:
    core = SimulatedCore("laptop")
    table = device_table(raw=True, core=core)
    assert table["simulated"].all() and list(table.index) == ["CPU", "GPU", "NPU"]
    d = list_devices(core=core)[1].to_dict()
    assert d["simulated"] is True and d["device_class"] == "GPU" and d["total_mib"] == 29276
