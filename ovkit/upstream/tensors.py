"""A policy :class:`~ovkit.ir.OpInfo` rebuilt as real ggml tensors (no data, ``op_params`` packed as
ggml's builders pack them), to ask the real backend about test-backend-ops rows."""

from __future__ import annotations

import contextlib
import ctypes
import struct
from collections.abc import Iterator
from typing import Any

from ovkit.catalogue.verdicts import Unexpressible, build_case
from ovkit.errors import OvkitError
from ovkit.ir import OpInfo


class Unbuildable(OvkitError):
    """The case cannot be built with the installed ggml (unknown op or type); the reason says why."""


#: op -> (param key, op_params slot, "i" int32 / "f" float32, default): ggml's builder layouts.
OP_PARAMS: dict[str, tuple[tuple[str, int, str, float], ...]] = {
    "GLU": (("swapped", 1, "i", 0), ("alpha", 2, "f", 1.702), ("limit", 3, "f", 7.0)),
    "ROPE": (("n_dims", 1, "i", 0), ("mode", 2, "i", 0), ("n_ctx_orig", 4, "i", 0),
             ("freq_base", 5, "f", 10000.0), ("freq_scale", 6, "f", 1.0), ("ext_factor", 7, "f", 0.0),
             ("attn_factor", 8, "f", 1.0), ("beta_fast", 9, "f", 32.0), ("beta_slow", 10, "f", 1.0)),
    "SOFT_MAX": (("scale", 0, "f", 1.0), ("max_bias", 1, "f", 0.0)),
    "FLASH_ATTN_EXT": (("scale", 0, "f", 1.0), ("max_bias", 1, "f", 0.0), ("logit_softcap", 2, "f", 0.0)),
    "SET": (("nb1", 0, "i", 0), ("nb2", 1, "i", 0), ("nb3", 2, "i", 0), ("offset", 3, "i", 0)),
    "ARGSORT": (("order", 0, "i", 0),),
    "CONCAT": (("dim", 0, "i", 0),),
    "CLAMP": (("min", 0, "f", 0.0), ("max", 1, "f", 0.0)),
    "SCALE": (("scale", 0, "f", 0.0), ("bias", 1, "f", 0.0)),
    "NORM": (("eps", 0, "f", 0.0),),
    "RMS_NORM": (("eps", 0, "f", 0.0),),
    "L2_NORM": (("eps", 0, "f", 0.0),),
    "FILL": (("c", 0, "f", 0.0),),
    "TRI": (("tri_type", 0, "i", 0),),
}  # fmt: skip
#: Where the sub-op enum goes, and its enum prefix in ggml.
SUB_OP_ENUM = {"UNARY": "GGML_UNARY_OP_", "GLU": "GGML_GLU_OP_"}


def _enum(g: Any, prefix: str, name: str) -> int:
    value = getattr(g, prefix + name.upper(), None)
    if value is None:
        raise Unbuildable(f"the installed ggml has no {prefix}{name.upper()}")
    return int(value)


def _pack(g: Any, c: Any, info: OpInfo) -> None:
    """Fill ``op_params`` the way ggml's builder for ``info.op`` does."""
    if info.op in SUB_OP_ENUM and info.sub_op:
        c.op_params[0] = _enum(g, SUB_OP_ENUM[info.op], info.sub_op)
    for key, slot, kind, default in OP_PARAMS.get(info.op, ()):
        value = info.param(key, default)
        if kind == "i":
            c.op_params[slot] = int(value)
        else:
            c.op_params[slot] = struct.unpack("<i", struct.pack("<f", float(value)))[0]


def _new(g: Any, ctx: Any, info: OpInfo, memo: dict[int, Any]) -> Any:
    done = memo.get(id(info))
    if done is not None:
        return done
    t = g.ggml_new_tensor(ctx, _enum(g, "GGML_TYPE_", info.type), 4, (ctypes.c_int64 * 4)(*info.ne))
    c = t.contents
    for i, nb in enumerate(info.strides):
        c.nb[i] = nb
    c.op = _enum(g, "GGML_OP_", info.op)
    for i, src in enumerate(info.srcs):
        if src is not None:
            c.src[i] = _new(g, ctx, src, memo)
    if info.view_src is not None:
        c.view_src = _new(g, ctx, info.view_src, memo)
        c.view_offs = info.view_offs
    _pack(g, c, info)
    g.ggml_set_name(t, info.name.encode())
    memo[id(info)] = t
    return t


@contextlib.contextmanager
def build_tensor(g: Any, op_name: str, op_params: str) -> Iterator[Any]:
    """The output node of test-backend-ops case ``op_name(op_params)`` as a ggml tensor, valid
    inside the ``with`` block (its context is freed afterwards)."""
    try:
        info = build_case(op_name, op_params)
    except Unexpressible as exc:
        raise Unbuildable(str(exc)) from None
    # room for the largest case graph (tensor headers only: no_alloc)
    params = g.ggml_init_params(mem_size=g.ggml_tensor_overhead() * 1024, mem_buffer=None, no_alloc=True)
    ctx = g.ggml_init(params)
    try:
        yield _new(g, ctx, info, {})
    finally:
        g.ggml_free(ctx)
