"""Quantized ggml weights as OpenVINO constants: block decoding, decompression forms, requant policy.

A :class:`QuantizedWeight` wraps the raw ggml blocks of a weight.  Upstream's types (Q4_0, Q4_1,
Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4) are decoded once into integer weights ``q``, per-group scales
and (for the asymmetric types) per-group biases, so that ``w = scale * q + bias`` reproduces
ggml's ``to_float`` exactly (upstream's extraction yields the same integers and scales).  The
types upstream refuses (:data:`HOST_TYPES`: Q5_0, Q2_K, Q3_K, the IQ and TQ types, NVFP4, Q1_0)
are decoded on the host to ggml's f32 values and become a plain f32 constant (f16 where every
value is exact in f16).

Decompression forms (docs/quant.md has the measurements):

- ``"upstream"``: upstream's subgraph — ``Constant(int) → Convert(f16) → [Subtract(zp)] →
  Multiply(f16 scale) → Reshape → Convert(f32)`` with a *rounded* integer zero point for the
  asymmetric types (u4/u8), f8e8m0 scales for MXFP4.  ``"upstream_bias"``: the same with
  upstream's exact f16 zero point (its test-graph path).
- ``"fast"`` (default): a form the OpenVINO CPU plugin keeps compressed in a ``FullyConnected``
  *and* that is exact.  Every type becomes a *symmetric* signed container (i4 for 4-bit, i8 for
  5/6/8-bit and MXFP4's exact integers) with ``Convert → Multiply``; the asymmetric types store
  ``q - 8`` / ``q - 16`` and their bias moves out of the weight:
  ``x @ (s*q + b)^T = x @ (s*(q-o))^T + groupsum(x) @ (b + s*o)^T`` — a second MatMul over k/32
  columns.  Hostile blocks (docs/quant.md): a weight with NaN/inf values is the f32 constant of
  ggml's values, and MXFP4's subnormal scales (exponent bytes 0, 1) go in a second i8 weight whose
  product is scaled down at run time.

``mul_mat`` uses :meth:`QuantizedWeight.ov_mul_mat`; ``get_rows`` and everything else use
:meth:`QuantizedWeight.to_ov_node` (f32 ``[rows, k]``).  Upstream's requantization policy is the
table :data:`REQUANT_RULES`, queried by :func:`requant_type`.  Writing a quantized tensor (CPY,
SET_ROWS) reads back ggml's ``to_float(from_float(x))``: :func:`round_trip` (numpy) and
:func:`ov_round_trip` (OpenVINO) for the types of :data:`ROUND_TRIPS`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ovkit.config import FROM_ENV, FromEnv, requant_kquant_env
from ovkit.dtypes import QUANT_TYPES, WRITABLE_QUANT_TYPES, ggml_type
from ovkit.errors import OvkitError

if TYPE_CHECKING:
    import pandas as pd

QK_K = 256
Form = Literal["fast", "upstream", "upstream_bias"]
FORMS: tuple[str, ...] = ("fast", "upstream", "upstream_bias")


class QuantError(OvkitError, ValueError):
    """Raw blocks that do not hold the declared quantized tensor, or an unknown type/form."""


class RequantTarget(enum.StrEnum):
    """What a weight becomes on a device (NATIVE = extracted as its own type; UNSUPPORTED = the
    device refuses the type, as upstream's type gate does for the host-decoded types)."""

    NATIVE = "native"
    UNSUPPORTED = "not supported"
    Q8_0_C = "q8_0_c"  # per-row symmetric i8 (G = ne0)
    Q4_0_128 = "q4_0_128"  # symmetric i4, G = 128
    Q4_0_64 = "q4_0_64"  # symmetric i4, G = 64 (REQUANT_KQUANT's MoE experts; GPU's Q5_1/Q8_0 experts)
    Q4_1_64 = "q4_1_64"  # u4 with a u4 zero point per group, G = 64 (REQUANT_KQUANT=q4_asym64_all)
    F16 = "f16"


#: OpenVINO element type of a requantized weight's Constant.
REQUANT_CONTAINER: dict[RequantTarget, str] = {
    RequantTarget.Q8_0_C: "i8",
    RequantTarget.Q4_0_128: "i4",
    RequantTarget.Q4_0_64: "i4",
    RequantTarget.Q4_1_64: "u4",
    RequantTarget.F16: "f16",
}


@dataclass(frozen=True, slots=True)
class QuantSpec:
    """One ggml quantized type: block geometry and how upstream extracts it."""

    name: str  # ggml's lower-case type name ("q4_0", "q4_K", ...)
    ggml_type: int  # GGML_TYPE_* value (= gguf.GGMLQuantizationType)
    block: int  # elements per block
    type_size: int  # bytes per block
    group: int  # elements sharing one scale after extraction
    bits: int  # bits per extracted integer weight
    symmetric: bool  # True: no zero point / bias
    upstream_weights: str  # OpenVINO element type upstream extracts to ("": upstream refuses the type)

    @property
    def host_decoded(self) -> bool:
        """A type upstream refuses: ovkit decodes it on the host into a plain f32/f16 constant."""
        return not self.upstream_weights

    @property
    def container_bits(self) -> int:
        """Bits per weight once extracted: 4-bit types stay 4-bit, 5/6/8-bit ones take a byte."""
        return 4 if self.bits == 4 else 8


def _spec(name: str, group: int, bits: int, symmetric: bool, upstream_weights: str) -> QuantSpec:
    """A spec whose enum id and block geometry come from ``ovkit.dtypes``."""
    t = ggml_type(name)
    return QuantSpec(t.name, t.id, t.block, t.size, group, bits, symmetric, upstream_weights)


#: The quantized types upstream extracts, in upstream's order.
QUANT_SPECS: dict[str, QuantSpec] = {
    s.name: s
    for s in (
        _spec("q4_0", 32, 4, True, "i4"),
        _spec("q4_1", 32, 4, False, "u4"),
        _spec("q5_1", 32, 5, False, "u8"),
        _spec("q8_0", 32, 8, True, "i8"),
        _spec("q4_K", 32, 4, False, "u4"),
        _spec("q5_K", 32, 5, False, "u8"),
        _spec("q6_K", 16, 6, True, "i8"),
        _spec("mxfp4", 32, 4, True, "f4e2m1"),
    )
}
assert tuple(QUANT_SPECS) == QUANT_TYPES, "ovkit.dtypes.QUANT_TYPES lists the types specified here"

#: The quantized types upstream refuses (not in supports_op's type gate) that ovkit still runs:
#: decoded on the host, bit for bit as ggml's ``to_float``, into a plain f32 (or exact f16)
#: constant.  Group and bits are the block's (no integer extraction happens).
HOST_SPECS: dict[str, QuantSpec] = {
    s.name: s
    for s in (
        _spec(name, ggml_type(name).block, bits, True, "")
        for name, bits in (
            ("q5_0", 5),
            ("q2_K", 2),
            ("q3_K", 3),
            ("iq2_xxs", 2),
            ("iq2_xs", 2),
            ("iq3_xxs", 3),
            ("iq1_s", 1),
            ("iq4_nl", 4),
            ("iq3_s", 3),
            ("iq2_s", 2),
            ("iq4_xs", 4),
            ("iq1_m", 1),
            ("tq1_0", 2),
            ("tq2_0", 2),
            ("nvfp4", 4),
            ("q1_0", 1),
        )
    )
}
HOST_TYPES: tuple[str, ...] = tuple(HOST_SPECS)
#: Every quantized type ovkit decodes: upstream's extracted types, then the host-decoded ones.
KNOWN_TYPES: tuple[str, ...] = QUANT_TYPES + HOST_TYPES
_ALL_SPECS = {**QUANT_SPECS, **HOST_SPECS}
_BY_LOWER = {k.lower(): k for k in _ALL_SPECS}


def quant_spec(qtype: str) -> QuantSpec:
    """The spec of ``qtype`` (case-insensitive: ``Q4_K``, ``q4_k`` and ``q4_K`` all work)."""
    key = _BY_LOWER.get(str(qtype).lower())
    if key is None:
        raise QuantError(f"unknown quantized type {qtype!r}; expected one of {', '.join(KNOWN_TYPES)}")
    return _ALL_SPECS[key]


def _n_rows(shape: Sequence[int]) -> int:
    """Rows of a numpy ``shape`` (every axis but the last; 1 for a single row)."""
    return math.prod(int(d) for d in shape[:-1])


def checked_shape(spec: QuantSpec, shape: object, what: str = "tensor") -> tuple[int, ...]:
    """``shape`` as a tuple of positive ints with rows a whole number of blocks, else QuantError.

    Floats, bools, negative or zero sizes and an empty shape are refused by name: a quantized
    tensor holds at least one block per row.
    """
    label = f"{spec.name} {what}"
    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence | np.ndarray):
        raise QuantError(f"{label}: shape must be a sequence of positive integers, got {shape!r}")
    dims = tuple(shape)
    if not dims:
        raise QuantError(f"{label}: shape () has no row length; expected at least one dimension")
    for i, d in enumerate(dims):
        if isinstance(d, bool) or not isinstance(d, int | np.integer):
            raise QuantError(f"{label}: dimension {i} of shape {dims} is {d!r}, expected an integer")
        if d <= 0:
            raise QuantError(f"{label}: dimension {i} of shape {dims} is {d}, expected a positive size")
    out = tuple(int(d) for d in dims)
    if out[-1] % spec.block:
        raise QuantError(
            f"{label}: row length {out[-1]} (last dimension of {out}) is not a multiple of "
            f"the block size {spec.block}"
        )
    return out


