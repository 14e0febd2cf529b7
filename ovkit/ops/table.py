"""The op catalogue as data (:class:`OpEntry`): one entry per ggml op, unary and GLU sub-op
registered upstream (39 + 7 + 3), then the ops upstream does not register: those ovkit translates
itself (``registered=False``; the upstream policy still refuses them) and SOLVE_TRI.
:mod:`ovkit.ops.coverage` joins it with the policy's gates and the interpreters (``docs/ops.md``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ovkit.ir import Op

#: test-backend-ops' default ``max_nmse_err``: the threshold of every op not given its own.
DEFAULT_MAX_NMSE = 1e-7


@dataclass(frozen=True, slots=True)
class OpEntry:
    """One catalogue row."""

    key: Op  #: the op (``Op.ADD``, or a sub-op member: ``Op.GELU``, ``Op.SWIGLU``)
    builders: tuple[str, ...]  #: ``ovkit.graph.Graph`` methods building it (ggml names minus ``ggml_``)
    params: str  #: the op's parameters (ggml builder arguments / op_params)
    openvino: str  #: ovkit's opset16 translation
    upstream: str  #: upstream's translation (op/*.cpp)
    notes: str = ""  #: upstream deviations and quirks (ovkit computes ggml's result)
    registered: bool = True  #: in upstream's op_table.cpp (the policy refuses the others)
    reason: str = ""  #: why it is not registered
    max_nmse: float = DEFAULT_MAX_NMSE  #: the NMSE its results are judged by (test-backend-ops')
    nmse_reason: str = ""  #: why ``max_nmse`` is not the default

    @property
    def kind(self) -> str:
        """``"op"``, or ``"unary"`` / ``"glu"`` for sub-ops."""
        return self.key.kind

    @property
    def ggml_name(self) -> str:
        """``GGML_OP_ADD``, ``GGML_UNARY_OP_GELU``, ``GGML_GLU_OP_SWIGLU``."""
        return self.key.ggml_name


#: test-backend-ops' own thresholds of ops upstream does not register: (max_nmse, why).
_OWN_THRESHOLDS: dict[Op, tuple[float, str]] = {
    op: (5e-4, f"test_{op.value.lower()}: 5e-4 (dot products in another order)")
    for op in (Op.OUT_PROD, Op.CONV_2D, Op.CONV_3D, Op.CONV_TRANSPOSE_2D)
}


def _ovkit_only(key: Op, builders: tuple[str, ...], params: str, openvino: str, notes: str = "") -> OpEntry:
    """An op upstream does not register that ovkit translates (its policy still refuses it)."""
    max_nmse, why = _OWN_THRESHOLDS.get(key, (DEFAULT_MAX_NMSE, ""))
    return OpEntry(
        key,
        builders,
        params,
        openvino,
        "none",
        notes,
        registered=False,
        reason="ovkit's own translation; upstream's op_table.cpp has none",
        max_nmse=max_nmse,
        nmse_reason=why,
    )


_BCAST = "b repeated to a (ggml_can_repeat: each a.ne[i] a multiple of b.ne[i]); f16/bf16 computed in f32"

# A table, one record per op (as the policy's gate tables): kept as written.
# fmt: off
ENTRIES: tuple[OpEntry, ...] = (
    # ---------------------------------------------------------------- elementwise
    OpEntry(Op.ADD, ("add",), "a, b", f"Add(a, Tile/broadcast(b)); {_BCAST}",
            "v1::Add (numpy broadcast); MoE expert-plane ADD chain → ReduceSum + Unsqueeze (op/add.cpp)",
            "Upstream broadcasts numpy-style only: a b dim that divides but is not 1 is rejected by the policy."),
    OpEntry(Op.SUB, ("sub",), "a, b", f"Subtract(a, Tile/broadcast(b)); {_BCAST}",
            "v1::Subtract (1:1 template)", "Same broadcast restriction as ADD."),
    OpEntry(Op.MUL, ("mul",), "a, b", f"Multiply(a, Tile/broadcast(b)); {_BCAST}",
            "v1::Multiply (1:1 template)", "Same broadcast restriction as ADD."),
    OpEntry(Op.DIV, ("div",), "a, b", f"Divide(a, Tile/broadcast(b)); {_BCAST}",
            "v1::Divide in f32 with precision-sensitive marks; src1 tiled; silu(x)/x → Sigmoid (op/div.cpp)",
            "GPU: a per-channel divisor [ne0,1,1,1] is rejected (fused GEMM yields inf)."),
    OpEntry(Op.ADD1, ("add1",), "a, b (scalar)", "Add(a, Reshape(b, [1,1,1,1]))", "v1::Add (1:1)"),
    OpEntry(Op.ADD_ID, ("add_id",), "a [ne0, n_used, n_tok], b [ne0, n_expert], ids i32 [n_used, n_tok]",
            "Gather(b, ids) → Reshape → Add",
            "Gather(bias, ids) → Reshape → Add, with converts (op/add_id.cpp)"),
    OpEntry(Op.SCALE, ("scale", "scale_bias"), "s, b (bias, 0 for scale)", "Multiply(x, s) [+ Add(b)]",
            "Multiply(scale) + Add(bias) when bias≠0; op_case 1: recurrent-state reset mask (op/scale.cpp)"),
    OpEntry(Op.SQR, ("sqr",), "a", "Multiply(x, x)", "Multiply(x, x) (op/sqr.cpp)"),
    OpEntry(Op.SQRT, ("sqrt",), "a", "Sqrt(x)", "v0::Sqrt"),
    OpEntry(Op.CLAMP, ("clamp",), "min, max", "Minimum(Maximum(x, min), max)",
            "v0::Clamp(min, max) from op_params (op/clamp.cpp)",
            "Revision M rejected the tensor named ffn_moe_weights_sum_clamped."),
    OpEntry(Op.FILL, ("fill",), "c (value)", "Broadcast(c, shape)",
            "Broadcast(f32 scalar, input shape) (op/fill.cpp)", "Registered twice in op_table.cpp."),
    # ---------------------------------------------------------------- layout
    OpEntry(Op.CONCAT, ("concat",), "dim (ggml dim, 0 = innermost)", "Concat(axis = 3 - dim)",
            "v0::Concat, axis = rank−1−dim, inputs converted to the output type (op/concat.cpp)",
            "Rejected: i64 output; GPU with bf16 output and a VIEW input."),
    OpEntry(Op.CONT, ("cont", "cont_1d", "cont_2d", "cont_3d", "cont_4d"), "target ne (cont_Nd)",
            "Reshape of the (strided) source value",
            "v1::Reshape to the dst shape, dynamic dim kept as −1 (op/cont.cpp)"),
    OpEntry(Op.CPY, ("cpy",), "a (src), b (dst: shape and type)",
            "Reshape to b's shape + Convert to b's type (f32→int truncates)",
            "Convert/Reshape; recurrent-state writeback via Slice/Concat with runtime rs_* inputs (op/cpy.cpp)",
            "Rejected: bf16 src/dst, quantized dst, element-count mismatch, non-contiguous/oversized output views; "
            "quirk: the test-backend-ops shapes [3,4,3,2], [1,4,3,2], [2,4,3,2]. ggml's result is a view of b; "
            "ovkit returns the copied value.",
            max_nmse=1e-6, nmse_reason="test_cpy: 1e-6 between float types (0 when src and dst types match)"),
    OpEntry(Op.RESHAPE, ("reshape", "reshape_1d", "reshape_2d", "reshape_3d", "reshape_4d"),
            "target ne (a must be contiguous)", "view over the base memory (contiguous: Reshape/Slice)",
            "v1::Reshape, 8 op_cases for KV/SSM layouts (op/reshape.cpp)",
            "Quirk: op name starting with ffn_norm_exps is rejected."),
    OpEntry(Op.VIEW, ("view_1d", "view_2d", "view_3d", "view_4d", "view_tensor"),
            "ne, nb (bytes), offset (bytes)",
            "ggml strides over the base memory: Reshape/Slice when packed, Transpose when a permutation, else Gather with constant indices",
            "usually a no-op (consumers re-slice); MoE/SSM cases: Slice/Reshape/Gather (op/view.cpp)",
            "Quirk: the tensor named selected_experts (TOPK_MOE test) is rejected."),
    OpEntry(Op.PERMUTE, ("permute",), "axis0..axis3 (source dim i → axis_i)",
            "strided view: Transpose of the base (or Gather when the base is itself strided)",
            "Transpose, or Reshape+Slice+Transpose for Q/KV-cache cases, op_cases 1-6 (op/permute.cpp)",
            "Rejected: bf16 output ('[GPU] Could not find a suitable kernel for transpose'); the translator throws for op_case 0."),
    OpEntry(Op.TRANSPOSE, ("transpose",), "a", "strided view: Transpose",
            "v1::Transpose, order from the stride ranking (op/transpose.cpp)", "Rejected: bf16 output."),
    OpEntry(Op.REPEAT, ("repeat",), "a, b (target shape)", "Tile", "v0::Tile (op/repeat.cpp)",
            "GPU: bf16 output rejected; the translator needs integer ratios."),
    OpEntry(Op.PAD, ("pad", "pad_ext", "pad_circular", "pad_ext_circular"),
            "p0..p3 (after) / lp0, rp0 .. lp3, rp3",
            "Pad CONSTANT 0; circular: a Gather per dim at (i − lp) mod ne",
            "v1::Pad CONSTANT 0; circular mode has its own path (op/pad.cpp)"),
    # ---------------------------------------------------------------- rows
    OpEntry(Op.GET_ROWS, ("get_rows",), "a [ne0, rows, ne2, ne3], b i32 [n, ne2, ne3]",
            "Gather(a, b, axis=2, batch_dims=2); f32 result (i32 for i32 a)",
            "v8::Gather (batch_dims variants, MoE dynamic batch); s_copy slicing via Slice (op/get_rows.cpp)",
            "Rejected: ne[3]≠1; GPU with bf16 src0; ne[0]==256 with Q4_K/Q5_K/Q4_1/Q5_1 src0 (f16 dequant misses 1e-7 NMSE)."),
    OpEntry(Op.SET_ROWS, ("set_rows",), "a (dst), b f32 rows, c i64/i32 row ids",
            "ScatterNDUpdate(a, [i3, i2, c], convert(b))",
            "stateless: ScatterUpdate into the KV tensor; stateful: ScatterElementsUpdate (op/set_rows.cpp)",
            "Rejected: ne[3]≠1 (checks shared with GET_ROWS)."),
    OpEntry(Op.SET, ("set", "set_1d", "set_2d"), "nb1, nb2, nb3, offset (bytes)",
            "ScatterNDUpdate on the flattened a at ggml's strided indices",
            "ScatterUpdate on the flattened dst (op/set.cpp)",
            "Rejected: nb1/nb2/nb3 differing from src0's; the translator needs an element-aligned offset."),
    # ---------------------------------------------------------------- matmul
    OpEntry(Op.MUL_MAT, ("mul_mat",), "a [K, N, ...] (weights), b [K, M, ...]",
            "MatMul(b, a, transpose_b) with a repeat-interleaved over batch (i02 = i12/r2); f16/bf16 a: b rounded to a's type first (ggml's vec_dot type); quantized a: its own decompression/compressed-matmul subgraph",
            "v0::MatMul(src1, src0, transpose_b=true), src0 converted to src1's type, GQA Unsqueeze+Broadcast+Reshape (op/mulmat.cpp)",
            "Rejected: ne[3] not broadcastable; both srcs VIEW; quirk: GPU quantized a named 'a' [256,1] with b named 'b' [256,64]. "
            "With quantized weights ggml's CPU also quantizes b to the vec_dot type (q8_0/q8_1/q8_K); ovkit's reference keeps b "
            "in f32 (differences ~1e-5 NMSE, inside test-backend-ops' 5e-4 for MUL_MAT).",
            max_nmse=5e-4,
            nmse_reason="test_mul_mat: 5e-4 (dot products accumulate in different orders; quantized src1)"),
    OpEntry(Op.MUL_MAT_ID, ("mul_mat_id",),
            "as [K, N, n_expert], b [K, n_used|1, n_tok], ids i32 [n_used, n_tok]",
            "Gather(experts, ids) + batched MatMul",
            "CPU static: internal GatherMatmul; GPU/dynamic: Gather+MatMul; packed MXFP4 decoded in-graph (op/mul_mat_id.cpp)",
            "Rejected: src0 ne[2]≤1; GPU bf16 src0; GPU when n_tokens·n_used·rows·k·4 B > 1 GiB.",
            max_nmse=5e-4, nmse_reason="test_mul_mat_id: 5e-4 (as mul_mat)"),
    # ---------------------------------------------------------------- norms, reductions
    OpEntry(Op.NORM, ("norm",), "eps", "(x − mean) / sqrt(var + eps) with ReduceMean",
            "ReduceMean/Subtract/Power/Sqrt/Divide (op/norm.cpp)"),
    OpEntry(Op.RMS_NORM, ("rms_norm",), "eps", "x · 1/sqrt(mean(x²) + eps)",
            "x · 1/sqrt(mean(x²)+eps); op_case 2 slices the state out of a fused GDN output (op/rms_norm.cpp)"),
    OpEntry(Op.L2_NORM, ("l2_norm",), "eps", "x · 1/max(sqrt(Σx²), eps)",
            "x / max(sqrt(Σx²), eps) (op/l2_norm.cpp)"),
    OpEntry(Op.SUM_ROWS, ("sum_rows",), "a", "ReduceSum(axis ne0, keep_dims)",
            "ReduceSum over the last axis, keep_dims (op/sum_rows.cpp)", "Rejected: src0 is PERMUTE."),
    OpEntry(Op.CUMSUM, ("cumsum",), "a", "CumSum(axis ne0)", "v0::CumSum on axis 3 (op/cumsum.cpp)"),
    OpEntry(Op.ARGSORT, ("argsort",), "order (0 ASC, 1 DESC)",
            "TopK(k = ne0, MIN/MAX, sort by value, stable) → indices i32", "v11::TopK (op/argsort.cpp)",
            "Any other order throws."),
    # ---------------------------------------------------------------- softmax / attention
    OpEntry(Op.SOFT_MAX, ("soft_max", "soft_max_ext", "soft_max_add_sinks"),
            "mask (f16/f32, rows ≥ ne1, tiled over dims 2,3), scale, max_bias (ALiBi), sinks",
            "Softmax(x·scale + slope_h·mask); sinks appended as an extra column and sliced off",
            "same scheme; stateful graphs use KQ_mask_sliced (op/softmax.cpp)",
            "ALiBi without a mask throws upstream (ggml's builder accepts no mask with max_bias>0 either in ovkit: GraphError). Revisions M/A rejected sinks; A rejected max_bias>0.",
            max_nmse=1e-6,
            nmse_reason="test_soft_max: 1e-6 (the 1024-wide ALiBi case measured 1.03e-7 upstream)"),
    OpEntry(Op.FLASH_ATTN_EXT, ("flash_attn_ext", "flash_attn_ext_add_sinks", "flash_attn_ext_set_prec"),
            "q [D, n_q, H, B], k/v [D(v), n_kv, H_kv, B], mask, scale, max_bias, logit_softcap, sinks",
            "MatMul(q, kᵀ)·scale [softcap·tanh] + slope·mask → Softmax (with sinks) → MatMul(·, v) → Transpose to [Dv, H, n_q, B], "
            "Q heads grouped per KV head; from 128 query rows (no sinks, softcap or ALiBi) KV broadcast + ScaledDotProductAttention, "
            "fully masked rows zeroed after an identity Select on IsNaN; f32 throughout, q rounded to k's type as ggml's CPU does",
            "Q/mask/scale converted to f16, KV broadcast for GQA + v13::ScaledDotProductAttention (or manual 5-D GQA), Transpose + Convert f32 (op/flash_attn_ext.cpp)",
            "Upstream computes in f16 (ovkit computes ggml's f32 result; ggml's CPU itself accumulates V·softmax in f16 "
            "when V is f16, ≈2e-7 NMSE from ovkit, inside test-backend-ops' 5e-4). Rejected: sinks; max_bias>0; logit_softcap≠0; Q/K/V not each PERMUTE←VIEW←base; gemma3n pattern with scale==1.",
            max_nmse=5e-4,
            nmse_reason="test_flash_attn_ext: 5e-4 (ggml's CPU kernel rounds Q/K/V through f16)"),
    # ---------------------------------------------------------------- rope
    OpEntry(Op.ROPE, ("rope_ext", "rope_multi"),
            "b i32 positions (4 planes for rope_multi), c freq factors, n_dims, mode, n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow, sections",
            "cos/sin of pos·θ_i (YaRN ramp, freq factors) computed in-graph; each pair as x·cos + swap(x)·(∓sin) over a pair axis (a Gather): NORMAL adjacent pairs, NEOX/MROPE/IMROPE halves, VISION pairs (i, i+n_dims) with per-section theta; the tail beyond n_dims copied. ovkit also builds MROPE (8) and VISION (24), which upstream rejects",
            "make_sin_cos per op; NORMAL: Flux-style Reshape+Split+Concat (GPU RoPE fusion); NEOX: VariadicSplit; IMROPE: 4 position planes (op/rope.cpp)",
            "Rejected: mode ∉ {0, 2, 40} (MROPE 8 and VISION 24); odd or out-of-range rope dims; output not f32/f16; a VIEW src0 with view_src.ne[1]≠ne[2]; IMROPE with freq factors, freq_scale≠1, ext_factor≠0 or attn_factor≠1."),
    # ---------------------------------------------------------------- conv-like, recurrent
    OpEntry(Op.IM2COL, ("im2col",), "a kernel, b data, s0, s1, p0, p1, d0, d1, is_2D, dst_type",
            "Pad + constant-index Gather of the patches (+ Convert to dst_type)",
            "Pad + v3::ExtractImagePatches + Reshape/Transpose (op/im2col.cpp)"),
    OpEntry(Op.SSM_CONV, ("ssm_conv",), "sx [d_conv−1+n_t, d_inner, n_s], c [d_conv, d_inner]",
            "Gather sliding windows · kernel → ReduceSum", "depthwise v1::GroupConvolution (op/ssm_conv.cpp)"),
    OpEntry(Op.GATED_DELTA_NET, ("gated_delta_net",),
            "q, k [S, H_k, T, n_s], v [S, H_v, T, n_s], g [1|S, H_v, T, n_s], beta, state [S, S, H_v, n_s], K snapshots",
            "the recurrence unrolled over tokens (decay, delta rule, rank-1 update, readout ·1/√S); output = attention ++ K state snapshots",
            "internal GatedDeltaNet (fused) with GQA head regrouping and state transposes; Loop reference in the file (op/gated_delta_net.cpp)",
            "Rejected: src2 PERMUTE; per-key 'kda' gate (g.ne[0]≠1); K>1 snapshots."),
    # ---------------------------------------------------------------- misc
    OpEntry(Op.DIAG, ("diag",), "a [n, 1, ...]", "Select(Eye, a, 0)", "Range/Equal/Select (op/diag.cpp)"),
    OpEntry(Op.TRI, ("tri",), "type (0 upper+diag, 1 upper, 2 lower+diag, 3 lower)",
            "Select(constant triangle mask, a, 0)", "Range + compare by tri_type + Select (op/tri.cpp)"),
    # ---------------------------------------------------------------- unary
    OpEntry(Op.GELU, ("gelu", "unary"), "a",
            "tanh-GELU of f16(x) rounded to f16 (ggml's GGML_GELU_FP16 table), ±10 cut-offs",
            "v7::Gelu with OV's default ERF approximation",
            "Deviation: upstream computes ERF-GELU; ggml's GELU is the tanh approximation (ovkit computes ggml's)."),
    OpEntry(Op.SIGMOID, ("sigmoid", "unary"), "a", "Sigmoid", "v0::Sigmoid",
            "Registered twice in op_table.cpp."),
    OpEntry(Op.SILU, ("silu", "unary"), "a", "x·Sigmoid(x)", "x·Sigmoid(x)"),
    OpEntry(Op.SOFTPLUS, ("softplus", "unary"), "a", "x > 20 ? x : log(1 + exp(x)) (ggml's form)",
            "Relu(x) + Log(1 + Exp(−|x|)) (stable form)"),
    OpEntry(Op.TANH, ("tanh", "unary"), "a", "Tanh", "v0::Tanh"),
    OpEntry(Op.EXP, ("exp", "unary"), "a", "Exp", "v0::Exp",
            "Rejected with an f32 output (test-backend-ops feeds x∈[-150,150] and exp overflows)."),
    OpEntry(Op.NEG, ("neg", "unary"), "a", "Negative", "v0::Negative"),
    # ---------------------------------------------------------------- GLU
    OpEntry(Op.SWIGLU, ("swiglu", "swiglu_swapped", "swiglu_split", "glu", "glu_split"), "a [, b], swapped",
            "silu(x0)·x1; one input: halves of ⌊ne0/2⌋ (exchanged when swapped)",
            "silu(a)·b; single input split by Slice, swapped honoured (op/glu_swiglu.cpp)",
            "Rejected: single input with odd ne0 ('triggers bug in ov gpu')."),
    OpEntry(Op.SWIGLU_OAI, ("swiglu_oai",), "a, b, alpha, limit",
            "x=min(a, limit); x·σ(alpha·x)·(clamp(b, −limit, limit) + 1)",
            "g=clamp(a, −∞, limit); g·σ(α·g)·(clamp(b,−limit,limit)+1)", "Same single-input rule as SWIGLU."),
    OpEntry(Op.GEGLU, ("geglu", "geglu_swapped", "geglu_split", "glu", "glu_split"), "a [, b], swapped",
            "ggml GELU(x0)·x1 (f16-table tanh GELU)",
            "v7::Gelu(a)·b (ERF); on NPU a is clamped to [−10, 10] first (op/glu_geglu.cpp)",
            "Deviation: ERF GELU upstream vs ggml's tanh GELU."),
    # ---------------------------------------------------------------- not registered
    *(
        _ovkit_only(key, builders, params, openvino, *notes)
        for key, builders, params, openvino, *notes in (
            (Op.SIN, ("sin",), "a", "Sin"),
            (Op.COS, ("cos",), "a", "Cos"),
            (Op.LOG, ("log",), "a", "Log"),
            (Op.LEAKY_RELU, ("leaky_relu",), "a, negative_slope, inplace", "Select(x > 0, x, slope·x)"),
            (Op.SUM, ("sum",), "a", "ReduceSum over every axis → [1]"),
            (Op.DUP, ("dup",), "a", "Reshape of the (strided) source value, as CONT"),
            (Op.MEAN, ("mean",), "a", "ReduceSum(axis ne0, keep_dims) / ne0"),
            (Op.ARGMAX, ("argmax",), "a (matrix)",
             "TopK(k=1, MAX, stable) of the reversed row (ties: the last max, as ggml)"),
            (Op.ABS, ("abs", "unary"), "a", "Abs"),
            (Op.SGN, ("sgn", "unary"), "a", "Sign"),
            (Op.STEP, ("step", "unary"), "a", "Convert(x > 0)"),
            (Op.ELU, ("elu", "unary"), "a", "Select(x > 0, x, exp(x) − 1)"),
            (Op.RELU, ("relu", "unary"), "a", "Relu"),
            (Op.GELU_QUICK, ("gelu_quick", "unary"), "a",
             "x·σ(1.702·x) of f16(x) rounded to f16 (ggml's GGML_GELU_QUICK_FP16 table)"),
            (Op.GELU_ERF, ("gelu_erf", "unary"), "a", "0.5·x·(1 + Erf(x/√2))"),
            (Op.HARDSWISH, ("hardswish", "unary"), "a", "x·min(1, max(0, (x + 3)/6))"),
            (Op.HARDSIGMOID, ("hardsigmoid", "unary"), "a", "min(1, max(0, (x + 3)/6))"),
            (Op.EXPM1, ("expm1", "unary"), "a", "exp(x) − 1"),
            (Op.XIELU, ("xielu",), "a, alpha_n, alpha_p, beta, eps",
             "Select(x > 0, α_p·x² + β·x, (expm1(min(x, eps)) − x)·α_n + β·x), ggml's softplus'd α"),
            (Op.FLOOR, ("floor", "unary"), "a", "Floor"),
            (Op.CEIL, ("ceil", "unary"), "a", "Ceiling"),
            (Op.ROUND, ("round", "unary"), "a", "Round(half_away_from_zero), C roundf"),
            (Op.TRUNC, ("trunc", "unary"), "a", "Select(x < 0, Ceiling, Floor)"),
            (Op.ACC, ("acc",), "a (contiguous), b, nb1, nb2, nb3, offset (bytes)",
             "GatherND + Add + ScatterNDUpdate on the flattened a at ggml's strided indices"),
            (Op.ROPE_BACK, ("rope_ext_back", "rope_multi_back"), "as ROPE",
             "the ROPE translation with sin negated (the inverse rotation)"),
            (Op.SOFT_MAX_BACK, ("soft_max_ext_back",), "a = dy, b = y, scale, max_bias (0)",
             "scale·y·(dy − ReduceSum(y·dy))"),
            (Op.SILU_BACK, ("silu_back",), "a = dy, b = x", "dy·σ(x)·(1 + x·(1 − σ(x)))"),
            (Op.CROSS_ENTROPY_LOSS_BACK, ("cross_entropy_loss_back",),
             "a = loss gradient [1], b = logits, c = labels", "(Softmax(b) − c)·a / rows"),
            (Op.DIAG_MASK_INF, ("diag_mask_inf",), "a, n_past", "Select(i > n_past + j, −inf, a)"),
            (Op.PAD_REFLECT_1D, ("pad_reflect_1d",), "a, p0, p1", "Pad REFLECT on dim 0"),
            (Op.ARANGE, ("arange",), "start, stop, step", "Constant start + i·step (f32)"),
            (Op.TIMESTEP_EMBEDDING, ("timestep_embedding",), "a timesteps [N], dim, max_period",
             "Concat(Cos(t·f), Sin(t·f)) with ggml's f32 frequencies f_j = max_period^(−j/half)"),
            (Op.COUNT_EQUAL, ("count_equal",), "a, b (i32)", "ReduceSum(Convert(Equal(a, b), i64))"),
            (Op.OPT_STEP_SGD, ("opt_step_sgd",), "a, grad, params [lr, wd]",
             "a·(1 − lr·wd) − lr·grad (the updated value; ggml writes it into a)"),
            (Op.RMS_NORM_BACK, ("rms_norm_back",), "a = dz, b = x, eps",
             "(dz − x·Σx·dz/(Σx² + n·eps))·1/sqrt(mean(x²) + eps), as ggml's CPU"),
            (Op.GET_ROWS_BACK, ("get_rows_back",), "a gradient rows, b i32 row ids, c (shape of the result)",
             "MatMul(OneHot(b)ᵀ, a): rows summed into their ids"),
            (Op.REPEAT_BACK, ("repeat_back",), "a, b (target shape)",
             "Reshape to [repeats, size] per dim + ReduceSum over the repeats"),
            (Op.UPSCALE, ("upscale", "upscale_ext", "interpolate"),
             "ne0..ne3, mode (NEAREST 0, BILINEAR 1, BICUBIC 2 | ALIGN_CORNERS 256 | ANTIALIAS 512)",
             "Gather (dims 2, 3: nearest) + two MatMuls with ggml's per-axis resampling matrices (its f32 formulas)"),
            (Op.OUT_PROD, ("out_prod",),
             "a [m, k, ...] (f32, f16 or quantized), b [p, k, ...] (f32, f16, bf16)",
             "MatMul(bᵀ, a) with a repeat-interleaved over b's batch",
             "ggml-python 0.0.45 has no f16-a kernel, asserts an f32 b and no broadcast for a quantized a; later ggml computes those as f32 (ovkit broadcasts every type as f32 a)."),
            (Op.TOP_K, ("top_k",), "k",
             "TopK(k, MAX, sort by value, stable) → i32, first two exchanged (ggml's CPU order; ggml leaves the order unspecified)"),
            (Op.ROLL, ("roll",), "shift0..shift3", "Roll (wrap-around, as numpy.roll)"),
            (Op.CONV_2D, ("conv_2d_direct",),
             "a kernel [KW, KH, IC, OC], b [W, H, IC, N], s0, s1, p0, p1, d0, d1",
             "Pad/crop to ggml's output size + Convolution (f16 kernel: input taps rounded to f16)"),
            (Op.CONV_2D_DW, ("conv_2d_dw_direct",),
             "a kernel [KW, KH, 1, C], b [W, H, C, N], stride0/1, pad0/1, dilation0/1",
             "Pad/crop + GroupConvolution (C groups)"),
            (Op.CONV_3D, ("conv_3d_direct",),
             "a [KW, KH, KD, IC·OC], b [W, H, D, IC·N], s0..2, p0..2, d0..2, c, n, oc",
             "Pad/crop + 3-D Convolution"),
            (Op.IM2COL_3D, ("im2col_3d",),
             "a [KW, KH, KD, OC·IC] (shape), b [W, H, D, IC·N], IC, s0..2, p0..2, d0..2, dst_type",
             "Gather with constant indices (a zero slot for padding taps)"),
            (Op.COL2IM_1D, ("col2im_1d",), "a columns [T_in, OC·K], s0, OC, p0",
             "ScatterElementsUpdate(sum) of the columns at their output times (i·s0 + k − p0), taps outside dropped"),
            (Op.CONV_TRANSPOSE_1D, ("conv_transpose_1d",),
             "a kernel [K, OC, IC], b [L, IC], s0 (p0 = 0, d0 = 1)",
             "ConvolutionBackpropData (f16 kernel: input rounded to f16)"),
            (Op.CONV_TRANSPOSE_2D, ("conv_transpose_2d_p0",),
             "a kernel [KW, KH, OC, IC], b [W, H, IC, N], stride", "ConvolutionBackpropData"),
            (Op.POOL_1D, ("pool_1d",), "op (0 MAX, 1 AVG), k0, s0, p0",
             "Gather of the windows (fill −FLT_MAX / 0) + ReduceMax / weighted ReduceSum; AVG over the in-bounds taps"),
            (Op.POOL_2D, ("pool_2d",), "op, k0, k1, s0, s1, p0, p1",
             "Gather of the windows + ReduceMax / weighted ReduceSum; AVG divides by k0·k1 (padding included, as ggml)"),
            (Op.REGLU, ("reglu", "reglu_swapped", "reglu_split", "glu", "glu_split"), "a [, b], swapped",
             "relu(x0)·x1"),
            (Op.GEGLU_ERF, ("geglu_erf", "geglu_erf_swapped", "geglu_erf_split", "glu", "glu_split"),
             "a [, b], swapped", "gelu_erf(x0)·x1"),
            (Op.GEGLU_QUICK, ("geglu_quick", "geglu_quick_swapped", "geglu_quick_split", "glu", "glu_split"),
             "a [, b], swapped", "gelu_quick(x0)·x1 (f16 table)"),
        )
    ),
    OpEntry(Op.SOLVE_TRI, ("solve_tri",), "a (n, n) triangular, b (n, m), left (must be True), lower, uni",
            "none: the policy rejects it (not registered); mode='reference' runs the numpy substitution",
            "op/solve_tri.cpp (Loop-based), commented out of op_table.cpp", registered=False,
            reason="translator exists (op/solve_tri.cpp, Loop-based) but is commented out: " "'solve_tri has accuracy issues on GPU'",
            max_nmse=1e-6, nmse_reason="test_solve_tri: 1e-6"),
)
# fmt: on

TABLE: dict[Op, OpEntry] = {e.key: e for e in ENTRIES}

#: Builders that take the sub-op as an argument (``unary(a, op)``, ``glu(a, op, swapped)``): they
#: build several ops, so :data:`BUILDER_OP` leaves them out.
GENERIC_BUILDERS = frozenset({"unary", "glu", "glu_split"})


@dataclass(frozen=True, slots=True)
class OpLists:
    """The op lists other modules need, derived from catalogue entries (never typed out)."""

    builder_op: dict[str, Op]  #: ``Graph`` builder name -> the op its node is (generic builders left out)
    unary_built: tuple[Op, ...]  #: the sub-ops ``Graph.unary`` builds (entries listing ``unary``)
    glu_built: tuple[Op, ...]  #: the sub-ops ``Graph.glu`` builds (every GLU entry)
    unary_cases: tuple[str, ...]  #: test-backend-ops' test_unary case names (the sub-ops ``unary`` builds)
    glu_cases: tuple[str, ...]  #: test-backend-ops' test_glu case names (entries listing ``glu``)


def op_lists(entries: Iterable[OpEntry]) -> OpLists:
    """The derived op lists of ``entries`` (in their order): adding an entry adds its op to each."""
    rows = tuple(entries)
    unary = tuple(e.key for e in rows if "unary" in e.builders)
    return OpLists(
        builder_op={b: e.key for e in rows for b in e.builders if b not in GENERIC_BUILDERS},
        unary_built=unary,
        glu_built=tuple(e.key for e in rows if e.kind == "glu"),
        unary_cases=tuple(str(o.sub_op) for o in unary),
        glu_cases=tuple(str(e.key.sub_op) for e in rows if "glu" in e.builders),
    )


LISTS = op_lists(ENTRIES)
#: ``Graph`` builder name -> the op its node is (the inverse of :attr:`OpEntry.builders`).
BUILDER_OP: dict[str, Op] = LISTS.builder_op
#: The unary sub-ops ``Graph.unary`` builds (XIELU has parameters: only ``Graph.xielu``), table order.
UNARY_BUILT: tuple[Op, ...] = LISTS.unary_built
#: The GLU sub-ops ``Graph.glu`` / ``glu_split`` build, table order.
GLU_BUILT: tuple[Op, ...] = LISTS.glu_built


def max_nmse(key: Op | str) -> float:
    """The NMSE threshold of op ``key`` (an ``Op`` or a ``Graph`` builder name); the default for
    anything the table does not list (a whole-block case)."""
    op = BUILDER_OP.get(key, key) if isinstance(key, str) else key
    entry = TABLE.get(op)  # type: ignore[call-overload]
    return entry.max_nmse if entry is not None else DEFAULT_MAX_NMSE


#: "Add an op": the (at most four) places an op of the ``Op`` enum is written, in order.  Everything
#: else is derived from them; ``tests/test_table.py`` adds an op in these places only and runs it.
ADD_AN_OP: tuple[tuple[str, str], ...] = (
    (
        "`ovkit/ops/table.py`",
        "its `OpEntry`: builders, params, translations, notes, `registered` (upstream's op_table.cpp has "
        "it: the policy's op membership reads it) and `max_nmse` when test-backend-ops gives it its own; "
        "then regenerate this page",
    ),
    (
        "`ovkit/graph.py`",
        "the `Graph` builder, ggml's name without `ggml_` (shape and type checks); a unary or GLU sub-op "
        "only a typed line in the `TYPE_CHECKING` block: its builders are made from the entry",
    ),
    (
        "`ovkit/ops/formulas.py` or `ovkit/ops/reference.py`",
        "an op the array namespace `ArrayOps` expresses (element-wise, unary, GLU, norms, gathers, "
        "windows): its formula, once for numpy and OpenVINO (`@formula(Op.X)`, a sub-op's activation in "
        "`ACTIVATIONS`); any other op: its numpy reference (`@reference(Op.X)`)",
    ),
    (
        "`ovkit/ops/translate.py`",
        "any other op: its opset16 translation (`@translator(Op.X)`; a formula is translated already)",
    ),
)
#: Where an op is checked and where upstream's rules about it go, when they apply.
TESTED_BY: tuple[tuple[str, str], ...] = (
    (
        "`ovkit/catalogue/curated/testops.py`",
        "its case in the test-ops set (a unary or GLU sub-op has one from the table)",
    ),
    (
        "`ovkit/catalogue/backend_ops.py`",
        "test-backend-ops' case builder, when test-backend-ops tests the op (unary and GLU sub-ops have theirs)",
    ),
    (
        "`ovkit/ops/policy.py`",
        "upstream's gates, `GATES[Op.X]`, when upstream registers the op with restrictions",
    ),
)
DERIVED = (
    "Derived from the table and the `Op` enum, never typed out: `Graph`'s unary and GLU builders and sub-op "
    "lists, the policy's op membership, the curated cases' NMSE thresholds and builder -> op map, "
    "test-backend-ops' unary/GLU case builders and the test-ops cases of unary/GLU sub-ops."
)
