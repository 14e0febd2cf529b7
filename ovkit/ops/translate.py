"""Graph node → ``openvino.opset16`` subgraph, one translator per op-table key.

Every value in the OpenVINO model is 4-D in numpy order ``[ne3, ne2, ne1, ne0]`` and has the
element type of its ggml tensor (bf16 inside the model; f32 at the Parameter/Result boundary).
Translators receive the node and its sources' values and may return any float type: the
builder converts the result to the node's type. Floating-point work is done in f32, as ggml's
CPU backend does, so the numbers follow ggml (not upstream's f16 shortcuts, see the op table).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset16 as ops

from ovkit.ir import GraphIR, Op, Tensor, TranslationGapError, ggml_index_map, interpret, round_to
from ovkit.ops import geometry
from ovkit.ops.formulas import (
    FORMULAS,
    Formula,
    attention_mask,
    attention_scores,
    quantized_write,
    register_in,
)
from ovkit.ops.ov_array import (
    OPENVINO,
    OV_TYPE,
    Out,
    const,
    expand_batch,
    f32,
    i64,
    output_of,
    reshape4,
    slice_dim,
    softmax_with_sinks,
    tile_to,
    to_type,
)
from ovkit.ops.rounding import rounded

TranslateFn = Callable[[Tensor, list[Any]], Any]

#: element type of the model's Parameters/Results per ggml type (bf16 crosses as f32).
BOUNDARY_TYPE: dict[str, Any] = {**OV_TYPE, "bf16": ov.Type.f32}

TRANSLATORS: dict[Op, TranslateFn] = {}


#: ``@translator(Op.X, ...)`` registers the opset16 translation of those op-table keys.
translator = functools.partial(register_in, TRANSLATORS)


# ---------------------------------------------------------------------------- helpers
def empty(t: Tensor) -> Out:
    """The value of a zero-size node: no elements to compute, an empty tensor of its shape."""
    return ops.constant(np.zeros(tuple(reversed(t.ne)), np.float32))


# ---------------------------------------------------------------------------- model building
def leaf_value(t: Tensor) -> Out:
    """A Constant leaf as an OpenVINO node (4-D)."""
    if t.is_quantized or hasattr(t.value, "to_ov_node"):
        return reshape4(f32(t.value.to_ov_node()), t.ne)
    arr = np.asarray(t.value).reshape(tuple(reversed(t.ne)))
    if t.dtype == "bf16":
        return ops.convert(const(round_to("bf16", arr)), ov.Type.bf16)
    return ops.constant(arr)


def view_value(t: Tensor, base: Out) -> Out:
    """The value of a view/permute/reshape ``t`` read from its base's memory, as ggml indexes it:
    Slices, Reshapes and a Transpose where the strides nest, else a Gather of constant indices."""
    base_t = t.base
    n_base = base_t.nelements
    start = t.elem_offset
    if t.is_contiguous:
        if start == 0 and t.nelements == n_base:
            return reshape4(base, t.ne)
        return reshape4(_element_range(base, n_base, start, start + t.nelements), t.ne)
    flat = ops.reshape(base, i64([n_base]), False)
    plan = _strided_plan(t)
    if plan is None:
        return ops.gather(flat, ops.constant(ggml_index_map(t)), i64(0))
    span, block, keep, order = plan
    if start + span > n_base:  # the padded block may run past the buffer: pad (never read)
        if base_t.dtype == "bf16":
            flat = ops.convert(flat, ov.Type.f32)  # exact; the bf16 view is converted back below
        zero = ops.convert(const(0.0), flat.get_output_element_type(0))
        flat = ops.pad(flat, i64([0]), i64([start + span - n_base]), "constant", zero)
        n_base = start + span
    src = _element_range(flat, n_base, start, start + span)
    y = ops.reshape(src, i64(block), False)
    if keep != block:
        y = ops.slice(y, i64([0] * len(block)), i64(keep), i64([1] * len(block)))
    y = ops.reshape(y, i64(keep[:-1]), False)
    if order != sorted(order):
        y = ops.transpose(y, i64(order))
    return reshape4(y, t.ne)


def _element_range(base: Out, n: int, start: int, stop: int) -> Out:
    """Elements ``start:stop`` of ``base`` (``n`` elements) in memory order, as rows of ``g`` =
    gcd(start, stop, n) elements: the CPU plugin runs a 1-D Slice with its reference kernel, about
    10x slower than a row Slice (a KV cache view: 2.2 ms against 0.15 ms), for the same values."""
    g = math.gcd(start, stop, n)
    rows = ops.reshape(base, i64([n // g, g]), False)
    return ops.slice(rows, i64([start // g]), i64([stop // g]), i64([1]), i64([0]))


def _strided_plan(t: Tensor) -> tuple[int, list[int], list[int], list[int]] | None:
    """For nested strides: (span in elements, padded block shape, kept sizes, transpose order)."""
    dims = [d for d in range(4) if t.ne[d] > 1]
    if not dims:
        return None
    stride = {d: t.elem_strides[d] for d in dims}
    if any(v <= 0 for v in stride.values()):
        return None
    desc = sorted(dims, key=lambda d: stride[d], reverse=True)
    block = [t.ne[desc[0]]]
    for outer, inner in zip(desc, desc[1:], strict=False):
        so, si = stride[outer], stride[inner]
        if so % si or so // si < t.ne[inner]:
            return None
        block.append(so // si)
    block.append(stride[desc[-1]])
    keep = [t.ne[d] for d in desc] + [1]
    order = [desc.index(d) for d in sorted(dims, reverse=True)]
    return t.ne[desc[0]] * stride[desc[0]], block, keep, order


def build_model(
    graph: GraphIR, outputs: Sequence[Tensor], leaves: Sequence[Tensor], *, manual_gqa: bool | None = None
) -> Any:
    """The ``openvino.Model`` computing ``outputs``; Parameters in the order of ``leaves``.
    ``manual_gqa``: GGML_OPENVINO_MANUAL_GQA_ATTN as resolved for the device, which picks
    FLASH_ATTN_EXT's form (:func:`attention_form`; None: ovkit's own)."""
    translators: dict[Op, TranslateFn] = {
        **TRANSLATORS,
        Op.FLASH_ATTN_EXT: functools.partial(_flash_attn_ext, manual_gqa=manual_gqa),
    }
    params = [ops.parameter(list(reversed(t.ne)), BOUNDARY_TYPE[t.dtype], name=t.name) for t in leaves]
    bound = {  # the values of the input leaves
        t.id: ops.convert(p, ov.Type.bf16) if t.dtype == "bf16" else p
        for t, p in zip(leaves, params, strict=True)
    }
    named = {p.get_name() for p in params}

    def leaf(t: Tensor) -> Out:
        return bound[t.id] if t.id in bound else leaf_value(t)

    def node(t: Tensor, xs: list[Any]) -> Out:
        fn = translators.get(t.op_key)
        if fn is None:
            raise TranslationGapError(f"{t.describe()}: no OpenVINO translation for {t.op_key}")
        out = to_type(empty(t) if 0 in t.ne else fn(t, xs), t.dtype)
        _name_nodes(out, f"{t.op_key} {t.name!r}" if t.name else f"{t.op_key} #{t.id}", named)
        return out

    def view(t: Tensor, vs: dict[int, Out]) -> Out:
        return to_type(empty(t) if 0 in t.ne else view_value(t, vs[t.memory.id]), t.dtype)

    values = interpret(graph, outputs, leaf, view, node)
    results = [to_type(values[o.id], "f32") if o.dtype == "bf16" else values[o.id] for o in outputs]
    shaped = [
        ops.result(ops.reshape(v, i64(list(o.shape)), False)) for v, o in zip(results, outputs, strict=True)
    ]
    return ov.Model(shaped, params, "ovkit_graph")


def _name_nodes(out: Out, label: str, named: set[str]) -> None:
    """Give ``label`` to every OpenVINO node made for one ggml node (the ones not named yet), so
    OpenVINO's per-node profile reads ``MUL_MAT #3`` instead of ``MatMul_16``."""
    stack = [output_of(out).get_node()]
    while stack:
        node = stack.pop()
        if node.get_name() in named:
            continue
        named.add(node.get_name())
        if node.get_type_name() not in ("Parameter", "Constant"):
            node.set_friendly_name(label)
        stack.extend(i.get_source_output().get_node() for i in node.inputs())


