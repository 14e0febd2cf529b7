"""Every ggml type fact in one table: name, enum id, block geometry, numpy and OpenVINO types.

Names are ggml's spelling (``"q4_K"``), looked up case-insensitively. bf16 computes as float32
holding bf16-rounded values and is stored as uint16 bit patterns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ovkit.errors import OvkitError


@dataclass(frozen=True, slots=True)
class GgmlType:
    """One ggml tensor type."""

    name: str  #: ggml's name (``ggml_type_name``)
    id: int  #: the ``GGML_TYPE_*`` enum value (= ``gguf.GGMLQuantizationType``)
    block: int  #: elements per block (1 for plain types)
    size: int  #: bytes per block (``ggml_type_size``)
    numpy: np.dtype[Any] | None = None  #: dtype values are computed in (None: quantized)
    storage: np.dtype[Any] | None = None  #: dtype raw bytes are read as (None: quantized)
    openvino: str | None = None  #: ``openvino.Type`` attribute name of a node of this type

    @property
    def enum_name(self) -> str:
        """``GGML_TYPE_Q4_K``: the C enum member."""
        return "GGML_TYPE_" + self.name.upper()

    @property
    def is_quantized(self) -> bool:
        """``ggml_is_quantized``: block-quantized (every type but the plain float/int ones)."""
        return self.numpy is None


def _plain(name: str, tid: int, dtype: Any) -> GgmlType:
    """A plain type: one element per block, computed and stored as numpy ``dtype``."""
    d = np.dtype(dtype)
    return GgmlType(name, tid, 1, d.itemsize, d, d, name)


#: Every ggml type ovkit knows, in enum order.
TYPES: tuple[GgmlType, ...] = (
    _plain("f32", 0, np.float32),
    _plain("f16", 1, np.float16),
    GgmlType("q4_0", 2, 32, 18),
    GgmlType("q4_1", 3, 32, 20),
    GgmlType("q5_0", 6, 32, 22),
    GgmlType("q5_1", 7, 32, 24),
    GgmlType("q8_0", 8, 32, 34),
    GgmlType("q8_1", 9, 32, 36),
    GgmlType("q2_K", 10, 256, 84),
    GgmlType("q3_K", 11, 256, 110),
    GgmlType("q4_K", 12, 256, 144),
    GgmlType("q5_K", 13, 256, 176),
    GgmlType("q6_K", 14, 256, 210),
    GgmlType("q8_K", 15, 256, 292),
    GgmlType("iq2_xxs", 16, 256, 66),
    GgmlType("iq2_xs", 17, 256, 74),
    GgmlType("iq3_xxs", 18, 256, 98),
    GgmlType("iq1_s", 19, 256, 50),
    GgmlType("iq4_nl", 20, 32, 18),
    GgmlType("iq3_s", 21, 256, 110),
    GgmlType("iq2_s", 22, 256, 82),
    GgmlType("iq4_xs", 23, 256, 136),
    _plain("i8", 24, np.int8),
    _plain("i16", 25, np.int16),
    _plain("i32", 26, np.int32),
    _plain("i64", 27, np.int64),
    _plain("f64", 28, np.float64),
    GgmlType("iq1_m", 29, 256, 56),
    # bf16 has no numpy type: computed as float32 holding bf16-rounded values, stored as uint16 bits.
    GgmlType("bf16", 30, 1, 2, np.dtype(np.float32), np.dtype(np.uint16), "bf16"),
    GgmlType("tq1_0", 34, 256, 54),
    GgmlType("tq2_0", 35, 256, 66),
    GgmlType("mxfp4", 39, 32, 17),
    GgmlType("nvfp4", 40, 64, 36),
    GgmlType("q1_0", 41, 128, 18),
)
_BY_NAME: dict[str, GgmlType] = {t.name.lower(): t for t in TYPES}
_BY_ID: dict[int, GgmlType] = {t.id: t for t in TYPES}

#: The quantized types ggml-openvino extracts (and ``ovkit.quant`` decodes), in its order.
QUANT_TYPES: tuple[str, ...] = ("q4_0", "q4_1", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K", "mxfp4")
#: The quantized types a CPY / SET_ROWS may write (``ovkit.quant`` reproduces ggml's from_float).
WRITABLE_QUANT_TYPES: tuple[str, ...] = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0")

#: The plain types a graph's tensors take (inputs, constants, results).
FLOAT_TYPES: tuple[str, ...] = ("f32", "f16", "bf16")
INT_TYPES: tuple[str, ...] = ("i32", "i64")
DTYPES: tuple[str, ...] = FLOAT_TYPES + INT_TYPES
#: Every non-quantized ggml type (``ggml_is_quantized`` is False for these).
PLAIN_TYPES: frozenset[str] = frozenset(t.name for t in TYPES if not t.is_quantized)
#: Bytes per element of the graph's plain types.
TYPE_SIZE: dict[str, int] = {n: _BY_NAME[n].size for n in DTYPES}
#: numpy dtype each graph type is computed in.
NUMPY_DTYPE: dict[str, np.dtype[Any]] = {n: _BY_NAME[n].numpy for n in DTYPES}  # type: ignore[misc]
#: numpy dtype of the raw storage of every plain type (bf16: uint16 bit patterns).
STORAGE_DTYPE: dict[str, np.dtype[Any]] = {t.name: t.storage for t in TYPES if t.storage is not None}
#: The ggml type of a plain numpy array's storage (no narrowing: float64 has no graph type).
STORAGE_TYPE_OF_NUMPY: dict[np.dtype[Any], str] = {
    STORAGE_DTYPE[n]: n for n in ("f32", "f16", "i32", "i64", "i16", "i8")
}
#: The graph type a numpy array becomes (float64 is narrowed to f32, as ``ggml.utils.from_numpy``).
TYPE_OF_NUMPY: dict[np.dtype[Any], str] = {
    **{d: n for d, n in STORAGE_TYPE_OF_NUMPY.items() if n in DTYPES},
    np.dtype(np.float64): "f32",
}

#: OpenVINO element type names (``Type.to_string()``) -> numpy dtype used to bind them; bf16 is
#: fed from float32 arrays (rounded to nearest even) and read back as float32.
OPENVINO_NUMPY: dict[str, np.dtype[Any]] = {
    "f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "f64": np.dtype(np.float64),
    "i64": np.dtype(np.int64), "i32": np.dtype(np.int32), "i16": np.dtype(np.int16), "i8": np.dtype(np.int8),
    "u64": np.dtype(np.uint64), "u32": np.dtype(np.uint32), "u16": np.dtype(np.uint16), "u8": np.dtype(np.uint8),
    "boolean": np.dtype(np.bool_), "bf16": np.dtype(np.float32),
}  # fmt: skip
#: Short names of OpenVINO precision types as properties report them (``str(Type)`` spells
#: ``float32``); ACCURACY mode reports an undefined hint: every op runs in the model's precision.
OPENVINO_SHORT: dict[str, str] = {
    "float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "f32": "f32", "f16": "f16",
    "bf16": "bf16", "dynamic": "model", "undefined": "model",
}  # fmt: skip


class UnknownTypeError(OvkitError, ValueError):
    """A type name or id that is no ggml type ovkit knows."""


def norm_type(dtype: str) -> str:
    """Canonical (lower-case) spelling for comparisons: ``"Q4_K"``/``"q4_K"`` -> ``"q4_k"``."""
    return str(dtype).lower()


def find_type(dtype: str) -> GgmlType | None:
    """The type named ``dtype`` (case-insensitive), None when unknown."""
    return _BY_NAME.get(str(dtype).lower())


def ggml_type(dtype: str) -> GgmlType:
    """The type named ``dtype`` (case-insensitive); UnknownTypeError naming the known ones."""
    t = find_type(dtype)
    if t is None:
        raise UnknownTypeError(f"unknown ggml type {dtype!r}; expected one of {type_names()}")
    return t


def type_by_id(tid: int) -> GgmlType:
    """The type with ``GGML_TYPE_*`` value ``tid``."""
    t = _BY_ID.get(int(tid))
    if t is None:
        raise UnknownTypeError(f"unknown ggml type id {tid}; expected one of {sorted(_BY_ID)}")
    return t


def type_names(types: Iterable[GgmlType] = TYPES) -> list[str]:
    """ggml names of ``types``."""
    return [t.name for t in types]


def is_quantized(dtype: str) -> bool:
    """``ggml_is_quantized``: every type except the plain float/int ones (unknown names too)."""
    return norm_type(dtype) not in PLAIN_TYPES


def layout(dtype: str) -> tuple[int, int]:
    """(elements per block, bytes per block) of ``dtype``; (1, 1) for an unknown name."""
    t = find_type(dtype)
    return (t.block, t.size) if t is not None else (1, 1)


def align_up(n: int, alignment: int) -> int:
    """``n`` rounded up to a multiple of ``alignment`` (ggml's ``GGML_PAD``): buffer offsets, the
    GGUF data section."""
    return (n + alignment - 1) // alignment * alignment


def contiguous_nb(dtype: str, ne: Iterable[int]) -> tuple[int, int, int, int]:
    """ggml's byte strides of a contiguous tensor of ``dtype`` and ``ne`` (ggml order)."""
    blck, tsize = layout(dtype)
    n = list(ne)
    nb1 = tsize * (n[0] // blck)
    nb2 = nb1 * n[1]
    return (tsize, nb1, nb2, nb2 * n[2])


def f32_to_bf16_bits(x: Any) -> np.ndarray:
    """ggml_compute_fp32_to_bf16: the uint16 bf16 bit patterns of float32 ``x``, rounded to nearest
    even (±inf beyond bf16's range); a NaN keeps its top bits with the quiet bit forced."""
    f = np.asarray(x, dtype=np.float32)
    u = np.ascontiguousarray(f).reshape(-1).view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    # in uint64: a negative NaN's pattern plus the rounding bias would wrap around in uint32
    rounded = (u.astype(np.uint64) + 0x7FFF + ((u >> 16) & 1)) >> 16
    bits = np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)
    return bits.reshape(f.shape)


def bf16_bits_to_f32(bits: Any) -> np.ndarray:
    """ggml_compute_bf16_to_fp32: bf16 bit patterns (uint16) widened exactly to float32."""
    b = np.asarray(bits, dtype=np.uint16)
    return (np.ascontiguousarray(b).reshape(-1).astype(np.uint32) << 16).view(np.float32).reshape(b.shape)


def bf16_round(x: Any) -> np.ndarray:
    """float32 ``x`` stored as ggml stores bf16 and read back: float32 holding bf16 values."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))
