"""ggml-python (optional, loaded on first use) and ggml's types: enums, sizes, bf16 and quantized
blocks as ggml stores them (``ggml_quantize_chunk`` / ``to_float``)."""

from __future__ import annotations

import ctypes
import functools
import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np

from ovkit.child import NO_BACKTRACE_ENV
from ovkit.dtypes import QUANT_TYPES, STORAGE_DTYPE, find_type, type_names
from ovkit.errors import OvkitError


class GgmlUnavailableError(OvkitError, ImportError):
    """ggml-python is not installed; install ``ggml-python`` (the ``test`` extra)."""


@functools.cache
def load_ggml() -> ModuleType | None:
    """ggml-python, imported on first use (scripts/install-upstream builds it), else None."""
    importlib.import_module("openvino")  # ggml-python's OpenVINO backend links libopenvino
    try:
        ggml = importlib.import_module("ggml")
    except ImportError:  # pragma: no cover - exercised only without ggml-python
        return None
    # ggml's backtrace child of a failed assert can deadlock (ovkit.child.NO_BACKTRACE_ENV)
    os.environ.setdefault(NO_BACKTRACE_ENV, "1")
    return ggml


def ggml_available() -> bool:
    """True when ggml-python (real ggml CPU build) can be imported (loads it on the first call)."""
    return load_ggml() is not None


def ggml_module() -> ModuleType:
    """ggml-python's module (loaded on first use); :class:`GgmlUnavailableError` without it."""
    ggml = load_ggml()
    if ggml is None:
        raise GgmlUnavailableError("ovkit.oracle needs ggml-python: pip install ggml-python")
    return ggml


def type_id(dtype: str) -> int:
    """ggml's enum value for an ovkit dtype / quant type name (case-insensitive, e.g. ``q4_K``)."""
    t = find_type(dtype)
    name = "GGML_TYPE_" + dtype.upper() if t is None else t.enum_name  # any other type ggml knows too
    if not hasattr(ggml_module(), name):
        raise ValueError(f"unknown ggml type {dtype!r}; expected one of {type_names()}")
    return int(getattr(ggml_module(), name))


def type_name(tid: int) -> str:
    """ggml's name of type enum ``tid`` (``q4_K``, ``bf16``)."""
    name = ggml_module().ggml_type_name(tid)
    return name.decode() if isinstance(name, bytes) else str(name)


def block_size(dtype: str) -> int:
    """Elements per ggml block (1 for plain types, 32 for q4_0, 256 for K-quants)."""
    return int(ggml_module().ggml_blck_size(type_id(dtype)))


def type_size(dtype: str) -> int:
    """Bytes per ggml block of ``dtype``."""
    return int(ggml_module().ggml_type_size(type_id(dtype)))


@dataclass(frozen=True, slots=True)
class Typed:
    """A numpy array to be stored in ggml as ``dtype`` (e.g. f32 values stored as bf16)."""

    array: np.ndarray
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in STORAGE_DTYPE:
            raise ValueError(
                f"Typed: dtype {self.dtype!r} is not a plain type; expected one of {sorted(STORAGE_DTYPE)}"
            )


def as_bf16(x: np.ndarray) -> Typed:
    """Mark an f32 array to be stored as bf16 in ggml."""
    return Typed(np.asarray(x, dtype=np.float32), "bf16")


@dataclass(frozen=True, slots=True)
class QuantArray:
    """Raw ggml blocks of a quantized tensor; ``shape`` in numpy order (last axis = ne0 = rows)."""

    qtype: str
    shape: tuple[int, ...]
    data: bytes = field(repr=False)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def dequantize(self) -> np.ndarray:
        """The f32 values ggml decodes from these blocks."""
        return dequantize(self.qtype, self.data, self.shape)


def quantize_blocks(qtype: str, array: np.ndarray) -> bytes:
    """Quantize ``array`` (rows along the last axis) into raw ggml blocks with ggml_quantize_chunk."""
    g = ggml_module()
    tid = type_id(qtype)
    if not g.ggml_is_quantized(tid):
        raise ValueError(f"quantize_blocks: {qtype!r} is not a quantized type; expected one of {QUANT_TYPES}")
    x = np.ascontiguousarray(array, dtype=np.float32)
    if x.ndim == 0:
        raise ValueError("quantize_blocks: expected an array with at least one axis, got a scalar")
    n_per_row = int(x.shape[-1])
    blck = int(g.ggml_blck_size(tid))
    if n_per_row % blck != 0:
        raise ValueError(
            f"quantize_blocks: row length {n_per_row} (last axis of shape {x.shape}) is not a multiple "
            f"of the {qtype} block size {blck}"
        )
    nrows = int(x.size // n_per_row) if n_per_row else 0
    row_bytes = int(g.ggml_row_size(tid, n_per_row))
    out = (ctypes.c_uint8 * max(1, row_bytes * nrows))()
    src = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    # the IQ1/IQ2 types cannot quantize without an importance matrix: test-backend-ops' dummy one
    ones = np.ones(n_per_row, np.float32)
    im = (
        ones.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) if g.ggml_quantize_requires_imatrix(tid) else None
    )
    written = g.ggml_quantize_chunk(tid, src, ctypes.cast(out, ctypes.c_void_p), 0, nrows, n_per_row, im)
    if written != row_bytes * nrows:
        raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes, expected {row_bytes * nrows}")
    return bytes(out)[: row_bytes * nrows]


def quantize(qtype: str, array: np.ndarray) -> QuantArray:
    """Quantize an f32 array into a :class:`QuantArray` (usable as a ggml input)."""
    x = np.asarray(array, dtype=np.float32)
    return QuantArray(qtype, tuple(int(s) for s in x.shape), quantize_blocks(qtype, x))


def dequantize(qtype: str, data: bytes, shape: Sequence[int]) -> np.ndarray:
    """Decode raw ggml blocks into f32 with ggml's own ``to_float`` (numpy order ``shape``)."""
    g = ggml_module()
    tid = type_id(qtype)
    n = int(np.prod(shape)) if len(shape) else 1
    n_per_row = int(shape[-1]) if len(shape) else 1
    blck = int(g.ggml_blck_size(tid))
    expected = int(g.ggml_row_size(tid, n_per_row)) * (n // max(1, n_per_row))
    if n_per_row % blck != 0 or len(data) != expected:
        raise ValueError(
            f"dequantize: {len(data)} bytes do not hold a {qtype} tensor of shape {tuple(shape)} "
            f"(expected {expected} bytes, rows a multiple of {blck})"
        )
    out = np.empty(n, dtype=np.float32)
    buf = (ctypes.c_uint8 * max(1, len(data))).from_buffer_copy(data if data else b"\0")
    to_float = g.ggml_get_type_traits(tid).contents.to_float
    to_float(ctypes.cast(buf, ctypes.c_void_p), out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), n)
    return out.reshape(tuple(shape))