def row_bytes(qtype: str, k: int) -> int:
    """Bytes of one row of ``k`` elements (``k`` must be a multiple of the block size)."""
    spec = quant_spec(qtype)
    if k % spec.block:
        raise QuantError(f"{spec.name}: row length {k} is not a multiple of the block size {spec.block}")
    return k // spec.block * spec.type_size


# ------------------------------------------------------------------------------------------------
# Block decoding: raw bytes -> integer weights, scales, biases (w = scale * q + bias)
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decoded:
    """Decoded blocks of ``rows`` rows: ``q`` [rows, k] ints, ``scale``/``bias`` [rows, k/group] f32
    (host-decoded types: ``q`` holds ggml's f32 values, one unit scale per row, group = k)."""

    q: np.ndarray
    scale: np.ndarray
    bias: np.ndarray | None
    group: int
    codes: np.ndarray | None = None  # MXFP4: raw e2m1 nibble codes [rows, k] (u8)
    exponent: np.ndarray | None = None  # MXFP4: raw e8m0 bytes [rows, k/32] (u8)

    def dequantize(self) -> np.ndarray:
        rows, k = self.q.shape
        g = k // self.group
        with np.errstate(over="ignore", invalid="ignore"):  # non-finite scales decode as ggml's do
            w = self.q.reshape(rows, g, self.group).astype(np.float32) * self.scale[:, :, None]
            if self.bias is not None:
                w = w + self.bias[:, :, None]
        return w.reshape(rows, k)


def _f16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


