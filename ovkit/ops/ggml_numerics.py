"""``precision="ggml"``: a quantized matmul and flash attention with llama.cpp's CPU numerics, as OpenVINO nodes.

ggml's CPU first quantizes each activation row to the weight type's dot type (``VEC_DOT_TYPES``)
and sums integer products per block.  Here the activations are quantized exactly as the vendored
x86 kernels do, decoded back to f32 and multiplied by the weight's exact values: ggml's sums up
to f32 rounding and summation order, far below a logit NMSE of 1e-5 (the q8_1 min term as ggml
stores it).  Float weights need nothing here (MUL_MAT already rounds activations to the weight's
type).  FLASH_ATTN_EXT nodes marked by :func:`mark` follow ggml's CPU kernel for fewer than 64
query rows: Q·K in ``ggml_vec_dot_f16``'s order and V·softmax accumulated in f16 key by key with
a correctly rounded ``expf``, each rounded as the build's x86 kernels (:class:`F16Kernels`) do,
bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

import numpy as np

from ovkit import quant
from ovkit.dtypes import ggml_type
from ovkit.ir import GraphIR, Op
from ovkit.quant import QuantizedWeight, RequantTarget

#: ggml's ``type_traits_cpu[type].vec_dot_type`` (ggml-cpu.c) for every quantized weight type:
#: the format the activations are quantized to before the integer dot product (q8_1 for the
#: types with a min, q8_K for the 256-element super-blocks, else q8_0).
VEC_DOT_TYPES: dict[str, str] = {
    t: "q8_1" if t in ("q4_1", "q5_1") else "q8_K" if ggml_type(t).block == quant.QK_K else "q8_0"
    for t in quant.KNOWN_TYPES
}


def vec_dot_type(qtype: str) -> str:
    """The dot type ggml's CPU quantizes activations to for a ``qtype`` weight."""
    return VEC_DOT_TYPES[quant.quant_spec(qtype).name]


def _ov() -> Any:
    """:mod:`ovkit.ops.ov_array` (``ops``, ``const``, ``i64``, the ``OPENVINO`` namespace), imported
    on first use: OpenVINO loads with the translation, not with the runner importing this module."""
    from ovkit.ops import ov_array

    return ov_array


def _ops() -> Any:
    return _ov().ops


def _c(v: float) -> Any:
    return _ov().const(v)


def _f16(x: Any) -> Any:
    """f32 Output rounded to f16 values (ggml's ``GGML_CPU_FP32_TO_FP16``: round to nearest even)."""
    return _ov().rounded(x, "f16")


@dataclass(frozen=True, slots=True)
class QuantizedActivations:
    """Activations after ggml's ``quantize_row_q8_*`` and decoded back: ``values`` (f32, the input's
    shape) and, for q8_1, per block ``sums`` = d·Σq exactly and ``stored_sums`` = ggml's f16 ``s``."""

    values: Any
    sums: Any = None  # [..., k/32]
    stored_sums: Any = None  # [..., k/32]


def _q8_0(x: Any, with_sums: bool) -> QuantizedActivations:
    """x86 ``quantize_row_q8_0`` / ``quantize_row_q8_1``: per 32, amax = max|x|, d = amax/127 stored
    as f16, q = round-half-even(x · (127/amax)) (the AVX kernel's multiplier, not the reference
    C code's 1/d: the two differ in the last bit); q8_1 also stores s = f16(d·Σq) with d in f32."""
    ov = _ov()
    n, ops, b = ov.OPENVINO, ov.ops, ov.OPENVINO.reshape(x, [-1, 32])
    amax = n.reduce("max", n.unary("abs", b), [1])
    q = n.unary("round_even", n.mul(b, n.where(n.ne(amax, 0.0), n.div_rn(127.0, amax), 0.0)))
    d = n.div_rn(amax, 127.0)
    values = ops.reshape(n.mul(q, _f16(d)), ops.shape_of(x), False)
    if not with_sums:
        return QuantizedActivations(values)
    qsum = n.reduce("sum", q, [1])
    sums_shape = _shape_with_last(x, -1)
    sums = ops.reshape(ops.multiply(qsum, _f16(d)), sums_shape, False)
    stored = ops.reshape(_f16(ops.multiply(qsum, d)), sums_shape, False)
    return QuantizedActivations(values, sums, stored)


