"""The comparison set against ggml's CPU backend: every op in layouts, views, types, value ranges
and model-sized shapes; a case per row, test-backend-ops' own (``tbo(op, **params)``) or written
out (``vs(id, builder, leaves, *args)``, ``ne`` innermost first)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ovkit.catalogue import backend_ops
from ovkit.catalogue.case import Case, Init, Leaf, Program
from ovkit.catalogue.curated import build
from ovkit.catalogue.curated.build import C, P, V, f, fa_program, ints, leaf_of, rope_args, vs
from ovkit.catalogue.curated.llama_block import cases as llama_block_cases
from ovkit.dtypes import QUANT_TYPES
from ovkit.ir import GGML_SORT_ORDER_ASC, GGML_SORT_ORDER_DESC, RopeType
from ovkit.ops.verdict_csv import parse_params

ASC, DESC = GGML_SORT_ORDER_ASC, GGML_SORT_ORDER_DESC


#: The parameters of test-backend-ops' case structs the comparison set varies, with the values its
#: rows take unless they say otherwise.
BASE: dict[str, str] = {
    **dict.fromkeys(("ADD", "SUB", "MUL", "DIV"), "type=f32,ne=[10,5,4,3],nr=[1,1,1,1],nf=1"),
    **dict.fromkeys(backend_ops.UNARY, "type=f32,ne_a=[128,2,2,2],v=0"),
    **dict.fromkeys(("SWIGLU", "GEGLU"), "type=f32,ne_a=[128,2,2,2],v=0,swapped=0"),
    "SWIGLU_OAI": "type=f32,ne_a=[128,2,2,2],v=0,alpha=1.702,limit=7.0",
    "ADD_ID": "type_a=f32,type_b=f32,n_embd=32,n_experts=8,n_experts_used=8,n_token=5",
    "SCALE": "type=f32,ne=[10,10,10,10],scale=2.0,bias=0.0",
    "SQR": "type=f32,ne=[10,5,4,3]",
    "SQRT": "type=f32,ne=[10,3,3,2]",
    "CLAMP": "type=f32,ne=[10,5,4,3],min=-0.5,max=0.5",
    "FILL": "type=f32,ne=[10,10,4,3],c=2.5",
    "CONCAT": "type=f32,ne_a=[10,5,5,5],ne_b_d=3,dim=0,v=0",
    **dict.fromkeys(("NORM", "RMS_NORM", "L2_NORM"), "type=f32,ne=[64,5,4,3],v=0,eps=1e-06,noncontig_rows=0"),
    "SOFT_MAX": "type=f32,ne=[16,5,4,3],mask=1,sinks=0,m_prec=f32,nr23=[1,1],scale=1.0,max_bias=0.0",
    "ROPE": "type=f32,ne_a=[32,4,5,1],n_dims=32,mode=0,n_ctx=512,fs=1.0,ef=0.0,af=1.0,ff=0,v=0",
    "GATED_DELTA_NET": "type=f32,head_count=4,head_size=16,n_seq_tokens=1,n_seqs=1,v_repeat=1,permuted=0,"
    "kda=0,K=1",
    "CONT": "type=f32,ne=[10,10,10,1],use_view_slice=0,permute=[0,0,0,0]",
    "CPY": "type_src=f32,type_dst=f16,ne_src=[10,10,10,1]",
    "IM2COL": "type_input=f32,type_kernel=f16,dst_type=f32,ne_input=[10,10,3,1],ne_kernel=[3,3,3,1],"
    "s0=1,s1=1,p0=1,p1=1,d0=1,d1=1,is_2D=1",
    "PAD": "type=f32,ne_a=[8,6,3,1],lp0=1,rp0=1,lp1=1,rp1=1,lp2=1,rp2=1,lp3=0,rp3=0,tfrm=0",
    "REPEAT": "type=f32,ne=[10,5,4,3],nr=[2,2,1,2]",
    "SSM_CONV": "type=f32,ne_a=[8,16,2,1],ne_b=[4,16,1,1]",
    "GET_ROWS": "type=f32,n=10,m=5,r=3,be1=1,be2=1,v=0",
    "SET_ROWS": "type_src=f32,type_dst=f32,type_idx=i64,ne=[32,10,2,1],nr23=[1,1],r=3,v=0",
    "MUL_MAT": "type_a=f32,type_b=f32,m=16,n=8,k=32,bs=[2,3],nr=[1,1]",
    "MUL_MAT_ID": "type_a=f32,type_b=f32,n_mats=4,n_used=2,b=0,m=16,n=5,k=32",
}


def tbo(op: str, rejected: str = "", /, **changes: Any) -> Case:
    """test-backend-ops' own case of ``op`` (:data:`BASE` with ``changes``), as
    :mod:`ovkit.catalogue.backend_ops` builds it, under ovkit's op key (``UNARY.GELU``);
    ``rejected``: a fragment of upstream's reason."""
    params = ",".join(f"{k}={build.fmt(v)}" for k, v in {**parse_params(BASE[op]), **changes}.items())
    return replace(
        backend_ops.case_of(op, params), op=build.BUILDER_OP.get(op.lower(), op), rejected=rejected
    )


