"""Every gate of the support policy: a case just inside it (supported) and just outside (rejected
by that gate, with a reason naming the gate and the offending value).

Also: GPU-class gates apply to ``GPU.1`` as to ``GPU`` and never to the CPU; quirk gates apply
only in upstream-exact mode; the registered tables have upstream's sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ovkit.dtypes import DTYPES
from ovkit.graph import Graph, Tensor
from ovkit.ir import Op, pad_ne
from ovkit.ops import policy as P
from ovkit.ops.policy import OpInfo, Revision, check_op

N, V, P_REV = Revision.N, Revision.V, Revision.P

# The records the policy reads, laid out as ggml lays them out: leaves and views are built by the
# graph builder (its view, permute and transpose), an op node directly as an OpInfo (the policy
# must see nodes the builder itself would refuse).
Src = Tensor | OpInfo


def L(*ne: int, t: str = "f32", name: str = "") -> Src:
    """A leaf of ggml shape ``ne`` (a builder input; a quantized one as a bare record)."""
    if t not in DTYPES:
        return OpInfo(Op.NONE, t, pad_ne(ne), name=name)
    return Graph().new_tensor(t, tuple(reversed(ne)), name)


def view(t: Tensor, ne, nb=None, offset: int = 0) -> Tensor:
    """``ggml_view_4d`` (``nb`` 1..3 default: ``t``'s own)."""
    nb1, nb2, nb3 = nb if nb is not None else t.strides[1:]
    return t.graph.view_4d(t, *pad_ne(ne), nb1, nb2, nb3, offset)


def permute(t: Tensor, axes) -> Tensor:
    return t.graph.permute(t, *axes)


def transpose(t: Tensor) -> Tensor:
    return t.graph.transpose(t)


def _info(x: Src | None) -> OpInfo | None:
    return x.op_info() if isinstance(x, Tensor) else x


def node(opname: str, dtype: str, ne, srcs, *, sub_op=None, name="out", inplace_of=None, **params) -> OpInfo:
    """An op node; ``inplace_of`` makes it a view of that tensor (ggml ``*_inplace``)."""
    infos = tuple(_info(x) for x in srcs)
    if inplace_of is None:
        return OpInfo(opname, dtype, pad_ne(ne), infos, sub_op=sub_op, params=params, name=name)
    dst = _info(inplace_of)
    base = dst.view_src if dst.view_src is not None else dst
    return OpInfo(opname, dtype, pad_ne(ne), infos, sub_op=sub_op, params=params, name=name,
                  nb=dst.strides, view_src=base, view_offs=dst.view_offs)  # fmt: skip


def op(name: str, t: str, ne, *srcs, **kw) -> OpInfo:
    return node(name, t, ne, srcs, **kw)


def fa_input(base: OpInfo) -> OpInfo:
    """PERMUTE <- VIEW <- base: how llama.cpp feeds Q/K/V (views of the KV cache)."""
    return permute(view(base, base.ne, base.strides[1:]), (0, 2, 1, 3))


@dataclass
class Case:
    ok: OpInfo
    bad: OpInfo
    text: str  # must appear in the rejection reason
    device: str = "CPU"
    ok_rev: Revision | None = None  # revision for the "inside" case, when no case passes in the gate's own


def _bin(opname: str, key: str) -> Case:
    a = L(4, 6)
    if key == "binary.src1_permute":
        return Case(op(opname, "f32", a.ne, a, L(4, 6)), op(opname, "f32", a.ne, a, permute(L(6, 4), (1, 0, 2, 3))),
                    "src1 is PERMUTE")  # fmt: skip
    return Case(op(opname, "f32", a.ne, a, L(4, 1)), op(opname, "f32", a.ne, a, L(4, 3)), "differ in dim 1")


def _fa(q: OpInfo, k: OpInfo, v: OpInfo, *extra: OpInfo | None, **params) -> OpInfo:
    params.setdefault("scale", 0.125)
    return op("FLASH_ATTN_EXT", "f32", (v.ne[0], q.ne[2], q.ne[1], 1), q, k, v, *extra, **params)


def _fa_ok(**params) -> OpInfo:
    return _fa(
        fa_input(L(64, 4, 8)), fa_input(L(64, 4, 32, t="f16")), fa_input(L(64, 4, 32, t="f16")), **params
    )


def _rope(src: OpInfo, **params) -> OpInfo:
    params.setdefault("mode", 0)
    params.setdefault("n_dims", 0)
    return op("ROPE", src.dtype, src.ne, src, L(src.ne[2], t="i32"), **params)


def _mmid(as_: OpInfo, n_used: int = 2, n_tok: int = 4, name: str = "out") -> OpInfo:
    b = L(as_.ne[0], n_used, n_tok)
    ids = L(n_used, n_tok, t="i32")
    return node("MUL_MAT_ID", "f32", (as_.ne[1], n_used, n_tok, 1), (as_, b, ids), name=name)


def _gdn(v: OpInfo | None = None, g_ne0: int = 1, K: int = 1) -> OpInfo:
    q, k = L(16, 4, 1, 1), L(16, 4, 1, 1)
    v = v if v is not None else L(16, 4, 1, 1)
    g, beta, state = L(g_ne0, 4, 1, 1), L(1, 4, 1, 1), L(16, 16, 4, 1)
    return op("GATED_DELTA_NET", "f32", (64, 17, 1, 1), q, k, v, g, beta, state, K=K)


def _rows(opname: str, t: str, n: int, ne3: int = 1, name: str = "out") -> OpInfo:
    if opname == "GET_ROWS":
        return node(
            "GET_ROWS", "f32", (n, 3, 1, ne3), (L(n, 5, 1, ne3, t=t), L(3, 1, ne3, t="i32")), name=name
        )
    dst = L(n, 5, 1, ne3)
    return node(
        "SET_ROWS", "f32", dst.ne, (L(n, 3, 1, ne3, t=t), L(3, 1, ne3, t="i64")), name=name, inplace_of=dst
    )


def _cpy(src: OpInfo, dst: OpInfo) -> OpInfo:
    return node("CPY", dst.dtype, dst.ne, (src, dst), inplace_of=dst)


def case_for(table_key: str, key: str, rev: Revision) -> Case:  # noqa: C901 - a table of cases
    a46 = L(4, 6)
    if key == "global.membership":
        if rev is N:
            return Case(op("SQR", "f32", a46.ne, a46), op("SOLVE_TRI", "f32", a46.ne, a46, a46),
                        "op SOLVE_TRI is not registered (translator exists")  # fmt: skip
        return Case(
            op("ADD", "f32", a46.ne, a46, a46), op("SQR", "f32", a46.ne, a46), "op SQR is not registered"
        )
    if key == "global.exp_f32":
        a = L(8, 2, t="f16")
        return Case(op("UNARY", "f16", a.ne, a, sub_op="EXP"), op("UNARY", "f32", a.ne, L(8, 2), sub_op="EXP"),
                    "EXP with f32 output")  # fmt: skip
    if key == "global.glu_view":
        return Case(op("GLU", "f32", (4, 2), L(8, 2), None, sub_op="SWIGLU"),
                    op("GLU", "f32", (4, 2), view(L(24, 2), (8, 2)), None, sub_op="SWIGLU"), "src0 is a VIEW")  # fmt: skip
    if key == "global.glu_odd":
        return Case(op("GLU", "f32", (4, 2), L(8, 2), None, sub_op="GEGLU"),
                    op("GLU", "f32", (3, 2), L(7, 2), None, sub_op="GEGLU"), "src0 ne[0]=7 (odd)")  # fmt: skip
    if key == "global.l2_norm_view":
        return Case(op("L2_NORM", "f32", (8, 2), L(8, 2)), op("L2_NORM", "f32", (8, 2), view(L(16, 2), (8, 2))),
                    "src0 is a VIEW")  # fmt: skip
    if key == "global.rms_norm_view":
        full = L(8, 2)
        return Case(op("RMS_NORM", "f32", (8, 2), view(full, (8, 2))),
                    op("RMS_NORM", "f32", (8, 2), view(L(16, 2), (8, 2))), "src0 is a non-contiguous VIEW")  # fmt: skip
    if key == "global.types":
        ok_t, bad_t = ("mxfp4", "q2_K") if rev is N else ("q4_0", "mxfp4")
        return Case(op("MUL_MAT", "f32", (4, 3), L(64, 4, t=ok_t), L(64, 3)),
                    op("MUL_MAT", "f32", (4, 3), L(64, 4, t=bad_t), L(64, 3)), f"src0 type {bad_t}")  # fmt: skip
    if key == "global.quant_3d":
        if rev is N:
            return Case(_mmid(L(64, 8, 4, t="q4_0")), op("MUL_MAT", "f32", (4, 3, 2), L(64, 4, 2, t="q4_0"), L(64, 3, 2)),
                        "src0 is q4_0 with ne=[64,4,2,1] (ne[2]=2)")  # fmt: skip
        return Case(op("MUL_MAT", "f32", (4, 3), L(64, 4, t="q4_0"), L(64, 3)), _mmid(L(64, 8, 4, t="q4_0")),
                    "(ne[2]=4)")  # fmt: skip
    if key == "global.msa":
        return Case(node("ADD", "f32", a46.ne, (a46, a46), name="attn_out"),
                    node("ADD", "f32", a46.ne, (a46, a46), name="msa_scores"), "starts with 'msa_'")  # fmt: skip
    if key.startswith("binary."):
        return _bin(table_key, key)
    if key == "add_id.types":
        a, b = L(8, 2, 3), L(8, 4)
        return Case(op("ADD_ID", "f32", a.ne, a, b, L(2, 3, t="i32")), op("ADD_ID", "f32", a.ne, a, b, L(2, 3, t="i64")),
                    "ids (src2) type i64")  # fmt: skip
    if key == "div.broadcast":
        return Case(
            op("DIV", "f32", a46.ne, a46, L(4, 1)), op("DIV", "f32", a46.ne, a46, L(4, 3)), "differ in dim 1"
        )
    if key == "div.gpu_broadcast":
        return Case(op("DIV", "f32", a46.ne, a46, a46), op("DIV", "f32", a46.ne, a46, L(4, 1)), "need a broadcast",
                    device="GPU")  # fmt: skip
    if key == "div.gpu_per_channel":
        return Case(op("DIV", "f32", a46.ne, a46, L(1, 6)), op("DIV", "f32", a46.ne, a46, L(4)),
                    "per-channel vector of the output's ne[0]=4", device="GPU")  # fmt: skip
    if key in ("div.ffn_moe_weights_norm", "clamp.ffn_moe_weights_sum_clamped", "sum_rows.ffn_moe_weights_sum",
               "soft_max.ffn_moe_probs", "reshape.ffn_norm_exps", "reshape.ffn_moe_weights", "mul_mat_id.ffn_moe",
               "rows.ffn_moe_weights", "view.selected_experts"):  # fmt: skip
        names = {
            "div.ffn_moe_weights_norm": "ffn_moe_weights_norm-0",
            "clamp.ffn_moe_weights_sum_clamped": "ffn_moe_weights_sum_clamped-0",
            "sum_rows.ffn_moe_weights_sum": "ffn_moe_weights_sum-0",
            "soft_max.ffn_moe_probs": "ffn_moe_probs-0",
            "reshape.ffn_norm_exps": "ffn_norm_exps-0",
            "reshape.ffn_moe_weights": "ffn_moe_weights-0",
            "mul_mat_id.ffn_moe": "ffn_moe_down-0",
            "rows.ffn_moe_weights": "ffn_moe_weights-0",
            "view.selected_experts": "selected_experts",
        }
        bad_name = names[key]
        if table_key == "MUL_MAT_ID":
            return Case(
                _mmid(L(64, 8, 4), name="ffn_up-0"), _mmid(L(64, 8, 4), name=bad_name), repr(bad_name)
            )
        if table_key in ("GET_ROWS", "SET_ROWS"):
            return Case(
                _rows(table_key, "f32", 8, name="x"),
                _rows(table_key, "f32", 8, name=bad_name),
                repr(bad_name),
            )
        ne = (1, 6) if table_key == "SUM_ROWS" else a46.ne
        srcs = (a46, a46) if table_key == "DIV" else (a46,)
        return Case(node(table_key, "f32", ne, srcs, name="fine"), node(table_key, "f32", ne, srcs, name=bad_name),
                    f"tensor name {bad_name!r}")  # fmt: skip
    if key == "concat.i64":
        return Case(op("CONCAT", "i32", (8, 6), L(4, 6, t="i32"), L(4, 6, t="i32"), dim=0),
                    op("CONCAT", "i64", (8, 6), L(4, 6, t="i64"), L(4, 6, t="i64"), dim=0), "output type i64")  # fmt: skip
    if key == "concat.gpu_bf16_view":
        x = L(4, 6, t="bf16")
        return Case(op("CONCAT", "bf16", (8, 6), x, x, dim=0),
                    op("CONCAT", "bf16", (8, 6), x, view(L(8, 6, t="bf16"), (4, 6)), dim=0),
                    "bf16 output and src1 is a VIEW", device="GPU")  # fmt: skip
    if key in ("permute.bf16", "transpose.bf16"):
        mk = (
            (lambda t: permute(L(4, 6, t=t), (1, 0, 2, 3)))
            if key == "permute.bf16"
            else (lambda t: transpose(L(4, 6, t=t)))
        )
        return Case(mk("f16"), mk("bf16"), "output type bf16")
    if key == "rows.ne3":
        return Case(_rows(table_key, "f32", 8), _rows(table_key, "f32", 8, ne3=2), "output ne[3]=2")
    if key == "get_rows.gpu_bf16":
        return Case(_rows("GET_ROWS", "f16", 8), _rows("GET_ROWS", "bf16", 8), "src0 is bf16", device="GPU")
    if key == "rows.q256":
        if rev is N:
            return Case(
                _rows(table_key, "q4_1", 512), _rows(table_key, "q4_1", 256), "ne[0]=256 with src0 q4_1"
            )
        return Case(_rows(table_key, "q4_1", 256), _rows(table_key, "q4_K", 256), "ne[0]=256 with src0 q4_K")
    if key == "set.strides":
        dst, src = L(12, 5, 4), L(6, 5, 4)
        good = op(
            "SET",
            "f32",
            dst.ne,
            dst,
            src,
            nb1=dst.strides[1],
            nb2=dst.strides[2],
            nb3=dst.strides[3],
            offset=0,
        )
        bad = op(
            "SET",
            "f32",
            dst.ne,
            dst,
            src,
            nb1=src.strides[1],
            nb2=src.strides[2],
            nb3=src.strides[3],
            offset=0,
        )
        return Case(good, bad, "nb1=24 differs from src0 nb[1]=48")
    if key == "cpy.bf16":
        return Case(_cpy(L(4, 6, t="f16"), L(4, 6)), _cpy(L(4, 6, t="bf16"), L(4, 6)), "src0 is bf16")
    if key == "cpy.quant_dst":
        return Case(_cpy(L(64, 6), L(64, 6, t="f16")), _cpy(L(64, 6), L(64, 6, t="q8_0")),
                    "destination type q8_0 is quantized")  # fmt: skip
    if key == "cpy.count":
        return Case(_cpy(L(10, 2), L(20)), _cpy(L(6, 2), L(10)), "src0 has 12 elements, destination 10")
    if key == "cpy.test_shapes":
        return Case(_cpy(L(4, 4, 3, 2), L(4, 4, 3, 2)), _cpy(L(3, 4, 3, 2), L(3, 4, 3, 2)),
                    "ne=[3,4,3,2] is a test-backend-ops non-contiguous CPY shape")  # fmt: skip
    if key == "cpy.view_fit":
        buf = L(128, 4, 3)
        if rev is N:  # N: the view must fit in its buffer and be contiguous
            return Case(_cpy(L(128, 4, 2), view(buf, (128, 4, 2))),
                        _cpy(L(128, 2, 3), view(buf, (128, 2, 3), buf.strides[1:])),
                        "destination view is non-contiguous")  # fmt: skip
        return Case(_cpy(L(128, 4, 3), view(buf, (128, 4, 3))), _cpy(L(128, 4, 2), view(buf, (128, 4, 2))),
                    "destination view covers 4096 B of a 6144 B buffer")  # fmt: skip
    if key == "mul_mat.gpu_test_ab":
        return Case(op("MUL_MAT", "f32", (1, 64), L(256, 1, t="q4_0", name="w"), L(256, 64, name="x")),
                    op("MUL_MAT", "f32", (1, 64), L(256, 1, t="q4_0", name="a"), L(256, 64, name="b")),
                    "quantized src0 'a'", device="GPU")  # fmt: skip
    if key == "mul_mat.gpu_kq":
        kq = op("SOFT_MAX", "f32", (32, 4, 8), L(32, 4, 8))
        v_ok = op("CONT", "f32", (32, 64, 8), L(32, 64, 8))
        v_bad = op("CONT", "f32", (32, 64, 8), transpose(permute(L(64, 8, 32), (1, 2, 0, 3))))
        return Case(op("MUL_MAT", "f32", (64, 4, 8), v_ok, kq), op("MUL_MAT", "f32", (64, 4, 8), v_bad, kq),
                    "src1 is SOFT_MAX and src0 is CONT<-TRANSPOSE<-PERMUTE", device="GPU")  # fmt: skip
    if key == "mul_mat.ne3":
        return Case(op("MUL_MAT", "f32", (4, 3, 1, 3), L(64, 4, 1, 1), L(64, 3, 1, 3)),
                    op("MUL_MAT", "f32", (4, 3, 1, 3), L(64, 4, 1, 2), L(64, 3, 1, 3)),
                    "src0 ne[3]=2 and src1 ne[3]=3 do not broadcast")  # fmt: skip
    if key == "mul_mat.both_views":
        va, vb = view(L(128, 4), (64, 4)), view(L(128, 3), (64, 3))
        return Case(op("MUL_MAT", "f32", (4, 3), va, L(64, 3)), op("MUL_MAT", "f32", (4, 3), va, vb),
                    "src0 and src1 are both VIEW")  # fmt: skip
    if key == "mul_mat_id.single_expert":
        return Case(
            _mmid(L(64, 8, 2), n_used=1), _mmid(L(64, 8, 1), n_used=1), "src0 ne[2]=1 (a single expert)"
        )
    if key == "mul_mat_id.gpu_bf16":
        return Case(_mmid(L(64, 8, 4, t="f16")), _mmid(L(64, 8, 4, t="bf16")), "src0 is bf16", device="GPU")
    if key in ("mul_mat_id.gpu_tmp", "mul_mat_id.tmp"):
        # n_tokens*n_used*rows*k*4 = 512*8*4096*64*4 = 4 GiB > 1 GiB; with 64 tokens 512 MiB fits
        return Case(_mmid(L(64, 4096, 8), n_used=8, n_tok=64), _mmid(L(64, 4096, 8), n_used=8, n_tok=512),
                    "temporary of 4294967296 B", device="GPU" if key == "mul_mat_id.gpu_tmp" else "CPU")  # fmt: skip
    if key == "sum_rows.permute":
        return Case(op("SUM_ROWS", "f32", (1, 6), L(4, 6)), op("SUM_ROWS", "f32", (1, 4), permute(L(4, 6), (1, 0, 2, 3))),
                    "src0 is PERMUTE")  # fmt: skip
    if key == "soft_max.ffn_moe_weights_reshape":
        w = L(8, 4, name="ffn_moe_weights-0")
        return Case(op("SOFT_MAX", "f32", (8, 4), op("RESHAPE", "f32", (8, 4), L(8, 4))),
                    op("SOFT_MAX", "f32", (8, 4), op("RESHAPE", "f32", (8, 4), w)),
                    "src0 is a RESHAPE of 'ffn_moe_weights-0'")  # fmt: skip
    if key == "soft_max.sinks":
        a = L(8, 4, 2)
        return Case(op("SOFT_MAX", "f32", a.ne, a, L(8, 4, t="f16")), op("SOFT_MAX", "f32", a.ne, a, L(8, 4, t="f16"), L(2)),
                    "sinks (src2) present")  # fmt: skip
    if key == "flash_attn.gemma3n":
        g = Graph()
        pos = g.new_tensor("i32", (4,))

        def rope() -> Tensor:
            x = g.new_tensor("f32", (4, 8, 64))
            return g.rope_ext(x, pos, None, 64, 0, 0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)

        q, k = fa_input(rope()), fa_input(rope())
        v_bad = fa_input(g.rms_norm(g.new_tensor("f32", (4, 8, 64)), 1e-6))
        v_ok = fa_input(L(64, 8, 4))
        return Case(_fa(q, k, v_ok, scale=1.0), _fa(q, k, v_bad, scale=1.0),
                    "scale=1 with q=ROPE, k=ROPE, v=RMS_NORM")  # fmt: skip
    if key == "flash_attn.sinks":
        ok = _fa_ok()
        return Case(ok, _fa(*ok.srcs[:3], None, L(8), scale=0.125), "sinks (src4) present")
    if key == "flash_attn.pattern":
        ok = _fa_ok()
        return Case(ok, _fa(L(64, 8, 4), ok.srcs[1], ok.srcs[2]), "Q (src0) is NONE, not PERMUTE")
    if key == "flash_attn.max_bias":
        return Case(_fa_ok(max_bias=0.0), _fa_ok(max_bias=8.0), "max_bias=8.0")
    if key == "flash_attn.logit_softcap":
        return Case(_fa_ok(logit_softcap=0.0), _fa_ok(logit_softcap=30.0), "logit_softcap=30.0")
    if key == "rope.mode":
        a = L(64, 8, 4)
        return Case(_rope(a, mode=2), _rope(a, mode=8), "mode=8 (MROPE)")
    if key == "rope.n_dims":
        a = L(64, 8, 4)
        if rev is N:
            return Case(_rope(a, n_dims=32), _rope(a, n_dims=33), "n_dims=33 with head_dim=64")
        return Case(_rope(a, n_dims=64), _rope(a, n_dims=32), "n_dims=32 != src0 ne[0]=64")
    if key == "rope.out_type":
        return Case(_rope(L(64, 8, 4, t="f16")), _rope(L(64, 8, 4, t="bf16")), "output type bf16")
    if key == "rope.view":
        # a VIEW reshaping [64,4,8] to [64,8,4]: view_src ne[1]=4 == ne[2] passes; a slice of [128,32,8] fails
        big_bad = L(128, 32, 8)
        return Case(_rope(view(L(64, 4, 8), (64, 8, 4))), _rope(view(big_bad, (64, 8, 4), big_bad.strides[1:])),
                    "view_src ne[1]=32 != src0 ne[2]=4")  # fmt: skip
    if key == "rope.imrope":
        a = L(128, 8, 4)
        return Case(
            _rope(a, mode=40, freq_scale=1.0), _rope(a, mode=40, freq_scale=0.5), "IMROPE with freq_scale=0.5"
        )
    if key == "repeat.gpu_bf16":
        return Case(op("REPEAT", "f16", (8, 6), L(4, 6, t="f16")), op("REPEAT", "bf16", (8, 6), L(4, 6, t="bf16")),
                    "output type bf16", device="GPU")  # fmt: skip
    if key == "ssm_conv.disabled":
        c = op("SSM_CONV", "f32", (64, 4, 1), L(7, 64, 1), L(4, 64))
        return Case(c, c, "every case", ok_rev=N)
    if key == "gdn.disabled":
        return Case(_gdn(), _gdn(), "every case", ok_rev=N)
    if key == "gdn.v_permute":
        return Case(_gdn(), _gdn(v=permute(L(16, 1, 4, 1), (0, 2, 1, 3))), "v (src2) must not be PERMUTE")
    if key == "gdn.kda":
        return Case(_gdn(), _gdn(g_ne0=16), "g (src3) ne[0]=16")
    if key == "gdn.snapshots":
        return Case(_gdn(K=1), _gdn(K=2), "K=2")
    raise KeyError(f"no test case for gate {key} ({table_key}, {rev})")


GATE_RECORDS = [(k, g) for k, g in P.all_gates()]


def _rev(g: P.Gate) -> Revision:
    return N if N in g.revisions else V if V in g.revisions else P_REV


@pytest.mark.parametrize(
    ("table_key", "gate"),
    GATE_RECORDS,
    ids=[f"{k}-{g.key}-{''.join(sorted(g.revisions))}" for k, g in GATE_RECORDS],
)
def test_gate_inside_and_outside(table_key: str, gate: P.Gate) -> None:
    rev = _rev(gate)
    c = case_for(table_key, gate.key, rev)
    device = "GPU.1" if c.device == "GPU" else c.device  # the class decides, GPU.1 is GPU
    inside = check_op(c.ok, device, upstream_exact=True, revision=c.ok_rev or rev)
    assert inside.supported, inside.reason
    outside = check_op(c.bad, device, upstream_exact=True, revision=rev)
    assert not outside.supported
    assert outside.gate == gate.key, outside.reason
    assert c.text in outside.reason
    assert f"[{gate.key}]" in outside.reason and gate.description in outside.reason
    if gate.device_class:  # a class gate never applies to another class
        assert check_op(c.bad, "CPU", upstream_exact=True, revision=rev).gate != gate.key
        assert "on the GPU class" in outside.reason
    if gate.quirk:  # quirks only in upstream-exact mode
        assert check_op(c.bad, device, upstream_exact=False, revision=rev).gate != gate.key
        assert "(upstream quirk)" in outside.reason


def test_registered_tables_match_the_spec() -> None:
    registered = P.REGISTERED_N - {Op.NONE}
    assert len([o for o in registered if o.kind == "op"]) == 39
    assert len([o for o in registered if o.kind == "unary"]) == 7
    assert len([o for o in registered if o.kind == "glu"]) == 3
    assert Op.SOLVE_TRI not in registered and Op.NONE in P.REGISTERED_N
    assert len(P.ALLOWED_TYPES_N) == 13
    # the older revisions register a subset: none of N's added ops, P not SWIGLU_OAI either
    assert P.REGISTERED[Revision.P] < P.REGISTERED[Revision.V] < P.REGISTERED_N
    assert Op.SQR not in P.REGISTERED[Revision.V] and Op.SWIGLU_OAI not in P.REGISTERED[Revision.P]


def test_none_is_always_supported() -> None:
    assert check_op(L(4, t="q6_K"), "CPU").supported


def test_unregistered_unary_and_glu_are_named() -> None:
    a = L(8, 2)
    d = check_op(op("UNARY", "f32", a.ne, a, sub_op="RELU"), "CPU")
    assert not d and "unary op RELU is not registered" in d.reason
    d = check_op(op("GLU", "f32", (4, 2), a, None, sub_op="REGLU"), "CPU")
    assert not d and "GLU op REGLU is not registered" in d.reason


def test_msa_block_mask_chain_is_a_quirk() -> None:
    mask = L(8, 8, name="msa_block_mask_0")
    chained = op("RESHAPE", "f32", (64,), op("REPEAT", "f32", (8, 8), mask))
    scores = op("ADD", "f32", (64,), chained, L(64))
    d = check_op(scores, "CPU", upstream_exact=True)
    assert d.gate == "global.msa" and "msa_block_mask" in d.reason
    assert check_op(scores, "CPU").supported


def test_upstream_exact_gpu_string_is_fixed_for_gpu_dot_n() -> None:
    """Upstream compares the device to "GPU" exactly; ovkit applies GPU rules to GPU.0/GPU.1 too."""
    a46 = L(4, 6)
    per_channel = op("DIV", "f32", a46.ne, a46, L(4))
    for dev in ("GPU", "GPU.0", "GPU.1"):
        assert check_op(per_channel, dev).gate == "div.gpu_per_channel"
    for dev in ("CPU", "NPU"):
        assert check_op(per_channel, dev).supported


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="ADD needs src1, which is absent"):
        check_op(OpInfo("ADD", "f32", (4,), (_info(L(4)),)), "CPU")
    with pytest.raises(ValueError, match="1 to 4 entries"):
        OpInfo("ADD", "f32", (1, 2, 3, 4, 5))
    with pytest.raises(TypeError, match="OpInfo or a graph Tensor"):
        check_op("ADD", "CPU")
    with pytest.raises(ValueError, match=r"unknown policy revision 'X'; expected one of \['N', 'V', 'P'\]"):
        check_op(L(4), "CPU", revision="X")