def _shape_with_last(x: Any, n: int) -> Any:
    """The shape of ``x`` with ``n`` for its last axis (an i64 Output)."""
    ov = _ov()
    rank = ov.output_of(x).get_partial_shape().rank.get_length()
    lead = ov.ops.gather(ov.ops.shape_of(x), ov.i64(list(range(rank - 1))), ov.i64(0))
    return ov.ops.concat([lead, ov.i64([n])], 0)


def _q8_k(x: Any) -> QuantizedActivations:
    """``quantize_row_q8_K_ref`` (x86 uses it as is): per 256, max = the first value of largest
    magnitude, iscale = -127/max, q = min(127, nearest_int(iscale·x)) (round half to even),
    d = 1/iscale in f32; a zero block stays zero.  (The repacked Q4_K kernels quantize with
    ±127/amax, which gives the same d·q.)"""
    ov = _ov()
    n = ov.OPENVINO
    b = n.reshape(x, [-1, quant.QK_K])
    signed = n.first_largest(b)
    nonzero = n.ne(signed, 0.0)
    iscale = n.div_rn(-127.0, n.where(nonzero, signed, 1.0))
    q = n.minimum(n.unary("round_even", n.mul(b, iscale)), 127.0)
    values = n.where(nonzero, n.mul(q, n.div_rn(1.0, iscale)), 0.0)
    return QuantizedActivations(ov.ops.reshape(values, ov.ops.shape_of(x), False))


def quantize_activations(x: Any, dot_type: str) -> QuantizedActivations:
    """f32 Output ``x`` [..., k] quantized per row to ``dot_type`` (a :data:`VEC_DOT_TYPES` value,
    whose blocks divide the weight's rows) as ggml's CPU does."""
    return _q8_k(x) if dot_type == "q8_K" else _q8_0(x, with_sums=dot_type == "q8_1")


@dataclass(frozen=True)
class GgmlNumericsWeight(QuantizedWeight):
    """A quantized weight whose MUL_MAT follows llama.cpp's CPU numerics (module docstring).

    ``source_type``: the weight's type in the GGUF, which picks the dot type (Q5_0 is repacked to
    Q8_0 blocks by ovkit; both quantize activations to q8_0, as ggml's table says).
    """

    source_type: str = ""

    @property
    def dot_type(self) -> str:
        return vec_dot_type(self.source_type or self.qtype)

    @cached_property
    def digest(self) -> str:
        """The weight's digest marked "ggml" (a graph with these numerics compiles on its own)."""
        return f"{QuantizedWeight.digest.func(self)}|ggml:{self.dot_type}"  # type: ignore[attr-defined]

    def ov_mul_mat(self, b: Any) -> Any:
        """``b @ W.T`` with ``b`` quantized to the dot type first; f32 Output [..., n, rows]."""
        ops = _ov().ops
        act = quantize_activations(b, self.dot_type)
        out = QuantizedWeight.ov_mul_mat(self, act.values.output(0))
        bias = self.decoded.bias
        if act.sums is None or bias is None or self.requant is not RequantTarget.NATIVE:
            return out
        # ggml adds m_w · f16(d_a·Σq_a); the product above holds m_w · d_a·Σq_a exactly
        delta = ops.subtract(act.stored_sums, act.sums)
        return ops.add(out, ops.matmul(delta, ops.constant(bias), False, True)).output(0)

    def expert_activations(self, b: Any) -> Any:
        """MUL_MAT_ID's activations quantized to the experts' dot type.  (The q8_1 min term's f16
        ``s`` is not reproduced here: the experts' product is one MatMul.)"""
        return quantize_activations(b, self.dot_type).values

    def __reduce__(self) -> tuple[Any, ...]:
        return (GgmlNumericsWeight, (*QuantizedWeight.__reduce__(self)[1], self.source_type))


def with_ggml_numerics(weight: QuantizedWeight, source_type: str = "") -> GgmlNumericsWeight:
    """``weight`` with ggml's numerics."""
    return GgmlNumericsWeight(
        weight.qtype, weight.shape, weight.raw, weight.name, weight.form, weight.requant, source_type
    )


