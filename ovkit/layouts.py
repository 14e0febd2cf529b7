"""The three device layouts users meet (``seed``, llama.cpp ``master``, Intel's ``fork``) as a table
of rules: how each lists devices and selects one (``ovkit.devices.list_devices`` applies them)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from ovkit import memory
from ovkit.errors import OvkitError
from ovkit.memory import MemoryReport, read_property
from ovkit.runtime import Core, get_core

DEFAULT_LAYOUT = "seed"
VIRTUAL_PREFIXES: tuple[str, ...] = ("AUTO", "MULTI", "HETERO", "BATCH")  # the seed's filter
FORK_VIRTUAL_PREFIXES: tuple[str, ...] = ("AUTO", "MULTI", "HETERO")  # the fork keeps BATCH
OPENVINO_RUNTIME_DESCRIPTION = "OpenVINO Runtime"  # ov::get_openvino_version().description
GPU_HOST_STATISTICS = ("usm_host", "usm_shared")  # host RAM on a dGPU: the fork does not count them
FORK_ABORT = (
    "GGML OpenVINO Backend: GGML_OPENVINO_DEVICE={} is not available. "
    "Set it to one of the available OpenVINO devices:{}"
)


class UnknownLayoutError(OvkitError, ValueError):
    """A layout name that is not one of :data:`LAYOUTS`."""


class BackendAbort(OvkitError, RuntimeError):
    """The backend would stop the process here (``GGML_ABORT``); the message is its own."""


class OnUnknown(enum.StrEnum):
    """What an unknown ``GGML_OPENVINO_DEVICE`` does."""

    FALLBACK = "fallback to CPU with a warning"
    ABORT = "abort naming the available devices"


@dataclass(frozen=True, slots=True)
class SelectionRule:
    """How ``GGML_OPENVINO_DEVICE`` picks the device: the candidates, the default, the miss."""

    candidates: Callable[[Sequence[str]], list[str]]  #: the ids it accepts, from available_devices
    default: Callable[[Sequence[str]], str]  #: the device when unset, from the candidates
    on_unknown: OnUnknown


@dataclass(frozen=True, slots=True)
class Layout:
    """One way the backend registers and describes its ggml devices (each field one rule)."""

    key: str
    title: str
    entries: Callable[[Sequence[str], str], list[str]]  #: (ids, selected) -> ids that become devices
    naming: Callable[[int, str], str]  #: (index, id) -> ggml device name
    description: Callable[[Core, str, str, Any], str]  #: (core, id, selected, seed's Device)
    #: (core, id) -> the entry's memory; None: the seed's reading (by device class, 0/0 on a failure)
    memory: Callable[[Core, str], MemoryReport] | None
    ggml_type: Callable[[str, str], str]  #: (id, selected) -> ggml_backend_dev_type
    selection: SelectionRule


class Resolved(NamedTuple):
    """The device a layout's selection rule picks, and whether it fell back."""

    device: str
    fell_back: bool


# -- which OpenVINO ids a layout lists, and which it accepts in GGML_OPENVINO_DEVICE -------------
def physical(ids: Sequence[str], virtual: tuple[str, ...] = VIRTUAL_PREFIXES) -> list[str]:
    """``ids`` without the ``virtual`` ones, sorted, each once."""
    return sorted({d for d in ids if not d.startswith(virtual)})


def _fork_enumerate(ids: Sequence[str]) -> list[str]:
    """``ov_enumerate_devices``: AUTO/MULTI/HETERO dropped, ``CPU`` if nothing is left, sorted, unique."""
    return physical(ids, FORK_VIRTUAL_PREFIXES) or ["CPU"]


# -- descriptions -------------------------------------------------------------------------------
def describe(ov_id: str, *, core: Core, props: dict[str, Any] | None = None) -> tuple[str, str | None]:
    """``ggml_openvino_get_device_description``: FULL_DEVICE_NAME (+ `` (NPU <arch>)``), else the
    id and why; the properties read are stored into ``props``."""
    props = {} if props is None else props
    full, err = read_property(ov_id, "FULL_DEVICE_NAME", core=core)
    if err or not isinstance(full, str) or not full:
        return ov_id, err or f"FULL_DEVICE_NAME returned {full!r}"
    props["FULL_DEVICE_NAME"] = full
    if ov_id.startswith("NPU"):
        arch, err = read_property(ov_id, "DEVICE_ARCHITECTURE", core=core)
        if not err and isinstance(arch, str) and arch:
            props["DEVICE_ARCHITECTURE"] = arch
            return f"{full} (NPU {arch})", None
    return full, None