def test_cpy_view_overrunning_its_buffer_is_rejected() -> None:
    buf = L(128, 4, 3)
    base = _info(buf)  # the builder refuses such a view: the record is made by hand
    overrun = OpInfo(Op.VIEW, "f32", (128, 4, 2, 1), (base,), nb=base.strides, view_src=base, view_offs=4096)
    d = check_op(_cpy(L(128, 4, 2), overrun), "CPU")
    assert d.gate == "cpy.view_fit" and "view of 4096 B at offset 4096 overruns its 6144 B buffer" in d.reason
    assert check_op(_cpy(L(128, 4, 2), view(buf, (128, 4, 2), offset=2048)), "CPU").supported


def test_graph_tensors_are_checked_through_op_info() -> None:
    """A Graph node is asked about as the OpInfo its op_info() builds (sources, permutes, views)."""
    from ovkit.graph import Graph

    g = Graph()
    a, b = g.input("a", (6, 4)), g.input("b", (4, 6))
    d = check_op(g.add(a, g.permute(b, 1, 0, 2, 3)), "CPU")
    assert not d and d.gate == "binary.src1_permute" and "src1 is PERMUTE" in d.reason
    assert check_op(g.add(a, a), "CPU").supported
    d = check_op(g.mul_mat(g.view_2d(a, 2, 6, a.nb[1], 0), g.view_2d(a, 2, 3, a.nb[1], 0)), "CPU")
    assert d.gate == "mul_mat.both_views"