# ------------------------------------------------------------------------------- attention
#: ggml's CPU FLASH_ATTN_EXT takes its tiled f32 path (Q kept in f32, K/V widened to f32, V·softmax
#: summed in f32) for ``GGML_FA_TILE_Q`` or more query rows per head; fewer rows run one query at a
#: time (``ggml_compute_forward_flash_attn_ext_f16_one_chunk``): Q rounded to K's type for the dot
#: and, for an f16 V, V·softmax accumulated in f16 with one rounding per key.
FA_TILE_Q = 64


@dataclass(frozen=True, slots=True)
class F16Kernels:
    """How one ggml build's x86 f16 vector kernels round (simd-mappings.h's F16 macros, vec.h):
    ``ggml_vec_dot_f16``'s four accumulators of ``dot_lanes`` lanes, in f16 with ``dot_f16``
    (else f32); ``vec_f16``: ``ggml_vec_mad_f16`` / ``ggml_vec_scale_f16`` compute in f16 on their
    first ``n − n % F16_STEP`` elements (see :func:`dot_f16_scores`, :func:`flash_attn_f16_accumulated`)."""

    name: str
    dot_lanes: int
    dot_f16: bool
    vec_f16: bool


#: GGML_F16_STEP where ggml computes in f16 (AVX512-FP16: four registers of 32 f16 lanes).
F16_STEP = 128

#: The x86 builds ggml_numerics reproduces, by name (the name is the node param
#: :data:`KERNELS_PARAM`): AVX2 and AVX-512 widen f16 to f32; AVX512-FP16 builds compute V·softmax
#: in f16, and their dot in f32 (llama-cpp-python 0.3.36's ggml: the ``GGML_F16_DOT_*`` macros)
#: or, in older ggml (ggml-python 0.0.45's ggml 0.15), in f16 too.
KERNELS: dict[str, F16Kernels] = {
    k.name: k
    for k in (
        F16Kernels("avx2", 8, dot_f16=False, vec_f16=False),
        F16Kernels("avx512", 16, dot_f16=False, vec_f16=False),
        F16Kernels("avx512fp16", 16, dot_f16=False, vec_f16=True),
        F16Kernels("avx512fp16-f16dot", 32, dot_f16=True, vec_f16=True),
    )
}

#: The native build whose kernels precision="ggml" reproduces: the llama.cpp CPU reference.
REFERENCE_BUILD = "llama-cpp-python-cpu"


@cache
def f16_kernels(build: str = REFERENCE_BUILD, f16_dot: bool = False) -> F16Kernels:
    """The f16 kernels of native build ``build`` (``ovkit.native.build_isa``: the ISA its recorded
    flags compiled for, or a native build's on this CPU).  ``f16_dot``: the build's ggml is one
    that accumulates ggml_vec_dot_f16 in f16 with AVX512-FP16 (``ovkit.oracle.ggml_dot_f16_in_f16``
    probes ggml-python's)."""
    from ovkit.native import build_isa

    isa = build_isa(build)
    if "avx512_fp16" in isa:
        return KERNELS["avx512fp16-f16dot" if f16_dot else "avx512fp16"]
    if f16_dot:
        raise ValueError(f"{build} accumulates its f16 dot in f16 but was not built with avx512_fp16")
    return KERNELS["avx512" if "avx512f" in isa else "avx2"]


def kernels_named(name: str) -> F16Kernels:
    """The :data:`KERNELS` entry ``name`` (a marked node's :data:`KERNELS_PARAM`)."""
    if name not in KERNELS:
        raise ValueError(f"unknown ggml f16 kernels {name!r}; expected one of {', '.join(KERNELS)}")
    return KERNELS[name]


def _mul_rn(a: Any, b: Any) -> Any:
    return _ov().OPENVINO.mul_rn(a, b)


def _split(a: Any) -> tuple[Any, Any]:
    from ovkit.ops.rounding import ov_split

    return ov_split(a)


def _two_sum(a: Any, b: Any) -> tuple[Any, Any]:
    """Knuth's TwoSum: ``s = fl(a + b)`` and its exact rounding error."""
    ops = _ops()
    s = ops.add(a, b)
    bb = ops.subtract(s, a)
    return s, ops.add(ops.subtract(a, ops.subtract(s, bb)), ops.subtract(b, bb))


def _product_error(a: Any, b: Any, p: Any) -> Any:
    """Dekker's exact error ``a·b − p`` of the f32 product ``p = fl(a·b)``."""
    ops = _ops()
    ah, al = _split(a)
    bh, bl = _split(b)
    err = ops.add(ops.add(ops.subtract(ops.multiply(ah, bh), p), ops.multiply(ah, bl)), ops.multiply(al, bh))
    return ops.add(err, ops.multiply(al, bl))