def model_inputs(names: Sequence[str], feed: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The arrays to feed the model's Parameters, in order (bf16 as f32)."""
    return [np.ascontiguousarray(feed[n]) for n in names]


# ---------------------------------------------------------------------------- elementwise
def _ov_formula(fn: Formula) -> TranslateFn:
    return lambda t, xs: fn(OPENVINO, t, xs)


for _op, _fn in FORMULAS.items():
    translator(_op)(_ov_formula(_fn))


#: The translations that are one opset16 expression.
ONE_EXPRESSION: dict[tuple[Op, ...], Callable[[Tensor, list[Any]], Any]] = {
    (Op.CUMSUM,): lambda t, xs: ops.cum_sum(f32(xs[0]), i64(3)),
    (Op.REPEAT,): lambda t, xs: tile_to(xs[0], t.operand(0).ne, t.ne),
    (Op.ROLL,): lambda t, xs: ops.roll(
        xs[0], i64([t.params[f"shift{d}"] for d in (3, 2, 1, 0)]), i64([0, 1, 2, 3])
    ),
    (Op.COUNT_EQUAL,): lambda t, xs: ops.reduce_sum(
        ops.reshape(ops.convert(ops.equal(xs[0], xs[1]), ov.Type.i64), i64([-1]), False), i64([0]), True
    ),
}
for _keys, _one in ONE_EXPRESSION.items():
    translator(*_keys)(_one)


# ---------------------------------------------------------------------------- matmul
@translator(Op.MUL_MAT)
def _mul_mat(t: Tensor, xs: list[Out]) -> Out:
    a = t.operand(0)
    fused = getattr(a.value, "ov_mul_mat", None) if a.is_leaf and a.is_quantized else None
    if fused is not None and a.ne[2] == 1 and a.ne[3] == 1:
        # the quantized weight builds the matmul form the CPU plugin keeps compressed
        return reshape4(fused(output_of(f32(xs[1]))), t.ne)
    return FORMULAS[Op.MUL_MAT](OPENVINO, t, xs)


# ---------------------------------------------------------------------------- rows
@translator(Op.GET_ROWS)
def _get_rows(t: Tensor, xs: list[Out]) -> Out:
    a, b = t.operand(0), t.operand(1)
    gather_rows = getattr(a.value, "ov_get_rows", None) if a.is_leaf and a.is_quantized else None
    if gather_rows is not None and a.ne[2] == 1 and a.ne[3] == 1:
        # the quantized weight gathers from its compressed table (never folded to f32)
        return reshape4(gather_rows(ops.convert(xs[1], ov.Type.i64).output(0)), t.ne)
    data = xs[0] if a.dtype == "i32" else f32(xs[0])
    # row b[i10, i11, i12] of a's batch (i11, i12): one flat row index into a's [a3·a2·a1, a0] rows
    # (a plain axis-0 Gather: the CPU plugin crashes on some batch_dims=2 Gathers)
    rows = ops.reshape(data, i64([-1, a.ne[0]]), False)
    idx = ops.convert(ops.reshape(xs[1], i64([b.ne[2], b.ne[1], b.ne[0]]), False), ov.Type.i64)
    if a.ne[2] * a.ne[3] > 1:
        base = (np.arange(b.ne[2])[:, None, None] * a.ne[2] + np.arange(b.ne[1])[None, :, None]) * a.ne[1]
        idx = ops.add(idx, const(base, np.int64))
    return reshape4(ops.gather(rows, idx, i64(0)), t.ne)


@translator(Op.SET_ROWS)
def _set_rows(t: Tensor, xs: list[Out]) -> Out:
    b, c = t.operand(1), t.operand(2)
    dst = xs[0]
    if 0 in b.ne:  # no rows to set
        return dst
    # [b3, b2, b1, b0] rows converted to dst type
    if t.is_quantized:
        rows = quantized_write(OPENVINO, xs[1], t.dtype, list(reversed(b.ne)))
    else:
        rows = to_type(f32(xs[1]), t.dtype)
    # row index of b's row (i1, i2, i3): c[i1, i2 % c.ne1, i3 % c.ne2]
    idx = ops.convert(xs[2], ov.Type.i64)
    idx = tile_to(idx, c.ne, (c.ne[0], b.ne[2], b.ne[3], 1))  # [1, b3, b2, b1] after tiling
    idx = ops.reshape(idx, i64([b.ne[3], b.ne[2], b.ne[1]]), False)
    batch = np.moveaxis(np.indices((b.ne[3], b.ne[2], b.ne[1]))[:2], 0, -1)  # (i3, i2) of each of b's rows
    coords = ops.concat([const(batch, np.int64), ops.unsqueeze(idx, i64(3))], 3)
    return ops.scatter_nd_update(dst, coords, rows)


@translator(Op.SET, Op.ACC)
def _set(t: Tensor, xs: list[Out]) -> Out:
    b = t.operand(1)
    idx = const(geometry.set_index(t).reshape(-1, 1), np.int64)
    flat = ops.reshape(xs[0], i64([t.nelements]), False)
    upd = ops.reshape(to_type(xs[1], t.dtype), i64([b.nelements]), False)
    if t.op == Op.ACC:
        upd = ops.add(ops.gather_nd(flat, idx), upd)
    return reshape4(ops.scatter_nd_update(flat, idx, upd), t.ne)


@translator(Op.GET_ROWS_BACK)
def _get_rows_back(t: Tensor, xs: list[Out]) -> Out:
    a, b = t.operand(0), t.operand(1)
    rows = slice_dim(ops.reshape(f32(xs[0]), i64([1, 1, a.ne[1], a.ne[0]]), False), 1, 0, b.ne[0])
    rows = ops.reshape(rows, i64([b.ne[0], a.ne[0]]), False)  # ggml reads the first b.ne[0] rows
    onehot = ops.one_hot(ops.reshape(xs[1], i64([-1]), False), i64(t.ne[1]), const(1.0), const(0.0), -1)
    return reshape4(ops.matmul(onehot, rows, True, False), t.ne)  # [rows of the result, ne0]


# ---------------------------------------------------------------------------- reductions
@translator(Op.ARGMAX)
def _argmax(t: Tensor, xs: list[Out]) -> Out:
    n = t.operand(0).ne[0]
    rev = ops.slice(f32(xs[0]), i64([-1]), i64([-(n + 1)]), i64([-1]), i64([3]))  # ties: the last max
    idx = ops.topk(rev, i64(1), 3, "max", "value", "i32", stable=True).output(1)
    return reshape4(ops.subtract(const(n - 1, np.int32), idx), t.ne)


# ---------------------------------------------------------------------------- mul_mat_id
@translator(Op.MUL_MAT_ID)
def _mul_mat_id(t: Tensor, xs: list[Out]) -> Out:
    as_t = t.operand(0)
    if as_t.is_leaf and as_t.is_quantized:  # precision="ggml": the experts' q8 activations
        xs = [xs[0], as_t.value.expert_activations(f32(xs[1])), xs[2]]
    return FORMULAS[Op.MUL_MAT_ID](OPENVINO, t, xs)


# ---------------------------------------------------------------------------- softmax / attention
# FLASH_ATTN_EXT's forms (``openvino/op/flash_attn_ext.cpp`` of the backend): ``grouped``:
# ovkit's own MatMul/Softmax, Q heads grouped per KV head ([B, H_kv, r·n_q, D]); ``manual``:
# GGML_OPENVINO_MANUAL_GQA_ATTN on, the backend's MatMul/Softmax on 5-D Q [B, H_kv, r, n_q, D]
# against K/V [B, H_kv, 1, n_kv, D] broadcast over r; ``sdpa``: the flag off, K/V broadcast to the
# H heads and OpenVINO's ScaledDotProductAttention.  The values are ggml's in every form.


#: ovkit's own form takes SDPA from this many query rows on: the CPU plugin's fused kernel halves
#: a long prefill's attention (SmolLM2, 512 rows: 291 -> 159 ms), is even at 64 rows, and at 16
#: rows or one (decode) costs 3x the grouped MatMuls (its K/V broadcast to every query head)
SDPA_MIN_QUERIES = 128


def attention_form(manual_gqa: bool | None, n_head: int, n_head_kv: int, plain: bool, n_q: int = 1) -> str:
    """The form of one FLASH_ATTN_EXT: ``manual_gqa`` is GGML_OPENVINO_MANUAL_GQA_ATTN as resolved
    for the device (None: ovkit's own form, SDPA for ``n_q`` >= SDPA_MIN_QUERIES query rows, else
    grouped); the backend takes the manual form only for grouped queries (r > 1, H_kv > 1), else
    SDPA.  ``plain``: no sinks, softcap or ALiBi — the backend's policy refuses the others, and
    SDPA has none of them, so they keep ovkit's form."""
    if not plain:
        return "grouped"
    if manual_gqa is None:
        return "sdpa" if n_q >= SDPA_MIN_QUERIES else "grouped"
    return "manual" if manual_gqa and n_head_kv > 1 and n_head > n_head_kv else "sdpa"


def _attention_probs(t: Tensor, xs: list[Out], s: Out) -> Out:
    """ggml's softmax of the raw scores ``s`` [B, H, n_q, n_kv]: scale, softcap, mask (ALiBi), sinks;
    a row whose scores (and sink) are all -inf gives 0, not NaN."""
    n_h = t.operand(0).ne[2]
    s = attention_scores(OPENVINO, t, xs, s)
    sinks = xs[4] if len(xs) > 4 else None
    if sinks is None:
        # a -inf sink column adds exp(-inf) = 0 to every denominator: the numbers are unchanged, and
        # the Concat keeps the CPU plugin from tokenizing the chain into its MHA snippet, which
        # miscomputes f16 K/V when n_q equals the head count (OpenVINO 2026.4.1)
        sinks = const(np.full(n_h, -np.inf, dtype=np.float32))
    # ggml: a row whose scores (and sink) are all -inf has S = 0 and outputs 0, not NaN. Such rows
    # are made finite before the softmax and zeroed after (a NaN would survive a fused Select).
    live = ops.logical_or(
        _live_rows(s), ops.greater(ops.reshape(f32(sinks), i64([1, n_h, 1, 1]), False), const(-np.inf))
    )
    p = softmax_with_sinks(ops.select(live, s, const(0.0)), sinks)
    return ops.multiply(p, ops.convert(live, ov.Type.f32))


def _live_rows(x: Out) -> Out:
    """The rows of ``x`` [.., n] with a value above -inf (keepdims), exact in every inference
    precision: a ReduceMax against a lowest-finite sentinel is not (in bf16 the sentinel rounds
    to -inf while ReduceMax of an all -inf row gives bf16's lowest finite value)."""
    return ops.reduce_logical_or(ops.greater(x, const(-np.inf)), i64([3]), True)


def _flash_attn_ext(t: Tensor, xs: list[Out], manual_gqa: bool | None = None) -> Out:
    """ggml's attention in the form :func:`attention_form` picks (``manual_gqa``: see there)."""
    q_t, k_t, v_t = t.operand(0), t.operand(1), t.operand(2)
    q, k, v = f32(xs[0]), f32(xs[1]), f32(xs[2])
    ggml_path = None
    if t.params.get("numerics") == "ggml":  # precision="ggml": ovkit.ops.ggml_numerics.mark
        from ovkit.ops import ggml_numerics

        ggml_path = ggml_numerics.flash_attn_path(q_t.ne[1], k_t.dtype, v_t.dtype)
    if k_t.dtype in ("f16", "bf16") and ggml_path != "tiled":  # ggml's tiled path keeps Q f32
        q = rounded(q, k_t.dtype)
    # batch dim 3: repeat-interleave K/V (the query head h reads KV head h // r in every form)
    k = expand_batch(k, k_t.ne, (k_t.ne[0], k_t.ne[1], k_t.ne[2], q_t.ne[3]))
    v = expand_batch(v, v_t.ne, (v_t.ne[0], v_t.ne[1], v_t.ne[2], q_t.ne[3]))
    n_b, n_h, n_q, n_kv, h_kv = q_t.ne[3], q_t.ne[2], q_t.ne[1], k_t.ne[1], k_t.ne[2]
    r = n_h // h_kv
    sinks = xs[4] if len(xs) > 4 else None
    plain = sinks is None and t.params["logit_softcap"] == 0 and t.params["max_bias"] <= 0
    # precision="ggml" keeps the grouped MatMuls (its tiled path: ggml's f32 attention)
    form = "grouped" if ggml_path else attention_form(manual_gqa, n_h, h_kv, plain, n_q)
    if form == "sdpa":
        out = _sdpa(t, xs, q, k, v)
    else:
        # grouped: the q heads of each KV head (h = kv_h·r + j) as its rows, instead of broadcasting
        # K/V (the CPU plugin miscomputes a broadcast-GQA MatMul/Softmax/MatMul chain for r = 4);
        # manual, the backend's GQA: 5-D, the MatMuls broadcast K/V over the r query heads
        rows, kv = ([r, n_q], [1]) if form == "manual" else ([r * n_q], [])
        kg, vg = (
            ops.reshape(x, i64([n_b, h_kv, *kv, n_kv, d]), False) for x, d in ((k, k_t.ne[0]), (v, v_t.ne[0]))
        )
        qg = ops.reshape(q, i64([n_b, h_kv, *rows, q_t.ne[0]]), False)
        if ggml_path == "f16":  # llama.cpp CPU's one-query attention: an f16 K's Q·K in
            # ggml_vec_dot_f16's order, V·softmax accumulated in f16 key by key
            kernels = ggml_numerics.kernels_named(t.params[ggml_numerics.KERNELS_PARAM])
            f16_k = k_t.dtype == "f16"
            s = ggml_numerics.dot_f16_scores(qg, kg, kernels) if f16_k else ops.matmul(qg, kg, False, True)
            s = attention_scores(OPENVINO, t, xs, ops.reshape(s, i64([n_b, n_h, n_q, n_kv]), False))
            row_sinks = None if sinks is None else ggml_numerics.grouped_sinks(f32(sinks), h_kv, r, n_q)
            s = ops.reshape(s, i64([n_b, h_kv, r * n_q, n_kv]), False)
            out = ggml_numerics.flash_attn_f16_accumulated(s, vg, kernels, row_sinks)
        else:
            s = ops.reshape(ops.matmul(qg, kg, False, True), i64([n_b, n_h, n_q, n_kv]), False)
            p = ops.reshape(_attention_probs(t, xs, s), i64([n_b, h_kv, *rows, n_kv]), False)
            out = ops.matmul(p, vg, False, False)
        out = ops.reshape(out, i64([n_b, n_h, n_q, v_t.ne[0]]), False)
    return ops.transpose(out, i64([0, 2, 1, 3]))  # ne [Dv, H, n_q, B]


translator(Op.FLASH_ATTN_EXT)(_flash_attn_ext)  # build_model passes manual_gqa


def _sdpa(t: Tensor, xs: list[Out], q: Out, k: Out, v: Out) -> Out:
    """The backend's SDPA path: K/V broadcast to the query heads (its ``tile_kv``), then
    ScaledDotProductAttention with the mask; a fully masked row gives ggml's 0 (SDPA: NaN)."""
    q_t, k_t = t.operand(0), t.operand(1)
    n_h, h_kv = q_t.ne[2], k_t.ne[2]
    if n_h > h_kv > 1:  # query head h reads KV head h // r
        k, v = (
            expand_batch(x, (d, k_t.ne[1], h_kv, q_t.ne[3]), (d, k_t.ne[1], n_h, q_t.ne[3]))
            for x, d in ((k, k_t.ne[0]), (v, t.operand(2).ne[0]))
        )
    scale = const(np.float32(t.params["scale"]))
    live = None
    m = attention_mask(OPENVINO, t, 3, xs, q_t.ne[1], q_t.ne)
    if m is not None:
        live = _live_rows(m)
        out = ops.scaled_dot_product_attention(q, k, v, ops.select(live, m, const(0.0)), scale, False)
    else:
        out = ops.scaled_dot_product_attention(q, k, v, None, scale, False)
    # IsNaN has no snippet kernel, so this identity Select keeps every op after it out of the CPU
    # plugin's MHA snippet (what SDPA becomes on AVX-512 CPUs), which in OpenVINO 2026.4.1
    # miscomputes an element-wise op fused after it whose operand is one value per query row (the
    # zeroing Select below) from head size 128 on in f32, and the Transpose/Reshape after it for
    # an f16-rounded Q with n_q equal to the head count
    out = ops.select(ops.is_nan(out), const(np.nan), out)
    return out if live is None else ops.select(live, out, const(0.0))


# ---------------------------------------------------------------------------- conv-like
@translator(Op.COL2IM_1D)
def _col2im_1d(t: Tensor, xs: list[Out]) -> Out:
    t_in, oc, k, idx = geometry.col2im_1d(t)
    cols = ops.reshape(f32(xs[0]), i64([t_in, oc, k]), False)
    cols = ops.reshape(ops.transpose(cols, i64([1, 0, 2])), i64([oc, t_in * k]), False)
    zeros = const(np.zeros((oc, t.ne[0] + 1), np.float32))
    out = ops.scatter_elements_update(zeros, const(idx, np.int64), cols, i64(1), "sum")
    return reshape4(ops.slice(out, i64([0, 0]), i64([oc, t.ne[0]]), i64([1, 1])), t.ne)
