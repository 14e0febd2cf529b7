"""Buffer types (per device a ``<device>`` and a ``<device>_HOST`` one, as upstream), buffers that own
one storage (anonymous ``mmap`` host memory or a GPU remote tensor) and their tensors' extras, and
the record of every allocation and release."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import itertools
import mmap
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from ovkit import quant, weight_release
from ovkit.config import read_config
from ovkit.devices import DeviceClass, device_class
from ovkit.dtypes import STORAGE_DTYPE, align_up
from ovkit.errors import OvkitError
from ovkit.memory import SIZE_MAX
from ovkit.runtime import Core, get_core
from ovkit.simulate import SimulatedCore

if TYPE_CHECKING:
    import pandas as pd

TENSOR_ALIGNMENT = 32  # buffer-type alignment (upstream TENSOR_ALIGNMENT)
HOST_ALIGNMENT = 64  # host allocation alignment (ggml_aligned_malloc)
HOST_SUFFIX = "_HOST"

#: numpy dtype of each plain ggml type's storage, and u8 for raw bytes (quantized tensors are raw bytes).
PLAIN_DTYPES: dict[str, np.dtype[Any]] = {**STORAGE_DTYPE, "u8": np.dtype(np.uint8)}


class BufferUsageError(OvkitError, RuntimeError):
    """Misuse of a buffer: out-of-range placement, use after free, foreign tensors."""


class BufferKind(enum.StrEnum):
    """Explicit buffer-type metadata: memory the device owns, or host memory it can read."""

    DEVICE = "device"
    HOST = "host"


class Usage(enum.StrEnum):
    """What a buffer holds (ggml's buffer usage; upstream tests WEIGHTS and ANY = KV cache)."""

    ANY = "any"
    WEIGHTS = "weights"
    KV_CACHE = "kv_cache"
    COMPUTE = "compute"


@dataclass(frozen=True, slots=True)
class BufferType:
    """One buffer type: stable name, owning device, explicit kind, alignment and maximum size."""

    name: str
    device: str
    kind: BufferKind
    alignment: int = TENSOR_ALIGNMENT
    max_size: int = SIZE_MAX


#: the process's buffer types, one per device and kind (``setdefault`` is atomic: no lock needed)
_TYPES: dict[tuple[str, BufferKind], BufferType] = {}


def _buffer_type(device: str, kind: BufferKind) -> BufferType:
    if not isinstance(device, str) or not device:
        raise ValueError(f"buffer type: expected a device id such as 'CPU' or 'GPU.1', got {device!r}")
    name = device + (HOST_SUFFIX if kind is BufferKind.HOST else "")
    return _TYPES.setdefault((device, kind), BufferType(name, device, kind))


def buffer_type(device: str) -> BufferType:
    """The device buffer type of ``device`` (named exactly ``device``); the same object every call."""
    return _buffer_type(device, BufferKind.DEVICE)


def host_buffer_type(device: str) -> BufferType:
    """The host buffer type of ``device`` (named ``<device>_HOST``); the same object every call."""
    return _buffer_type(device, BufferKind.HOST)


def is_ovkit_buffer_type(obj: object) -> TypeGuard[BufferType]:
    """True only for buffer types created here (a look-alike with the same name is not)."""
    return isinstance(obj, BufferType) and _TYPES.get((obj.device, obj.kind)) is obj


def buffer_type_kind(obj: object) -> BufferKind | None:
    """The kind of an ovkit buffer type (read from its metadata), or None for anything else."""
    return obj.kind if is_ovkit_buffer_type(obj) else None


def tensor_nbytes(shape: Sequence[int], dtype: str) -> int:
    """Bytes of a tensor of numpy ``shape`` and ggml ``dtype`` (quantized: whole blocks)."""
    if dtype in PLAIN_DTYPES:
        return int(np.prod(shape, dtype=np.int64)) * PLAIN_DTYPES[dtype].itemsize
    spec = quant.quant_spec(dtype)
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    return rows * quant.row_bytes(spec.name, int(shape[-1]))


def alloc_size(shape: Sequence[int], dtype: str) -> int:
    """Allocation size: ``nbytes``, or for a quantized weight with at most 3 dims the extracted
    layout ``[weights | scales | zp]`` (64-byte aligned sections) when that is larger, as upstream sizes extracted weights."""
    nbytes = tensor_nbytes(shape, dtype)
    if dtype in PLAIN_DTYPES or len(shape) > 3:
        return nbytes
    spec = quant.quant_spec(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    groups = n // spec.group
    weights = n * spec.container_bits // 8
    scales = groups * 2
    zp = 0 if spec.symmetric else groups
    layout = sum(align_up(s, HOST_ALIGNMENT) for s in (weights, scales, zp))
    return max(nbytes, layout)


# -- storage ---------------------------------------------------------------------------------------
class HostStorage:
    """Zero-filled host memory from a private anonymous mmap (page-aligned, so 64-byte aligned)."""

    remote = False

    def __init__(
        self, size: int, note: str = "host memory", on_free: Callable[[], None] | None = None
    ) -> None:
        self.size = int(size)
        self.note = note
        # ``on_free``, called once when freed: a simulated device's memory, given back then
        self.device_side = on_free is not None
        self._on_free = on_free
        # private anonymous mapping: MADV_DONTNEED really frees its pages (a shared one would not);
        # weight release madvises it
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        self.mmap: mmap.mmap | None = mmap.mmap(-1, self.size, flags=flags) if self.size else None
        self._array: np.ndarray | None = (
            np.frombuffer(self.mmap, dtype=np.uint8) if self.mmap is not None else np.zeros(0, np.uint8)
        )
        self._ov_tensor: Any = None

    @property
    def data(self) -> np.ndarray:
        if self._array is None:
            raise BufferUsageError("storage used after it was freed")
        return self._array

    @property
    def address(self) -> int:
        return int(self.data.ctypes.data) if self.size else 0

    @property
    def ov_tensor(self) -> Any:
        """An ``ov.Tensor(u8, {size})`` sharing this memory (created on first use)."""
        if self._ov_tensor is None:
            import openvino as ov

            self._ov_tensor = ov.Tensor(self.data, shared_memory=True)
        return self._ov_tensor

    def free(self) -> None:
        """Drop the tensor and the array, then unmap (deferred to GC if someone holds a view)."""
        self._ov_tensor = None
        self._array = None
        on_free, self._on_free = self._on_free, None
        if on_free is not None:
            on_free()
        if self.mmap is not None:
            # a caller still holding a numpy view defers the unmap until that view goes
            with contextlib.suppress(BufferError):
                self.mmap.close()
            self.mmap = None

    @property
    def freed(self) -> bool:
        return self._array is None


class RemoteStorage:
    """A device-side remote tensor from the device's OpenVINO remote context (GPU class only)."""

    remote = device_side = True
    address = 0
    mmap = None

    def __init__(self, size: int, device: str, *, core: Core) -> None:
        import openvino as ov

        self.size = int(size)
        self.note = f"remote tensor on {device}"
        context = core.get_default_context(device)
        self._tensor: Any = context.create_tensor(ov.Type.u8, ov.Shape([max(1, self.size)]), {})

    @property
    def data(self) -> np.ndarray:
        raise BufferUsageError("a remote (device) buffer has no host data; use get_tensor/set_tensor")

    @property
    def ov_tensor(self) -> Any:
        if self._tensor is None:
            raise BufferUsageError("storage used after it was freed")
        return self._tensor

    def free(self) -> None:
        self._tensor = None

    @property
    def freed(self) -> bool:
        return self._tensor is None


Storage = HostStorage | RemoteStorage


# -- extras and placed tensors ---------------------------------------------------------------------
class ExtraKind(enum.StrEnum):
    """Upstream's extra buffer types."""

    WEIGHT = "weight"
    QUANTIZED_WEIGHT = "quantized_weight"
    TENSOR = "tensor"


@dataclass(eq=False, slots=True)
class TensorExtra:
    """Backend data attached to a tensor (an ov.Tensor over it, or a weight node); owned by a buffer."""

    kind: ExtraKind
    ov_tensor: Any = field(default=None, repr=False)
    weight: Any = field(default=None, repr=False)
    released: bool = False

    def release(self) -> None:
        """Drop what the extra holds; a second release is an error (it would be a double free)."""
        if self.released:
            raise BufferUsageError(f"{self.kind} extra released twice")
        self.released = True
        self.ov_tensor = None
        self.weight = None


@dataclass(eq=False, slots=True)
class PlacedTensor:
    """A tensor placed in a buffer: name, numpy shape, ggml dtype, byte offset, optional view source."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int
    nbytes: int
    buffer: Buffer = field(repr=False)
    view_src: PlacedTensor | None = None

    @property
    def base(self) -> PlacedTensor:
        t = self
        while t.view_src is not None:
            t = t.view_src
        return t

    @property
    def extra(self) -> TensorExtra | None:
        """The extra this tensor uses (a view's is its source's)."""
        return self.buffer._extras.get(id(self.base))

    def numpy(self) -> np.ndarray:
        """A numpy view of the tensor's bytes in the buffer (host storage)."""
        return self.typed(self.buffer.data[self.offset : self.offset + self.nbytes])

    def typed(self, raw: np.ndarray) -> np.ndarray:
        """The tensor's bytes ``raw`` in its numpy shape and dtype (quantized: the raw bytes)."""
        dtype = PLAIN_DTYPES.get(self.dtype)
        return raw if dtype is None else raw.view(dtype).reshape(self.shape)


# -- buffers ---------------------------------------------------------------------------------------
_IDS = itertools.count(1)


class Buffer:
    """A buffer of one buffer type, owning one storage, the tensors placed in it and their extras."""

    def __init__(
        self, buffer_type: BufferType, size: int, usage: Usage = Usage.ANY, *, core: Core | None = None
    ) -> None:
        if not is_ovkit_buffer_type(buffer_type):
            raise BufferUsageError(f"{buffer_type!r} is not an ovkit buffer type")
        if not isinstance(size, int | np.integer) or size < 0:
            raise ValueError(f"buffer size must be a non-negative integer, got {size!r}")
        if size > buffer_type.max_size:
            raise ValueError(
                f"buffer size {size} exceeds the maximum {buffer_type.max_size} of {buffer_type.name}"
            )
        self.id = next(_IDS)
        self.buffer_type = buffer_type
        self.usage = Usage(usage)
        self._core = core
        # a GPU's KV cache is device memory from the start (others move with a cache_* tensor)
        gpu = device_class(buffer_type.device) is DeviceClass.GPU
        remote = gpu and buffer_type.kind is BufferKind.DEVICE and self.usage is Usage.KV_CACHE
        self.storage: Storage = self._make_storage(int(size), remote=remote)
        self._tensors: dict[str, PlacedTensor] = {}
        self._extras: dict[int, TensorExtra] = {}  # id(base PlacedTensor) -> owned extra
        self._next = 0
        self._freed = False
        self._track_storage()

    def _track_storage(self) -> None:
        """Record the allocation of the current storage; ``_finalizer()`` releases and records it, at
        the latest when the buffer is collected unfreed."""
        t = self.buffer_type
        ev = AllocationEvent(
            time.time(), "alloc", self.id, t.device, t.name, t.kind, self.usage, self.size, self.storage.note
        )
        HISTORY.append(ev)
        self._finalizer = weakref.finalize(self, _release, self.storage, self._extras, ev)

    def _make_storage(self, size: int, *, remote: bool) -> Storage:
        core = self._core
        if remote and size:
            if isinstance(core, SimulatedCore):
                # counted as the simulated GPU's usm_device, as the plugin counts a USM tensor
                dev = self.buffer_type.device
                core.allocate(dev, size, "usm_device")
                release = functools.partial(core.release, dev, size, "usm_device")
                return HostStorage(size, f"simulated {dev}: host memory", release)
            return RemoteStorage(size, self.buffer_type.device, core=get_core(core))
        return HostStorage(size)

    # -- storage-backed fields (never cached here) ---------------------------------------------
    @property
    def size(self) -> int:
        return self.storage.size

    @property
    def data(self) -> np.ndarray:
        self._check_alive()
        return self.storage.data

    @property
    def ov_tensor(self) -> Any:
        self._check_alive()
        return self.storage.ov_tensor

    @property
    def is_remote(self) -> bool:
        return self.storage.remote

    @property
    def is_device_side(self) -> bool:
        """Device memory (a remote tensor), or host memory standing in for it on a simulated GPU."""
        return bool(self.storage.device_side)

    @property
    def name(self) -> str:
        return self.buffer_type.name

    def _check_alive(self) -> None:
        if self._freed:
            raise BufferUsageError(f"buffer {self.id} ({self.name}) used after free")

    # -- tensors ---------------------------------------------------------------------------------
    def place(
        self, name: str, shape: Sequence[int], dtype: str = "f32", offset: int | None = None
    ) -> PlacedTensor:
        """Place a tensor at ``offset`` (default: the next 32-byte aligned free offset)."""
        self._check_alive()
        self._maybe_migrate_kv(name)
        shape_t = tuple(int(s) for s in shape)
        nbytes = tensor_nbytes(shape_t, dtype)
        alloc = alloc_size(shape_t, dtype)
        off = align_up(self._next, self.buffer_type.alignment) if offset is None else int(offset)
        if off < 0 or off % self.buffer_type.alignment:
            raise BufferUsageError(
                f"tensor {name!r}: offset {off} is not a multiple of {self.buffer_type.alignment}"
            )
        if off + alloc > self.size:
            raise BufferUsageError(
                f"tensor {name!r} ({alloc} bytes at offset {off}) does not fit in buffer {self.id} of {self.size} bytes"
            )
        t = self._add(PlacedTensor(name, shape_t, dtype, off, nbytes, self))
        self._next = max(self._next, off + alloc)
        if dtype in PLAIN_DTYPES and not self.is_remote:
            import openvino as ov

            self.set_extra(
                t, TensorExtra(ExtraKind.TENSOR, ov_tensor=ov.Tensor(t.numpy(), shared_memory=True))
            )
        return t

    def _maybe_migrate_kv(self, name: str) -> None:
        """As upstream: the first ``cache_*`` tensor of a host-backed device buffer on the GPU
        class (stateless execution) moves the whole buffer to device memory; offsets stay."""
        on_gpu = device_class(self.buffer_type.device) is DeviceClass.GPU
        if not (on_gpu and self.buffer_type.kind is BufferKind.DEVICE and name.startswith("cache_")):
            return
        if self.is_device_side or not self.size:
            return
        if read_config(warn=False).stateful("GPU"):
            return  # stateful: the OpenVINO model owns the cache; the buffer stays on the host
        if self._core is None and self.buffer_type.device not in get_core().available_devices:
            return  # no such device here: nothing to migrate to
        if self._extras:
            raise BufferUsageError(
                f"KV cache tensor {name!r}: buffer {self.id} already has tensor extras; "
                "the KV cache must be the first tensor placed in its buffer (upstream asserts this)"
            )
        old = self.storage
        new = self._make_storage(old.size, remote=True)
        self.storage = new
        if isinstance(new, HostStorage):
            new.data[:] = old.data
        else:  # pragma: no cover - needs a GPU
            self._remote_copy_in(0, old.data)
        self._finalizer()  # the old storage (no extras yet)
        self._track_storage()

    def view(
        self,
        src: PlacedTensor,
        name: str,
        shape: Sequence[int] | None = None,
        offset: int = 0,
        dtype: str | None = None,
    ) -> PlacedTensor:
        """A view of ``src`` (byte ``offset`` into it); it shares its source's extra."""
        self._check_alive()
        if src.buffer is not self:
            raise BufferUsageError(f"view {name!r}: source {src.name!r} lives in another buffer")
        dt = dtype or src.dtype
        shape_t = tuple(int(s) for s in (shape if shape is not None else src.shape))
        nbytes = tensor_nbytes(shape_t, dt)
        if offset < 0 or offset + nbytes > src.nbytes:
            raise BufferUsageError(
                f"view {name!r}: {nbytes} bytes at offset {offset} exceed source {src.name!r} ({src.nbytes} bytes)"
            )
        return self._add(PlacedTensor(name, shape_t, dt, src.offset + offset, nbytes, self, view_src=src))

    def _add(self, t: PlacedTensor) -> PlacedTensor:
        if t.name in self._tensors:
            raise BufferUsageError(f"tensor {t.name!r} is already placed in buffer {self.id}")
        self._tensors[t.name] = t
        return t

    def tensor(self, name: str) -> PlacedTensor:
        if name not in self._tensors:
            raise KeyError(f"no tensor {name!r} in buffer {self.id}; placed: {sorted(self._tensors)}")
        return self._tensors[name]

    def set_tensor(self, t: PlacedTensor, values: np.ndarray | bytes, offset: int = 0) -> None:
        """Copy ``values`` into the tensor's bytes (host storage, or the remote tensor)."""
        self._own(t)
        raw = (
            np.frombuffer(values, np.uint8)
            if isinstance(values, bytes | bytearray | memoryview)
            else np.ascontiguousarray(values).view(np.uint8).reshape(-1)
        )
        if offset < 0 or offset + raw.size > t.nbytes:
            raise BufferUsageError(
                f"set_tensor {t.name!r}: {raw.size} bytes at offset {offset} exceed its {t.nbytes} bytes"
            )
        if self.is_remote:
            self._remote_copy_in(t.offset + offset, raw)
            return
        self.storage.data[t.offset + offset : t.offset + offset + raw.size] = raw

    def set_weight(self, t: PlacedTensor, values: np.ndarray | bytes) -> TensorExtra:
        """Upstream's weight path of set_tensor: copy the tensor and attach a weight extra (a
        ``QuantizedWeight`` or the numpy view); WEIGHTS host buffers are registered for release."""
        self._own(t)
        if t.view_src is not None:
            raise BufferUsageError(f"set_weight {t.name!r}: views cannot hold weights")
        self.set_tensor(t, values)
        if t.dtype in PLAIN_DTYPES:
            extra = TensorExtra(ExtraKind.WEIGHT, weight=t.numpy())
        else:
            raw = self.get_tensor(t) if self.is_remote else t.numpy()
            extra = TensorExtra(
                ExtraKind.QUANTIZED_WEIGHT, weight=quant.from_blocks(t.dtype, raw, t.shape, t.name)
            )
        self.set_extra(t, extra)
        if self.usage is Usage.WEIGHTS and not self.is_remote:
            weight_release.register_weight_buffer(self)
        return extra

    def get_tensor(self, t: PlacedTensor) -> np.ndarray:
        """A copy of the tensor's values (numpy shape and dtype)."""
        self._own(t)
        if self.is_remote:  # pragma: no cover - needs a GPU
            raw = np.asarray(self._remote_host_copy().data)[t.offset : t.offset + t.nbytes].copy()
        else:
            raw = self.storage.data[t.offset : t.offset + t.nbytes].copy()
        return t.typed(raw)

    def _remote_host_copy(self) -> Any:  # pragma: no cover - needs a GPU
        import openvino as ov

        host = ov.Tensor(ov.Type.u8, ov.Shape([self.size]))
        self.storage.ov_tensor.copy_to(host)
        return host

    def _remote_copy_in(self, offset: int, raw: np.ndarray) -> None:  # pragma: no cover - needs a GPU
        host = self._remote_host_copy()
        np.asarray(host.data)[offset : offset + raw.size] = raw
        host.copy_to(self.storage.ov_tensor)

    def _own(self, t: PlacedTensor) -> None:
        self._check_alive()
        if t.buffer is not self or self._tensors.get(t.name) is not t:
            raise BufferUsageError(f"tensor {t.name!r} is not placed in buffer {self.id}")

    # -- extras ----------------------------------------------------------------------------------
    def set_extra(self, t: PlacedTensor, extra: TensorExtra) -> TensorExtra:
        """Attach ``extra`` to ``t``'s base tensor; a replaced extra is released exactly once."""
        self._own(t)
        key = id(t.base)
        old = self._extras.get(key)
        if old is extra:
            return extra
        self._extras[key] = extra
        if old is not None:
            old.release()
        return extra

    @property
    def extras(self) -> list[TensorExtra]:
        return list(self._extras.values())

    # -- lifetime --------------------------------------------------------------------------------
    def free(self) -> None:
        """Release every extra, the storage, and record the release (idempotent)."""
        if self._freed:
            return
        self._freed = True
        if self.usage is Usage.WEIGHTS:
            weight_release.REGISTRY.unregister(self)
        self._tensors.clear()
        self._finalizer()

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __repr__(self) -> str:
        state = "freed" if self._freed else f"{self.size} bytes"
        return f"Buffer(id={self.id}, type={self.name}, usage={self.usage}, {state}, storage={self.storage.note!r})"


def _release(storage: Storage, extras: dict[int, TensorExtra], allocated: AllocationEvent) -> None:
    """Release a buffer's extras and storage, and record the release (free() or the collector)."""
    for extra in list(extras.values()):
        if not extra.released:
            extra.release()
    extras.clear()
    storage.free()
    HISTORY.append(dataclasses.replace(allocated, time=time.time(), event="free"))


def alloc_buffer(
    device: str, size: int, usage: Usage | str = Usage.ANY, *, host: bool = False, core: Core | None = None
) -> Buffer:
    """Allocate ``size`` bytes in ``device``'s device (or, ``host=True``, host) buffer type."""
    return Buffer(host_buffer_type(device) if host else buffer_type(device), size, Usage(usage), core=core)


# -- allocation tracking ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AllocationEvent:
    """One allocation or release: when, which buffer, where, for what, how many bytes."""

    time: float
    event: str  # "alloc" | "free"
    buffer_id: int
    device: str
    buffer_type: str
    kind: str
    usage: str
    bytes: int
    storage: str


#: every allocation and release in order (``list.append`` is atomic: no lock needed)
HISTORY: list[AllocationEvent] = []
_COLUMNS = ["buffer_id", "device", "buffer_type", "kind", "usage", "bytes", "storage", "time"]


def current_allocations() -> pd.DataFrame:
    """Live buffers, one row each: buffer_id, device, buffer_type, kind, usage, bytes, storage, time."""
    last = allocation_history().drop_duplicates("buffer_id", keep="last")  # a KV migration: free, alloc
    return last.loc[last["event"] == "alloc", _COLUMNS].reset_index(drop=True)


def allocation_history() -> pd.DataFrame:
    """Every allocation and release in order, with the running live bytes per device (``live_bytes``)."""
    import pandas as pd

    columns = [f.name for f in dataclasses.fields(AllocationEvent)]
    frame = pd.DataFrame(map(dataclasses.asdict, HISTORY), columns=columns)
    signed = frame["bytes"].astype("int64").where(frame["event"] == "alloc", -frame["bytes"])
    frame["live_bytes"] = signed.groupby(frame["device"]).cumsum()
    return frame