def test_docs_policy_page_is_in_step_with_the_gates() -> None:
    from pathlib import Path

    page = Path(__file__).resolve().parents[1] / "docs" / "policy.md"
    assert page.read_text() == P.render_markdown(), (
        "regenerate docs/policy.md with ovkit.ops.policy.render_markdown()"
    )
    frame = P.gates_frame()
    assert len(frame) == len(P.all_gates())
    assert set(frame[frame["device class"] == "GPU"]["gate"]) >= {"div.gpu_per_channel", "mul_mat_id.gpu_tmp"}


def test_graph_cpy_into_an_offset_view_is_supported() -> None:
    """A CPY into a fitting, contiguous offset view of a buffer passes (overrunning views already fail
    at Graph build time)."""
    from ovkit.graph import Graph

    g = Graph()
    buf = g.input("buf", (3, 4, 128))
    fits = g.cpy(g.input("src", (2, 4, 128)), g.view_3d(buf, 128, 4, 2, buf.nb[1], buf.nb[2], 2048))
    assert check_op(fits, "CPU").supported


def test_op_gates_lists_the_op_specific_global_gates_first() -> None:
    assert [g.key for g in P.op_gates("UNARY.EXP")] == ["global.exp_f32"]
    assert [g.key for g in P.op_gates("GLU.SWIGLU")] == ["global.glu_view", "global.glu_odd"]
    assert [g.key for g in P.op_gates("rope")][0] == "rope.mode"
    assert P.op_gates("NONE") == ()