#: exp on [-87, 0] as exp(a)·exp(b): ``a`` on a 2^-8 grid from a table of (hi, lo) f32 pairs,
#: |b| <= 2^-9 by its Taylor series in double-f32 arithmetic: within ~2^-45 of exp(x), so the final
#: rounding gives the correctly rounded f32 (glibc's expf, which ggml calls, is correctly rounded
#: in all but ~0.06% of arguments; OpenVINO's CPU Exp differs from it in the last bit in about
#: half of them).  Below -87 the result is under 2^-125 and OpenVINO's own Exp is used.
_EXP_GRID, _EXP_MIN = 256, -87.0


def _exp_table() -> tuple[np.ndarray, np.ndarray]:
    # scaled by 2^64 so that the error terms of the smallest values stay normal floats
    t = np.exp(-np.arange(int(-_EXP_MIN * _EXP_GRID) + 1, dtype=np.float64) / _EXP_GRID) * 2.0**64
    hi = t.astype(np.float32)
    return hi, (t - hi).astype(np.float32)


def exp_f32(x: Any) -> Any:
    """``expf(x)`` for ``x <= 0`` (f32 Output), correctly rounded but for rare hard cases."""
    ops = _ops()
    xc = ops.maximum(x, _c(_EXP_MIN))
    idx = ops.round(ops.multiply(xc, _c(-float(_EXP_GRID))), "half_to_even")  # exact: 2^8 scaling
    b = ops.add(xc, ops.multiply(idx, _c(1.0 / _EXP_GRID)))  # x - a, exact
    i = ops.convert(idx, "i32")
    hi_t, lo_t = _exp_table()
    th = ops.gather(ops.constant(hi_t), i, _ov().i64(0))
    tl = ops.gather(ops.constant(lo_t), i, _ov().i64(0))
    p = _mul_rn(b, b)
    rest = ops.add(
        ops.add(ops.multiply(_product_error(b, b, p), _c(0.5)), _mul_rn(_mul_rn(b, p), _c(1.0 / 6.0))),
        _mul_rn(_mul_rn(p, p), _c(1.0 / 24.0)),
    )
    s1, e1 = _two_sum(b, ops.multiply(p, _c(0.5)))  # exp(b) - 1 = s1 + (e1 + rest)
    lo1 = ops.add(e1, rest)
    ph = _mul_rn(th, s1)
    r1, r2 = _two_sum(th, ph)
    corr = ops.add(
        ops.add(ops.add(r2, _product_error(th, s1, ph)), _mul_rn(th, lo1)), ops.add(tl, _mul_rn(tl, s1))
    )
    y = ops.multiply(ops.add(r1, corr), _c(2.0**-64))  # exact: the result is a normal float
    return ops.select(ops.less(x, _c(_EXP_MIN)), ops.exp(x), y)


def _fma(a: Any, b: Any, c: Any) -> Any:
    """``a·b + c`` rounded to f32 once: C's ``x*y + z``, which GCC contracts to an FMA in ggml's
    native builds (ggml's ``S = S*ms + vs``); the product's exact error joins the sum first."""
    ops = _ops()
    p = _mul_rn(a, b)
    s, e = _two_sum(c, p)
    return ops.add(s, ops.add(e, _product_error(a, b, p)))


def _f16_add(a: Any, b: Any) -> Any:
    """``f16(a + b)`` rounded once, as AVX512-FP16's ``vaddph`` / ``vfmadd231ph`` round, for
    ``a + b`` exact as an f32 sum and its error (f16 values, exact products of two): rounding the
    f32 sum ``s`` to f16 errs only where ``s`` lies halfway between two f16 values; there the
    error's sign picks the side."""
    ops = _ops()
    s, e = _two_sum(a, b)
    r = _f16(s)
    other = ops.subtract(ops.add(s, s), r)  # exact: the other f16 neighbour where s is halfway
    halfway = ops.logical_and(
        ops.logical_and(ops.not_equal(r, s), ops.equal(_f16(other), other)), ops.is_finite(r)
    )
    toward = ops.select(ops.greater(other, r), ops.greater(e, _c(0.0)), ops.less(e, _c(0.0)))
    return ops.select(ops.logical_and(halfway, toward), other, r)