def _binary_cases() -> list[Case]:
    """Binary elementwise: ADD SUB MUL DIV (test_bin_bcast: a of ne * nr, b of ne)."""
    out = []
    for op in ("ADD", "SUB", "MUL", "DIV"):
        r = backend_ops.POS_09 if op in ("MUL", "DIV") else None
        name = op.lower()
        out += [
            *(tbo(op, type=dt) for dt in ("f32", "f16", "bf16")),
            tbo(op, ne=(10, 1, 1, 1), nr=(1, 5, 4, 3)),
            # ggml tiles b; upstream ADD/SUB/MUL broadcast only dims of size 1
            tbo(op, "" if op == "DIV" else "neither is 1", nr=(2, 2, 2, 2)),
            tbo(op, ne=(1, 5, 4, 1), nr=(16, 1, 1, 3)),
            vs(f"{name}-f16-b-f32", name, {"a": f(10, 5, 4, 3, dtype="f16", init=r), "b": f(10, 5, 1, 1, init=r)},
               "a", "b"),
            # a non-contiguous view: the first half of each row of a wider tensor
            vs(f"{name}-src0-view", name, {"a": f(20, 5, 4, 3, init=r), "b": f(10, 5, 4, 3, init=r)},
               V("a", 10, 5, 4, 3), "b"),
            vs(f"{name}-src0-permuted", name, {"a": f(10, 4, 5, 3, init=r), "b": f(10, 5, 1, 3, init=r)},
               P("a", 0, 2, 1, 3), "b"),
        ]  # fmt: skip
    return out


def _scalar_cases() -> list[Case]:
    """ADD1, ADD_ID, SCALE, SQR, SQRT, CLAMP, FILL."""
    return [
        vs("add1-f32", "add1", {"a": f(10, 5, 4, 3), "b": f(1)}, "a", "b"),
        vs("add1-f16", "add1", {"a": f(10, 5, 4, 3, dtype="f16"), "b": f(1, dtype="f16")}, "a", "b"),
        tbo("ADD_ID"),
        tbo("ADD_ID", n_experts_used=4),
        tbo("SCALE"),
        tbo("SCALE", scale=0.75, bias=-1.5),
        *(tbo(op, type=dt) for dt in ("f32", "f16") for op in ("SQR", "SQRT", "CLAMP", "FILL")),
        tbo("SQR", type="bf16"),
    ]