def _nibbles32(qs: np.ndarray) -> np.ndarray:
    """16 bytes → 32 values: low nibbles are elements 0..15, high nibbles 16..31 (ggml order)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _dec_q4_0(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    d = _f16(b[:, 0:2])
    q = _nibbles32(b[:, 2:18]).astype(np.int8) - 8
    return q, d, None


def _dec_q4_1(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    return _nibbles32(b[:, 4:20]), _f16(b[:, 0:2]), _f16(b[:, 2:4])


def _dec_q5_1(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    qh = np.ascontiguousarray(b[:, 4:8]).view(np.uint32)  # [n, 1]
    hi = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
    q = _nibbles32(b[:, 8:24]) | (hi << 4)
    return q, _f16(b[:, 0:2]), _f16(b[:, 2:4])


def _dec_q8_0(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    return np.ascontiguousarray(b[:, 2:34]).view(np.int8), _f16(b[:, 0:2]), None


def _scale_min_k4(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's get_scale_min_k4 for all 8 sub-blocks: 6-bit scales and mins from 12 bytes."""
    sc = np.empty((s.shape[0], 8), np.uint8)
    mn = np.empty((s.shape[0], 8), np.uint8)
    sc[:, :4] = s[:, 0:4] & 63
    mn[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, mn


def _k_scales(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = _f16(b[:, 0:2])
    dmin = _f16(b[:, 2:4])
    sc, mn = _scale_min_k4(b[:, 4:16])
    return d * sc.astype(np.float32), -(dmin * mn.astype(np.float32))


def _dec_q4_k(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    scale, bias = _k_scales(b)
    qs = b[:, 16:144].reshape(-1, 4, 32)  # 4 chunks of 64 values: low nibbles then high nibbles
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, QK_K)
    return q, scale, bias


def _dec_q5_k(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    scale, bias = _k_scales(b)
    qh = b[:, 16:48]  # 32 bytes; bit j of qh[l] is the 5th bit of sub-block j element l
    qs = b[:, 48:176].reshape(-1, 4, 32)
    lo = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 8, 32)
    hi = (qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1
    return (lo | (hi << 4)).reshape(-1, QK_K), scale, bias


def _dec_q6_k(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    ql_s = b[:, 0:128].reshape(-1, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    ql = (ql_s & 0x0F).reshape(-1, 2, 4, 32)
    qh_s = b[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    qh = (qh_s & 0x03).reshape(-1, 2, 4, 32)
    q = ((ql | (qh << 4)).astype(np.int8) - 32).reshape(-1, QK_K)
    sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(np.float32)
    return q, _f16(b[:, 208:210]) * sc, None


_MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)


def _e8m0_half(e: np.ndarray) -> np.ndarray:
    """ggml's GGML_E8M0_TO_FP32_HALF: 2**(e-128) as f32 (e < 2 gives denormals, as in ggml)."""
    return np.ldexp(np.float32(1.0), e.astype(np.int32) - 128).astype(np.float32)


def _dec_mxfp4(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    codes = _nibbles32(b[:, 1:17])
    return _MXFP4_VALUES[codes], _e8m0_half(b[:, 0]), None


def _dec_q1_0(b: np.ndarray) -> np.ndarray:
    """ggml's dequantize_row_q1_0: one f16 scale d, 128 sign bits (LSB first): bit 1 → +d, 0 → −d."""
    d = _f16(b[:, 0:2])
    bits = (b[:, 2:18, None] >> np.arange(8, dtype=np.uint8)) & 1  # [n, 16, 8]: element 8*i + j
    return np.where(bits.reshape(-1, 128) != 0, d, -d)


def _dec_host(spec: QuantSpec, blocks: np.ndarray) -> np.ndarray:
    """ggml's ``to_float`` of ``blocks`` [n, type_size] as f32 [n, block] (gguf's numpy decoders,
    which equal ggml's bit for bit; q1_0 is not in gguf and is decoded here)."""
    if spec.name == "q1_0":
        return _dec_q1_0(blocks)
    import gguf.quants as gq

    # one row of all the blocks: gguf loops in Python over groups of 16 rows (one a block here)
    with np.errstate(all="ignore"):  # random blocks hold NaN/inf scales: decoded as ggml does
        out = gq.dequantize(blocks.reshape(1, -1), gq.GGMLQuantizationType(spec.ggml_type))
    return np.asarray(out, np.float32).reshape(-1, spec.block)


_DECODERS: dict[str, Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray | None]]] = {
    "q4_0": _dec_q4_0,
    "q4_1": _dec_q4_1,
    "q5_1": _dec_q5_1,
    "q8_0": _dec_q8_0,
    "q4_K": _dec_q4_k,
    "q5_K": _dec_q5_k,
    "q6_K": _dec_q6_k,
    "mxfp4": _dec_mxfp4,
}


def decode_blocks(qtype: str, raw: bytes | np.ndarray | memoryview, shape: Sequence[int]) -> Decoded:
    """Decode raw ggml blocks of a tensor with numpy ``shape`` (rows along the last axis)."""
    spec = quant_spec(qtype)
    shape = checked_shape(spec, shape)
    k = shape[-1]
    rows = _n_rows(shape)
    need = rows * row_bytes(spec.name, k)
    buf = (
        np.frombuffer(raw, dtype=np.uint8)
        if not isinstance(raw, np.ndarray)
        else raw.view(np.uint8).reshape(-1)
    )
    if buf.size != need:
        raise QuantError(f"{spec.name} tensor of shape {shape} needs {need} bytes of blocks, got {buf.size}")
    blocks = buf.reshape(-1, spec.type_size)
    if spec.host_decoded:
        # the values themselves, with one unit scale per row (w = 1 * q is exact, NaN included)
        values = _dec_host(spec, blocks).reshape(rows, k)
        return Decoded(values, np.ones((rows, 1), np.float32), None, k)
    q, scale, bias = _DECODERS[spec.name](blocks)
    nb = k // spec.block
    per_block = spec.block // spec.group
    q = np.ascontiguousarray(q).reshape(rows, k)
    scale = np.ascontiguousarray(scale, dtype=np.float32).reshape(rows, nb * per_block)
    bias_r = (
        None if bias is None else np.ascontiguousarray(bias, dtype=np.float32).reshape(rows, nb * per_block)
    )
    codes = exponent = None
    if spec.name == "mxfp4":
        codes = _nibbles32(blocks[:, 1:17]).reshape(rows, k)
        exponent = blocks[:, 0].reshape(rows, nb).copy()
    return Decoded(q, scale, bias_r, spec.group, codes, exponent)


# ------------------------------------------------------------------------------------------------
# OpenVINO constants
# ------------------------------------------------------------------------------------------------


def _ov() -> Any:
    import openvino as ov

    return ov


def _ops() -> Any:
    import openvino.opset13 as ops

    return ops


def packed_constant(values: np.ndarray, element_type: str) -> Any:
    """A Constant of a sub-byte/byte integer type from integer ``values`` (packed low nibble first)."""
    ov = _ov()
    et = getattr(ov.Type, element_type)
    tensor = ov.Tensor(et, ov.Shape(list(values.shape)))
    dst = np.asarray(tensor.data).view(np.uint8).reshape(-1)
    if element_type in ("u4", "i4", "f4e2m1"):
        v = (values.astype(np.int16) & 0x0F).astype(np.uint8).reshape(-1)
        if v.size % 2:
            v = np.concatenate([v, np.zeros(1, np.uint8)])
        dst[:] = v[0::2] | (v[1::2] << 4)
    else:
        small = values.astype(np.int8) if element_type == "i8" else values.astype(np.uint8)
        dst[:] = small.view(np.uint8).reshape(-1)
    return ov.op.Constant(tensor)


def _scale_type(scale: np.ndarray, *, exact: bool) -> type[np.floating[Any]]:
    """f16 when every scale survives the cast (``exact``: bit for bit, and normal in f16; else
    finite and non-zero staying non-zero), otherwise f32 — NaN, inf, values beyond f16's range or
    below its smallest subnormal (MXFP4's 2**-30) all stay f32, and so do f16 subnormals (a ``d``
    of 0x0001), so no kernel reads an f16-subnormal scale (in f32 they are normal)."""
    with np.errstate(over="ignore", invalid="ignore"):
        s16 = scale.astype(np.float16)
    if not np.isfinite(s16).all():
        return np.float32
    if exact:
        f16_subnormal = (s16 != 0) & (np.abs(s16) < np.finfo(np.float16).smallest_normal)
        same = np.array_equal(s16.astype(np.float32), scale) and not f16_subnormal.any()
        return np.float16 if same else np.float32
    return np.float32 if np.any((s16 == 0) & (scale != 0)) else np.float16


def _decompress(weight: Any, scale: np.ndarray, *, exact: bool = True) -> Any:
    """``Convert(weight) → Multiply(scale)`` in f16 or f32 (one type for both inputs, as
    OpenVINO requires), chosen by :func:`_scale_type`."""
    ops = _ops()
    dt = _scale_type(scale, exact=exact)
    return ops.multiply(
        ops.convert(weight, "f16" if dt is np.float16 else "f32"), ops.constant(scale.astype(dt))
    )


#: MXFP4 exponent bytes 0 and 1 scale by 2**-128 and 2**-127, f32 subnormals, which OpenVINO's CPU
#: plugin flushes to zero in every constant it loads.  The fast form holds such "tiny" groups in a
#: second weight with the scale raised by 2**TINY_SHIFT (2**-8, 2**-7: normal even in f16) and lowers
#: that weight's product by 2**-TINY_SHIFT (normal too) at run time, where subnormals survive.
TINY_SHIFT = 120


def _to_f32(node: Any) -> Any:
    ops = _ops()
    return node if node.get_element_type() == _ov().Type.f32 else ops.convert(node, "f32")


@dataclass(frozen=True)
class QuantizedWeight:
    """A ggml-quantized weight (raw blocks + decoded view) usable as a graph constant.

    ``shape`` is numpy order (``(rows, k)`` or ``(experts, rows, k)``); ``dtype`` ggml's type name.
    """

    qtype: str
    shape: tuple[int, ...]
    raw: bytes = field(repr=False)
    name: str = ""
    form: Form = "fast"
    requant: RequantTarget = RequantTarget.NATIVE

    def __post_init__(self) -> None:
        spec = quant_spec(self.qtype)
        object.__setattr__(self, "qtype", spec.name)
        object.__setattr__(self, "requant", RequantTarget(self.requant))
        what = f"weight {self.name!r}" if self.name else "weight"
        object.__setattr__(self, "shape", checked_shape(spec, self.shape, what))
        if self.form not in FORMS:
            raise QuantError(f"unknown decompression form {self.form!r}; expected one of {FORMS}")
        if spec.host_decoded and self.form != "fast":
            raise QuantError(
                f"{spec.name} {what}: form {self.form!r} does not exist (upstream refuses {spec.name} "
                "weights); expected 'fast' (the host-decoded constant)"
            )
        refused = requant_refusal(self.requant, spec.name, self.shape, what)
        if refused:
            raise QuantError(refused)
        need = self.rows * row_bytes(spec.name, self.shape[-1])
        if len(self.raw) != need:
            raise QuantError(
                f"{spec.name} {what} of shape {self.shape} needs {need} bytes of blocks, got {len(self.raw)}"
            )

    # -- the graph-constant protocol (ovkit.graph.Graph.constant) --------------------------------
    @property
    def dtype(self) -> str:
        return self.qtype

    @property
    def spec(self) -> QuantSpec:
        return quant_spec(self.qtype)

    @property
    def nbytes(self) -> int:
        return len(self.raw)

    @property
    def rows(self) -> int:
        return _n_rows(self.shape)

    @property
    def k(self) -> int:
        return self.shape[-1]

    @cached_property
    def decoded(self) -> Decoded:
        """Integer weights, scales and biases of the blocks, or of their requantization."""
        native = decode_blocks(self.qtype, self.raw, self.shape)
        if self.requant in (RequantTarget.NATIVE, RequantTarget.F16):
            return native
        return requantize(native.dequantize(), self.requant)

    @property
    def scale_group(self) -> int:
        """Elements per scale of the constant (``decoded.group``) without decoding the blocks: the
        requant target's groups, a row for host-decoded types and per-row Q8_0_C, else the type's."""
        if self.requant in REQUANT_GROUPED:
            return REQUANT_GROUPED[self.requant][0]
        if self.spec.host_decoded or self.requant is RequantTarget.Q8_0_C:
            return self.k
        return self.spec.group

    def may_be_int8(self) -> bool:
        """False when :attr:`container` is surely not i8/u8, told without decoding the blocks."""
        if self.requant in REQUANT_CONTAINER:
            return REQUANT_CONTAINER[self.requant] in _NO_DYNQ_CONTAINERS
        if self.spec.host_decoded:
            return False
        if self.spec.name == "mxfp4":
            return self.form == "fast"
        return self.spec.container_bits == 8

    @property
    def symmetric(self) -> bool:
        return self.decoded.bias is None

    @cached_property
    def digest(self) -> str:
        """sha256 of the blocks plus type, shape and form (a cache key for compiled graphs)."""
        import hashlib

        h = hashlib.sha256(self.raw)
        h.update(f"|{self.qtype}|{self.shape}|{self.form}|{self.requant}".encode())
        return h.hexdigest()

    def dequantize(self) -> np.ndarray:
        """f32 values the constant holds: ggml's ``to_float`` of the blocks (after any requant)."""
        if self.requant is RequantTarget.F16:
            return self.decoded.dequantize().astype(np.float16).astype(np.float32).reshape(self.shape)
        return self.decoded.dequantize().reshape(self.shape)

    def with_form(self, form: Form) -> QuantizedWeight:
        return QuantizedWeight(self.qtype, self.shape, self.raw, self.name, form, self.requant)

    def with_requant(self, target: RequantTarget | str) -> QuantizedWeight:
        """The same blocks requantized to ``target`` (upstream's targets: Q8_0_C, Q4_0_128, Q4_0_64,
        Q4_1_64, F16)."""
        return QuantizedWeight(self.qtype, self.shape, self.raw, self.name, self.form, RequantTarget(target))

    def apply_policy(
        self, device_class: str, *, no_requant: bool = False, kquant: str | None | FromEnv = FROM_ENV
    ) -> QuantizedWeight:
        """Requantized as upstream's policy does for this tensor name and shape on ``device_class``
        (``kquant``: the REQUANT_KQUANT choice, by default the environment's)."""
        target = requant_type(
            self.name, device_class, self.qtype, no_requant=no_requant, shape=self.shape, kquant=kquant
        )
        return self.with_requant(target)

    @property
    def container(self) -> str:
        """OpenVINO element type of the weight Constant in this form."""
        spec = self.spec
        if self.requant in REQUANT_CONTAINER:
            return REQUANT_CONTAINER[self.requant]
        if spec.host_decoded:
            return "f16" if self._f16_exact else "f32"
        if self._host_f32:
            return "f32"
        if spec.name == "mxfp4":
            # fast: the exact integers 2*e2m1 in i8 (decompressing kernel, ~25% faster at n=1
            # than f4e2m1, which has no int8 path); upstream: the raw e2m1 codes
            return "i8" if self.form == "fast" else "f4e2m1"
        sign = "i" if spec.symmetric or self._offset else "u"
        return f"{sign}{spec.container_bits}"

    @cached_property
    def _f16_exact(self) -> bool:
        """Host-decoded values that f16 holds bit for bit (q1_0's ±d, most ternary blocks)."""
        v = self.decoded.q
        with np.errstate(over="ignore", invalid="ignore"):
            back = v.astype(np.float16).astype(np.float32)
        return bool(np.array_equal(back.view(np.uint32), v.view(np.uint32)))

    # -- OpenVINO --------------------------------------------------------------------------------
    def _grouped(self, values: np.ndarray) -> np.ndarray:
        g = self.decoded.group
        return values.reshape(self.rows, self.k // g, g)

    def _weight_const(self) -> Any:
        """The weight Constant [rows, k/G, G] in the element type of :attr:`container`."""
        dec, et = self.decoded, self.container
        if et == "f4e2m1":
            assert dec.codes is not None
            return packed_constant(self._grouped(dec.codes), "f4e2m1")
        q = dec.q
        offset = self._offset
        if offset:
            q = q.astype(np.int16) - offset
        return packed_constant(self._grouped(q), et)

    @cached_property
    def _offset(self) -> int:
        """Fast form of the asymmetric types: q - 8 (4-bit) or q - 16 (5-bit) in a signed container.

        Only where that algebra gives ggml's numbers bit for bit: ``(q-o)*s + (b + s*o)`` must equal
        ``q*s + b`` in f32 for every weight.  A huge scale beside a small bias breaks it (``b + s*o``
        rounds ``b`` away); such weights keep ``q`` unsigned and decompress as ``q*s + b``, ggml's
        own arithmetic.  Weights with NaN or inf values are the f32 constant (:attr:`_host_f32`).
        """
        spec, dec = self.spec, self.decoded
        if self.form != "fast" or self.requant is not RequantTarget.NATIVE or dec.bias is None:
            return 0
        if self._host_f32:
            return 0
        offset = 8 if spec.bits == 4 else 16
        grouped, o = self._grouped(dec.q), np.float32(offset)
        step = max(1, (1 << 20) // self.k)  # rows per check: bounded temporaries for big weights
        with np.errstate(over="ignore", invalid="ignore"):
            for r in range(0, self.rows, step):
                q = grouped[r : r + step].astype(np.float32)
                sc, b = dec.scale[r : r + step, :, None], dec.bias[r : r + step, :, None]
                if not np.array_equal((q - o) * sc + (b + sc * o), q * sc + b):
                    return 0
        return offset

    @cached_property
    def _host_f32(self) -> bool:
        """Fast form whose decoded weights hold NaN or ±inf (a NaN/inf scale or bias, or scale·q
        beyond f32): built as the f32 constant of ggml's values, so its MatMul is a plain f32 one
        on every CPU.  A compressed FullyConnected quantizes the activations to int8 on CPUs with
        VNNI, and its integer sums times an inf scale are ±inf or NaN where the product is not."""
        dec = self.decoded
        if self.form != "fast" or self.requant is not RequantTarget.NATIVE or self.spec.host_decoded:
            return False
        qmax = max(int(dec.q.max(initial=0)), -int(dec.q.min(initial=0)))
        with np.errstate(over="ignore", invalid="ignore"):
            bound = np.abs(dec.scale.astype(np.float64)) * qmax
            if dec.bias is not None:
                bound = bound + np.abs(dec.bias)
            if np.all(bound < np.finfo(np.float32).max / 2):  # NaN fails the comparison
                return False
            grouped = self._grouped(dec.q)
            step = max(1, (1 << 20) // self.k)  # rows per check: bounded temporaries for big weights
            for r in range(0, self.rows, step):
                w = grouped[r : r + step].astype(np.float32) * dec.scale[r : r + step, :, None]
                if dec.bias is not None:
                    w = w + dec.bias[r : r + step, :, None]
                if not np.isfinite(w).all():
                    return True
        return False

    @cached_property
    def _tiny(self) -> np.ndarray | None:
        """The fast form's MXFP4 groups whose scale is an f32 subnormal (exponent byte 0 or 1),
        [rows, k/32] bool; None when there are none (every other weight)."""
        exponent = self.decoded.exponent
        if self.form != "fast" or self.requant is not RequantTarget.NATIVE or exponent is None:
            return None
        tiny = exponent < 2
        return tiny if tiny.any() else None

    def _tiny_split(self) -> tuple[Any, Any, Any]:
        """The weight as ``normal + tiny * low``: f32 [rows, k] nodes of the groups with a normal
        scale (tiny groups zeroed) and of the tiny groups with their scale raised by 2**TINY_SHIFT
        (the others zeroed), both compressed i8, and the f32 constant ``low`` = 2**-TINY_SHIFT."""
        ops, dec, tiny = _ops(), self.decoded, self._tiny
        assert tiny is not None and dec.exponent is not None
        q, one, in_tiny = self._grouped(dec.q), np.float32(1), tiny[:, :, None]

        def part(weights: np.ndarray, scale: np.ndarray) -> Any:
            return _to_f32(self._flat(_decompress(packed_constant(weights, "i8"), scale[:, :, None])))

        if self._host_f32:  # the other groups hold NaN/inf: ggml's values, as the f32 constant
            values = np.where(in_tiny, np.float32(0), self._grouped(dec.dequantize()))
            normal = ops.constant(values.reshape(self.rows, self.k))
        else:
            normal = part(np.where(in_tiny, 0, q), np.where(tiny, one, dec.scale))
        # 2**(e - 128 + TINY_SHIFT) for the tiny groups, 1 for the others
        shift = np.where(tiny, dec.exponent.astype(np.int32) - 128 + TINY_SHIFT, 0)
        small = part(np.where(in_tiny, q, 0), np.ldexp(one, shift).astype(np.float32))
        return normal, small, ops.constant(np.float32(2.0**-TINY_SHIFT))

    @cached_property
    def _zero_points(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Integer zero points and the exact residual ``bias + scale * zp`` (None: symmetric).

        Fast form: the zero point is the fixed container offset (8 or 16), so the Constant is a
        plain signed integer tensor (no Subtract) and the whole bias moves into the residual.
        Upstream forms: ``round(-bias/scale)`` clamped to the unsigned container.
        """
        dec, spec = self.decoded, self.spec
        if dec.bias is None or self._host_f32:  # the f32 constant holds the bias already
            return None
        if self.form == "fast":
            offset = self._offset
            z = np.full(dec.scale.shape, offset, np.uint8)
            resid = dec.bias + dec.scale * np.float32(offset) if offset else dec.bias
            return z, resid.astype(np.float32)
        hi = 15 if spec.bits == 4 else 255
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            zf = np.where(dec.scale != 0, -dec.bias / dec.scale, 0.0)
            # NaN has no zero point (upstream's cast is undefined there): 0; infinities clamp
            z = np.clip(np.rint(np.nan_to_num(zf, nan=0.0, posinf=hi, neginf=0.0)), 0, hi).astype(np.uint8)
            scale_used = dec.scale.astype(np.float16).astype(np.float32)
            return z, (dec.bias + scale_used * z.astype(np.float32)).astype(np.float32)

    def _scaled(self, *, upstream: bool) -> Any:
        """Convert → [Subtract zp] → Multiply, grouped [rows, k/G, G] (without the residual bias)."""
        ops, dec, spec = _ops(), self.decoded, self.spec
        if self.requant is RequantTarget.F16:
            values = dec.dequantize().astype(np.float16)
            return ops.convert(ops.constant(self._grouped(values)), "f32")
        if spec.host_decoded:  # the decoded values as the constant (f16 only where exact)
            values = self._grouped(dec.q)
            if self.container == "f32":
                return ops.constant(values)
            return ops.convert(ops.constant(values.astype(np.float16)), "f32")
        if not upstream and self._tiny is not None:  # folded into one constant: subnormals flush
            normal, tiny, low = self._tiny_split()
            return ops.reshape(ops.add(normal, ops.multiply(tiny, low)), self._group_shape(), False)
        if not upstream and self._host_f32:
            return ops.constant(self._grouped(dec.dequantize()))
        w = self._weight_const()
        if not upstream:
            # ggml's numbers: the scale exactly (requantized scales as upstream rounds them)
            return _decompress(w, dec.scale[:, :, None], exact=self.requant is RequantTarget.NATIVE)
        if self.container == "f4e2m1":
            assert dec.exponent is not None
            e = packed_constant(dec.exponent.reshape(self.rows, -1, 1), "f8e8m0")
            return ops.multiply(ops.convert(w, "f32"), ops.convert(e, "f32"))
        node = ops.convert(w, "f16")
        if self.form == "upstream_bias" and dec.bias is not None:
            # upstream with use_bias (test graphs, MoE): exact f16 zero point -bias/scale
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                zf = np.where(dec.scale != 0, -dec.bias / dec.scale, 0.0).astype(np.float16)
            node = ops.subtract(node, ops.constant(zf[:, :, None]))
        elif upstream and self._zero_points is not None:
            # upstream: u4 zero points for 4-bit weights, u8 for 5-bit
            zt = "u4" if spec.bits == 4 else "u8"
            zc = packed_constant(self._zero_points[0][:, :, None], zt)
            node = ops.subtract(node, ops.convert(zc, "f16"))
        with np.errstate(over="ignore"):  # upstream's f16 scales: beyond 65504 they are inf there too
            return ops.multiply(node, ops.constant(dec.scale[:, :, None].astype(np.float16)))

    def _group_shape(self) -> Any:
        g = self.decoded.group
        return _ops().constant(np.array([self.rows, self.k // g, g], np.int64))

    def _flat(self, node: Any) -> Any:
        ops = _ops()
        return ops.reshape(node, ops.constant(np.array([self.rows, self.k], np.int64)), False)

    def to_ov_node(self) -> Any:
        """The decompression subgraph: f32 output of the numpy ``shape`` (for get_rows and fallback)."""
        ops = _ops()
        upstream = self.form != "fast"
        node = self._scaled(upstream=upstream)
        zps = self._zero_points
        if not upstream and zps is not None:
            node = ops.add(_to_f32(node), ops.constant(zps[1][:, :, None]))
        out = _to_f32(self._flat(node))
        if len(self.shape) != 2:
            out = ops.reshape(out, ops.constant(np.array(self.shape, np.int64)), False)
        return out.output(0)

    def expert_activations(self, b: Any) -> Any:
        """The activations MUL_MAT_ID multiplies these expert weights with: ``b`` as it is (a
        weight computing with ggml's numerics quantizes them first)."""
        return b

    def ov_mul_mat(self, b: Any) -> Any:
        """``b @ W.T`` for an f32 Output ``b`` [..., n, k]: f32 Output [..., n, rows] (ggml mul_mat)."""
        ops = _ops()
        if len(self.shape) != 2:
            return ops.matmul(b, self.to_ov_node(), False, True).output(0)
        if self._tiny is not None:  # the tiny groups' product is lowered at run time
            normal, tiny, low = self._tiny_split()
            # through an Unsqueeze: a Multiply right after the MatMul is fused into its weights'
            # scale (2**-128 again, and the weight decompressed at every inference)
            axis = ops.constant(np.int64(0))
            product = ops.unsqueeze(ops.matmul(b, tiny, False, True), axis)
            lowered = ops.squeeze(ops.multiply(product, low), axis)
            return ops.add(ops.matmul(b, normal, False, True), lowered).output(0)
        if not self._offset:  # symmetric, upstream forms, NaN/inf weights: one MatMul
            return ops.matmul(b, self.to_ov_node(), False, True).output(0)
        weight = _to_f32(self._flat(self._scaled(upstream=False)))
        main = ops.matmul(b, weight, False, True)
        return ops.add(main, self._bias_term(b)).output(0)

    def ov_get_rows(self, indices: Any) -> Any:
        """Rows ``indices`` (integer Output, any shape) of the dequantized weight: f32 [..., k].

        The CPU plugin gathers straight from the compressed weights when the decompression is
        ``Convert → [Subtract] → Multiply``; the exact residual of the asymmetric types is gathered
        separately ([n, k/32]) and added, so the table is never folded into f32.
        """
        ops = _ops()
        axis = ops.constant(np.int64(0))
        zps = self._zero_points
        if self._tiny is not None and len(self.shape) == 2:  # tiny rows lowered after the gather
            normal, tiny, low = self._tiny_split()
            lowered = ops.multiply(ops.gather(tiny, indices, axis), low)
            return ops.add(ops.gather(normal, indices, axis), lowered).output(0)
        if not self._offset or zps is None:
            table = self.to_ov_node()
            if len(self.shape) != 2:
                # a batched shape such as (1, 1, m, k) gathers the m rows of its [rows, k] table;
                # a 2-D table is gathered as it is, so the plugin keeps it compressed
                table = self._flat(table)
            return ops.gather(table, indices, axis).output(0)
        g = self.decoded.group
        flat = ops.reshape(indices, ops.constant(np.array([-1], np.int64)), False)
        main = ops.gather(_to_f32(self._flat(self._scaled(upstream=False))), flat, axis)
        main = ops.reshape(main, ops.constant(np.array([-1, self.k // g, g], np.int64)), False)
        resid = ops.gather(ops.constant(zps[1]), flat, axis)
        rows = ops.add(main, ops.unsqueeze(resid, ops.constant(np.int64(-1))))
        out_shape = ops.concat([ops.shape_of(indices), ops.constant(np.array([self.k], np.int64))], 0)
        return ops.reshape(rows, out_shape, False).output(0)

    def _bias_term(self, b: Any) -> Any:
        """groupsum(b) @ residual.T: the part of the bias the integer zero points leave, out of the FC."""
        ops, dec, zps = _ops(), self.decoded, self._zero_points
        assert zps is not None
        rank = b.get_partial_shape().rank.get_length()
        g = dec.group
        target = np.array([0] * (rank - 1) + [self.k // g, g], np.int64)
        grouped = ops.reshape(b, ops.constant(target), True)
        sums = ops.reduce_sum(grouped, ops.constant(np.array([-1], np.int64)), False)
        return ops.matmul(sums, ops.constant(zps[1]), False, True)

    def __reduce__(self) -> tuple[Any, ...]:
        return (QuantizedWeight, (self.qtype, self.shape, self.raw, self.name, self.form, self.requant))


def from_blocks(
    qtype: str,
    raw: bytes | np.ndarray | memoryview,
    shape: Sequence[int],
    name: str = "",
    form: Form = "fast",
) -> QuantizedWeight:
    """A :class:`QuantizedWeight` from raw ggml blocks of numpy ``shape``."""
    data = raw.tobytes() if isinstance(raw, np.ndarray) else bytes(raw)
    return QuantizedWeight(qtype, shape, data, name, form)  # type: ignore[arg-type]  # checked there


def quantize(qtype: str, array: np.ndarray, name: str = "", form: Form = "fast") -> QuantizedWeight:
    """Quantize an f32 array with ggml's own ``ggml_quantize_chunk`` (via ovkit.oracle) or gguf."""
    from ovkit import oracle  # here: loading ggml-python is a cost only quantizing pays

    spec = quant_spec(qtype)
    x = np.ascontiguousarray(array, dtype=np.float32)
    try:
        if oracle.ggml_available():
            return from_blocks(spec.name, oracle.quantize_blocks(spec.name, x), x.shape, name, form)
    except ImportError:
        pass
    import gguf.quants as gq

    blocks = gq.quantize(x, gq.GGMLQuantizationType(spec.ggml_type))
    return from_blocks(spec.name, blocks, x.shape, name, form)


#: Host types whose blocks repack losslessly into a type upstream extracts (same values bit for
#: bit): Q5_0 is ``d·(q − 16)`` with q 5-bit and one f16 ``d`` per 32, so ``q − 16`` is an int8
#: and the block is a Q8_0 block with the same ``d`` (1.06 bytes per weight instead of 4 as f32).
REPACKS: dict[str, str] = {"q5_0": "q8_0"}


def repack_blocks(qtype: str, raw: bytes | np.ndarray | memoryview) -> tuple[str, np.ndarray]:
    """``(REPACKS[qtype], blocks)``: the same weights as blocks of the repacked type."""
    if qtype not in REPACKS:
        raise QuantError(f"{qtype} blocks have no lossless repack (expected one of {sorted(REPACKS)})")
    src = np.frombuffer(bytes(raw) if not isinstance(raw, np.ndarray) else raw.tobytes(), np.uint8)
    blocks = src.reshape(-1, quant_spec("q5_0").type_size)  # d f16, qh u32 (bit j: high bit of j), qs[16]
    qh = blocks[:, 2:6].copy().view("<u4")[:, 0]
    qs = blocks[:, 6:22]
    low = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int16)  # elements 0..15, 16..31
    high = ((qh[:, None] >> np.arange(32, dtype=np.uint32)[None, :]) & 1).astype(np.int16) << 4
    out = np.empty((blocks.shape[0], quant_spec("q8_0").type_size), np.uint8)
    out[:, :2] = blocks[:, :2]
    out[:, 2:] = ((low | high) - 16).astype(np.int8).view(np.uint8)
    return REPACKS[qtype], out.reshape(-1)


def reference_dequantize(qtype: str, raw: bytes | np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """The ``gguf`` package's dequantization of the same blocks (the independent reference)."""
    import gguf.quants as gq

    spec = quant_spec(qtype)
    buf = np.frombuffer(bytes(raw) if not isinstance(raw, np.ndarray) else raw.tobytes(), np.uint8)
    rows = _n_rows(shape)
    out = gq.dequantize(buf.reshape(rows, -1), gq.GGMLQuantizationType(spec.ggml_type))
    return np.asarray(out, dtype=np.float32).reshape(tuple(shape))


# ------------------------------------------------------------------------------------------------
# Writing quantized tensors: ggml's from_float then to_float (CPY / SET_ROWS into quantized rows)
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RoundTrip:
    """How ggml's CPU ``from_float`` quantizes one 32-element block (then decoded as ``to_float``).

    ``symmetric``: d = (the value of largest magnitude) / -offset, q = min(levels,
    trunc(x/d + offset + 0.5)), w = (q - offset)·d (Q4_0, Q5_0); otherwise, with ``offset`` 0, d = (max - min) /
    levels, q = min(levels, trunc((x - min)/d + 0.5)), w = q·d + min (Q4_1, Q5_1); Q8_0 (``levels``
    127): d = amax/127, q = round-half-even(x · 127/amax), its AVX kernel's arithmetic.
    """

    symmetric: bool
    offset: int
    levels: int


#: The quantized types an op may write, each as ggml's CPU backend quantizes it.
ROUND_TRIPS: dict[str, RoundTrip] = {
    "q4_0": RoundTrip(True, 8, 15),
    "q4_1": RoundTrip(False, 0, 15),
    "q5_0": RoundTrip(True, 16, 31),
    "q5_1": RoundTrip(False, 0, 31),
    "q8_0": RoundTrip(False, 0, 127),
}
assert tuple(ROUND_TRIPS) == WRITABLE_QUANT_TYPES, "ovkit.dtypes lists the types specified here"


def _round_trip_spec(qtype: str) -> RoundTrip:
    spec = quant_spec(qtype)
    rt = ROUND_TRIPS.get(spec.name)
    if rt is None:
        raise QuantError(
            f"writing {spec.name} values (ggml's from_float) is not reproduced; expected one of {', '.join(WRITABLE_QUANT_TYPES)}"
        )
    return rt


def round_trip(values: np.ndarray, qtype: str) -> np.ndarray:
    """The f32 values a tensor of ``qtype`` holds after ggml's CPU backend writes ``values`` into
    it (rows along the last axis, a multiple of 32): ``to_float(from_float(values))``."""
    rt = _round_trip_spec(qtype)
    x = np.ascontiguousarray(values, dtype=np.float32)
    b = x.reshape(-1, 32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if rt.symmetric:
            mx = np.take_along_axis(b, np.abs(b).argmax(axis=1)[:, None], axis=1)
            d = mx / np.float32(-rt.offset)
            inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
            q = np.minimum(np.float32(rt.levels), np.trunc(b * inv + np.float32(rt.offset + 0.5)))
            out = (q - np.float32(rt.offset)) * _f16_round(d)
        elif rt.levels == 127:
            amax = np.abs(b).max(axis=1, keepdims=True)
            inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
            out = np.rint(b * inv) * _f16_round(amax / np.float32(127))
        else:
            lo, hi = b.min(axis=1, keepdims=True), b.max(axis=1, keepdims=True)
            d = (hi - lo) / np.float32(rt.levels)
            inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
            q = np.minimum(np.float32(rt.levels), np.trunc((b - lo) * inv + np.float32(0.5)))
            out = q * _f16_round(d) + _f16_round(lo)
    return out.astype(np.float32).reshape(x.shape)


def _f16_round(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return v.astype(np.float16).astype(np.float32)


def ov_mul_rn(a: Any, b: Any) -> Any:
    """``a·b`` rounded to f32 before whatever adds it: the Minimum keeps the CPU plugin from
    fusing the product and a following Add into one FMA (one rounding where C has two)."""
    ops = _ops()
    return ops.minimum(ops.multiply(a, b), ops.constant(np.finfo(np.float32).max))


def ov_div_rn(num: Any, den: Any) -> Any:
    """``num / den`` correctly rounded to f32, as C's division is: the CPU plugin's Divide can be
    an ulp off (a reciprocal), so the quotient and its two neighbours are compared by their exact
    residual ``num - den·q`` (Dekker's product with Veltkamp splits; finite, normal operands;
    the result's last axis has size 1)."""
    ops = _ops()

    def c(v: float) -> Any:
        return ops.constant(np.float32(v))

    def split(a: Any) -> tuple[Any, Any]:
        t = ov_mul_rn(a, c(4097.0))
        hi = ops.subtract(t, ops.subtract(t, a))
        return hi, ops.subtract(a, hi)

    # den itself, but not a Constant: with a constant divisor the CPU plugin's fused snippet
    # kernel runs out of registers (max(min(n, d), d) is d for every ordered pair)
    den = ops.maximum(ops.minimum(num, den), den)
    dh, dl = split(den)

    def cut(v: Any) -> Any:
        # a Gather of the last (size-1) axis ends a fused chain (one snippet kernel of the whole
        # computation fails to allocate registers)
        return ops.gather(v, ops.constant(np.array([0], np.int64)), ops.constant(np.int64(-1)))

    def residual(q: Any) -> Any:  # |num - den·q|, the product's rounding error included
        p = ov_mul_rn(den, q)
        qh, ql = split(q)
        err = ops.add(
            ops.add(ops.add(ops.subtract(ov_mul_rn(dh, qh), p), ov_mul_rn(dh, ql)), ov_mul_rn(dl, qh)),
            ov_mul_rn(dl, ql),
        )
        return cut(ops.abs(ops.subtract(ops.subtract(num, p), err)))

    q0 = ops.divide(num, den)
    step = ov_mul_rn(ops.abs(q0), c(1.25 * 2.0**-24))  # 0.625 to 1.25 ulp: the next float
    best, best_r = q0, residual(q0)
    for q in (ops.add(q0, step), ops.subtract(q0, step)):
        r = residual(q)
        closer = ops.less(r, best_r)
        best, best_r = ops.select(closer, q, best), ops.select(closer, r, best_r)
    return cut(best)


def ov_round_trip(x: Any, qtype: str, f16_round: Callable[[Any], Any]) -> Any:
    """:func:`round_trip` as an OpenVINO subgraph of the f32 Output ``x`` (same shape);
    ``f16_round`` rounds an f32 Output to f16 values the plugin cannot fold away."""
    rt = _round_trip_spec(qtype)
    ops = _ops()

    def c(v: float) -> Any:
        return ops.constant(np.float32(v))

    def safe_div(num: float, den: Any) -> Any:  # den != 0 ? num/den : 0
        return ops.select(ops.not_equal(den, c(0.0)), ov_div_rn(c(num), den), c(0.0))

    b = ops.reshape(x, ops.constant(np.array([-1, 32], np.int64)), False)
    axis = ops.constant(np.array([1], np.int64))
    if rt.symmetric:
        # the first value of largest magnitude, as ggml's strict ``amax < fabsf(v)`` scan finds it
        mag = ops.abs(b)
        first = ops.select(
            ops.equal(mag, ops.reduce_max(mag, axis, True)),
            ops.constant(np.arange(32, dtype=np.int64)),
            ops.constant(np.int64(32)),
        )
        at = ops.reduce_min(first, axis, True)
        d = ops.multiply(ops.gather_elements(b, at, 1), c(-1.0 / rt.offset))  # exact: 2^-k
        q = ops.floor(ops.add(ov_mul_rn(b, safe_div(1.0, d)), c(rt.offset + 0.5)))
        q = ops.minimum(q, c(rt.levels))
        out = ops.multiply(ops.subtract(q, c(rt.offset)), f16_round(d))
    elif rt.levels == 127:
        amax = ops.reduce_max(ops.abs(b), axis, True)
        q = ops.round(ops.multiply(b, safe_div(127.0, amax)), "half_to_even")
        out = ops.multiply(q, f16_round(ov_div_rn(amax, c(127.0))))
    else:
        lo, hi = ops.reduce_min(b, axis, True), ops.reduce_max(b, axis, True)
        d = ov_div_rn(ops.subtract(hi, lo), c(rt.levels))
        q = ops.floor(ops.add(ov_mul_rn(ops.subtract(b, lo), safe_div(1.0, d)), c(0.5)))
        out = ops.add(ov_mul_rn(ops.minimum(q, c(rt.levels)), f16_round(d)), f16_round(lo))
    return ops.reshape(out, ops.shape_of(x), False)


def _roundf(v: np.ndarray) -> np.ndarray:
    """C ``roundf``/``lroundf`` of f32 values: half away from zero (exact: f32 + 0.5 fits f64)."""
    w = v.astype(np.float64)
    return np.trunc(w + np.copysign(0.5, w))


def _f16_scale(d: np.ndarray) -> np.ndarray:
    """The f16 scale upstream stores (``ov::float16(d)``), as f32."""
    with np.errstate(over="ignore"):
        return d.astype(np.float16).astype(np.float32)


def _requant_q4_sym(g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``quantize_q4_0``'s signed branch per group: ``d = max / -8`` (max: the value of largest
    magnitude, first one on ties), ``q = clamp(roundf(x * (1/d)), -8, 7)``; a zero group gets
    scale 1 and zeros."""
    idx = np.abs(g).argmax(axis=2)[..., None]
    d = (np.take_along_axis(g, idx, axis=2) / np.float32(-8)).astype(np.float32)
    zero = d == 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = (np.float32(1) / np.where(zero, np.float32(1), d)).astype(np.float32)
        q = np.clip(_roundf((g * inv).astype(np.float32)), -8, 7)
    q = np.where(zero, 0, q).astype(np.int8)
    return q, np.where(zero, np.float32(1), _f16_scale(d))[..., 0], None


def _requant_q4_asym(g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``quantize_q4_1_asym`` per group: the range widened to hold 0, ``d = (max - min) / 15``,
    zero point ``zq = clamp(lroundf(-min / d), 0, 15)``, ``q = clamp(lroundf(x / d) + zq, 0, 15)``
    (``/ d`` as ``* (1/d)`` in f32), value ``(q - zq) * f16(d)``: here ``q * s + bias`` with
    ``bias = -zq * s``; a constant-zero group gets scale 1, zero point 0 and zeros."""
    lo = np.minimum(g.min(axis=2, keepdims=True), np.float32(0))
    hi = np.maximum(g.max(axis=2, keepdims=True), np.float32(0))
    with np.errstate(over="ignore", invalid="ignore"):
        d = ((hi - lo) / np.float32(15)).astype(np.float32)
    zero = d == 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = (np.float32(1) / np.where(zero, np.float32(1), d)).astype(np.float32)
        zq = np.clip(_roundf((-lo * inv).astype(np.float32)), 0, 15)
        q = np.clip(_roundf((g * inv).astype(np.float32)) + zq, 0, 15)
    q = np.where(zero, 0, q).astype(np.uint8)
    zq = np.where(zero, 0, zq).astype(np.float32)[..., 0]
    scale = np.where(zero, np.float32(1), _f16_scale(d))[..., 0]
    return q, scale, (-zq * scale).astype(np.float32)


#: Upstream's grouped 4-bit requantizers (``requantize_to_buffers`` in ggml-quants.cpp): target ->
#: (elements per scale, quantizer).  Q8_0_C is per row and has its own code below.
REQUANT_GROUPED: dict[RequantTarget, tuple[int, Callable[..., Any]]] = {
    RequantTarget.Q4_0_128: (128, _requant_q4_sym),
    RequantTarget.Q4_0_64: (64, _requant_q4_sym),
    RequantTarget.Q4_1_64: (64, _requant_q4_asym),
}


def requantize(values: np.ndarray, target: RequantTarget) -> Decoded:
    """Upstream's requantization of f32 rows (``requantize_to_buffers`` in ggml-quants.cpp).

    Q8_0_C: per row, d = amax/127, q = round(x/d) (i8).  Q4_0_128 / Q4_0_64 / Q4_1_64: the
    grouped 4-bit quantizers of :data:`REQUANT_GROUPED`, scales rounded to f16 as upstream
    stores them, so :meth:`Decoded.dequantize` gives the values the device holds.
    """
    x = np.asarray(values, dtype=np.float32)
    rows, k = x.shape[0] if x.ndim > 1 else 1, x.shape[-1]
    x = x.reshape(rows, k)
    if target is RequantTarget.Q8_0_C:
        d = np.abs(x).max(axis=1, keepdims=True) / 127.0
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(d != 0, np.rint(x / d), 0).astype(np.int8)
        return Decoded(q, d.astype(np.float32), None, k)
    if target in REQUANT_GROUPED:
        refused = requant_refusal(target, "f32", (rows, k), "rows")
        if refused:
            raise QuantError(refused)
        group, quantizer = REQUANT_GROUPED[target]
        q, scale, bias = quantizer(x.reshape(rows, k // group, group))
        return Decoded(q.reshape(rows, k), scale, bias, group)
    raise QuantError(f"requantize: {target!s} is not an integer requantization target")


#: Element types whose FullyConnected runs faster without activation dynamic quantization (n=1,
#: measured in docs/quant.md); 4-bit types are 2x slower without it.
_NO_DYNQ_CONTAINERS = frozenset({"i8", "u8"})


def compile_hints(weights: Sequence[QuantizedWeight], n_tokens: int = 1) -> dict[str, Any]:
    """CPU compile properties that suit these quantized weights (docs/quant.md, finding 8).

    For single-token graphs (``n_tokens == 1``) whose weights are all 8-bit containers (Q8_0,
    Q5_1, Q5_K, Q6_K, MXFP4 fast form, Q8_0_C), dynamic quantization of activations is turned
    off (``DYNAMIC_QUANTIZATION_GROUP_SIZE=0``): the plain decompressing kernel is about 25%
    faster there.  Batches (n > 1) and 4-bit or mixed models keep the default, which is up to
    2x faster for them, except Q6_K-only batches, which get 16-element activation groups.
    """
    # Told from the types first: a model with a 4-bit weight is settled without decoding a block
    # (Model() then reads no weight; the compiled-model cache may never need them).
    eight_bit = n_tokens == 1 and bool(weights) and all(w.may_be_int8() for w in weights)
    if eight_bit and {w.container for w in weights} <= _NO_DYNQ_CONTAINERS:
        return {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
    groups = {w.scale_group for w in weights}
    if n_tokens > 1 and groups == {16}:
        # Q6_K's 16-element scale groups: int8 activations in 16-groups halve the n=8 time
        return {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 16}
    return {}


# ------------------------------------------------------------------------------------------------
# Requantization policy (which weights upstream requantizes, per device class)
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequantRule:
    """One row of the policy: a tensor-name prefix (or ``*``), device class, source types, target;
    ``kquant``: the GGML_OPENVINO_REQUANT_KQUANT values the row applies to (``*``: any, unset
    included); ``experts``: only 3-D MoE expert weights (ggml ``ne[2] > 1``)."""

    name_prefix: str
    device_class: str  # "CPU", "GPU", "NPU"
    types: tuple[str, ...]  # source types the row applies to ("*" = every quantized type)
    target: RequantTarget
    note: str = ""
    kquant: tuple[str, ...] = ("*",)
    experts: bool = False

    def matches(self, tensor_name: str, device_class: str, qtype: str, experts: bool, kquant: str) -> bool:
        return (
            self.device_class == device_class
            and (self.name_prefix == "*" or tensor_name.startswith(self.name_prefix))
            and (self.types == ("*",) or qtype in self.types)
            and (self.kquant == ("*",) or kquant in self.kquant)
            and (experts or not self.experts)
        )


_K56 = ("q5_K", "q6_K")
_OTHER = ("q4_0", "q4_1", "q4_K", "q5_1", "q8_0", "mxfp4")
_EXPERT_8BIT = ("q5_1", "q8_0")  # MoE experts kept at 8 bits by default (grouped u8/i8)
_SYM128 = ("q4_sym128", "q4_sym128_all")
_ASYM64 = ("q4_asym64", "q4_asym64_all")
_CPU_GPU = ("CPU", "GPU")

#: Upstream's ``ggml_openvino_get_requant_type`` (ggml-openvino-extra.cpp): first matching row
#: wins, in its order: the name rules, the NPU's blanket i4, then on CPU/GPU the REQUANT_KQUANT
#: choices (Q4_K with ``_all``, 3-D Q5_1/Q8_0 experts, Q5_K/Q6_K).  It follows the newest source
#: (Intel's fork, whose variable list ``ovkit.config.ENV_VARS`` follows); llama-cpp-python
#: 0.3.36's copy has no ``q4_asym64`` (without ``_all``) and reads it as unset.  The
#: host-decoded types come first: supports_op's type gate refuses them before any rule.
REQUANT_RULES: tuple[RequantRule, ...] = (
    *(
        RequantRule("*", d, HOST_TYPES, RequantTarget.UNSUPPORTED, "refused by supports_op's type gate")
        for d in ("CPU", "GPU", "NPU")
    ),
    *(
        RequantRule("token_embd.weight", d, ("*",), RequantTarget.Q8_0_C, "embeddings: per-row i8")
        for d in _CPU_GPU
    ),
    RequantRule("token_embd.weight", "NPU", ("q6_K",), RequantTarget.F16, "NPU embeddings from Q6_K: f16"),
    RequantRule("token_embd.weight", "NPU", ("*",), RequantTarget.Q8_0_C, "NPU embeddings: per-row i8"),
    *(
        RequantRule("output.weight", d, ("*",), RequantTarget.Q8_0_C, "output head: per-row i8")
        for d in ("CPU", "GPU", "NPU")
    ),
    RequantRule("*", "NPU", _K56, RequantTarget.Q4_0_128, "NPU: i4 symmetric, G=128"),
    RequantRule("*", "NPU", _OTHER, RequantTarget.Q4_0_128, "NPU: i4 symmetric G=128 (even Q8_0)"),
    *(
        rule
        for d in _CPU_GPU
        for rule in (
            RequantRule(
                "*", d, ("q4_K",), RequantTarget.Q4_0_128, "REQUANT_KQUANT: Q4_K too", ("q4_sym128_all",)
            ),
            RequantRule(
                "*", d, ("q4_K",), RequantTarget.Q4_1_64, "REQUANT_KQUANT: Q4_K too", ("q4_asym64_all",)
            ),
            RequantRule(
                "*",
                d,
                _EXPERT_8BIT,
                RequantTarget.Q4_0_64,
                "REQUANT_KQUANT: 8-bit experts, G=64",
                _SYM128,
                True,
            ),
            RequantRule(
                "*",
                d,
                _EXPERT_8BIT,
                RequantTarget.Q4_1_64,
                "REQUANT_KQUANT: 8-bit experts, G=64",
                _ASYM64,
                True,
            ),
        )
    ),
    RequantRule(
        "*",
        "GPU",
        _EXPERT_8BIT,
        RequantTarget.NATIVE,
        "REQUANT_KQUANT=native: experts kept",
        ("native",),
        True,
    ),
    RequantRule(
        "*",
        "GPU",
        _EXPERT_8BIT,
        RequantTarget.Q4_0_64,
        "GPU: 8-bit experts to i4 G=64 (the plugin's grouped 8-bit GatherMatmul is wrong)",
        experts=True,
    ),
    *(
        rule
        for d in _CPU_GPU
        for rule in (
            RequantRule("*", d, _K56, RequantTarget.Q4_0_128, "REQUANT_KQUANT: i4 symmetric, G=128", _SYM128),
            RequantRule("*", d, _K56, RequantTarget.Q4_1_64, "REQUANT_KQUANT: u4 asymmetric, G=64", _ASYM64),
            RequantRule("*", d, _K56, RequantTarget.NATIVE, "REQUANT_KQUANT=native", ("native",)),
            RequantRule("*", d, _K56, RequantTarget.Q8_0_C, "Q5_K/Q6_K: per-row i8 on CPU/GPU"),
        )
    ),
    *(RequantRule("*", d, _OTHER, RequantTarget.NATIVE, "native extraction") for d in _CPU_GPU),
)


def requant_refusal(target: RequantTarget, qtype: str, shape: Sequence[int], what: str = "weight") -> str:
    """Why a device cannot build a ``qtype`` weight of ``shape`` requantized to ``target`` ("" if it can).

    UNSUPPORTED: upstream's type gate refuses the type.  The grouped 4-bit targets (Q4_0_128,
    Q4_0_64, Q4_1_64) need each row (ggml ``ne0``, the last numpy axis) to be whole groups:
    upstream sizes the scales ``ne0 // G`` per row, quantizes the flattened tensor in G-runs that
    straddle rows, and its Reshape back to ``[rows, ne0]`` fails, so the weight does not load (no
    smaller group, no per-channel fallback).
    """
    name = str(qtype)
    if target is RequantTarget.UNSUPPORTED:
        return (
            f"{name} {what}: requant target {target!s}: the policy refuses this weight "
            "(upstream has no extraction for it); expected a target the device builds"
        )
    k = int(shape[-1])
    group = REQUANT_GROUPED[target][0] if target in REQUANT_GROUPED else 0
    if group and k % group:
        return (
            f"{name} {what} of shape {tuple(int(d) for d in shape)}: requant target {target!s} "
            f"needs rows that are a multiple of {group}, got {k}; upstream's requantization has "
            "no other group for it (its weight Reshape fails and the model does not load)"
        )
    return ""


@dataclass(frozen=True, slots=True)
class RequantDecision:
    """What a device class does with one stored weight: the target, its bytes, or why it cannot."""

    name: str
    qtype: str
    shape: tuple[int, ...]
    target: RequantTarget
    refused: str  # "" when the device builds the weight

    @property
    def ok(self) -> bool:
        return not self.refused

    @property
    def nbytes(self) -> int:
        """Bytes on the device after the policy (a refused Q4_0_128 weight: what upstream allocates
        before its build fails; UNSUPPORTED has no size: QuantError)."""
        return requant_bytes(self.target, self.qtype, self.shape)


def requant_decision(
    tensor_name: str,
    device_class: str,
    qtype: str,
    shape: Sequence[int],
    *,
    no_requant: bool = False,
    kquant: str | None | FromEnv = FROM_ENV,
) -> RequantDecision:
    """The one decision placement, fit and the runner share: upstream's target for this weight
    on ``device_class`` and, when the device cannot build it, the reason (``kquant``: the
    REQUANT_KQUANT choice, by default the environment's, read on every call as upstream does)."""
    target = requant_type(tensor_name, device_class, qtype, no_requant=no_requant, shape=shape, kquant=kquant)
    dims = tuple(int(d) for d in shape)
    what = f"weight {tensor_name!r}" if tensor_name else "weight"
    name = quant_spec(qtype).name
    return RequantDecision(tensor_name, name, dims, target, requant_refusal(target, name, dims, what))


def requant_type(
    tensor_name: str,
    device_class: str,
    qtype: str,
    *,
    no_requant: bool = False,
    shape: Sequence[int] = (),
    kquant: str | None | FromEnv = FROM_ENV,
) -> RequantTarget:
    """The policy's target for a quantized weight (``no_requant`` = upstream's ``use_bias``: native;
    UNSUPPORTED for the host-decoded types on every device class).  ``shape`` (numpy order) tells
    3-D MoE experts apart; ``kquant`` is the GGML_OPENVINO_REQUANT_KQUANT value (None: unset), by
    default read from the environment as upstream reads it."""
    spec = quant_spec(qtype)
    cls = str(device_class).upper()
    if cls not in ("CPU", "GPU", "NPU") or (no_requant and not spec.host_decoded):
        return RequantTarget.NATIVE
    choice = requant_kquant_env() if kquant is FROM_ENV else kquant
    experts = len(shape) >= 3 and int(shape[-3]) > 1
    for rule in REQUANT_RULES:
        if rule.matches(tensor_name, cls, spec.name, experts, str(choice or "")):
            return rule.target
    return RequantTarget.NATIVE


def requant_table() -> pd.DataFrame:
    """The policy as a DataFrame (one row per rule, in match order)."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "tensor": r.name_prefix,
                "device_class": r.device_class,
                "types": ", ".join(r.types),
                "target": str(r.target),
                "requant_kquant": ", ".join(r.kquant),
                "experts_only": r.experts,
                "note": r.note,
            }
            for r in REQUANT_RULES
        ]
    )


def requant_bytes(target: RequantTarget, qtype: str, shape: Sequence[int]) -> int:
    """Bytes a weight of ``shape`` occupies after the policy (weights + scales [+ zero points]);
    a host-decoded type kept NATIVE is an f32 constant (its upper bound)."""
    spec = quant_spec(qtype)
    if target is RequantTarget.UNSUPPORTED:
        raise QuantError(f"requant_bytes: the policy refuses {spec.name} weights ({target!s}): no size")
    n = math.prod(int(d) for d in shape)
    rows = _n_rows(shape)
    if target is RequantTarget.Q8_0_C:
        return n + rows * 2
    if target in REQUANT_GROUPED:  # u4/i4 weights, f16 scales [, u4 zero points two a byte]
        groups = n // REQUANT_GROUPED[target][0]
        return n // 2 + groups * 2 + ((groups + 1) // 2 if target is RequantTarget.Q4_1_64 else 0)
    if target is RequantTarget.F16:
        return n * 2
    if spec.host_decoded:
        return n * 4
    groups = n // spec.group
    zp = 0 if spec.symmetric else (groups + 1) // 2 if spec.bits == 4 else groups  # u4 or u8 zero points
    scale_bytes = groups * (1 if spec.name == "mxfp4" else 2)  # f8e8m0 or f16
    return n * spec.container_bits // 8 + scale_bytes + zp
