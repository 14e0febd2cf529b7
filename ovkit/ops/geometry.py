"""The index and shape tables both interpreters share: ggml's geometry of an op node (windows,
pads, row ids, rope frequencies, resampling matrices) as numpy constants, computed from the
node's shapes and parameters, never from its values.  The numpy reference gathers with them,
the OpenVINO translation bakes them into Constants."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ovkit.ir import Op, RopeType, Tensor

Arr = np.ndarray


def ax(dim: int) -> int:
    """Axis of ggml dim ``dim`` in a 4-D value (numpy or OpenVINO order ``[ne3, ne2, ne1, ne0]``)."""
    return 3 - dim


def wrap_index(t: Tensor, d: int) -> Arr:
    """Circular PAD: the source index (i − lp) mod ne of every output index i along ggml dim d."""
    src = t.operand(0)
    return (np.arange(t.ne[d]) - int(t.params[f"lp{d}"])) % src.ne[d]


def set_index(t: Tensor) -> Arr:
    """SET/ACC: the flat element index in a of each element of b (b.ne at nb1..nb3 from offset)."""
    b_t = t.operand(1)
    p = t.params
    es = t.type_size
    idx = np.full((1, 1, 1, 1), p["offset"] // es, dtype=np.int64)
    for d, nb in enumerate((es, p["nb1"], p["nb2"], p["nb3"])):
        shape = [1, 1, 1, 1]
        shape[3 - d] = b_t.ne[d]
        idx = idx + (np.arange(b_t.ne[d], dtype=np.int64) * (nb // es)).reshape(shape)
    return idx.reshape(-1)


def repeat_back_shape(t: Tensor) -> list[int]:
    """REPEAT_BACK: a's value reshaped [r3, n3, r2, n2, r1, n1, r0, n0] (repeat index outermost)."""
    a = t.operand(0)
    return [v for d in (3, 2, 1, 0) for v in (a.ne[d] // t.ne[d], t.ne[d])]


def top_k_order(k: int) -> Arr:
    """Positions of the sorted (descending) top-k in ggml's CPU output: the first two exchanged."""
    order = np.arange(k)
    if k > 1:
        order[[0, 1]] = [1, 0]
    return order


#: ggml_tri_type → keep(col i0, row i1)
TRI_KEEP: dict[int, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    0: lambda c, r: c >= r,  # UPPER_DIAG
    1: lambda c, r: c > r,  # UPPER
    2: lambda c, r: c <= r,  # LOWER_DIAG
    3: lambda c, r: c < r,  # LOWER
}


def tri_mask(type_: int, n: int) -> np.ndarray:
    return TRI_KEEP[type_](np.arange(n)[None, :], np.arange(n)[:, None])


def diag_mask(t: Tensor) -> Arr:
    """DIAG_MASK_INF: True where column i > n_past + row j ([ne1, ne0])."""
    return np.arange(t.ne[0])[None, :] > int(t.params["n_past"]) + np.arange(t.ne[1])[:, None]


def arange_values(t: Tensor) -> Arr:
    """ARANGE: start + i·step in f32, as ggml's CPU loop."""
    return np.float32(t.params["start"]) + np.arange(t.ne[0], dtype=np.float32) * np.float32(t.params["step"])


def timestep_freqs(t: Tensor) -> Arr:
    """TIMESTEP_EMBEDDING: f_j = exp(−ln(max_period)·j/half) in f32, j < half."""
    half = t.params["dim"] // 2
    j = np.arange(half, dtype=np.float32)
    return np.asarray(
        np.exp(np.float32(-math.log(t.params["max_period"])) * j / np.float32(half)), np.float32
    )


def alibi_slopes(n_head: int, max_bias: float) -> Arr:
    """ggml's ALiBi slope per head (1 when max_bias == 0)."""
    if max_bias <= 0:
        return np.ones(n_head, dtype=np.float32)
    n_head_log2 = 1 << int(math.floor(math.log2(n_head)))
    m0 = np.float32(2.0 ** (-max_bias / n_head_log2))
    m1 = np.float32(2.0 ** (-(max_bias / 2.0) / n_head_log2))
    h = np.arange(n_head)
    return np.where(
        h < n_head_log2,
        np.power(m0, h + 1, dtype=np.float32),
        np.power(m1, 2 * (h - n_head_log2) + 1, dtype=np.float32),
    ).astype(np.float32)


def rope_corr_dims(
    n_dims: int, n_ctx_orig: int, freq_base: float, beta_fast: float, beta_slow: float
) -> tuple[float, float]:
    """``ggml_rope_yarn_corr_dims`` (IEEE semantics: n_ctx_orig = 0 gives -inf, as in C)."""

    def corr_dim(n_rot: float) -> float:
        den = n_rot * 2 * math.pi
        ratio = n_ctx_orig / den if den else math.copysign(math.inf, n_ctx_orig) if n_ctx_orig else math.nan
        log_ratio = math.log(ratio) if ratio > 0 else -math.inf
        return n_dims * log_ratio / (2 * math.log(freq_base))

    start = corr_dim(beta_fast)
    end = corr_dim(beta_slow)
    start = math.floor(start) if math.isfinite(start) else start
    end = math.ceil(end) if math.isfinite(end) else end
    return max(0.0, float(start)), min(float(n_dims - 1), float(end))


def rope_pairs(p: dict[str, Any], ne0: int) -> int:
    """Rotated pairs: n_dims/2, or ne0/2 for VISION (pairs (i, i + n_dims) over the whole row)."""
    return ne0 // 2 if p["mode"] == RopeType.VISION else p["n_dims"] // 2


def rope_tables(p: dict[str, Any], n_dims: int, n_pairs: int) -> dict[str, Any]:
    """Per rotated pair i: the theta multiplier θ_scale^e (e = i, or the index within its section
    for VISION, whose sections restart theta), the YaRN ramp mix and mscale."""
    theta_scale = np.float32(p["freq_base"]) ** np.float32(-2.0 / n_dims)
    # ggml multiplies theta by theta_scale once per pair, in f32
    powers = np.cumprod(
        np.r_[1.0, np.full(max(n_pairs, 1) - 1, theta_scale)].astype(np.float32), dtype=np.float32
    )
    exponent = np.arange(n_pairs)
    if p["mode"] == RopeType.VISION:
        secs = p["sections"]
        starts = np.array([0, secs[0], secs[0] + secs[1], secs[0] + secs[1] + secs[2]])
        sector = exponent % sum(secs)
        exponent = sector - starts[rope_sections(p, n_pairs)]
    mult = powers[exponent]
    ext = float(p["ext_factor"])
    mscale = float(p["attn_factor"])
    ramp = np.zeros(n_pairs, dtype=np.float32)
    if ext != 0.0:
        low, high = rope_corr_dims(n_dims, p["n_ctx_orig"], p["freq_base"], p["beta_fast"], p["beta_slow"])
        y = (np.arange(n_pairs) - low) / max(0.001, high - low)
        ramp = ((1 - np.minimum(1, np.maximum(0, y))) * ext).astype(np.float32)
        mscale *= 1.0 + 0.1 * math.log(1.0 / p["freq_scale"])
    return {"mult": mult, "ramp": ramp, "mscale": np.float32(mscale)}


def rope_sections(p: dict[str, Any], n_pairs: int) -> Arr:
    """Which position plane (0 t, 1 h, 2 w, 3 e) each rotated pair uses (multi-section rope)."""
    secs = np.asarray(p["sections"], dtype=np.int64)
    sector = np.arange(n_pairs) % secs.sum()
    if p["mode"] == RopeType.IMROPE:  # interleaved: t, h, w by sector % 3, each up to 3·its size
        plane = sector % 3  # 0 t, 1 h, 2 w
        return np.where(sector < 3 * secs[plane], plane, 3)
    return np.asarray(np.searchsorted(np.cumsum(secs), sector, side="right"))


def im2col_geometry(t: Tensor) -> tuple[Arr, int]:
    """IM2COL's window indices into each input plane (:func:`window_index`, [OH, OW, KH, KW] or
    [OW, KW]) and the spatial rank: tap (ky, kx) of output (oy, ox) reads (oy·s1 + ky·d1 − p1,
    ox·s0 + kx·d0 − p0), zero outside the input, as ggml's CPU im2col (any dilation sign)."""
    n = 2 if t.params["is_2D"] else 1
    sizes, ks, s, p, d, _ = conv_geometry(t, n)
    out = [t.ne[i + 1] for i in reversed(range(n))]  # im2col's output rows start at ne[1]
    return window_index(sizes, ks, s, p, d, out)[0], n


def window_index(
    sizes: Sequence[int],
    ks: Sequence[int],
    s: Sequence[int],
    p: Sequence[int],
    d: Sequence[int],
    out: Sequence[int],
) -> tuple[Arr, Arr]:
    """Flat indices into a spatial block of ``sizes`` (numpy order, outer first) for every output
    position and kernel tap, shape [*out, *ks]: tap k of output o reads o·s + k·d − p per dim, as
    ggml's direct convolutions and pools do; taps outside the block index the extra slot
    ``prod(sizes)`` (a zero or fill value appended by the caller). Also the validity mask."""
    n = len(sizes)
    flat = np.zeros([*out, *ks], dtype=np.int64)
    valid = np.ones([*out, *ks], dtype=bool)
    stride = 1
    for i in reversed(range(n)):
        shape_o = [1] * (2 * n)
        shape_o[i] = out[i]
        shape_k = [1] * (2 * n)
        shape_k[n + i] = ks[i]
        pos = np.arange(out[i]).reshape(shape_o) * s[i] + np.arange(ks[i]).reshape(shape_k) * d[i] - p[i]
        valid &= (pos >= 0) & (pos < sizes[i])
        flat += pos * stride
        stride *= sizes[i]
    return np.where(valid, flat, stride), valid


#: (input sizes, kernel sizes, strides, pads, dilations, output sizes), numpy order.
ConvGeometry = tuple[list[int], list[int], list[int], list[int], list[int], list[int]]


def conv_geometry(t: Tensor, n: int, kernel: str = "") -> ConvGeometry:
    """(input sizes, kernel sizes, strides, pads, dilations, output sizes) of an n-D direct conv
    node, numpy order (outer first); ``kernel``: the param prefix of the kernel sizes ("k" for
    pools, whose input is src0 and dilation 1), else src0's shape over src1."""
    p, dims = t.params, list(reversed(range(n)))  # ggml dim n-1 .. 0
    x, w = (t.operand(0), None) if kernel else (t.operand(1), t.operand(0))
    return (
        [x.ne[i] for i in dims],
        [p[f"{kernel}{i}"] if w is None else w.ne[i] for i in dims],
        [p[f"s{i}"] for i in dims],
        [p[f"p{i}"] for i in dims],
        [1 if kernel else p[f"d{i}"] for i in dims],
        [t.ne[i] for i in dims],
    )


def im2col_3d_index(t: Tensor) -> npt.NDArray[np.int64]:
    """Flat indices into b's [b.ne[3], D, H, W] elements (+1 zero slot) of every IM2COL_3D output
    element; N = b.ne[3] // IC batches (ggml's floor: trailing channels beyond N·IC are unused)."""
    b, ic = t.operand(1), t.params["IC"]
    n = b.ne[3] // ic
    sizes, ks, s, p, d, _ = conv_geometry(t, 3)
    # [OD, OH, OW, KD, KH, KW]
    idx, valid = window_index(sizes, ks, s, p, d, [t.ne[3] // n, t.ne[2], t.ne[1]])
    block = int(np.prod(sizes))
    plane = (np.arange(n)[:, None] * ic + np.arange(ic)[None, :]) * block  # [N, IC]
    # [N, OD, OH, OW, IC, KD, KH, KW]
    full = idx[None, :, :, :, None] + plane[:, None, None, None, :, None, None, None]
    full = np.where(valid[None, :, :, :, None], full, b.ne[3] * block)  # the zero slot
    return full.reshape(tuple(reversed(t.ne)))


def col2im_1d(t: Tensor) -> tuple[int, int, int, Arr]:
    """COL2IM_1D's columns as (T_in, OC, K) and the output time i·s0 + k − p0 of every column
    element [OC, T_in·K] (dropped taps outside the output: the extra slot T_out)."""
    a = t.operand(0)
    p, oc, t_out = t.params, t.params["oc"], t.ne[0]
    k = a.ne[0] // oc
    tgt = np.arange(a.ne[1])[:, None] * p["s0"] + np.arange(k)[None, :] - p["p0"]  # [T_in, K]
    tgt = np.where((tgt >= 0) & (tgt < t_out), tgt, t_out)
    return a.ne[1], oc, k, np.broadcast_to(tgt.reshape(1, -1), (oc, tgt.size))


def pool_geometry(t: Tensor) -> tuple[Arr, Arr, int]:
    """(window indices, validity, spatial rank) of a POOL_1D/POOL_2D node (numpy order)."""
    n = 1 if t.op == Op.POOL_1D else 2
    return (*window_index(*conv_geometry(t, n, "k")), n)


def pool_divisor(t: Tensor, valid: Arr, n: int) -> Arr:
    """AVG divisors per output: POOL_1D the in-bounds taps (0 → result 0), POOL_2D k0·k1."""
    axes = tuple(range(valid.ndim - n, valid.ndim))
    if t.op == Op.POOL_1D:
        count = valid.sum(axis=axes).astype(np.float32)
        return np.where(count > 0, count, np.float32(np.inf))
    return np.full(valid.shape[:-n], np.float32(t.params["k0"] * t.params["k1"]))


def _cubic_weights(d: np.float32) -> list[np.float32]:
    """ggml's bicubic convolution weights (alpha −0.75, as PyTorch) of taps −1..2 at offset d."""
    a = np.float32(-0.75)

    def w1(x: np.float32) -> np.float32:
        return np.float32(((a + 2) * x - (a + 3)) * x * x + 1)

    def w2(x: np.float32) -> np.float32:
        return np.float32(((a * x - 5 * a) * x + 8 * a) * x - 4 * a)

    one, two = np.float32(1.0), np.float32(2.0)
    return [w2(d + one), w1(d), w1(one - d), w2(two - d)]


def upscale_weights(n_out: int, n_in: int, mode: int) -> Arr:
    """The [n_out, n_in] resampling matrix ggml's CPU upscale applies along dim 0 or 1 (its f32
    arithmetic; the 2-D kernels are products of these, antialias normalised per axis)."""
    base, align = mode & 0xFF, bool(mode & 256)
    sf = np.float32(n_out) / np.float32(n_in)
    po = np.float32(0.5)
    if align:
        po = np.float32(0.0)
        if n_out > 1 and n_in > 1:
            sf = np.float32(n_out - 1) / np.float32(n_in - 1)
    w = np.zeros((n_out, n_in), dtype=np.float64)
    for i in range(n_out):
        fi = np.float32(i)
        if base == 0:
            w[i, int(fi / sf)] = 1.0
        elif base == 1 and mode & 512:
            x = (fi + po) / sf
            support = max(np.float32(1.0), np.float32(1.0) / sf)
            inv = np.float32(1.0) / support
            lo, hi = max(int(x - support + po), 0), min(int(x + support + po), n_in)
            taps = {
                sx: max(np.float32(1.0) - abs((np.float32(sx) - x + po) * inv), np.float32(0.0))
                for sx in range(lo, hi)
            }
            total = sum(float(v) for v in taps.values())
            for sx, v in taps.items():
                w[i, sx] = float(v) / total if total > 0 else 0.0
        elif base == 1:
            x = (fi + po) / sf - po
            x0 = int(np.floor(x))
            c0, c1 = min(max(x0, 0), n_in - 1), min(max(x0 + 1, 0), n_in - 1)
            dx = min(max(x - np.float32(c0), np.float32(0.0)), np.float32(1.0))
            w[i, c0] += 1.0 - float(dx)
            w[i, c1] += float(dx)
        else:
            x = (fi + po) / sf - po
            x0 = int(np.floor(x))
            for k, wk in zip(range(-1, 3), _cubic_weights(np.float32(x - np.float32(x0))), strict=True):
                w[i, min(max(x0 + k, 0), n_in - 1)] += float(wk)
    return w.astype(np.float32)


def upscale_batch_index(n_out: int, n_in: int) -> Arr:
    """Dims 2, 3: output i reads input int(i / (n_out / n_in)) (f32 division, as ggml)."""
    sf = np.float32(n_out) / np.float32(n_in)
    return np.array([int(np.float32(i) / sf) for i in range(n_out)], dtype=np.int64)