def _unary_cases() -> list[Case]:
    """Unary sub-ops (test_unary: x in [-150, 150])."""
    out = []
    for u in ("GELU", "SIGMOID", "SILU", "SOFTPLUS", "TANH", "NEG"):
        name = u.lower()
        out += [
            *(tbo(u, type=t, v=v) for t, v in (("f32", 0), ("f16", 0), ("f32", 1))),
            vs(f"{name}-f32-narrow", name, {"a": f(128, 2, 2, 2, lo=-4.0, hi=4.0)}, "a"),
            vs(f"{name}-f16", name, {"a": f(128, 2, 2, 2, dtype="f16", lo=-10.0, hi=10.0)}, "a"),
        ]
    return [
        *out,
        # bf16: ggml's CPU backend has bf16 kernels for these unary ops (not for GELU/SILU)
        *(tbo(u, type="bf16") for u in ("NEG", "TANH", "SIGMOID", "SOFTPLUS")),
        tbo("EXP", type="f16"),  # test-backend-ops draws f16 EXP in [-10, 10]
        # in [-150, 150] (why upstream rejects EXP f32: OpenVINO's Exp overflows from x ~ 88.38,
        # ovkit's translation keeps it finite up to 88.72 like ggml)
        tbo("EXP", "exp"),
        vs("exp-f32", "exp", {"a": f(128, 2, 2, 2, lo=-10.0, hi=10.0)}, "a", rejected="exp"),
    ]


def _glu_cases() -> list[Case]:
    """GLU sub-ops (test_glu / test_glu_split / test_swiglu_oai: x in [-150, 150]; v=1: views)."""
    out = []
    for op in ("SWIGLU", "GEGLU"):
        for sw in (0, 1):
            out += [tbo(op, swapped=sw), tbo(op, v=1, swapped=sw), tbo(op, type="f16", swapped=sw)]
        out += [tbo(op, split=1), tbo(op, v=1, split=1)]
    narrow = f(128, 2, 2, 2, lo=-10.0, hi=10.0)
    return [
        *out,
        tbo("SWIGLU_OAI"),
        vs("swiglu_oai-narrow", "swiglu_oai", {"a": narrow, "b": narrow}, "a", "b", 1.702, 7.0),
        tbo("SWIGLU_OAI", v=1),
    ]


def _layout_cases() -> list[Case]:
    """Layout ops: CONT, CPY, RESHAPE, VIEW, PERMUTE, TRANSPOSE."""
    # upstream: a TRANSPOSE output must not be bf16
    out = [tbo("CONT", "bf16" if dt == "bf16" else "", type=dt) for dt in ("f32", "f16", "bf16")]
    out += [
        # a slice of each row: 10 of a 10x10 plane's rows, from element 9 on
        tbo("CONT", type="bf16", use_view_slice=1),
        tbo("CONT", ne=(6, 5, 4, 3), permute=(2, 0, 3, 1)),
        tbo("CONT", use_view_slice=1),
        vs("cont_2d-of-permute", "cont", {"a": f(8, 4, 6)}, program=C("cont_2d", P("a", 0, 2, 1, 3), 32, 6)),
        tbo("CPY"),
        tbo("CPY", type_src="f16", type_dst="f32"),
        vs("cpy-f32-permuted-src", "cpy", {"a": f(10, 8, 6, 1, init=backend_ops.U150), "d": f(10, 6, 8, 1)},
           P("a", 0, 2, 1, 3), "d", max_nmse=0.0, why="test_cpy: 0 when src and dst types match"),  # fmt: skip
        tbo("CPY", ne_src=(12, 7, 1, 1), _src_transpose=1),
        vs("reshape_2d", "reshape_2d", {"a": f(10, 5, 4, 3)}, "a", 50, 12),
        vs("reshape_4d-then-add", "reshape_4d", {"a": f(60, 4), "b": f(5, 3, 4, 4)},
           program=C("add", C("reshape_4d", "a", 5, 3, 4, 4), "b")),  # fmt: skip
        vs("reshape-of-cont-permute", "reshape_3d", {"a": f(4, 6, 5)}, C("cont", P("a", 1, 0, 2, 3)), 12,
           2, 5),
        vs("view_1d-offset", "view_1d", {"a": f(10, 5, 4)}, "a", 37, 4 * 11),
        vs("view_2d-rows", "view_2d", {"a": f(10, 8)}, "a", 6, 3, 40, 40 * 2 + 8),  # nb1 40: f32 rows of 10
        vs(
            "view_3d-strided", "view_3d", {"a": f(8, 6, 4)}, "a", 4, 3, 2, 32 * 2, 192 * 2, 4
        ),  # every 2nd row, plane
        vs("view_4d-then-mul", "view_4d", {"a": f(20, 5, 4, 3), "b": f(10, 5, 4, 3)},
           program=C("mul", V("a", 10, 5, 4, 3, offset=40), "b")),  # fmt: skip
    ]  # fmt: skip
    out += [vs(f"permute-{''.join(map(str, axes))}", "permute", {"a": f(6, 5, 4, 3)}, "a", *axes)
            for axes in ((1, 0, 2, 3), (0, 2, 1, 3), (2, 0, 1, 3), (3, 2, 1, 0))]  # fmt: skip
    return [
        *out,
        vs("permute-f16", "permute", {"a": f(6, 5, 4, 3, dtype="f16")}, "a", 0, 2, 1, 3),
        vs("transpose", "transpose", {"a": f(7, 5, 3)}, "a"),
        vs("transpose-f16-then-cont", "transpose", {"a": f(7, 5, dtype="f16")},
           program=C("cont", C("transpose", "a"))),
    ]  # fmt: skip