def _sum_rounded_once(x: Any, n: int) -> Any:
    """``x``'s ``n`` values on its last axis summed and rounded to f32 once (size 1 left), as
    ggml adds a dot's leftover products in double (exactly, for products of f16 values):
    pairwise double-f32 sums with TwoSum."""
    ops = _ops()
    hi, lo = x, None
    while n > 1:
        if n % 2:
            zero = ops.broadcast(_c(0.0), _shape_with_last(hi, 1))
            hi = ops.concat([hi, zero], -1)
            lo = None if lo is None else ops.concat([lo, zero], -1)
            n += 1
        half = n // 2
        s, e = _two_sum(_last_slice(hi, 0, half), _last_slice(hi, half, n))
        if lo is not None:
            e = ops.add(ops.add(_last_slice(lo, 0, half), _last_slice(lo, half, n)), e)
        hi, lo = _two_sum(s, e)
        n = half
    return hi


def dot_f16_scores(q: Any, k: Any, kernels: F16Kernels) -> Any:
    """Q·K as ``ggml_vec_dot_f16`` sums it on x86 with ``kernels``: ``q`` [B, G, R, D] and ``k``
    [B, G, n_kv, D] with f16 values in f32; returns [B, G, R, n_kv].  Products of f16 values are
    exact in f32; the whole steps are added in ggml's order: per lane and accumulator over the
    steps, then accumulators 0+2 and 1+3, their sum, then the lanes (AVX2's REDUCE: the 4-lane
    halves, then hadd twice; AVX-512's ``_mm512_reduce_add_ps`` as GCC has it: the 8-lane
    halves, the 4-lane halves, lanes 0+2 and 1+3, their sum; AVX512-FP16's f16
    ``_mm512_reduce_add_ph``: halves down to one lane); the leftover products join in double."""
    ops = _ops()
    lanes = kernels.dot_lanes
    add = _f16_add if kernels.dot_f16 else ops.add
    q, k = _ov().output_of(q), _ov().output_of(k)
    d = q.get_partial_shape()[3].get_length()
    n_simd = d - d % (4 * lanes)
    prod = ops.multiply(ops.unsqueeze(q, _ov().i64(3)), ops.unsqueeze(k, _ov().i64(2)))  # [B, G, R, n_kv, D]
    lead = ops.gather(ops.shape_of(prod), _ov().i64([0, 1, 2, 3]), _ov().i64(0))
    if n_simd:
        steps = n_simd // (4 * lanes)
        simd = prod if n_simd == d else _last_slice(prod, 0, n_simd)
        shape = ops.concat([lead, _ov().i64([steps, 4, lanes])], 0)
        parts = ops.split(ops.reshape(simd, shape, False), _ov().i64(4), steps).outputs()
        acc = _f16(parts[0]) if kernels.dot_f16 else parts[0]
        for part in parts[1:]:
            acc = add(acc, part)
        a = ops.split(acc, _ov().i64(5), 4).outputs()  # [.., 1, 1, lanes] each
        x = add(add(a[0], a[2]), add(a[1], a[3]))

        def halves(v: Any) -> Any:  # lane i + lane i + n/2
            h = ops.split(v, _ov().i64(6), 2).outputs()
            return add(h[0], h[1])

        if kernels.dot_f16:
            for _ in range(lanes.bit_length() - 1):
                x = halves(x)
            total = x
        elif lanes == 16:
            t = ops.split(halves(halves(x)), _ov().i64(6), 4).outputs()
            total = ops.add(ops.add(t[0], t[2]), ops.add(t[1], t[3]))
        else:
            t = ops.split(halves(x), _ov().i64(6), 4).outputs()
            total = ops.add(ops.add(t[0], t[1]), ops.add(t[2], t[3]))  # [B, G, R, n_kv, 1, 1, 1]
        if n_simd == d:
            return ops.reshape(total, lead, False).output(0)
    # the leftovers, after the whole steps' sum (ggml's REDUCE gives 0.0 where there is no step)
    tail = _last_slice(prod, n_simd, d)
    if n_simd:
        one = ops.concat([lead, _ov().i64([1])], 0)
        tail = ops.concat([ops.reshape(total, one, False), tail], -1)
    n_tail = d - n_simd + (1 if n_simd else 0)
    return ops.reshape(_sum_rounded_once(tail, n_tail), lead, False).output(0)


