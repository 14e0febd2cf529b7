"""``SimulatedCore``: a Core-shaped object answering OpenVINO's property names from a profile.
Models compiled for a simulated device run on the local CPU; while alive, their constants count
as that device's allocations (and, on a device sharing host RAM, come out of the profile's)."""

from __future__ import annotations

import collections
import copy
import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ovkit.errors import OvkitError
from ovkit.runtime import default_core, exact_on_cpu
from ovkit.simulate.profiles import PROFILES, Failure, Profile


class UnknownProfileError(OvkitError, ValueError):
    """A simulation profile name that is not shipped."""


def get_profile(name: str) -> Profile:
    """The shipped profile ``name``, or a clear error listing the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise UnknownProfileError(f"unknown simulation profile {name!r} (expected one of: {known})") from None


def _not_registered(device: str) -> RuntimeError:
    return RuntimeError(f'Device with "{device}" name is not registered in the OpenVINO Runtime')


class SimulatedCore:
    """A simulated OpenVINO device set; compile and run happen on the real CPU device."""

    simulated = True

    def __init__(
        self,
        profile: Profile | str = "laptop",
        *,
        activity: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        self._props: dict[str, dict[str, Any]] = {
            d.id: copy.deepcopy(dict(d.properties)) for d in self.profile.devices
        }
        self._lock = threading.Lock()
        # Releases from compiled-model finalizers: they may run (via the garbage collector) while
        # this thread holds the lock, so they only queue here; the next locked call applies them.
        self._pending: collections.deque[tuple[str, int, str]] = collections.deque()
        self._activity = activity
        self._clock = clock
        self._t0 = clock()
        self._host_used = 0  # bytes ovkit holds on the simulated CPU and on devices sharing host RAM
        self._shares_host = {
            d.id
            for d in self.profile.devices
            if d.id.startswith(("CPU", "NPU")) or d.properties.get("DEVICE_TYPE") == "integrated"
        }

    def __repr__(self) -> str:
        return f"SimulatedCore({self.profile.name!r}, devices={self.available_devices})"

    # -- the Core surface -------------------------------------------------------------------
    @property
    def available_devices(self) -> list[str]:
        return [d.id for d in self.profile.devices]

    def get_property(self, device_name: str, property: Any) -> Any:  # noqa: A002
        """``get_property(device, name)``."""
        name = str(property)
        with self._lock:
            self._apply_pending()
            props = self._props.get(device_name)
            if props is None:
                raise _not_registered(device_name)
            if name == "SUPPORTED_PROPERTIES":
                return {k: "RO" for k in props}
            if name not in props:
                raise RuntimeError(f"[{device_name}] Unsupported property {name} by simulated device")
            value = props[name]
            if isinstance(value, Failure):
                raise RuntimeError(value.message)
            value = copy.deepcopy(value)
        if self._activity:
            value = self._with_activity(device_name, name, value)
        return value

    def host_memory(self) -> tuple[int, int]:
        """Host RAM of the simulated machine: (total, available), available being the profile's
        less what ovkit holds on the simulated CPU, integrated GPU and NPU."""
        with self._lock:
            self._apply_pending()
            used = self._host_used
        return self.profile.host_total_bytes, max(0, self.profile.host_available_bytes - used)

    def compile_model(
        self, model: Any, device_name: str = "CPU", config: Mapping[str, Any] | None = None
    ) -> Any:
        """Compile on the real CPU; while alive, the model's constants count as device allocations."""
        if device_name not in self._props:
            raise _not_registered(device_name)
        real = default_core()
        cpu_config = {
            k: v for k, v in (config or {}).items() if not str(k).startswith(("NPU", "NPUW", "GPU"))
        }
        exact_on_cpu(cpu_config)  # the real CPU computes: f32 asked is exact f32 there too
        compiled = real.compile_model(model, "CPU", cpu_config)
        # the model's Constant nodes: what the device would have to store
        ops = model.get_ordered_ops()
        nbytes = sum(int(op.get_byte_size()) for op in ops if op.get_type_name() == "Constant")
        if nbytes:
            self.allocate(device_name, nbytes)
            weakref.finalize(compiled, self.release, device_name, nbytes, "usm_device")
        return compiled

    def __getattr__(self, name: str) -> Any:
        # Anything else a Core offers (read_model, Tensor helpers, ...) is the real Core's.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(default_core(), name)

    # -- simulation controls ----------------------------------------------------------------
    def allocate(self, device_name: str, nbytes: int, kind: str = "usm_device") -> None:
        """Add (or, negative, release) ``nbytes`` of allocations on a simulated device."""
        with self._lock:
            self._apply_pending()
            self._change(device_name, nbytes, kind)

    def release(self, device_name: str, nbytes: int, kind: str = "usm_device") -> None:
        """Give back ``nbytes`` allocated on a simulated device; safe from finalizers (queued,
        applied by the next call that reads the device)."""
        self._pending.append((device_name, -int(nbytes), kind))

    def _apply_pending(self) -> None:
        while self._pending:
            self._change(*self._pending.popleft())

    def _change(self, device_name: str, nbytes: int, kind: str) -> None:
        """Apply one allocation change (the caller holds the lock)."""
        props = self._props[device_name]
        if device_name in self._shares_host:
            self._host_used = max(0, self._host_used + nbytes)
        if "GPU_MEMORY_STATISTICS" in props and isinstance(props["GPU_MEMORY_STATISTICS"], dict):
            stats = props["GPU_MEMORY_STATISTICS"]
            stats[kind] = max(0, stats.get(kind, 0) + nbytes)
        elif isinstance(props.get("NPU_DEVICE_ALLOC_MEM_SIZE"), int):
            props["NPU_DEVICE_ALLOC_MEM_SIZE"] = max(0, props["NPU_DEVICE_ALLOC_MEM_SIZE"] + nbytes)

    def set_property_value(self, device_name: str, name: str, value: Any) -> None:
        """Change what a simulated device answers (a value, or a ``Failure``)."""
        with self._lock:
            if device_name not in self._props:
                raise _not_registered(device_name)
            self._props[device_name][name] = value

    def _with_activity(self, device: str, name: str, value: Any) -> Any:
        """A slow deterministic wave of extra allocations, for live views (``activity=True``)."""
        phase = (self._clock() - self._t0) / 5.0 + (hash(device) % 7)
        wave = 0.5 + 0.5 * math.sin(phase)
        if name == "GPU_MEMORY_STATISTICS" and isinstance(value, dict):
            total = self._props[device].get("GPU_DEVICE_TOTAL_MEM_SIZE")
            if isinstance(total, int):
                value["usm_device"] = value.get("usm_device", 0) + int(total * 0.4 * wave)
        elif name == "NPU_DEVICE_ALLOC_MEM_SIZE" and isinstance(value, int):
            total = self._props[device].get("NPU_DEVICE_TOTAL_MEM_SIZE")
            if isinstance(total, int):
                value += int(total * 0.2 * wave)
        return value