def _concat_cases() -> list[Case]:
    """CONCAT (test_concat: v bit 0 = a non-contiguous a, bit 1 = a non-contiguous b)."""
    variants = [(d, 0, "f32") for d in range(4)] + [(1, v, "f32") for v in (1, 2, 3)] + [(2, 0, "f16")]
    return [
        *(tbo("CONCAT", type=t, dim=d, v=v) for d, v, t in variants),
        vs("concat-dim0-i32", "concat", {"a": ints(10, 5, 5, 5, high=1000), "b": ints(3, 5, 5, 5,
           high=1000)}, "a", "b", 0),
    ]  # fmt: skip


def _rows_cases() -> list[Case]:
    """GET_ROWS / SET_ROWS / SET."""
    return [
        *(tbo("GET_ROWS", type=dt) for dt in ("f32", "f16", "bf16")),
        tbo("GET_ROWS", r=4, be1=3),
        tbo("GET_ROWS", r=4, be1=3, v=1),
        vs("get_rows-i32-data", "get_rows", {"a": ints(10, 5, high=100), "r": ints(3, high=5)}, "a", "r"),
        *(tbo("SET_ROWS", type_dst=d, type_idx=i) for d in ("f32", "f16", "bf16") for i in ("i64", "i32")),
        tbo("SET_ROWS", ne=(16, 10, 2, 1), nr23=(2, 1)),
        tbo("SET_ROWS", ne=(16, 10, 2, 1), r=4, v=1),
        # a's own strides (f32 [12, 5, 4, 3]: 48, 240, 960), from row 2, element 3
        vs("set-block", "set", {"a": f(12, 5, 4, 3), "b": f(6, 3, 2, 1)}, "a", "b", 48, 240, 960, 48 * 2 + 3 * 4),
        vs("set_1d", "set", {"a": f(40), "b": f(7)}, program=C("set_1d", "a", "b", 4 * 9)),
        vs("set_2d", "set", {"a": f(10, 6), "b": f(4, 3)}, program=C("set_2d", "a", "b", 40, 4 * 12)),
    ]  # fmt: skip