def _running_max(s: Any, n: int) -> Any:
    """The running maximum of ``s`` [..., n] along its last axis (Hillis-Steele: log2(n) steps)."""
    ops = _ops()
    step = 1
    while step < n:
        pad = ops.broadcast(_c(-np.inf), _shape_with_last(s, step))
        shifted = ops.concat([pad, _last_slice(s, 0, n - step)], -1)
        s = ops.maximum(s, shifted)
        step *= 2
    return s


def _last_slice(x: Any, start: int, stop: int) -> Any:
    i64 = _ov().i64
    return _ops().slice(x, i64([start]), i64([stop]), i64([1]), i64([-1]))


def flash_attn_f16_accumulated(scores: Any, v: Any, kernels: F16Kernels, sinks: Any = None) -> Any:
    """ggml's one-query-at-a-time flash attention with an f16 V, rounded as ``kernels`` round it:
    ``scores`` [B, G, R, n_kv] (scaled, soft-capped, ``-inf`` where masked), ``v`` [B, G, n_kv, Dv]
    (f16 values in f32), ``sinks`` None or per-row logits; returns [B, G, R, Dv] f32.  Per key, as
    ggml: a new maximum rescales the f16 accumulator by ``ms = expf(M_old − M)``, then
    ``acc = f16(fma(v, vs, acc))`` with ``vs = expf(s − M)`` and ``S = fma(S, ms, vs)``.  ``ms`` and
    ``vs`` come from the running maximum for all keys at once (1 and 0 where ggml does not scale or
    skips a key); only the roundings run in an OpenVINO Loop over the keys."""
    import openvino as ov

    ops = _ops()
    scores, v = _ov().output_of(scores), _ov().output_of(v)
    s_shape, v_shape = scores.get_partial_shape(), v.get_partial_shape()
    n_kv = s_shape[3].get_length()
    m_after = _running_max(scores, n_kv)
    m_before = ops.concat(
        [ops.broadcast(_c(-np.inf), _shape_with_last(scores, 1)), _last_slice(m_after, 0, n_kv - 1)], -1
    )
    unset = ops.equal(m_after, _c(-np.inf))  # no key yet: the accumulator is 0 whatever ms is
    skip = ops.equal(scores, _c(-np.inf))
    ms_all = exp_f32(ops.select(unset, _c(0.0), ops.subtract(m_before, m_after)))
    vs_all = ops.select(skip, _c(0.0), exp_f32(ops.select(skip, _c(0.0), ops.subtract(scores, m_after))))
    dv = v_shape[3].get_length()
    n_f16 = dv - dv % F16_STEP if kernels.vec_f16 else 0

    row_shape = ov.PartialShape([s_shape[0], s_shape[1], s_shape[2], 1])
    acc_shape = ov.PartialShape([s_shape[0], s_shape[1], s_shape[2], v_shape[3]])
    s_in = ops.parameter(row_shape, np.float32, name="S")
    a_in = ops.parameter(acc_shape, np.float32, name="acc")
    v_row = ops.parameter(ov.PartialShape([v_shape[0], v_shape[1], 1, v_shape[3]]), np.float32, name="v")
    per_key: dict[str, tuple[Any, Any]] = {}  # body Parameter and its values for all keys, by name

    def key_input(name: str, values: Any) -> Any:
        per_key[name] = (ops.parameter(row_shape, np.float32, name=name), values)
        return per_key[name][0]

    ms, vs = key_input("ms", ms_all), key_input("vs", vs_all)
    if n_f16 < dv:
        vs_hi_all, vs_lo_all = _split(vs_all)
        vs_hi, vs_lo = key_input("vs_hi", vs_hi_all), key_input("vs_lo", vs_lo_all)
        scaled = _f16(_mul_rn(a_in, ms))
        # f16(fma(v, vs, acc)): v has 11 significant bits, so v·vs_hi and v·vs_lo are exact and
        # the product's rounding error is (v·vs_hi − p) + v·vs_lo (Dekker)
        p = _mul_rn(v_row, vs)
        err = ops.add(ops.subtract(ops.multiply(v_row, vs_hi), p), ops.multiply(v_row, vs_lo))
        total, e = _two_sum(scaled, p)
        a_out = _f16(ops.add(total, ops.add(e, err)))
    if n_f16:  # f16 arithmetic on f16 operands: the products are exact in f32
        ms16, vs16 = key_input("ms16", _f16(ms_all)), key_input("vs16", _f16(vs_all))
        a16 = _f16_add(_f16(ops.multiply(a_in, ms16)), ops.multiply(v_row, vs16))
        a_out = a16 if n_f16 == dv else ops.select(ops.constant(np.arange(dv) < n_f16), a16, a_out)
    s_out = _fma(s_in, ms, vs)
    results = [ops.result(x) for x in (ops.constant(True), s_out, a_out)]
    params = [s_in, a_in, *(param for param, _ in per_key.values()), v_row]
    body = ov.Model(results, params, "flash_attn_f16_keys")

    loop = ops.loop(_ov().i64(n_kv), ops.constant(True))
    loop.set_function(body)
    loop.set_special_body_ports([-1, 0])
    rows = _shape_with_last(scores, 1)
    acc_dims = _shape_with_last(scores, dv)
    loop.set_merged_input(s_in, ops.broadcast(_c(0.0), rows).output(0), s_out.output(0))
    loop.set_merged_input(a_in, ops.broadcast(_c(0.0), acc_dims).output(0), a_out.output(0))
    for param, value in per_key.values():
        loop.set_sliced_input(param, _ov().output_of(value), 0, 1, 1, -1, 3)
    loop.set_sliced_input(v_row, v, 0, 1, 1, -1, 2)
    s = loop.get_iter_value(s_out.output(0), -1)
    a = loop.get_iter_value(a_out.output(0), -1)
    m = _last_slice(m_after, n_kv - 1, n_kv)
    if sinks is not None:  # ggml: after the f16 accumulator is widened, in f32
        sink_max = ops.greater(sinks, m)
        sink_ms = ops.select(sink_max, ops.exp(ops.subtract(m, sinks)), _c(1.0))
        sink_vs = ops.select(sink_max, _c(1.0), ops.exp(ops.subtract(sinks, m)))
        a = ops.multiply(a, sink_ms)
        s = _fma(s, sink_ms, sink_vs)
    inv = ops.select(ops.equal(s, _c(0.0)), _c(0.0), ops.divide(_c(1.0), s))
    return ops.multiply(a, inv).output(0)


