"""The op-support policy of the upstream ggml-openvino backend, as data: global gates, per-op gates, registered op tables.

``check_op(op, device_class)`` answers what upstream's ``ggml_backend_openvino_device_supports_op``
answers, with a human-readable reason for every rejection: the global gates (:data:`GLOBAL_GATES`)
run first, in upstream's order, then the op's own (:data:`GATES`).  The deliberate differences
from upstream (device classes, quirks, the revisions N, V and P) are listed by
:func:`render_markdown`, which writes ``docs/policy.md``.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ovkit.dtypes import DTYPES, QUANT_TYPES, is_quantized
from ovkit.ir import Op, OpInfo, RopeType
from ovkit.ops.table import ENTRIES, TABLE

if TYPE_CHECKING:
    from ovkit.ir import GraphIR, Tensor


class Revision(enum.StrEnum):
    """Upstream states the policy reproduces."""

    N = "N"  #: aee56b3ab (2026-08-13): the default
    V = "V"  #: older state (close to mirror master 5735e10c4) that produced upstream-support-verdicts.csv
    #: the ggml-openvino vendored by ggml-python 0.0.45 (the real backend scripts/install-upstream
    #: builds): V's rules without GLU SWIGLU_OAI and the CPY view-fit gate, plus a MoE softmax quirk
    P = "P"


ALL_REVISIONS = frozenset(Revision)

# ----------------------------------------------------------------------------------------------
# Gate records


#: A gate's check: returns None when the op passes, else the offending value (text).
Check = Callable[[OpInfo], str | None]


@dataclass(frozen=True, slots=True)
class Gate:
    """One support restriction: the op is rejected when ``check`` returns a detail string."""

    key: str  #: stable id, e.g. ``"rope.mode"``
    description: str  #: what must hold, in words (used in the rejection reason)
    check: Check = field(repr=False, compare=False)
    device_class: str | None = None  #: applies only on this device class, None = all
    quirk: bool = False  #: upstream name/shape-keyed quirk: applied only when upstream_exact
    revisions: frozenset[Revision] = ALL_REVISIONS  #: the upstream states having this gate
    note: str = ""  #: upstream background (source, error text)
    ops: frozenset[str] = frozenset()  #: for op-specific global gates: the table keys they concern

    def applies(self, device_class: str, upstream_exact: bool, revision: Revision) -> bool:
        if revision not in self.revisions:
            return False
        if self.quirk and not upstream_exact:
            return False
        return self.device_class is None or self.device_class == device_class


@dataclass(frozen=True, slots=True)
class SupportDecision:
    """Whether an op is supported, and the human-readable reason when it is not."""

    supported: bool
    reason: str = ""
    gate: str = ""  #: the key of the rejecting gate ("" when supported)

    def __bool__(self) -> bool:
        return self.supported


# ----------------------------------------------------------------------------------------------
# Registered op tables (upstream's op_table.cpp): the catalogue's ``registered`` entries

#: The ops, unary and GLU sub-ops registered in revision N (NONE, a leaf, is always supported).
REGISTERED_N: frozenset[Op] = frozenset(e.key for e in ENTRIES if e.registered) | {Op.NONE}
#: What revision N registers that the older V and P do not.
_ADDED_IN_N = frozenset(
    {Op.FILL, Op.SQR, Op.SQRT, Op.CUMSUM, Op.DIAG, Op.TRI, Op.SET, Op.SIGMOID, Op.EXP, Op.NEG}
)
REGISTERED: dict[Revision, frozenset[Op]] = {
    Revision.N: REGISTERED_N,
    Revision.V: REGISTERED_N - _ADDED_IN_N,
    Revision.P: REGISTERED_N - _ADDED_IN_N - {Op.SWIGLU_OAI},
}

#: The allowed tensor types (a global gate of supports_op): the plain types and the quantized
#: types upstream extracts.  Revisions V and P lack MXFP4.
ALLOWED_TYPES_N = frozenset(DTYPES) | {q.lower() for q in QUANT_TYPES}
ALLOWED_TYPES: dict[Revision, frozenset[str]] = {
    Revision.N: ALLOWED_TYPES_N,
    Revision.V: ALLOWED_TYPES_N - {"mxfp4"},
    Revision.P: ALLOWED_TYPES_N - {"mxfp4"},
}

ROPE_MODE_NAMES: dict[int, str] = {m.value: m.name for m in RopeType}
MUL_MAT_ID_TMP_LIMIT = 1 << 30  #: 1 GiB, the GPU temporary limit of MUL_MAT_ID


def _ne(t: OpInfo | None) -> str:
    return "absent" if t is None else "[" + ",".join(str(x) for x in t.ne) + "]"


def _when(cond: Callable[[OpInfo], bool], detail: Callable[[OpInfo], str | None]) -> Check:
    """A check rejecting (with ``detail``) where ``cond`` holds."""
    return lambda op: detail(op) if cond(op) else None


def _s(op: OpInfo, i: int) -> OpInfo:
    s = op.src(i)
    if s is None:
        raise ValueError(f"{op.label} needs src{i}, which is absent")
    return s


def _srcs(op: OpInfo) -> list[tuple[int, OpInfo]]:
    """The present sources up to the first absent one (upstream loops break at NULL)."""
    present = itertools.takewhile(lambda s: s is not None, op.srcs)
    return list(enumerate(s for s in present if s is not None))


def _has_view_input(op: OpInfo) -> str | None:
    return next((f"src{i} is a VIEW" for i, s in _srcs(op) if s.is_view), None)


def _first(details: Iterable[str | None]) -> str | None:
    return next((d for d in details if d is not None), None)


def _rms_norm_noncontig_view(op: OpInfo) -> str | None:
    bad = (i for i, s in _srcs(op) if s.is_view and not s.is_contiguous)
    return _first(f"src{i} is a non-contiguous VIEW" for i in bad) if op.op == Op.RMS_NORM else None


def _binary_incompatible(op: OpInfo) -> str | None:
    a, b = _s(op, 0), _s(op, 1)
    bad = (i for i in range(4) if a.ne[i] != b.ne[i] and a.ne[i] != 1 and b.ne[i] != 1)
    return _first(f"src0 ne={_ne(a)} vs src1 ne={_ne(b)} differ in dim {i} and neither is 1" for i in bad)


def _set_strides(op: OpInfo) -> str | None:
    nb = _s(op, 0).strides
    bad = ((j, op.param(f"nb{j}", nb[j])) for j in (1, 2, 3))
    return _first(f"nb{j}={v} differs from src0 nb[{j}]={nb[j]}" for j, v in bad if v != nb[j])


def _cpy_bf16(op: OpInfo) -> str | None:
    return _first(f"src{i} is bf16" for i in (0, 1) if (s := op.src(i)) is not None and s.type == "bf16")


CPY_TEST_SHAPES = ((3, 4, 3, 2), (1, 4, 3, 2), (2, 4, 3, 2))
# fmt: off
_exp_f32 = _when(lambda op: op.op == Op.UNARY and op.sub_op == "EXP" and op.type == "f32",
                 lambda op: "EXP with f32 output")
_glu_view = _when(lambda op: op.op == Op.GLU, _has_view_input)
_l2_norm_view = _when(lambda op: op.op == Op.L2_NORM, _has_view_input)
_div_broadcast = _when(lambda op: _s(op, 0).ne != _s(op, 1).ne,
                       lambda op: f"src0 ne={_ne(_s(op, 0))} and src1 ne={_ne(_s(op, 1))} need a broadcast")
_concat_gpu_bf16_view = _when(lambda op: op.type == "bf16" and _has_view_input(op) is not None,
                              lambda op: f"bf16 output and {_has_view_input(op)}")
_rows_ne3 = _when(lambda op: op.ne[3] != 1, lambda op: f"output ne[3]={op.ne[3]}")
_cpy_quant_dst = _when(lambda op: is_quantized(op.dtype), lambda op: f"destination type {op.dtype} is quantized")
_cpy_count = _when(lambda op: _s(op, 0).nelements != op.nelements,
                   lambda op: f"src0 has {_s(op, 0).nelements} elements, destination {op.nelements}")
_cpy_shapes = _when(lambda op: op.ne in CPY_TEST_SHAPES,
                    lambda op: f"ne={_ne(op)} is a test-backend-ops non-contiguous CPY shape")
_mul_mat_ne3 = _when(lambda op: _s(op, 0).ne[3] not in (_s(op, 1).ne[3], 1) and _s(op, 1).ne[3] != 1,
                     lambda op: f"src0 ne[3]={_s(op, 0).ne[3]} and src1 ne[3]={_s(op, 1).ne[3]} do not broadcast")
_mul_mat_both_views = _when(lambda op: _s(op, 0).is_view and _s(op, 1).is_view,
                            lambda op: "src0 and src1 are both VIEW")
_mmid_single_expert = _when(lambda op: _s(op, 0).ne[2] <= 1,
                            lambda op: f"src0 ne[2]={_s(op, 0).ne[2]} (a single expert)")
_gdn_kda = _when(lambda op: _s(op, 3).ne[0] != 1,
                 lambda op: f"g (src3) ne[0]={_s(op, 3).ne[0]} (per-key 'kda' gating)")
_div_per_channel = _when(lambda op: _s(op, 1).ne == (op.ne[0], 1, 1, 1),
                         lambda op: f"src1 ne={_ne(_s(op, 1))} is a per-channel vector of the output's ne[0]={op.ne[0]}")
_rope_mode = _when(lambda op: int(op.param("mode", 0)) not in (RopeType.NORMAL, RopeType.NEOX, RopeType.IMROPE),
                   lambda op: f"mode={int(op.param('mode'))} ({ROPE_MODE_NAMES.get(int(op.param('mode')), 'unknown')})")
_rope_dims_v = _when(lambda op: int(op.param("n_dims", 0)) not in (0, _s(op, 0).ne[0]),
                     lambda op: f"n_dims={int(op.param('n_dims'))} != src0 ne[0]={_s(op, 0).ne[0]}")
# fmt: on


# ----------------------------------------------------------------------------------------------
# Global gates (checked for every op before its own), in upstream's order


def _membership(revision: Revision) -> Check:
    registered = REGISTERED[revision]

    def check(op: OpInfo) -> str | None:
        if op.op in (Op.UNARY, Op.GLU):
            if Op.sub_op_named(Op(op.op), op.sub_op or "") in registered:
                return None
            return f"{'unary' if op.op == Op.UNARY else 'GLU'} op {op.sub_op} is not registered"
        if op.op in registered:
            return None
        entry = TABLE.get(Op(op.op)) if op.op in Op.__members__ else None  # a newer ggml's op: no entry
        return f"op {op.op} is not registered" + (f" ({entry.reason})" if entry is not None else "")

    return check


def _types(revision: Revision) -> Check:
    allowed = ALLOWED_TYPES[revision]

    def check(op: OpInfo) -> str | None:
        if op.type not in allowed:
            return f"output type {op.dtype}"
        for i, s in _srcs(op):
            if s.type not in allowed:
                return f"src{i} type {s.dtype}"
        return None

    return check


def _quant_3d(mul_mat_id_exception: bool) -> Check:
    def check(op: OpInfo) -> str | None:
        for i, s in _srcs(op):
            if not is_quantized(s.dtype) or s.ne[2] == 1:
                continue
            if (
                mul_mat_id_exception
                and op.op == Op.MUL_MAT_ID
                and i == 0
                and (s.type == "mxfp4" or s.ne[3] == 1)
            ):
                continue
            return f"src{i} is {s.dtype} with ne={_ne(s)} (ne[2]={s.ne[2]})"
        return None

    return check


def _glu_odd(op: OpInfo) -> str | None:
    s0 = op.src(0)
    if op.op == Op.GLU and op.src(1) is None and s0 is not None and s0.ne[0] % 2 != 0:
        return f"single-input GLU with src0 ne[0]={s0.ne[0]} (odd)"
    return None


def _reaches_msa_mask(t: OpInfo | None) -> bool:
    while t is not None:
        if t.name.startswith("msa_block_mask"):
            return True
        if t.op not in (Op.RESHAPE, Op.REPEAT):
            return False
        t = t.src(0)
    return False


def _msa(op: OpInfo) -> str | None:
    if op.name.startswith("msa_"):
        return f"tensor name {op.name!r} starts with 'msa_'"
    s0 = op.src(0)
    if s0 is not None and _reaches_msa_mask(s0):
        return "src0's RESHAPE/REPEAT chain reaches a tensor named 'msa_block_mask*'"
    return None


_N = frozenset({Revision.N})
_V = frozenset({Revision.V, Revision.P})  #: V's gates; P shares all but the few marked _V_ONLY
_V_ONLY = frozenset({Revision.V})
_P = frozenset({Revision.P})
_GLU_KEYS = frozenset(o for o in REGISTERED_N if o.kind == "glu")

GLOBAL_GATES: tuple[Gate, ...] = (
    *(Gate("global.membership", "the op must have a registered translator (op_table.cpp)",
           _membership(r), revisions=frozenset({r})) for r in Revision),
    Gate("global.exp_f32", "UNARY EXP with an f32 output is rejected", _exp_f32, revisions=_N,
         ops=frozenset({Op.EXP}),
         note="test-backend-ops feeds x in [-150,150] and exp overflows"),
    Gate("global.glu_view", "GLU with a VIEW input is rejected", _glu_view, revisions=_V, ops=_GLU_KEYS),
    Gate("global.glu_odd", "single-input GLU needs an even src0 ne[0]", _glu_odd, ops=_GLU_KEYS,
         note="'triggers bug in ov gpu'"),
    Gate("global.l2_norm_view", "L2_NORM with a VIEW input is rejected (ops_not_support_view_input)",
         check=_l2_norm_view, revisions=_V, ops=frozenset({Op.L2_NORM})),
    Gate("global.rms_norm_view", "RMS_NORM with a non-contiguous VIEW input is rejected",
         check=_rms_norm_noncontig_view, revisions=_V, ops=frozenset({Op.RMS_NORM})),
    Gate("global.types", "output and every src must be one of the allowed types", _types(Revision.N),
         revisions=_N),
    Gate("global.types", "output and every src must be one of the allowed types", _types(Revision.V),
         revisions=_V),  # V and P allow the same types
    Gate("global.quant_3d", "a quantized src must have ne[2]==1 (except MUL_MAT_ID src0 that is MXFP4 or has ne[3]==1)",
         _quant_3d(True), revisions=_N),
    Gate("global.quant_3d", "a quantized src must have ne[2]==1", _quant_3d(False), revisions=_V),
    Gate("global.msa", "MSA block-mask graphs stay on CPU (names 'msa_*')", _msa, quirk=True,
         revisions=_N, note="llama.cpp graph-name quirk"),
)  # fmt: skip

# ----------------------------------------------------------------------------------------------
# Per-op gates


def _src_is(i: int, kind: str) -> Check:
    return _when(lambda op: op.src(i) is not None and _s(op, i).op == kind, lambda op: f"src{i} is {kind}")


def _src_present(i: int, detail: str) -> Check:
    return _when(lambda op: op.src(i) is not None, lambda op: detail)


_src0_bf16 = _when(lambda op: _s(op, 0).type == "bf16", lambda op: "src0 is bf16")


def _out_type(types: frozenset[str], what: str) -> Check:
    return _when(lambda op: op.type in types, lambda op: f"{what} {op.dtype}")


def _name_prefix(prefix: str | tuple[str, ...]) -> Check:
    return _when(lambda op: op.name.startswith(prefix), lambda op: f"tensor name {op.name!r}")


def _softmax_moe_reshape(op: OpInfo) -> str | None:
    s0 = op.src(0)
    s00 = s0.src(0) if s0 is not None and s0.op == "RESHAPE" else None
    if s00 is not None and s00.name.startswith("ffn_moe_weights"):
        return f"src0 is a RESHAPE of {s00.name!r}"
    return None


def _add_id_types(op: OpInfo) -> str | None:
    if op.type != "f32":
        return f"output type {op.dtype}"
    for i in (0, 1):
        if _s(op, i).type != "f32":
            return f"src{i} type {_s(op, i).dtype}"
    if _s(op, 2).type != "i32":
        return f"ids (src2) type {_s(op, 2).dtype}"
    return None


def _get_rows_256(types: frozenset[str]) -> Check:
    return _when(
        lambda op: op.ne[0] == 256 and _s(op, 0).type in types,
        lambda op: f"ne[0]=256 with src0 {_s(op, 0).dtype} (f16 dequant misses the 1e-7 NMSE threshold)",
    )


def _cpy_view_fit_n(op: OpInfo) -> str | None:
    vs = op.view_src
    if vs is None:
        return None
    if op.view_offs > vs.nbytes or op.nbytes > vs.nbytes - op.view_offs:
        return f"destination view of {op.nbytes} B at offset {op.view_offs} overruns its {vs.nbytes} B buffer"
    if op.nbytes != 0 and not op.is_contiguous:
        return "destination view is non-contiguous"
    return None


def _cpy_view_fit_v(op: OpInfo) -> str | None:
    vs = op.view_src
    if vs is not None and op.nbytes != vs.nbytes:
        return f"destination view covers {op.nbytes} B of a {vs.nbytes} B buffer"
    return None


def _mul_mat_ab(op: OpInfo) -> str | None:
    a, b = _s(op, 0), _s(op, 1)
    if is_quantized(a.dtype) and (a.name, b.name, a.ne[:2], b.ne[:2]) == ("a", "b", (256, 1), (256, 64)):
        return f"quantized src0 'a' ne={_ne(a)} with src1 'b' ne={_ne(b)} (a test-backend-ops case)"
    return None


def _chain(t: OpInfo | None, *ops: str) -> bool:
    for kind in ops:
        if t is None or t.op != kind:
            return False
        t = t.src(0)
    return True


def _mul_mat_gpu_kq(op: OpInfo) -> str | None:
    if _s(op, 1).op == Op.SOFT_MAX and _chain(op.src(0), Op.CONT, Op.TRANSPOSE, Op.PERMUTE):
        return "src1 is SOFT_MAX and src0 is CONT<-TRANSPOSE<-PERMUTE"
    return None


def _mmid_tmp(op: OpInfo) -> str | None:
    a, ids = _s(op, 0), op.src(2)
    if ids is None:
        return "ids (src2) absent"
    nbytes = ids.ne[1] * ids.ne[0] * a.ne[1] * a.ne[0] * 4
    if nbytes > MUL_MAT_ID_TMP_LIMIT:
        return f"temporary of {nbytes} B (n_tokens*n_used*rows*k*4) exceeds 1 GiB"
    return None


def _fa_pattern(op: OpInfo) -> str | None:
    for i, nm in enumerate("QKV"):
        s = op.src(i)
        if s is None or not s.is_permute:
            return f"{nm} (src{i}) is {s.op if s else 'absent'}, not PERMUTE"
        v = s.src(0)
        if v is None or not v.is_view:
            return f"{nm} is PERMUTE of {v.op if v else 'nothing'}, not of a VIEW"
        base = v.src(0)
        if base is None or base.view_src is not None:
            return f"{nm} is PERMUTE<-VIEW of a view, not of a base tensor"
    return None


def _base(op: OpInfo, i: int) -> OpInfo | None:
    s = op.src(i)
    v = s.src(0) if s is not None else None
    return v.src(0) if v is not None else None


def _fa_gemma3n(op: OpInfo) -> str | None:
    scale = float(op.param("scale", 1.0))
    if abs(scale - 1.0) >= 1e-6 or _fa_pattern(op) is not None:
        return None
    bases = [_base(op, i) for i in range(3)]
    if [None if b is None else b.op for b in bases] == [Op.ROPE, Op.ROPE, Op.RMS_NORM]:
        return "scale=1 with q=ROPE, k=ROPE, v=RMS_NORM (gemma3n direct attention)"
    return None


def _param_bad(key: str, bad: Callable[[float], bool]) -> Check:
    """Rejects where ``bad`` holds for param ``key`` (0 when absent)."""
    return _when(lambda op: bad(float(op.param(key, 0))), lambda op: f"{key}={op.param(key)}")


def _rope_dims_n(op: OpInfo) -> str | None:
    head = _s(op, 0).ne[0]
    n = int(op.param("n_dims", 0)) or head
    if n <= 0 or n > head or n % 2:
        return f"n_dims={n} with head_dim={head}"
    return None


def _rope_view(op: OpInfo) -> str | None:
    s0 = _s(op, 0)
    if s0.is_view and s0.view_src is not None and s0.view_src.ne[1] != s0.ne[2]:
        return f"src0 is a VIEW with view_src ne[1]={s0.view_src.ne[1]} != src0 ne[2]={s0.ne[2]}"
    return None


def _rope_imrope(op: OpInfo) -> str | None:
    if int(op.param("mode", 0)) != RopeType.IMROPE:
        return None
    if op.src(2) is not None:
        return "IMROPE with freq_factors (src2)"
    for key, want in (("freq_scale", 1.0), ("ext_factor", 0.0), ("attn_factor", 1.0)):
        v = float(op.param(key, want))
        if v != want:
            return f"IMROPE with {key}={v} (needs {want})"
    return None


def _always(detail: str) -> Check:
    return lambda op: detail


_F32F16 = frozenset({"f32", "f16"})
_BF16 = frozenset({"bf16"})
_ROWS = (
    Gate("rows.ne3", "output ne[3] must be 1", _rows_ne3),
    Gate("rows.q256", "no ne[0]=256 rows of Q4_K/Q5_K/Q4_1/Q5_1",
         _get_rows_256(frozenset({"q4_k", "q5_k", "q4_1", "q5_1"})), revisions=_N),
    Gate("rows.q256", "no ne[0]=256 rows of Q4_K/Q5_K", _get_rows_256(frozenset({"q4_k", "q5_k"})),
         revisions=_V),
    Gate("rows.ffn_moe_weights", "MoE routing-weight gather stays on CPU",
         _name_prefix("ffn_moe_weights"), quirk=True, revisions=_V),
)  # fmt: skip
_BINARY = (
    Gate("binary.src1_permute", "src1 must not be PERMUTE", _src_is(1, Op.PERMUTE)),
    Gate("binary.broadcast", "each dim must match or be 1 in one operand", _binary_incompatible),
)

#: Per-op gates by op-table key (an op without restrictions has none listed; keys are ``Op``
#: members, looked up by their text too).
GATES: dict[str, tuple[Gate, ...]] = {
    Op.ADD: _BINARY,
    Op.SUB: _BINARY,
    Op.MUL: _BINARY,
    Op.ADD_ID: (
        Gate("add_id.types", "output, src0 and src1 must be f32 and ids i32", _add_id_types),
    ),
    Op.DIV: (
        Gate("div.broadcast", "each dim must match or be 1 in one operand", _binary_incompatible,
             revisions=_V),
        Gate("div.gpu_broadcast", "no broadcast DIV (fused GEMM yields inf)",
             _div_broadcast, device_class="GPU", revisions=_V),
        Gate("div.gpu_per_channel", "no per-channel DIV (fused GEMM yields inf)",
             _div_per_channel, device_class="GPU", revisions=_N,
             note="failed case llama-arch-test mpt"),
        Gate("div.ffn_moe_weights_norm", "MoE weight normalisation stays on CPU",
             _name_prefix("ffn_moe_weights_norm"), quirk=True, revisions=_V),
    ),
    Op.CLAMP: (
        Gate("clamp.ffn_moe_weights_sum_clamped", "MoE weight clamp stays on CPU",
             _name_prefix("ffn_moe_weights_sum_clamped"), quirk=True, revisions=_V),
    ),
    Op.CONCAT: (
        Gate("concat.i64", "output must not be i64", _out_type(frozenset({"i64"}), "output type")),
        Gate("concat.gpu_bf16_view", "no bf16 CONCAT with a VIEW input",
             _concat_gpu_bf16_view, device_class="GPU", revisions=_N),
    ),
    Op.RESHAPE: (
        Gate("reshape.ffn_norm_exps", "name must not start with 'ffn_norm_exps'",
             _name_prefix("ffn_norm_exps"), quirk=True, note="llama.cpp graph-name quirk"),
        Gate("reshape.ffn_moe_weights", "name must not start with 'ffn_moe_weights'",
             _name_prefix("ffn_moe_weights"), quirk=True, revisions=_V),
    ),
    Op.VIEW: (
        Gate("view.selected_experts", "a VIEW named 'selected_experts' (TOPK_MOE test) is rejected",
             _when(lambda op: op.name == "selected_experts", lambda op: "tensor name 'selected_experts'"),
             quirk=True, note="test-backend-ops name quirk"),
    ),
    Op.PERMUTE: (
        Gate("permute.bf16", "output must not be bf16", _out_type(_BF16, "output type"),
             note="[GPU] Could not find a suitable kernel for transpose"),
    ),
    Op.TRANSPOSE: (Gate("transpose.bf16", "output must not be bf16", _out_type(_BF16, "output type")),),
    Op.GET_ROWS: (
        *_ROWS,
        Gate("get_rows.gpu_bf16", "src0 must not be bf16", _src0_bf16, device_class="GPU", revisions=_N),
    ),
    Op.SET_ROWS: _ROWS,  # upstream shares the GET_ROWS case (except the GPU bf16 check)
    Op.SET: (Gate("set.strides", "nb1/nb2/nb3 must equal src0's strides", _set_strides),),
    Op.CPY: (
        Gate("cpy.bf16", "src0 and src1 must not be bf16", _cpy_bf16),
        Gate("cpy.quant_dst", "the destination must not be quantized", _cpy_quant_dst, revisions=_N),
        Gate("cpy.count", "src0 and destination must have the same element count", _cpy_count,
             revisions=_N),
        Gate("cpy.test_shapes", "the test-backend-ops shapes [3|1|2,4,3,2] are rejected", _cpy_shapes,
             quirk=True, note="test cases with non-contiguous src/dst"),
        Gate("cpy.view_fit", "a destination view must fit its buffer and be contiguous (unless empty)",
             _cpy_view_fit_n, revisions=_N),
        Gate("cpy.view_fit", "a destination view must cover its whole buffer", _cpy_view_fit_v,
             revisions=_V_ONLY),
    ),
    Op.MUL_MAT: (
        Gate("mul_mat.gpu_test_ab", "GPU: quantized 'a' [256,1] x 'b' [256,64] test case rejected",
             _mul_mat_ab, device_class="GPU", quirk=True, revisions=_N,
             note="a test-backend-ops case"),
        Gate("mul_mat.gpu_kq", "GPU: KQ·V pattern (SOFT_MAX x CONT<-TRANSPOSE<-PERMUTE) stays on CPU",
             _mul_mat_gpu_kq, device_class="GPU", revisions=_V),
        Gate("mul_mat.ne3", "ne[3] must broadcast", _mul_mat_ne3),
        Gate("mul_mat.both_views", "src0 and src1 must not both be VIEW", _mul_mat_both_views),
    ),
    Op.MUL_MAT_ID: (
        Gate("mul_mat_id.single_expert", "src0 needs more than one expert (ne[2] > 1)",
             _mmid_single_expert, revisions=_N),
        Gate("mul_mat_id.gpu_bf16", "src0 must not be bf16", _src0_bf16,
             device_class="GPU", revisions=_N),
        Gate("mul_mat_id.gpu_tmp", "the expert temporary must fit in 1 GiB", _mmid_tmp,
             device_class="GPU", revisions=_N),
        Gate("mul_mat_id.tmp", "the expert temporary must fit in 1 GiB", _mmid_tmp, revisions=_V),
        Gate("mul_mat_id.ffn_moe", "MoE gate_up/down stays on CPU",
             _name_prefix(("ffn_moe_gate_up", "ffn_moe_down")), quirk=True, revisions=_V),
    ),
    Op.SUM_ROWS: (
        Gate("sum_rows.permute", "src0 must not be PERMUTE", _src_is(0, Op.PERMUTE)),
        Gate("sum_rows.ffn_moe_weights_sum", "MoE weight sum stays on CPU",
             _name_prefix("ffn_moe_weights_sum"), quirk=True, revisions=_V),
    ),
    Op.SOFT_MAX: (
        Gate("soft_max.sinks", "sinks (src2) are not supported",
             _src_present(2, "sinks (src2) present"), revisions=_V),
        Gate("soft_max.ffn_moe_probs", "MoE routing softmax stays on CPU", _name_prefix("ffn_moe_probs"),
             quirk=True, revisions=_V),
        Gate("soft_max.ffn_moe_weights_reshape", "a softmax of a RESHAPE of 'ffn_moe_weights*' stays on CPU",
             _softmax_moe_reshape, quirk=True, revisions=_P,
             note="GPU MoE routing softmax numerically unstable when fused with GET_ROWS/reshape"),
    ),
    Op.FLASH_ATTN_EXT: (
        Gate("flash_attn.gemma3n", "gemma3n direct attention (scale 1, q/k=ROPE, v=RMS_NORM) stays on CPU",
             _fa_gemma3n, quirk=True, note="accuracy drift; restricted to scale==1"),
        Gate("flash_attn.sinks", "sinks (src4) are not supported", _src_present(4, "sinks (src4) present")),
        Gate("flash_attn.pattern", "Q, K and V must each be PERMUTE<-VIEW<-base tensor", _fa_pattern),
        Gate("flash_attn.max_bias", "max_bias must be 0", _param_bad("max_bias", lambda v: v > 0)),
        Gate("flash_attn.logit_softcap", "logit_softcap must be 0", _param_bad("logit_softcap", lambda v: v != 0)),
    ),
    Op.ROPE: (
        Gate("rope.mode", "mode must be NORMAL(0), NEOX(2) or IMROPE(40)", _rope_mode),
        Gate("rope.n_dims", "rope dims (n_dims, or head_dim if 0) must be even and 0 < n <= head_dim",
             _rope_dims_n, revisions=_N),
        Gate("rope.n_dims", "n_dims must be 0 or src0 ne[0]", _rope_dims_v, revisions=_V),
        Gate("rope.out_type", "output must be f32 or f16",
             _when(lambda op: op.type not in _F32F16, lambda op: f"output type {op.dtype}")),
        Gate("rope.view", "a VIEW src0 needs view_src ne[1] == src0 ne[2]", _rope_view),
        Gate("rope.imrope", "IMROPE needs no freq_factors, freq_scale=1, ext_factor=0, attn_factor=1",
             _rope_imrope),
    ),
    Op.REPEAT: (
        Gate("repeat.gpu_bf16", "output must not be bf16", _out_type(_BF16, "output type"),
             device_class="GPU", revisions=_N),
    ),
    Op.SSM_CONV: (
        Gate("ssm_conv.disabled", "SSM_CONV is kept on CPU (qwen3next numerically unstable)",
             _always("every case"), revisions=_V),
    ),
    Op.GATED_DELTA_NET: (
        Gate("gdn.disabled", "GATED_DELTA_NET awaits an OpenVINO release (openvino PR 35917)",
             _always("every case"), revisions=_V),
        Gate("gdn.v_permute", "v (src2) must not be PERMUTE", _src_is(2, Op.PERMUTE), revisions=_N),
        Gate("gdn.kda", "g (src3) ne[0] must be 1", _gdn_kda, revisions=_N),
        Gate("gdn.snapshots", "K (state snapshots, op_params[0]) must be <= 1", _param_bad("K", lambda v: v > 1),
             revisions=_N),
    ),
}  # fmt: skip


def op_gates(key: str) -> tuple[Gate, ...]:
    """Every gate specific to table entry ``key`` (``"ADD"``, ``"UNARY.EXP"``, ``"GLU.SWIGLU"``):
    the op-specific global gates (EXP f32, GLU odd ne0, view inputs) then ``GATES[key]``.
    The gates every op passes (membership, types, quantized 3-D, MSA) are in :data:`GLOBAL_GATES`."""
    k = key.upper()
    return tuple(g for g in GLOBAL_GATES if k in g.ops) + GATES.get(k, ())


def check_op(
    op: OpInfo | Any,
    device_class: str,
    *,
    upstream_exact: bool = False,
    revision: Revision | str = Revision.N,
) -> SupportDecision:
    """The policy's decision for ``op`` on a device of ``device_class`` (``"CPU"``/``"GPU"``/...).

    ``device_class`` may also be a device id (``"GPU.1"``): its class is used.  Quirk gates
    apply only with ``upstream_exact=True``; ``revision`` picks the upstream state (default N).
    """
    from ovkit.devices import device_class as class_of

    info = op if isinstance(op, OpInfo) else getattr(op, "op_info", lambda: None)()
    if not isinstance(info, OpInfo):
        raise TypeError(
            f"check_op needs an OpInfo or a graph Tensor with .op_info(), got {type(op).__name__}"
        )
    dc = str(class_of(str(device_class)))
    try:
        rev = Revision(revision)
    except ValueError:
        raise ValueError(
            f"unknown policy revision {revision!r}; expected one of {[r.value for r in Revision]}"
        ) from None
    sub = info.sub_op if info.op in (Op.UNARY, Op.GLU) else None
    for gate in GLOBAL_GATES + GATES.get(f"{info.op}.{sub}".upper() if sub else info.op.upper(), ()):
        if not gate.applies(dc, upstream_exact, rev):
            continue
        detail = gate.check(info)
        if detail is not None:
            where = f" on the {gate.device_class} class" if gate.device_class else ""
            quirk = " (upstream quirk)" if gate.quirk else ""
            reason = f"{info.label}: {detail} — {gate.description}{where}{quirk} [{gate.key}]"
            return SupportDecision(False, reason, gate.key)
    return SupportDecision(True)


def graph_decisions(
    graph: GraphIR, outputs: Sequence[Tensor], device_class: str
) -> list[tuple[Tensor, SupportDecision]]:
    """The decision for every op node ``outputs`` depend on, in build order (leaves have none)."""
    return [(t, check_op(t, device_class)) for t in graph.topo(outputs) if not t.is_leaf]


def all_gates() -> list[tuple[str, Gate]]:
    """Every gate with the table key it belongs to (``"global"`` for the global gates)."""
    return [("global", g) for g in GLOBAL_GATES] + [(key, g) for key, gates in GATES.items() for g in gates]


def gates_frame() -> Any:
    """Every gate as a DataFrame (one row per gate record), for docs, tables and notebooks."""
    import pandas as pd

    rows = [
        {
            "op": key,
            "gate": g.key,
            "rule": g.description,
            "device class": g.device_class or "any",
            "upstream quirk": g.quirk,
            "revisions": ",".join(sorted(r.value for r in g.revisions)),
            "note": g.note,
        }
        for key, g in all_gates()
    ]
    return pd.DataFrame(rows)


def render_markdown() -> str:
    """The policy section of the docs (``docs/policy.md``), generated from the gate records."""
    lines = [
        "# Op-support policy",
        "",
        "Generated from `ovkit.ops.policy` by `ovkit.ops.policy.render_markdown()`; a test keeps it in step.",
        "",
        '`check_op(op, device_class, *, upstream_exact=False, revision="N")` runs the global gates in',
        "upstream's order, then the op's own gates; the first gate that rejects gives the reason",
        "`<op>: <offending value> — <what must hold>[ on the <class> class][ (upstream quirk)] [<gate>]`.",
        "",
        '- **Device class, not device id.** Upstream compares the device name with `"GPU"`',
        "  exactly; ovkit applies GPU-class gates to `GPU`, `GPU.0`, `GPU.1`, ... alike. Upstream has no",
        "  NPU-only rejection in `supports_op` (NPU differences are in translation, e.g. the GEGLU clamp).",
        "- **Quirks.** Gates keyed to test-backend-ops names/shapes or llama.cpp graph names apply",
        "  only with `upstream_exact=True`.",
        "- **Revisions.** `N` is upstream aee56b3ab and the default. `V` is the older",
        "  state (close to the mirror's master, 5735e10c4) that produced",
        "  `ovkit/data/upstream-support-verdicts.csv.gz`: no MXFP4, none of N's added ops (FILL, SQR,",
        "  SQRT, CUMSUM, DIAG, TRI, SET, unary SIGMOID/EXP/NEG), view-input rejections for GLU,",
        "  L2_NORM and RMS_NORM, SSM_CONV and GATED_DELTA_NET disabled, SOFT_MAX sinks rejected.",
        "  `ovkit.catalogue.verdicts.replay()` replays that CSV: every expressible row agrees",
        "  (`pytest tests/test_policy_upstream_csv.py -s`).",
        "",
        *(
            f"{what} (N, {len(keys)}): " + ", ".join(keys) + "."
            for what, keys in (
                ("Registered ops", [e.key.value for e in ENTRIES if e.registered and e.kind == "op"]),
                ("Unary", [str(e.key.sub_op) for e in ENTRIES if e.registered and e.kind == "unary"]),
                ("GLU", [str(e.key.sub_op) for e in ENTRIES if e.registered and e.kind == "glu"]),
            )
        ),
        "Not registered: "
        + f"SOLVE_TRI ({TABLE[Op.SOLVE_TRI].reason}); every op the catalogue lists unregistered.",
        "Allowed types (N): " + ", ".join(sorted(ALLOWED_TYPES_N)) + ".",
        "",
        "| op | gate | rule (rejected when it does not hold) | device class | quirk | revisions |",
        "|---|---|---|---|---|---|",
    ]
    for r in gates_frame().to_dict("records"):
        quirk = "yes" if r["upstream quirk"] else ""
        lines.append(
            f"| {r['op']} | `{r['gate']}` | {r['rule']} | {r['device class']} | {quirk} | {r['revisions']} |"
        )
    return "\n".join(lines) + "\n"