def _mul_mat_cases() -> list[Case]:
    """MUL_MAT (a ne [k, m, bs0, bs1], b ne [k, n, bs0*nr0, bs1*nr1]) and MUL_MAT_ID (as ne [k, m,
    n_mats], b ne [k, n_used or 1, n], ids ne [n_used, n])."""
    return [
        tbo("MUL_MAT"),
        tbo("MUL_MAT", bs=(2, 1), nr=(4, 2)),  # GQA's broadcast
        tbo("MUL_MAT", m=48, n=1, k=64, bs=(1, 1)),
        tbo("MUL_MAT", type_a="f16", bs=(2, 1)),
        tbo("MUL_MAT", type_a="f16", type_b="f16", bs=(2, 1)),
        tbo("MUL_MAT", type_a="bf16", bs=(2, 1)),
        tbo("MUL_MAT", per=(0, 2, 1, 3)),
        vs("mul_mat-a-view-k", "mul_mat", {"a": f(48, 16, 2), "b": f(32, 8, 2)}, V("a", 32, 16, 2), "b"),
        # [head_dim, n_head, n_tokens] as in llama.cpp
        vs("mul_mat-kq-attention", "mul_mat", {"k": f(16, 4, 24), "q": f(16, 4, 6)},
           P("k", 0, 2, 1, 3), P("q", 0, 2, 1, 3)),
        tbo("MUL_MAT_ID"),
        tbo("MUL_MAT_ID", b=1),
        tbo("MUL_MAT_ID", type_a="f16", n_mats=8, n_used=3, n=4),
    ]  # fmt: skip


def _quantized_cases() -> list[Case]:
    """Quantized weights (the upstream backend's 8 types); get_rows rows of 512 avoid upstream's
    ne[0]==256 gate."""
    return [
        *(tbo("MUL_MAT", type_a=q, m=24, n=5, k=256, bs=(1, 1)) for q in QUANT_TYPES),
        *(tbo("GET_ROWS", type=q, n=512, m=6, r=4) for q in QUANT_TYPES),
        *(tbo("MUL_MAT_ID", type_a=q, n=3, k=256) for q in ("q4_0", "mxfp4")),
    ]


def _norm_cases() -> list[Case]:
    """Norms (test_norm: v = a view, noncontig_rows = permuted rows) and reductions."""
    distinct = Init("distinct")
    return [
        tbo("NORM"),
        tbo("NORM", ne=(64, 6, 4, 2), v=1),
        tbo("NORM", eps=1e-5, noncontig_rows=1),
        tbo("RMS_NORM"),
        tbo("RMS_NORM", ne=(64, 6, 4, 2), v=1),
        tbo("L2_NORM", eps=1e-12),
        tbo("L2_NORM", ne=(64, 6, 4, 2), v=1, eps=1e-12),
        tbo("L2_NORM", ne=(64, 6, 4, 2), eps=1e-12, noncontig_rows=1),
        vs("rms_norm-eps-large", "rms_norm", {"a": f(32, 4, lo=-0.01, hi=0.01)}, "a", 1e-3),
        vs("sum_rows", "sum_rows", {"a": f(10, 5, 4, 3)}, "a"),
        # every 2nd plane of the first two batches of a's [10, 5, 4, 3] f32 (nb 40, 200, 800), from batch 1
        vs("sum_rows-slice-view", "sum_rows", {"a": f(10, 5, 4, 3)},
           C("view_4d", "a", 10, 5, 2, 2, 40, 400, 800, 800)),
        vs("cumsum", "cumsum", {"a": f(10, 5, 4, 3)}, "a"),
        vs("cumsum-long", "cumsum", {"a": f(200, 3)}, "a"),
        vs("argsort-asc", "argsort", {"a": leaf_of((16, 10, 4, 2), "f32", distinct)}, "a", ASC),
        vs("argsort-odd-width", "argsort", {"a": leaf_of((13, 7), "f32", distinct)}, "a", DESC),
        vs("argsort-desc", "argsort", {"a": leaf_of((16, 10, 4, 2), "f32", distinct)}, "a", DESC),
    ]  # fmt: skip


