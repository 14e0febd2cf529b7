"""Simulated device sets as plain data, every value what OpenVINO would return; a ``Failure``
raises ``RuntimeError`` when read, as plugins do where the hardware or driver is missing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MIB = 1024 * 1024
GIB = 1024 * MIB
#: ``GPU_DEVICE_MAX_ALLOC_MEM_SIZE`` (OpenCL's ``CL_DEVICE_MAX_MEM_ALLOC_SIZE``) as Intel's integrated
#: GPUs report it: 4 GiB less 8 KiB, the largest single buffer they allocate.
IGPU_MAX_ALLOC = 4_294_959_104


@dataclass(frozen=True, slots=True)
class Failure:
    """A property read that raises ``RuntimeError(message)``."""

    message: str


@dataclass(frozen=True, slots=True)
class DeviceProfile:
    """One simulated device: its OpenVINO id and the properties it answers."""

    id: str
    properties: Mapping[str, Any]


# The seed's laptop: totals chosen so the list reads 31623 / 29276 / 31623 MiB.
_LAPTOP_RAM = 31623 * MIB + 417 * 1024
_LAPTOP_GPU = 29276 * MIB + 123 * 1024


@dataclass(frozen=True, slots=True)
class Profile:
    """A simulated machine: devices in ``available_devices`` order, plus host RAM (the laptop's by default)."""

    name: str
    summary: str
    devices: tuple[DeviceProfile, ...]
    host_total_bytes: int = _LAPTOP_RAM
    host_available_bytes: int = 24 * GIB


def _cpu(full_name: str, arch: str = "intel64") -> dict[str, Any]:
    return {
        "FULL_DEVICE_NAME": full_name,
        "DEVICE_ARCHITECTURE": arch,
        "DEVICE_TYPE": "integrated",
        "OPTIMIZATION_CAPABILITIES": ["FP32", "FP16", "INT8", "BIN", "EXPORT_IMPORT"],
    }


def _gpu(full_name: str, total: int, stats: Mapping[str, int], *, dgpu: bool = False) -> dict[str, Any]:
    return {
        "FULL_DEVICE_NAME": full_name,
        "DEVICE_ARCHITECTURE": "GPU: vendor=0x8086 arch=v20.4.4",
        "DEVICE_TYPE": "discrete" if dgpu else "integrated",
        "GPU_DEVICE_TOTAL_MEM_SIZE": total,
        "GPU_MEMORY_STATISTICS": dict(stats),
        # The largest single allocation: never used for memory (upstream reads GPU memory elsewhere),
        # but a buffer above it cannot be allocated (ovkit check's limit).
        "GPU_DEVICE_MAX_ALLOC_MEM_SIZE": total // 2 if dgpu else IGPU_MAX_ALLOC,
        "GPU_EXECUTION_UNITS_COUNT": 512 if dgpu else 64,
        "GPU_UARCH_VERSION": "20.4.4",
        "OPTIMIZATION_CAPABILITIES": ["FP32", "FP16", "INT8", "BIN", "EXPORT_IMPORT"],
    }


def _npu(full_name: str, arch: str, total: int, alloc: int) -> dict[str, Any]:
    return {
        "FULL_DEVICE_NAME": full_name,
        "DEVICE_ARCHITECTURE": arch,
        "NPU_DEVICE_TOTAL_MEM_SIZE": total,
        "NPU_DEVICE_ALLOC_MEM_SIZE": alloc,
        "NPU_DRIVER_VERSION": 1688,
        "OPTIMIZATION_CAPABILITIES": ["FP16", "INT8", "EXPORT_IMPORT"],
    }


def _virtual(name: str) -> DeviceProfile:
    return DeviceProfile(name, {"FULL_DEVICE_NAME": f"{name} virtual device"})


_GPU_NOT_FOUND = (
    "Exception from src/inference/src/cpp/core.cpp:112: [GPU] Can't get GPU_DEVICE_TOTAL_MEM_SIZE "
    "property as no supported devices found or an error happened during devices query."
)

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "laptop",
            "Core Ultra 7 258V laptop: CPU, integrated Arc GPU, AI Boost NPU (the list-devices seed)",
            (
                _virtual("AUTO"),
                DeviceProfile("NPU", _npu("Intel(R) AI Boost", "4000", _LAPTOP_RAM, 0)),
                DeviceProfile("CPU", _cpu("Intel(R) Core(TM) Ultra 7 258V")),
                _virtual("HETERO"),
                DeviceProfile("GPU", _gpu("Intel(R) Arc(TM) Graphics (iGPU)", _LAPTOP_GPU, {})),
                _virtual("MULTI"),
            ),
        ),
        Profile(
            "workstation",
            "Xeon workstation with an integrated GPU.0 and a discrete Arc GPU.1 (no NPU)",
            (
                DeviceProfile("CPU", _cpu("Intel(R) Xeon(R) w5-3435X")),
                DeviceProfile(
                    "GPU.1",
                    _gpu(
                        "Intel(R) Arc(TM) A770 Graphics (dGPU)",
                        16 * GIB,
                        {"cl_mem": 0, "usm_host": 64 * MIB, "usm_shared": 0, "usm_device": 1536 * MIB},
                        dgpu=True,
                    ),
                ),
                DeviceProfile("GPU.0", _gpu("Intel(R) UHD Graphics 770 (iGPU)", 28 * GIB, {})),
                _virtual("AUTO"),
                _virtual("BATCH"),
                _virtual("HETERO"),
            ),
            host_total_bytes=64 * GIB,
            host_available_bytes=52 * GIB,
        ),
        Profile(
            "gpu-memory-error",
            "laptop whose GPU memory properties raise (driver too old): GPU reports 0/0",
            (
                DeviceProfile("CPU", _cpu("Intel(R) Core(TM) Ultra 7 258V")),
                DeviceProfile(
                    "GPU",
                    _gpu("Intel(R) Arc(TM) Graphics (iGPU)", _LAPTOP_GPU, {})
                    | {"GPU_DEVICE_TOTAL_MEM_SIZE": Failure(_GPU_NOT_FOUND)},
                ),
            ),
        ),
        Profile(
            "npu-name-error",
            "laptop whose NPU does not answer FULL_DEVICE_NAME: described by its id",
            (
                DeviceProfile("CPU", _cpu("Intel(R) Core(TM) Ultra 7 258V")),
                DeviceProfile(
                    "NPU",
                    _npu("Intel(R) AI Boost", "4000", _LAPTOP_RAM, 0)
                    | {"FULL_DEVICE_NAME": Failure("Unsupported configuration key: FULL_DEVICE_NAME")},
                ),
            ),
        ),
        Profile(
            "gpu-overcommit",
            "GPU whose allocations exceed its total: free is clamped to 0",
            (
                DeviceProfile("CPU", _cpu("Intel(R) Core(TM) Ultra 7 258V")),
                DeviceProfile(
                    "GPU",
                    _gpu(
                        "Intel(R) Arc(TM) Graphics (iGPU)",
                        8 * GIB,
                        {"cl_mem": 2 * GIB, "usm_host": 3 * GIB, "usm_device": 5 * GIB},
                    ),
                ),
                DeviceProfile("NPU", _npu("Intel(R) AI Boost", "4000", 4 * GIB, 6 * GIB)),
            ),
        ),
    )
}