def flash_attn_path(n_q: int, k_type: str, v_type: str) -> str:
    """Which of ggml's CPU flash-attention paths runs ``n_q`` query rows per head: "tiled" (f32
    throughout, Q not rounded), "f16" (the one-query path with an f16 V accumulator) or "f32" (the
    one-query path with any other V: ovkit's f32 attention with Q rounded to K's type)."""
    if n_q >= FA_TILE_Q and k_type == v_type and k_type in ("f16", "f32"):
        return "tiled"
    return "f16" if v_type == "f16" else "f32"


def grouped_sinks(sinks: Any, h_kv: int, r: int, n_q: int) -> Any:
    """Per-head sink logits [n_head] laid out as the grouped rows of :func:`flash_attn_f16_accumulated`
    ([1, h_kv, r·n_q, 1]; head ``h = kv_head·r + j``, row ``j·n_q + i``)."""
    ops = _ops()
    per_head = ops.reshape(sinks, _ov().i64([1, h_kv, r, 1]), False)
    rows = ops.broadcast(per_head, _ov().i64([1, h_kv, r, n_q]))
    return ops.reshape(rows, _ov().i64([1, h_kv, r * n_q, 1]), False)


#: The node params that ask the translation for llama.cpp CPU's numerics: :data:`PARAM` "ggml",
#: :data:`KERNELS_PARAM` the name of the build's :class:`F16Kernels`.  Params, not a global
#: switch: they are part of the graph's structure key, so a marked graph compiles on its own.
PARAM = "numerics"
KERNELS_PARAM = "ggml_kernels"


def mark(graph: GraphIR, kernels: F16Kernels | None = None) -> None:
    """precision="ggml": mark ``graph``'s FLASH_ATTN_EXT nodes for llama.cpp CPU's attention
    numerics (:func:`flash_attn_path`) with ``kernels`` (default: the reference build's,
    :func:`f16_kernels`)."""
    name = (kernels or f16_kernels()).name
    for t in graph.nodes:
        if t.op is Op.FLASH_ATTN_EXT:
            t.set_param(PARAM, "ggml")
            t.set_param(KERNELS_PARAM, name)