def _soft_max_cases() -> list[Case]:
    """SOFT_MAX (test_soft_max)."""
    causal = {"a": f(24, 6, 4, 1), "m": leaf_of((24, 6, 1, 1), "f16", Init("causal_mask"))}
    return [
        vs("soft_max-plain", "soft_max", {"a": f(16, 5, 4, 3)}, "a"),
        tbo("SOFT_MAX", mask=0, scale=0.1),
        tbo("SOFT_MAX"),
        tbo("SOFT_MAX", m_prec="f16", scale=0.1),
        tbo("SOFT_MAX", nr23=(2, 3), scale=0.5),
        tbo("SOFT_MAX", max_bias=8.0),
        tbo("SOFT_MAX", ne=(32, 4, 12, 1), m_prec="f16", scale=0.25, max_bias=8.0),
        tbo("SOFT_MAX", mask=0, sinks=1),
        tbo("SOFT_MAX", m_prec="f16", sinks=1, scale=0.1),
        tbo("SOFT_MAX", sinks=1, max_bias=8.0),
        vs("soft_max_ext-causal-mask", "soft_max_ext", causal, "a", "m", 0.125, 0.0),
    ]


def _fa(
    hsk: int, hsv: int, nh: int, nr: int, kv: int, nb: int, mask: bool, kv_dtype: str
) -> tuple[dict[str, Leaf], Program]:
    """test_flash_attn_ext's leaves (q/k/v as llama.cpp passes them: permuted views) and program."""
    ins = {
        "q": f(hsk, nh * nr, nb),  # [head_dim, n_head, n_tokens], as after the Q projection
        "k": f(hsk, nh, kv, dtype=kv_dtype),  # cache layout [head_dim, n_head_kv, n_kv]
        "v": f(hsv, nh, kv, dtype=kv_dtype),
    }
    if mask:  # ggml-python's ggml pads the mask rows to GGML_KQ_MASK_PAD (32)
        ins["m"] = leaf_of((kv, -(-nb // 32) * 32, 1, 1), "f16", Init("causal_mask"))
    return ins, fa_program(1.0 / np.sqrt(hsk), mask="m" if mask else None)


def _flash_attn_cases() -> list[Case]:
    """FLASH_ATTN_EXT (test_flash_attn_ext; upstream rejects a bf16 PERMUTE, which bf16 K/V pass through)."""
    out = []
    for cid, args in {
        "fa-f16kv-mask": (64, 64, 4, 1, 32, 8, True, "f16"),
        "fa-f16kv-nomask": (64, 64, 4, 1, 32, 8, False, "f16"),
        "fa-gqa4-mask": (64, 64, 2, 4, 32, 8, True, "f16"),
        "fa-gqa2-hsv-ne-hsk": (64, 32, 2, 2, 48, 5, True, "f16"),
        "fa-f32kv-gqa": (32, 32, 2, 3, 16, 4, True, "f32"),
        "fa-decode-1-token": (64, 64, 4, 2, 40, 1, True, "f16"),
        "fa-bf16kv-gqa": (64, 64, 2, 2, 32, 6, True, "bf16"),
    }.items():
        ins, prog = _fa(*args)
        out.append(vs(cid, "flash_attn_ext", ins, program=prog, rejected="bf16" if "bf16" in args else None))
    return out


#: YaRN's rope parameters: freq_scale, ext_factor, attn_factor.
YARN = {"fs": 1.4245, "ef": 0.7465, "af": 1.4245}


def _rope_cases() -> list[Case]:
    """ROPE: NORMAL, NEOX (rope_ext) and IMROPE (rope_multi)."""
    out = []
    for mode in (RopeType.NORMAL, RopeType.NEOX):
        out += [
            tbo("ROPE", mode=mode),
            tbo("ROPE", n_dims=16, mode=mode),
            tbo("ROPE", type="f16", mode=mode),
            tbo("ROPE", ne_a=(64, 2, 7, 1), n_dims=64, mode=mode, **YARN),
            tbo("ROPE", mode=mode, ff=1),
            tbo("ROPE", ne_a=(16, 3, 6, 2), n_dims=16, mode=mode, fs=0.25),
            # Q sliced out of a fused QKV projection (non-contiguous rows; qkv rows of 96 f32: nb1 384)
            vs(f"rope-{mode.name.lower()}-qkv-view", "rope_ext", {"qkv": f(96, 5), "p": ints(5, high=512)},
               C("view_3d", "qkv", 16, 2, 5, 16 * 4, 384, 0), "p", None, *rope_args(16, mode)),  # fmt: skip
        ]  # fmt: skip
    imrope = RopeType.IMROPE
    return [
        *out,
        tbo("ROPE", mode=imrope),
        tbo("ROPE", ne_a=(32, 2, 6, 1), n_dims=16, mode=imrope),
        tbo("ROPE", type="f16", mode=imrope),
        # test-backend-ops' v=1: a strided view; upstream only takes views with view_src ne[1] == ne[2]
        tbo("ROPE", "view_src", ne_a=(10, 5, 5, 1), n_dims=10, v=1),
        # MROPE and VISION are not registered upstream: rejected, yet ggml's numbers must hold
        tbo("ROPE", "mode", mode=RopeType.MROPE),
        tbo("ROPE", "mode", mode=RopeType.VISION),
        tbo("ROPE", "imrope", mode=imrope, ff=1),
        tbo("ROPE", "imrope", mode=imrope, **YARN),
    ]


def _conv_and_recurrent_cases() -> list[Case]:
    """IM2COL, PAD, REPEAT, SSM_CONV, GATED_DELTA_NET, DIAG, TRI."""
    return [
        *(tbo("IM2COL", dst_type=dst) for dst in ("f32", "f16")),
        tbo("IM2COL", ne_input=(12, 9, 2, 2), ne_kernel=(3, 3, 2, 4), s0=2, s1=1, p0=0, p1=2, d0=2, d1=1),
        tbo("IM2COL", ne_input=(20, 4, 2, 1), ne_kernel=(3, 4, 2, 1), s1=0, p1=0, d1=0, s0=2, is_2D=0),
        vs("pad", "pad", {"a": f(16, 12, 1, 1)}, "a", 1, 2, 0, 0),
        vs("pad-4d", "pad", {"a": f(5, 4, 3, 2)}, "a", 2, 1, 1, 1),
        tbo("PAD", rp0=2, lp1=0, rp2=0),  # pad_ext
        tbo("PAD", tfrm=2),  # of a permuted a
        tbo("PAD", lp2=0, tfrm=1),  # of a view
        tbo("REPEAT"),
        tbo("REPEAT", type="f16", ne=(8, 1, 3, 1), nr=(2, 5, 1, 1)),
        tbo("REPEAT", ne=(1, 1, 1, 1), nr=(4, 3, 1, 1)),
        tbo("SSM_CONV"),
        tbo("SSM_CONV", ne_a=(4, 32, 1, 1), ne_b=(4, 32, 1, 1)),
        tbo("GATED_DELTA_NET"),
        tbo("GATED_DELTA_NET", n_seq_tokens=5, n_seqs=2),
        tbo("GATED_DELTA_NET", head_count=2, n_seq_tokens=3, v_repeat=2),
        vs("diag", "diag", {"a": f(10, 1, 4, 3)}, "a"),
        *(vs(f"tri-type{t}", "tri", {"a": f(10, 10, 4, 3)}, "a", t) for t in range(4)),
    ]


def _rejected_cases() -> list[Case]:
    """Cases upstream's policy rejects: ovkit raises UnsupportedOpError, and its translation still
    reproduces ggml's numbers (checked with the policy bypassed)."""
    fa, _ = _fa(64, 64, 2, 2, 32, 6, True, "f16")
    fa_prog = fa_program(0.125, mask="m")
    return [
        vs("fa-sinks", "flash_attn_ext", {**fa, "s": f(4, lo=-10.0, hi=10.0)},
           program=fa_program(0.125, mask="m", sinks="s"), rejected="sinks"),
        vs("fa-alibi", "flash_attn_ext", fa, program=fa_program(0.125, 8.0, mask="m"), rejected="max_bias"),
        vs("fa-softcap", "flash_attn_ext", fa, program=fa_program(0.125, 0.0, 30.0, mask="m"), rejected="logit_softcap"),
        tbo("GATED_DELTA_NET", "kda", n_seq_tokens=3, kda=1),
        tbo("GATED_DELTA_NET", "K=2", n_seq_tokens=3, K=2),
        tbo("GATED_DELTA_NET", "permute", n_seq_tokens=3, permuted=1),
        tbo("SWIGLU", "odd", ne_a=(127, 2, 2, 1)),
        vs("sum_rows-permuted", "sum_rows", {"a": f(10, 5, 4, 3)}, P("a", 0, 2, 3, 1), rejected="permute"),
        vs("add-permuted-src1", "add", {"a": f(10, 5, 4, 3), "b": f(5, 4, 10, 3)}, "a", P("b", 1, 2, 0, 3),
           rejected="permute"),
        tbo("GET_ROWS", "ne[3]", r=4, be1=3, be2=2),
        vs("concat-i64", "concat", {"a": ints(4, 3, high=9, dtype="i64"), "b": ints(2, 3, high=9, dtype="i64")},
           "a", "b", 0, rejected="i64"),
        tbo("MUL_MAT", "view", bs=(1, 1), k_v=48),
        vs("cpy-f32-bf16", "cpy", {"a": f(10, 4), "d": f(10, 4, dtype="bf16")}, "a", "d", rejected="bf16"),
        # test_set: the nb of b (f32 [6, 5, 4, 3]: 24, 120, 480), not of a: upstream requires a's
        vs("set-foreign-strides", "set", {"a": f(12, 5, 4, 3), "b": f(6, 5, 4, 3)}, "a", "b", 24, 120, 480, 4 * 3,
           rejected="nb"),
        tbo("MUL_MAT_ID", "ne[2]", n_mats=1, n_used=1, b=1),
        # flash attention over padding: a query row whose keys are all masked gives 0 in ggml (not NaN)
        vs("fa-fully-masked-rows", "flash_attn_ext", {**fa, "m": leaf_of((32, 32, 1, 1), "f16", Init("padded_mask"))},
           program=fa_prog),
    ]  # fmt: skip


def _model_sized_cases() -> list[Case]:
    """Model-sized shapes (test-backend-ops' larger cases: accumulation over long rows)."""
    fa, fa_prog = _fa(128, 128, 8, 4, 512, 16, True, "f16")
    return [
        tbo("SOFT_MAX", ne=(1024, 16, 1, 1), max_bias=8.0),
        vs("rms_norm-4096", "rms_norm", {"a": f(4096, 8, lo=-10.0, hi=10.0)}, "a", 1e-6),
        vs("norm-4096", "norm", {"a": f(4096, 4)}, "a", 1e-5),
        *(tbo("MUL_MAT", type_a=ta, m=64, n=9, k=4096, bs=(1, 1)) for ta in ("f32", "q4_K")),
        tbo("GELU", ne_a=(4096, 16, 1, 1)),
        tbo("SWIGLU", ne_a=(2 * 2816, 8, 1, 1)),
        tbo("ROPE", ne_a=(128, 32, 48, 1), n_dims=128, mode=RopeType.NEOX),
        tbo("ROPE", ne_a=(128, 8, 48, 1), n_dims=128, **YARN),
        vs("fa-large-gqa4", "flash_attn_ext", fa, program=fa_prog),
        vs("cumsum-4096", "cumsum", {"a": f(4096, 4)}, "a"),
        vs("argsort-512", "argsort", {"a": leaf_of((512, 8), "f32", Init("distinct"))}, "a", DESC),
    ]  # fmt: skip


def cases() -> list[Case]:
    """The comparison set, in table order."""
    families = (
        _binary_cases, _scalar_cases, _unary_cases, _glu_cases, _layout_cases, _concat_cases, _rows_cases,
        _mul_mat_cases, _quantized_cases, _norm_cases, _soft_max_cases, _flash_attn_cases, _rope_cases,
        _conv_and_recurrent_cases, _rejected_cases, _model_sized_cases, llama_block_cases,
    )  # fmt: skip
    return [c for family in families for c in family()]