# -- memory -------------------------------------------------------------------------------------
def _fork_memory(ov_id: str, *, core: Core) -> MemoryReport:
    """The fork's ``get_memory``: the plugin's counters (a dGPU's host USM left out) when total > 0
    and used are readable, else host RAM (free = total); an iGPU's or NPU's free is then capped at
    MemAvailable."""
    rule = memory.MEMORY_RULES.get(ov_id[:3], memory.MEMORY_RULES["CPU"])  # by class prefix
    try:
        mem = memory.read_counters(ov_id, rule, {}, core=core, skip=GPU_HOST_STATISTICS)
        mem = replace(mem, formula=f"{rule.total_property} - this process's OpenVINO allocations")
    except memory.UnreadableMemory:
        mem = MemoryReport(0, 0, 0, "")
    if not mem.total_bytes:
        mem = memory.host_ram_report(
            "host RAM (free = total), as for the CPU or a plugin without memory counters", core=core
        )
    if memory.shares_host_ram(ov_id, core=core):
        available = memory.host_memory(core).available_bytes
        capped = min(mem.free_bytes, available) if available else mem.free_bytes
        formula = mem.formula + (", free capped at MemAvailable" if capped != mem.free_bytes else "")
        mem = replace(mem, free_bytes=capped, formula=formula, shared_host_available_bytes=available)
    return mem


# -- the table ----------------------------------------------------------------------------------
LAYOUTS: dict[str, Layout] = {
    layout.key: layout
    for layout in (
        Layout(
            "seed",
            "list-devices PRD: one device per OpenVINO device, named by its id",
            entries=lambda ids, _sel: physical(ids),
            naming=lambda _i, ov_id: ov_id,
            description=lambda _core, _ov_id, _sel, seen: seen.description,  # FULL_DEVICE_NAME
            memory=None,
            ggml_type=lambda _ov_id, _sel: "GPU",
            selection=SelectionRule(physical, lambda _c: "CPU", OnUnknown.FALLBACK),
        ),
        Layout(
            "master",
            "llama.cpp master: one device OPENVINO0 for the selected OpenVINO device",
            entries=lambda _ids, sel: [sel],
            naming=lambda i, _ov_id: f"OPENVINO{i}",
            description=lambda _core, _ov_id, _sel, _seen: OPENVINO_RUNTIME_DESCRIPTION,
            memory=lambda core, _ov_id: memory.host_ram_report(
                "host RAM whatever the device (Linux: free = total)", core=core
            ),
            ggml_type=lambda _ov_id, _sel: "GPU",
            # exact membership in OpenVINO's list, as upstream checks it
            selection=SelectionRule(list, lambda _c: "CPU", OnUnknown.FALLBACK),
        ),
        Layout(
            "fork",
            "Intel's fork: OPENVINO<i> per OpenVINO device, selection by GGML_OPENVINO_DEVICE only",
            entries=lambda ids, _sel: _fork_enumerate(ids),
            naming=lambda i, _ov_id: f"OPENVINO{i}",
            description=lambda core, ov_id, sel, _seen: (
                f"GGML_OPENVINO_DEVICE={ov_id}{' (selected)' if ov_id == sel else ''} - {describe(ov_id, core=core)[0]}"
            ),
            # plugin counters, else host RAM; iGPU/NPU free capped at MemAvailable
            memory=lambda core, ov_id: _fork_memory(ov_id, core=core),
            ggml_type=lambda ov_id, sel: "GPU" if ov_id == sel else "IGPU",
            selection=SelectionRule(
                _fork_enumerate, lambda c: "CPU" if "CPU" in c else c[0], OnUnknown.ABORT
            ),
        ),
    )
}


def get_layout(name: str) -> Layout:
    """The layout called ``name`` (``UnknownLayoutError`` naming the known ones otherwise)."""
    try:
        return LAYOUTS[name]
    except KeyError:
        raise UnknownLayoutError(
            f"unknown device layout {name!r}; expected one of {', '.join(LAYOUTS)}"
        ) from None


def resolve_for(layout: Layout, requested: str | None, *, core: Core | None = None) -> Resolved:
    """``layout``'s selection on ``core`` for the requested device (None = unset or empty);
    ``BackendAbort``, naming the candidates, for the fork's miss."""
    core = get_core(core)
    rule = layout.selection
    candidates = rule.candidates(list(core.available_devices))
    if requested is None:
        return Resolved(rule.default(candidates), False)
    if requested in candidates:
        return Resolved(requested, False)
    if rule.on_unknown is OnUnknown.ABORT:
        listing = "".join(f"\n  {name}: {describe(name, core=core)[0]}" for name in candidates)
        raise BackendAbort(FORK_ABORT.format(requested, listing))
    return Resolved("CPU", True)
