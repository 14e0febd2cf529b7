"""Block decoding: raw ggml bytes -> integer weights, scales and biases (``w = scale * q +
bias``, exactly ggml's ``to_float``), host-type decoding, lossless repacks and the ``gguf``
package's independent dequantization."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ovkit.quant.specs import QK_K, QuantError, QuantSpec, checked_shape, n_rows, quant_spec, row_bytes


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


def _bytes(raw: bytes | np.ndarray | memoryview) -> np.ndarray:
    """Raw blocks as a flat uint8 array (a view where the memory allows)."""
    return (
        np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
        if isinstance(raw, np.ndarray)
        else np.frombuffer(raw, np.uint8)
    )


def _f16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


def _nibbles32(qs: np.ndarray) -> np.ndarray:
    """16 bytes → 32 values: low nibbles are elements 0..15, high nibbles 16..31 (ggml order)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _five_bits32(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """32 5-bit values of Q5_0/Q5_1: ``qs``'s nibbles, bit j of the u32 ``qh`` element j's 5th bit."""
    hi = ((np.ascontiguousarray(qh).view("<u4") >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
    return _nibbles32(qs) | (hi << 4)


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


def _dec_q1_0(b: np.ndarray) -> np.ndarray:
    """ggml's dequantize_row_q1_0: one f16 scale d, 128 sign bits (LSB first): bit 1 → +d, 0 → −d."""
    d = _f16(b[:, 0:2])
    bits = (b[:, 2:18, None] >> np.arange(8, dtype=np.uint8)) & 1  # [n, 16, 8]: element 8*i + j
    return np.where(bits.reshape(-1, 128) != 0, d, -d)


def _gguf_dequantize(spec: QuantSpec, blocks: np.ndarray) -> np.ndarray:
    """The ``gguf`` package's f32 values of raw ``blocks`` (flat), as one row of all the blocks:
    gguf loops in Python over groups of 16 rows (one a block otherwise)."""
    import gguf.quants as gq

    with np.errstate(all="ignore"):  # random blocks hold NaN/inf scales: decoded as ggml does
        out = gq.dequantize(blocks.reshape(1, -1), gq.GGMLQuantizationType(spec.ggml_type))
    return np.asarray(out, np.float32).reshape(-1)


#: Block bytes [n, type_size] -> (q, scale, bias) per type, at ggml's byte offsets.
_DECODERS: dict[str, Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray | None]]] = {
    "q4_0": lambda b: (_nibbles32(b[:, 2:18]).astype(np.int8) - 8, _f16(b[:, 0:2]), None),
    "q4_1": lambda b: (_nibbles32(b[:, 4:20]), _f16(b[:, 0:2]), _f16(b[:, 2:4])),
    "q5_1": lambda b: (_five_bits32(b[:, 4:8], b[:, 8:24]), _f16(b[:, 0:2]), _f16(b[:, 2:4])),
    "q8_0": lambda b: (np.ascontiguousarray(b[:, 2:34]).view(np.int8), _f16(b[:, 0:2]), None),
    "q4_K": _dec_q4_k,
    "q5_K": _dec_q5_k,
    "q6_K": _dec_q6_k,
    "mxfp4": lambda b: (_MXFP4_VALUES[_nibbles32(b[:, 1:17])], _e8m0_half(b[:, 0]), None),
}


def decode_blocks(qtype: str, raw: bytes | np.ndarray | memoryview, shape: Sequence[int]) -> Decoded:
    """Decode raw ggml blocks of a tensor with numpy ``shape`` (rows along the last axis)."""
    spec = quant_spec(qtype)
    shape = checked_shape(spec, shape)
    k = shape[-1]
    rows = n_rows(shape)
    need = rows * row_bytes(spec.name, k)
    buf = _bytes(raw)
    if buf.size != need:
        raise QuantError(f"{spec.name} tensor of shape {shape} needs {need} bytes of blocks, got {buf.size}")
    blocks = buf.reshape(-1, spec.type_size)
    if spec.host_decoded:
        # the values themselves, with one unit scale per row (w = 1 * q is exact, NaN included)
        # ggml's to_float: gguf's numpy decoders equal it bit for bit (q1_0 is not in gguf)
        values = _dec_q1_0(blocks) if spec.name == "q1_0" else _gguf_dequantize(spec, blocks)
        values = values.reshape(rows, k)
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


#: Host types whose blocks repack losslessly into a type upstream extracts (same values bit for
#: bit): Q5_0 is ``d·(q − 16)`` with q 5-bit and one f16 ``d`` per 32, so ``q − 16`` is an int8
#: and the block is a Q8_0 block with the same ``d`` (1.06 bytes per weight instead of 4 as f32).
REPACKS: dict[str, str] = {"q5_0": "q8_0"}


def repack_blocks(qtype: str, raw: bytes | np.ndarray | memoryview) -> tuple[str, np.ndarray]:
    """``(REPACKS[qtype], blocks)``: the same weights as blocks of the repacked type."""
    if qtype not in REPACKS:
        raise QuantError(f"{qtype} blocks have no lossless repack (expected one of {sorted(REPACKS)})")
    blocks = _bytes(raw).reshape(-1, quant_spec("q5_0").type_size)  # d f16, qh u32, qs[16]
    out = np.empty((blocks.shape[0], quant_spec("q8_0").type_size), np.uint8)
    out[:, :2] = blocks[:, :2]
    out[:, 2:] = (_five_bits32(blocks[:, 2:6], blocks[:, 6:22]).astype(np.int8) - 16).view(np.uint8)
    return REPACKS[qtype], out.reshape(-1)


def reference_dequantize(qtype: str, raw: bytes | np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """The ``gguf`` package's dequantization of the same blocks (the independent reference)."""
    return _gguf_dequantize(quant_spec(qtype), _bytes(raw)).reshape(tuple(shape))
