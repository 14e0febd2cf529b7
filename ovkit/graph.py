"""A ggml-style graph builder: build with ggml's builder names, run on OpenVINO.

Methods mirror ggml's C builders (``ggml_add(ctx, a, b)`` → ``g.add(a, b)``: same argument order and
defaults, no context). Shapes are in NUMPY order (numpy ``(ne1, ne0)`` is ggml ``ne = [ne0, ne1]``);
dim, axis, ne/nb/offset and pad arguments keep ggml's (dim 0 innermost, strides and offsets in bytes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ovkit.dtypes import DTYPES, FLOAT_TYPES, TYPE_OF_NUMPY, WRITABLE_QUANT_TYPES, contiguous_nb, layout
from ovkit.engine import GRAPH_RUN_CONFIG, compute_graph, run_config_from, run_model
from ovkit.ir import (
    GGML_OP_POOL_AVG,
    GGML_OP_POOL_MAX,
    GGML_PREC_DEFAULT,
    GGML_SCALE_FLAG_ALIGN_CORNERS,
    GGML_SCALE_FLAG_ANTIALIAS,
    GGML_SCALE_MODE_BICUBIC,
    GGML_SCALE_MODE_BILINEAR,
    GGML_SORT_ORDER_ASC,
    GGML_SORT_ORDER_DESC,
    IN_PLACE_WRITES,
    GraphError,
    GraphIR,
    Op,
    RopeType,
    Tensor,
    UnsupportedOpError,
    from_model_output,
    ne4,
    ne_str,
    pad_ne,
    round_to,
)
from ovkit.ops.bounds import check_constant, check_feed, fed_index_nodes
from ovkit.ops.feed import prepare_feed
from ovkit.ops.table import ENTRIES, GENERIC_BUILDERS, GLU_BUILT, UNARY_BUILT, OpEntry
from ovkit.runtime import Core

__all__ = ["Graph", "GraphError", "Mode", "Tensor", "UnsupportedOpError"]

Mode = Literal["device", "reference"]


def conv_output_size(ins: int, ks: int, s: int, p: int, d: int) -> int:
    """``ggml_calc_conv_output_size``: (ins + 2p − d(ks − 1) − 1) / s + 1, C integer division."""
    num = ins + 2 * p - d * (ks - 1) - 1
    return int(num / s) + 1 if s else 0  # int(): truncation toward zero, as C


class Graph(GraphIR):
    """Build a ggml-style graph; run it with :meth:`compute` (OpenVINO) or in reference mode."""

    @staticmethod
    def _indexed(t: Tensor) -> Tensor:
        """``t`` after checking a constant index operand against its table (ovkit.ops.bounds)."""
        check_constant(t)
        return t

    @staticmethod
    def _err(op: str, operand: str, expected: str, given: str) -> GraphError:
        return GraphError(f"{op}: operand {operand}: expected {expected}, given {given}")

    def _ne_err(self, op: str, operand: str, expected: str, t: Tensor) -> GraphError:
        """``_err`` for a shape: ``t``'s ne is what was given."""
        return self._err(op, operand, expected, f"ne {ne_str(t.ne)}")

    def _check_tensor(
        self, op: str, operand: str, t: Any, types: Sequence[str] | None = None, quantized: bool = False
    ) -> Tensor:
        """``t`` after checking it is a Tensor of this graph (and of one of ``types`` when given, or
        block-quantized when ``quantized``: a weight ggml dequantizes)."""
        if not isinstance(t, Tensor):
            raise self._err(op, operand, "an ovkit.graph.Tensor", type(t).__name__)
        if t.graph is not self:
            raise GraphError(f"{op}: operand {operand} belongs to another Graph")
        if types is not None and t.dtype not in types and not (quantized and t.is_quantized):
            raise self._err(op, operand, "type in {" + ", ".join(types) + "}", t.dtype)
        return t

    def _same_as_a(
        self, op: str, a: Tensor, b: Tensor, types: Sequence[str] = ("f32",), an: str = "a", bn: str = "b"
    ) -> None:
        """Operands ``a`` (of one of ``types``) and ``b`` of a's type and shape (named ``an``, ``bn``)."""
        self._check_tensor(op, an, a, types)
        self._check_tensor(op, bn, b)
        if b.dtype != a.dtype:
            raise self._err(op, bn, f"type {a.dtype} (same as {an})", b.dtype)
        if b.ne != a.ne:
            raise self._ne_err(op, bn, f"ne {ne_str(a.ne)} (same shape as {an})", b)

    def _can_repeat(self, op: str, small: Tensor, big: Tensor, small_name: str, big_name: str) -> None:
        """``ggml_can_repeat(small, big)``: each big.ne[i] is a multiple of small.ne[i]."""
        multiples = all(b % s == 0 for s, b in zip(small.ne, big.ne, strict=True) if s)
        if not (math.prod(big.ne) == 0 if math.prod(small.ne) == 0 else multiples):
            raise GraphError(
                f"{op}: operand {small_name} ne {ne_str(small.ne)} cannot be repeated to "
                f"{big_name} ne {ne_str(big.ne)} (expected each {big_name}.ne[i] to be a multiple "
                f"of {small_name}.ne[i])"
            )

    # ------------------------------------------------------------------ leaves
    def _leaf(self, what: str, shape: Any, dtype: str, plain: bool = True) -> Tensor:
        """A leaf of numpy-order ``shape``; GraphError naming the leaf for a bad shape or (``plain``) type."""
        if plain and dtype not in DTYPES:
            raise GraphError(f"{what}: expected dtype in {DTYPES}, given {dtype!r}")
        try:
            ne = ne4(tuple(shape))
        except TypeError:
            raise GraphError(f"{what}: expected a shape (a sequence of integers), given {shape!r}") from None
        except GraphError as exc:
            raise GraphError(f"{what}: {exc}") from None
        if 0 in ne:
            raise GraphError(
                f"{what}: zero-size shape {tuple(shape)}: expected every dimension >= 1 "
                "(ovkit does not build empty tensors)"
            )
        return self._new(Op.NONE, ne, dtype)

    def input(self, name: str, shape: Sequence[int], dtype: str = "f32") -> Tensor:
        """A graph input (an OpenVINO Parameter) fed by name in :meth:`compute`."""
        if not name:
            raise GraphError("input: expected a non-empty name")
        if name in self._names:
            raise GraphError(f"input {name!r}: the name is already used in this graph")
        t = self._leaf(f"input {name!r}", shape, dtype)
        self._names.add(name)
        t.name = name
        t.is_input = True
        return t

    def constant(self, array: Any, name: str = "", dtype: str | None = None) -> Tensor:
        """A constant leaf of ``array``'s type (float32 → f32, ...) or ``dtype`` (``"bf16"``: rounded as
        ggml stores it); or a quantized weight (``ovkit.quant``: ``.shape``, ``.dtype``, ``.to_ov_node()``,
        ``.dequantize()``)."""
        if hasattr(array, "to_ov_node") and not isinstance(array, np.ndarray):
            t = self._leaf(f"constant {name!r}", array.shape, str(array.dtype), plain=False)
            t.value = array
            t.name = name or getattr(array, "name", "") or ""
            return t
        arr = np.atleast_1d(np.asarray(array))
        inferred = TYPE_OF_NUMPY.get(arr.dtype)
        if inferred is None:
            raise GraphError(
                f"constant {name!r}: expected a float32/float16/int32/int64 array, given dtype {arr.dtype}"
            )
        final = dtype or inferred
        t = self._leaf(f"constant {name!r}", arr.shape, final)
        # A private, read-only copy: the caller changing its array later must not change a
        # graph that may already be compiled (the device would keep the old values).
        value = np.array(round_to(final, arr), order="C", copy=True)
        value.flags.writeable = False
        t.value = value
        t.name = name
        return t

    def new_tensor(self, dtype: str, shape: Sequence[int], name: str = "") -> Tensor:
        """An input with a generated name (ggml_new_tensor's counterpart)."""
        return self.input(name or f"t{len(self.nodes)}", shape, dtype)

    # ------------------------------------------------------------------ elementwise binary
    def _binary(self, op: str, a: Tensor, b: Tensor) -> Tensor:
        self._check_tensor(op, "a", a, FLOAT_TYPES)
        self._check_tensor(op, "b", b)
        if b.dtype not in (a.dtype, "f32"):
            raise self._err(op, "b", f"type {a.dtype} or f32 (the type of a, or f32)", b.dtype)
        self._can_repeat(op, b, a, "b", "a")
        return self._new(op, a.ne, a.dtype, (a, b))

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_add``: a + b, b repeated (tiled) to a's shape."""
        return self._binary(Op.ADD, a, b)

    def sub(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_sub``: a - b, b repeated to a's shape."""
        return self._binary(Op.SUB, a, b)

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_mul``: a * b, b repeated to a's shape."""
        return self._binary(Op.MUL, a, b)

    def div(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_div``: a / b, b repeated to a's shape."""
        return self._binary(Op.DIV, a, b)

    def add1(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_add1``: a + scalar b."""
        self._check_tensor(Op.ADD1, "a", a, FLOAT_TYPES)
        self._check_tensor(Op.ADD1, "b", b, FLOAT_TYPES)
        if b.nelements != 1:
            raise self._ne_err(Op.ADD1, "b", "a scalar (1 element)", b)
        return self._new(Op.ADD1, a.ne, a.dtype, (a, b))

    def add_id(self, a: Tensor, b: Tensor, ids: Tensor) -> Tensor:
        """``ggml_add_id``: out[:, i1, i2] = a[:, i1, i2] + b[:, ids[i1, i2]] (per-expert bias)."""
        op = Op.ADD_ID
        self._check_tensor(op, "a", a, ("f32",))
        self._check_tensor(op, "b", b, ("f32",))
        self._check_tensor(op, "ids", ids, ("i32",))
        if a.ne[0] != b.ne[0]:
            raise self._ne_err(op, "b", f"ne[0] == a.ne[0] = {a.ne[0]}", b)
        if a.ne[1] != ids.ne[0] or a.ne[2] != ids.ne[1]:
            raise self._ne_err(op, "ids", f"ne[0:2] == a.ne[1:3] = [{a.ne[1]}, {a.ne[2]}]", ids)
        return self._indexed(self._new(op, a.ne, a.dtype, (a, b, ids)))

    # ------------------------------------------------------------------ elementwise unary-like
    def _float_unary(
        self,
        op: str,
        a: Tensor,
        params: Mapping[str, Any] | None = None,
        types: Sequence[str] = FLOAT_TYPES,
    ) -> Tensor:
        self._check_tensor(op, "a", a, types)
        return self._new(op, a.ne, a.dtype, (a,), params)

    def scale(self, a: Tensor, s: float) -> Tensor:
        """``ggml_scale``: a * s (f32 only: ggml's CPU aborts on other types)."""
        return self._float_unary(Op.SCALE, a, {"s": float(s), "b": 0.0}, ("f32",))

    def scale_bias(self, a: Tensor, s: float, b: float) -> Tensor:
        """``ggml_scale_bias``: a * s + b (f32 only)."""
        return self._float_unary(Op.SCALE, a, {"s": float(s), "b": float(b)}, ("f32",))

    def sqr(self, a: Tensor) -> Tensor:
        """``ggml_sqr``: a²."""
        return self._float_unary(Op.SQR, a)

    def sqrt(self, a: Tensor) -> Tensor:
        """``ggml_sqrt``: √a."""
        return self._float_unary(Op.SQRT, a)

    def clamp(self, a: Tensor, min: float, max: float) -> Tensor:  # noqa: A002
        """``ggml_clamp``: min(max(a, min), max)."""
        return self._float_unary(Op.CLAMP, a, {"min": float(min), "max": float(max)}, ("f32", "f16"))

    def fill(self, a: Tensor, c: float) -> Tensor:
        """``ggml_fill``: a tensor shaped like a, every element c."""
        return self._float_unary(Op.FILL, a, {"c": float(c)}, ("f32", "f16"))

    def unary(self, a: Tensor, op: int | str) -> Tensor:
        """``ggml_unary``: one of ggml's unary ops (enum value or name)."""
        code = self._sub_op(Op.UNARY, op, UNARY_BUILT)
        # ggml's CPU kernels of these exist for f32/f16 only (bf16 aborts at compute time)
        no_bf16 = code in (Op.GELU, Op.SILU, Op.GELU_QUICK, Op.GELU_ERF)
        self._check_tensor(Op.UNARY, "a", a, ("f32", "f16") if no_bf16 else FLOAT_TYPES)
        return self._new(Op.UNARY, a.ne, a.dtype, (a,), {"op": code.enum_value}, sub_op=code.sub_op)

    def xielu(self, a: Tensor, alpha_n: float, alpha_p: float, beta: float, eps: float) -> Tensor:
        """``ggml_xielu``: x > 0: α_p·x² + β·x, else (expm1(min(x, eps)) − x)·α_n + β·x, with ggml's
        α_n = β + softplus(alpha_n) and α_p = softplus(alpha_p) (f32, softplus(v > 20) = v)."""
        self._check_tensor(Op.UNARY, "a", a, FLOAT_TYPES)

        def softplus(v: float) -> np.float32:
            f = np.float32(v)
            return f if f > 20 else np.float32(np.log(np.float32(1.0) + np.exp(f)))

        b = np.float32(beta)
        params = {"op": Op.XIELU.enum_value, "alpha_n": float(b + softplus(alpha_n)),
                  "alpha_p": float(softplus(alpha_p)), "beta": float(b), "eps": float(np.float32(eps))}  # fmt: skip
        return self._new(Op.UNARY, a.ne, a.dtype, (a,), params, sub_op=Op.XIELU.sub_op)

    if TYPE_CHECKING:  # made from the op table (_sub_op_builder, below): the signatures IDEs see

        def gelu(self, a: Tensor) -> Tensor: ...
        def sigmoid(self, a: Tensor) -> Tensor: ...
        def silu(self, a: Tensor) -> Tensor: ...
        def softplus(self, a: Tensor) -> Tensor: ...
        def tanh(self, a: Tensor) -> Tensor: ...
        def exp(self, a: Tensor) -> Tensor: ...
        def neg(self, a: Tensor) -> Tensor: ...
        def abs(self, a: Tensor) -> Tensor: ...
        def sgn(self, a: Tensor) -> Tensor: ...
        def step(self, a: Tensor) -> Tensor: ...
        def elu(self, a: Tensor) -> Tensor: ...
        def relu(self, a: Tensor) -> Tensor: ...
        def gelu_quick(self, a: Tensor) -> Tensor: ...
        def gelu_erf(self, a: Tensor) -> Tensor: ...
        def hardswish(self, a: Tensor) -> Tensor: ...
        def hardsigmoid(self, a: Tensor) -> Tensor: ...
        def expm1(self, a: Tensor) -> Tensor: ...
        def floor(self, a: Tensor) -> Tensor: ...
        def ceil(self, a: Tensor) -> Tensor: ...
        def round(self, a: Tensor) -> Tensor: ...
        def trunc(self, a: Tensor) -> Tensor: ...
        def swiglu(self, a: Tensor) -> Tensor: ...
        def swiglu_swapped(self, a: Tensor) -> Tensor: ...
        def swiglu_split(self, a: Tensor, b: Tensor) -> Tensor: ...
        def geglu(self, a: Tensor) -> Tensor: ...
        def geglu_swapped(self, a: Tensor) -> Tensor: ...
        def geglu_split(self, a: Tensor, b: Tensor) -> Tensor: ...
        def reglu(self, a: Tensor) -> Tensor: ...
        def reglu_swapped(self, a: Tensor) -> Tensor: ...
        def reglu_split(self, a: Tensor, b: Tensor) -> Tensor: ...
        def geglu_erf(self, a: Tensor) -> Tensor: ...
        def geglu_erf_swapped(self, a: Tensor) -> Tensor: ...
        def geglu_erf_split(self, a: Tensor, b: Tensor) -> Tensor: ...
        def geglu_quick(self, a: Tensor) -> Tensor: ...
        def geglu_quick_swapped(self, a: Tensor) -> Tensor: ...
        def geglu_quick_split(self, a: Tensor, b: Tensor) -> Tensor: ...

    def leaky_relu(self, a: Tensor, negative_slope: float, inplace: bool) -> Tensor:
        """``ggml_leaky_relu``: a where a > 0, else negative_slope·a (``inplace`` changes nothing here)."""
        return self._float_unary(Op.LEAKY_RELU, a, {"negative_slope": float(negative_slope)})

    def sin(self, a: Tensor) -> Tensor:
        return self._float_unary(Op.SIN, a)

    def cos(self, a: Tensor) -> Tensor:
        return self._float_unary(Op.COS, a)

    def log(self, a: Tensor) -> Tensor:
        """``ggml_log``: natural logarithm (NaN below 0, -inf at 0)."""
        return self._float_unary(Op.LOG, a)

    # ------------------------------------------------------------------ whole-tensor / row reductions
    def sum(self, a: Tensor) -> Tensor:
        """``ggml_sum``: the sum of every element, a 1-element tensor of a's type."""
        self._check_tensor(Op.SUM, "a", a, FLOAT_TYPES)
        return self._new(Op.SUM, (1, 1, 1, 1), a.dtype, (a,))

    def mean(self, a: Tensor) -> Tensor:
        """``ggml_mean``: row means (ne0 → 1), f32."""
        self._check_tensor(Op.MEAN, "a", a, ("f32",))
        return self._new(Op.MEAN, (1, a.ne[1], a.ne[2], a.ne[3]), "f32", (a,))

    def argmax(self, a: Tensor) -> Tensor:
        """``ggml_argmax``: i32 index of each row's maximum (the last one on ties); a is a matrix."""
        self._check_tensor(Op.ARGMAX, "a", a, ("f32",))
        if a.ne[2] != 1 or a.ne[3] != 1:
            raise self._ne_err(Op.ARGMAX, "a", "a matrix (ne[2] == ne[3] == 1)", a)
        return self._new(Op.ARGMAX, (a.ne[1], 1, 1, 1), "i32", (a,))

    def count_equal(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_count_equal``: the number of equal elements of two i32 tensors, as i64 [1]."""
        self._same_as_a(Op.COUNT_EQUAL, a, b, ("i32",))
        return self._new(Op.COUNT_EQUAL, (1, 1, 1, 1), "i64", (a, b))

    # ------------------------------------------------------------------ GLU
    def glu(self, a: Tensor, op: int | str, swapped: bool = False) -> Tensor:
        """``ggml_glu``: split a's rows in halves; act(first) * second (halves exchanged if swapped)."""
        code = self._sub_op(Op.GLU, op, GLU_BUILT)
        self._check_tensor(Op.GLU, "a", a, ("f32", "f16"))
        ne = (a.ne[0] // 2, a.ne[1], a.ne[2], a.ne[3])
        params = {"op": code.enum_value, "swapped": bool(swapped)}
        return self._new(Op.GLU, ne, a.dtype, (a, None), params, sub_op=code.sub_op)

    def glu_split(self, a: Tensor, b: Tensor, op: int | str) -> Tensor:
        """``ggml_glu_split``: act(a) * b."""
        return self._glu2(self._sub_op(Op.GLU, op, GLU_BUILT), a, b, {})

    @staticmethod
    def _sub_op(parent: Op, op: int | str | Op, built: Sequence[Op]) -> Op:
        """The UNARY/GLU sub-op from its enum value, name or member; GraphError unless this
        builder builds it."""
        code = op if isinstance(op, Op) else Op.sub_op_named(parent, op)
        if code is None or code not in built:
            names = tuple(b.sub_op for b in built)
            raise GraphError(f"{parent.value}: operand op: expected one of {names}, given {op!r}")
        return code

    def _glu2(self, code: Op, a: Tensor, b: Tensor, extra: Mapping[str, Any]) -> Tensor:
        self._same_as_a(Op.GLU, a, b, ("f32", "f16"))
        params = {"op": code.enum_value, "swapped": False, **extra}
        return self._new(Op.GLU, a.ne, a.dtype, (a, b), params, sub_op=code.sub_op)

    def swiglu_oai(self, a: Tensor, b: Tensor, alpha: float, limit: float) -> Tensor:
        """``ggml_swiglu_oai``: x=min(a,limit); x·σ(alpha·x)·(clamp(b,-limit,limit)+1) (f32 only)."""
        self._check_tensor(Op.GLU, "a", a, ("f32",))
        return self._glu2(Op.SWIGLU_OAI, a, b, {"alpha": float(alpha), "limit": float(limit)})

    # ------------------------------------------------------------------ layout ops
    def cont(self, a: Tensor) -> Tensor:
        """``ggml_cont``: a contiguous copy."""
        return self._cont_nd(a, a.ne)

    def dup(self, a: Tensor) -> Tensor:
        """``ggml_dup``: a contiguous copy (a DUP node)."""
        return self._cont_nd(a, a.ne, Op.DUP)

    def _cont_nd(self, a: Tensor, ne: Sequence[int], op: Op = Op.CONT) -> Tensor:
        return self._new(op, self._same_count(op, a, ne), a.dtype, (a,))

    def _same_count(self, op: Op, a: Tensor, ne: Sequence[int]) -> tuple[int, int, int, int]:
        """``ne`` padded to 4 after checking it holds as many elements as tensor ``a``."""
        self._check_tensor(op, "a", a)
        ne4 = pad_ne(ne)
        if math.prod(ne4) != a.nelements:
            raise self._err(op, "a", f"{math.prod(ne4)} elements for ne {ne_str(ne4)}", f"{a.nelements}")
        return ne4

    def cont_1d(self, a: Tensor, ne0: int) -> Tensor:
        return self._cont_nd(a, (ne0,))

    def cont_2d(self, a: Tensor, ne0: int, ne1: int) -> Tensor:
        return self._cont_nd(a, (ne0, ne1))

    def cont_3d(self, a: Tensor, ne0: int, ne1: int, ne2: int) -> Tensor:
        return self._cont_nd(a, (ne0, ne1, ne2))

    def cont_4d(self, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int) -> Tensor:
        return self._cont_nd(a, (ne0, ne1, ne2, ne3))

    def cpy(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_cpy``: a's elements (row-major) written into b's shape and type."""
        self._check_tensor(Op.CPY, "a", a)
        self._check_tensor(Op.CPY, "b", b, DTYPES + WRITABLE_QUANT_TYPES)
        if a.nelements != b.nelements:
            raise self._err(
                Op.CPY, "b", f"{a.nelements} elements (as a)", f"{b.nelements} (ne {ne_str(b.ne)})"
            )
        if b.is_quantized and a.dtype != b.dtype and not b.is_contiguous:
            # ggml quantizes into contiguous rows of blocks only (same-type copies move blocks)
            raise self._err(Op.CPY, "b", f"a contiguous {b.dtype} tensor", f"nb {list(b.nb)}")
        return self._new(Op.CPY, b.ne, b.dtype, (a, b))

    def _reshape_to(self, a: Tensor, ne: Sequence[int]) -> Tensor:
        ne4 = self._same_count(Op.RESHAPE, a, ne)
        if not a.is_contiguous:
            raise self._err(
                Op.RESHAPE, "a", "a contiguous tensor (use cont first)", f"strides nb {list(a.nb)}"
            )
        if ne4[0] % layout(a.dtype)[0]:
            raise self._err(
                Op.RESHAPE, "ne", f"ne[0] a multiple of the {a.dtype} block size", f"ne {ne_str(ne4)}"
            )
        return self._new(Op.RESHAPE, ne4, a.dtype, (a,), view_of=a, nb=contiguous_nb(a.dtype, ne4))

    def reshape(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_reshape``: a (contiguous) viewed with b's shape."""
        self._check_tensor(Op.RESHAPE, "b", b)
        return self._reshape_to(a, b.ne)

    def reshape_1d(self, a: Tensor, ne0: int) -> Tensor:
        return self._reshape_to(a, (ne0,))

    def reshape_2d(self, a: Tensor, ne0: int, ne1: int) -> Tensor:
        return self._reshape_to(a, (ne0, ne1))

    def reshape_3d(self, a: Tensor, ne0: int, ne1: int, ne2: int) -> Tensor:
        return self._reshape_to(a, (ne0, ne1, ne2))

    def reshape_4d(self, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int) -> Tensor:
        return self._reshape_to(a, (ne0, ne1, ne2, ne3))

    def _view(self, a: Tensor, ne: Sequence[int], nb: Sequence[int], offset: int) -> Tensor:
        """``ggml_view_impl``: ne, nb[1:] and a byte offset over a's memory."""
        self._check_tensor(Op.VIEW, "a", a)
        blck, es = layout(a.dtype)
        ne4 = pad_ne(ne)
        nb_given = [es, *[int(x) for x in nb]]
        # ggml fills the strides of the dims not given with contiguous ones.
        for i in range(len(nb_given), 4):
            nb_given.append(nb_given[i - 1] * ne4[i - 1] // (blck if i == 1 else 1))
        nb4 = pad_ne(nb_given)
        if ne4[0] % blck:  # a quantized view keeps rows of whole blocks
            given = f"ne {ne_str(ne4)}"
            raise self._err(Op.VIEW, "ne", f"ne[0] a multiple of the {a.dtype} block size {blck}", given)
        # ggml checks the packed size (Π ne · element size); the strided extent must fit as well
        size = max(self._region_bytes(Op.VIEW, a.dtype, ne4, nb4, offset), math.prod(ne4) // blck * es)
        start, buffer = a.view_offs + offset, a.base.nelements // blck * es
        if start + size > buffer:
            given = f"ne {ne_str(ne4)}, nb {list(nb4)}, offset {start} ({size} bytes)"
            raise self._err(Op.VIEW, "a", f"a view inside its {buffer}-byte buffer", given)
        params = {"ne": ne4, "nb": nb4, "offset": int(offset)}
        return self._new(Op.VIEW, ne4, a.dtype, (a,), params, view_of=a, nb=nb4, offset=int(offset))

    def _region_bytes(self, op: str, dtype: str, ne: Sequence[int], nb: Sequence[int], offset: int) -> int:
        """The bytes a region (ne, byte strides nb) spans, after checking that ``offset`` and the
        strides are non-negative multiples of the element size (quantized: whole blocks)."""
        blck, es = layout(dtype)
        unit = f"whole {dtype} blocks (a multiple of {es} bytes)" if blck > 1 else None
        for what, v in (("offset", offset), *((f"nb[{i}]", nb[i]) for i in range(4))):
            if v < 0 or v % es:
                expected = unit or f"a non-negative multiple of the element size {es}"
                raise self._err(op, what, expected, f"{v} (nb {list(nb)}, offset {offset})")
        return Tensor(self, -1, Op.VIEW, pad_ne(ne), dtype, nb=pad_ne(nb)).nbytes

    def view_1d(self, a: Tensor, ne0: int, offset: int) -> Tensor:
        """``ggml_view_1d(a, ne0, offset)`` (offset in bytes)."""
        return self._view(a, (ne0,), (), offset)

    def view_2d(self, a: Tensor, ne0: int, ne1: int, nb1: int, offset: int) -> Tensor:
        """``ggml_view_2d(a, ne0, ne1, nb1, offset)`` (strides/offset in bytes)."""
        return self._view(a, (ne0, ne1), (nb1,), offset)

    def view_3d(self, a: Tensor, ne0: int, ne1: int, ne2: int, nb1: int, nb2: int, offset: int) -> Tensor:
        return self._view(a, (ne0, ne1, ne2), (nb1, nb2), offset)

    def view_4d(
        self, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, nb1: int, nb2: int, nb3: int, offset: int
    ) -> Tensor:
        return self._view(a, (ne0, ne1, ne2, ne3), (nb1, nb2, nb3), offset)

    def view_tensor(self, a: Tensor) -> Tensor:
        """``ggml_view_tensor``: a view with a's own ne/nb."""
        self._check_tensor(Op.VIEW, "a", a)
        return self._new(
            Op.VIEW, a.ne, a.dtype, (a,), {"ne": a.ne, "nb": a.nb, "offset": 0}, view_of=a, nb=a.nb
        )

    def permute(self, a: Tensor, axis0: int, axis1: int, axis2: int, axis3: int) -> Tensor:
        """``ggml_permute``: source dim i becomes dim axis_i (ggml dims: 0 = innermost)."""
        self._check_tensor(Op.PERMUTE, "a", a)
        axes = (axis0, axis1, axis2, axis3)
        if sorted(axes) != [0, 1, 2, 3]:
            raise self._err(Op.PERMUTE, "axes", "a permutation of 0,1,2,3", str(list(axes)))
        if a.is_quantized and axes[0] != 0:
            raise self._err(
                Op.PERMUTE, "axes", f"dim 0 kept innermost for {a.dtype} blocks (axis0 = 0)", str(list(axes))
            )
        src = [axes.index(d) for d in range(4)]  # the source dim that becomes dim d
        ne, nb = [a.ne[i] for i in src], [a.nb[i] for i in src]
        return self._new(Op.PERMUTE, ne, a.dtype, (a,), {"axes": axes}, view_of=a, nb=nb)

    def transpose(self, a: Tensor) -> Tensor:
        """``ggml_transpose``: swap dims 0 and 1 (a strided view)."""
        self._check_tensor(Op.TRANSPOSE, "a", a)
        if a.is_quantized:
            raise self._err(Op.TRANSPOSE, "a", "a plain-typed tensor (blocks cannot be transposed)", a.dtype)
        ne = (a.ne[1], a.ne[0], a.ne[2], a.ne[3])
        nb = (a.nb[1], a.nb[0], a.nb[2], a.nb[3])
        return self._new(Op.TRANSPOSE, ne, a.dtype, (a,), view_of=a, nb=nb)

    def concat(self, a: Tensor, b: Tensor, dim: int) -> Tensor:
        """``ggml_concat``: join along ggml dim ``dim`` (0 = innermost)."""
        self._check_tensor(Op.CONCAT, "a", a)
        self._check_tensor(Op.CONCAT, "b", b)
        if not 0 <= dim < 4:
            raise self._err(Op.CONCAT, "dim", "0 <= dim < 4", str(dim))
        if a.dtype != b.dtype:
            raise self._err(Op.CONCAT, "b", f"type {a.dtype} (same as a)", b.dtype)
        if a.is_quantized:
            raise self._err(
                Op.CONCAT, "a", "plain-typed operands (ovkit concatenates no quantized blocks)", a.dtype
            )
        for d in range(4):
            if d != dim and a.ne[d] != b.ne[d]:
                raise self._ne_err(Op.CONCAT, "b", f"ne[{d}] == {a.ne[d]} (a's, all dims but {dim})", b)
        ne = list(a.ne)
        ne[dim] += b.ne[dim]
        return self._new(Op.CONCAT, ne, a.dtype, (a, b), {"dim": int(dim)})

    def repeat(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_repeat``: a tiled to b's shape."""
        self._check_tensor(Op.REPEAT, "a", a)
        self._check_tensor(Op.REPEAT, "b", b)
        self._can_repeat(Op.REPEAT, a, b, "a", "b")
        return self._new(Op.REPEAT, b.ne, a.dtype, (a, b))

    def pad(self, a: Tensor, p0: int, p1: int, p2: int, p3: int) -> Tensor:
        """``ggml_pad``: zeros appended at the end of each dim."""
        return self.pad_ext(a, 0, p0, 0, p1, 0, p2, 0, p3)

    def pad_circular(self, a: Tensor, p0: int, p1: int, p2: int, p3: int) -> Tensor:
        """``ggml_pad_circular``: each dim extended at its end by its own values, wrapped around."""
        return self.pad_ext_circular(a, 0, p0, 0, p1, 0, p2, 0, p3)

    def pad_reflect_1d(self, a: Tensor, p0: int, p1: int) -> Tensor:
        """``ggml_pad_reflect_1d``: dim 0 extended by its mirror image (edges not repeated)."""
        op = Op.PAD_REFLECT_1D
        self._check_tensor(op, "a", a, ("f32",))
        if not (0 <= p0 < a.ne[0] and 0 <= p1 < a.ne[0]):
            raise self._err(op, "p0/p1", f"pads in [0, ne[0] = {a.ne[0]})", f"p0 {p0}, p1 {p1}")
        return self._new(op, (a.ne[0] + p0 + p1, *a.ne[1:]), a.dtype, (a,), {"p0": int(p0), "p1": int(p1)})

    def pad_ext(
        self, a: Tensor, lp0: int, rp0: int, lp1: int, rp1: int, lp2: int, rp2: int, lp3: int, rp3: int
    ) -> Tensor:
        """``ggml_pad_ext``: zeros before (lp) and after (rp) each dim."""
        return self._pad(a, (lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3), False)

    def pad_ext_circular(
        self, a: Tensor, lp0: int, rp0: int, lp1: int, rp1: int, lp2: int, rp2: int, lp3: int, rp3: int
    ) -> Tensor:
        """``ggml_pad_ext_circular``: element i of each dim is a's element (i − lp) mod ne."""
        return self._pad(a, (lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3), True)

    def _pad(self, a: Tensor, pads: tuple[int, ...], circular: bool) -> Tensor:
        self._check_tensor(Op.PAD, "a", a, ("f32",))
        if any(p < 0 for p in pads):
            raise self._err(Op.PAD, "padding", "non-negative pads", str(list(pads)))
        ne = [a.ne[i] + pads[2 * i] + pads[2 * i + 1] for i in range(4)]
        names = (f"{side}{i}" for i in range(4) for side in ("lp", "rp"))  # lp0, rp0, lp1, ...
        params = {**{n: int(p) for n, p in zip(names, pads, strict=True)}, "circular": circular}
        return self._new(Op.PAD, ne, a.dtype, (a,), params)

    # ------------------------------------------------------------------ rows
    def get_rows(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_get_rows``: rows of a picked by i32 indices b (out ne = [a.ne0, b.ne0, b.ne1, b.ne2])."""
        op = Op.GET_ROWS
        self._check_tensor(op, "a", a)
        self._check_tensor(op, "b", b, ("i32",))
        if a.ne[2] != b.ne[1] or a.ne[3] != b.ne[2] or b.ne[3] != 1:
            raise self._ne_err(
                op, "b", f"ne[1] == a.ne[2] = {a.ne[2]}, ne[2] == a.ne[3] = {a.ne[3]}, ne[3] == 1", b
            )
        dtype = "i32" if a.dtype == "i32" else "f32"
        return self._indexed(self._new(op, (a.ne[0], b.ne[0], b.ne[1], b.ne[2]), dtype, (a, b)))

    def set_rows(self, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
        """``ggml_set_rows``: a with rows c[i] replaced by b's rows i (result = a updated)."""
        op = Op.SET_ROWS
        self._check_tensor(op, "b", b, FLOAT_TYPES)
        self._check_tensor(op, "c", c, ("i64", "i32"))
        self._check_tensor(op, "a", a, FLOAT_TYPES + ("i32",) + WRITABLE_QUANT_TYPES)
        if a.ne[0] != b.ne[0] or a.ne[2] != b.ne[2] or a.ne[3] != b.ne[3]:
            raise self._ne_err(op, "b", f"ne[0], ne[2], ne[3] equal to a's {ne_str(a.ne)}", b)
        if b.ne[1] != c.ne[0] or b.ne[2] % c.ne[1] or b.ne[3] % c.ne[2] or c.ne[3] != 1:
            raise self._ne_err(
                op,
                "c",
                f"ne[0] == b.ne[1] = {b.ne[1]}, b.ne[2] % ne[1] == 0, b.ne[3] % ne[2] == 0, ne[3] == 1",
                c,
            )
        return self._indexed(self._new(op, a.ne, a.dtype, (a, b, c)))

    def build_forward_expand(self, t: Tensor) -> Tensor:
        """``ggml_build_forward_expand``: matters for in-place writes only: after a SET_ROWS (or CPY)
        into a whole tensor, views of it made later read the written value (llama.cpp's KV cache)."""
        self._check_tensor("build_forward_expand", "t", t)
        dst_index = IN_PLACE_WRITES.get(t.op)
        if dst_index is None:
            return t
        dst = t.operand(dst_index)
        base = dst.base
        whole = not dst.view_offs and dst.nelements == base.nelements and dst.dtype == base.dtype
        if not (whole and dst.is_contiguous):
            raise self._err(
                t.op.value,
                "t",
                f"a write into the whole of {base.describe()} (offset 0, contiguous, same type)",
                f"destination ne {ne_str(dst.ne)}, nb {list(dst.nb)}, offset {dst.view_offs}",
            )
        self._writes[base.id] = t
        return t

    def set(self, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int) -> Tensor:
        """``ggml_set``: a copy of a whose view (b.ne, nb1..nb3, offset bytes) is overwritten by b."""
        return self._set_like(Op.SET, a, b, nb1, nb2, nb3, offset, ("f32", "i32"))

    def acc(self, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int) -> Tensor:
        """``ggml_acc``: a copy of a whose view (b.ne, nb1..nb3, offset bytes) has b added (f32)."""
        if not a.is_contiguous:
            raise self._err(Op.ACC, "a", "a contiguous tensor", f"nb {list(a.nb)}")
        return self._set_like(Op.ACC, a, b, nb1, nb2, nb3, offset, ("f32",))

    def _set_like(
        self, op: Op, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int, types: Sequence[str]
    ) -> Tensor:
        self._check_tensor(op, "a", a, types)
        self._check_tensor(op, "b", b)
        if b.dtype != a.dtype:
            raise self._err(op, "b", f"type {a.dtype} (as a)", b.dtype)
        if b.nelements > a.nelements:
            raise self._err(op, "b", f"at most {a.nelements} elements (a's)", f"{b.nelements}")
        nb4 = (a.type_size, int(nb1), int(nb2), int(nb3))
        size, buffer = self._region_bytes(op, a.dtype, b.ne, nb4, offset), a.nelements * a.type_size
        if offset + size > buffer:
            raise self._err(
                op, "b", f"a region inside a's {buffer} bytes", f"{size} bytes at offset {offset}"
            )
        params = {"nb1": int(nb1), "nb2": int(nb2), "nb3": int(nb3), "offset": int(offset), "inplace": False}
        return self._new(op, a.ne, a.dtype, (a, b), params)

    def set_1d(self, a: Tensor, b: Tensor, offset: int) -> Tensor:
        return self.set(a, b, a.nb[1], a.nb[2], a.nb[3], offset)

    def set_2d(self, a: Tensor, b: Tensor, nb1: int, offset: int) -> Tensor:
        return self.set(a, b, nb1, a.nb[2], a.nb[3], offset)

    # ------------------------------------------------------------------ matmul
    def mul_mat(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_mul_mat``: out = b @ aᵀ per batch (ne = [a.ne1, b.ne1, b.ne2, b.ne3]); f32 result."""
        op = Op.MUL_MAT
        self._check_tensor(op, "a", a, FLOAT_TYPES, quantized=True)
        self._check_tensor(op, "b", b, FLOAT_TYPES)
        if a.ne[0] != b.ne[0]:
            raise self._ne_err(op, "b", f"ne[0] == a.ne[0] = {a.ne[0]}", b)
        if b.ne[2] % a.ne[2] or b.ne[3] % a.ne[3]:
            raise self._ne_err(op, "b", f"ne[2], ne[3] multiples of a's ({a.ne[2]}, {a.ne[3]})", b)
        if a.is_transposed():
            raise self._err(op, "a", "a non-transposed tensor (nb[0] <= nb[1]); use cont", f"nb {list(a.nb)}")
        return self._new(op, (a.ne[1], b.ne[1], b.ne[2], b.ne[3]), "f32", (a, b), {"prec": GGML_PREC_DEFAULT})

    def mul_mat_set_hint(self, a: Tensor, hint: int) -> None:
        """``ggml_mul_mat_set_hint`` (recorded: a hint to ggml's kernels, the product is the same)."""
        a.set_param("hint", int(hint))

    def mul_mat_set_prec(self, a: Tensor, prec: int) -> None:
        """``ggml_mul_mat_set_prec`` (recorded; the OpenVINO path always computes in f32)."""
        a.set_param("prec", int(prec))

    def mul_mat_id(self, as_: Tensor, b: Tensor, ids: Tensor) -> Tensor:
        """``ggml_mul_mat_id``: out[:, e, t] = as_[ids[e, t]] @ b[:, e % b.ne1, t] (MoE experts)."""
        op = Op.MUL_MAT_ID
        self._check_tensor(op, "as", as_, FLOAT_TYPES, quantized=True)
        self._check_tensor(op, "b", b, FLOAT_TYPES)
        self._check_tensor(op, "ids", ids, ("i32",))
        if as_.ne[3] != 1:
            raise self._ne_err(op, "as", "a 3-D tensor (ne[3] == 1)", as_)
        if b.ne[3] != 1:
            raise self._ne_err(op, "b", "a 3-D tensor (ne[3] == 1)", b)
        if ids.ne[2] != 1 or ids.ne[3] != 1:
            raise self._ne_err(op, "ids", "a 2-D tensor", ids)
        if ids.ne[1] != b.ne[2]:
            raise self._ne_err(op, "ids", f"ne[1] == b.ne[2] = {b.ne[2]} (tokens)", ids)
        if as_.ne[0] != b.ne[0]:
            raise self._ne_err(op, "b", f"ne[0] == as.ne[0] = {as_.ne[0]}", b)
        if ids.ne[0] % b.ne[1]:
            raise self._ne_err(op, "b", f"ne[1] dividing ids.ne[0] = {ids.ne[0]}", b)
        return self._indexed(self._new(op, (as_.ne[1], ids.ne[0], b.ne[2], 1), "f32", (as_, b, ids)))

    def out_prod(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_out_prod``: out[.., i1, i0] = Σ_k a[.., k, i0]·b[.., k, i1] (numpy: bᵀ @ a per batch,
        a repeat-interleaved over b's batch dims); f32 result of ne [a.ne0, b.ne0, b.ne2, b.ne3]."""
        op = Op.OUT_PROD
        self._check_tensor(op, "a", a, ("f32", "f16"), quantized=True)
        self._check_tensor(op, "b", b, FLOAT_TYPES)
        if a.ne[1] != b.ne[1] or b.ne[2] % a.ne[2] or b.ne[3] % a.ne[3]:
            raise self._ne_err(op, "b", f"ne[1] == a.ne[1] = {a.ne[1]}, ne[2], ne[3] multiples of a's", b)
        if not a.is_quantized and a.is_transposed():
            raise self._err(op, "a", "a non-transposed tensor (nb[0] <= nb[1])", f"nb {list(a.nb)}")
        return self._new(op, (a.ne[0], b.ne[0], b.ne[2], b.ne[3]), "f32", (a, b))

    # ------------------------------------------------------------------ normalisation / reductions
    def norm(self, a: Tensor, eps: float) -> Tensor:
        """``ggml_norm``: (x - mean) / sqrt(var + eps) along rows."""
        return self._float_unary(Op.NORM, a, {"eps": float(eps)}, ("f32",))

    def rms_norm(self, a: Tensor, eps: float) -> Tensor:
        """``ggml_rms_norm``: x / sqrt(mean(x²) + eps) along rows."""
        return self._float_unary(Op.RMS_NORM, a, {"eps": float(eps)}, ("f32",))

    def l2_norm(self, a: Tensor, eps: float) -> Tensor:
        """``ggml_l2_norm``: x / max(‖x‖, eps) along rows."""
        return self._float_unary(Op.L2_NORM, a, {"eps": float(eps)}, ("f32",))

    def sum_rows(self, a: Tensor) -> Tensor:
        """``ggml_sum_rows``: row sums (ne0 → 1)."""
        self._check_tensor(Op.SUM_ROWS, "a", a, ("f32",))
        return self._new(Op.SUM_ROWS, (1, a.ne[1], a.ne[2], a.ne[3]), a.dtype, (a,))

    def cumsum(self, a: Tensor) -> Tensor:
        """``ggml_cumsum``: inclusive prefix sums along rows."""
        return self._float_unary(Op.CUMSUM, a, None, ("f32",))

    def argsort(self, a: Tensor, order: int = GGML_SORT_ORDER_ASC) -> Tensor:
        """``ggml_argsort``: i32 indices sorting each row (0 = ASC, 1 = DESC)."""
        self._check_tensor(Op.ARGSORT, "a", a, ("f32",))
        if order not in (GGML_SORT_ORDER_ASC, GGML_SORT_ORDER_DESC):
            raise self._err(Op.ARGSORT, "order", "0 (ASC) or 1 (DESC)", str(order))
        return self._new(Op.ARGSORT, a.ne, "i32", (a,), {"order": int(order)})

    def top_k(self, a: Tensor, k: int) -> Tensor:
        """``ggml_top_k``: i32 indices of each row's k largest values (order unspecified by ggml; ovkit
        gives ggml's CPU order: descending, the first two exchanged)."""
        self._check_tensor(Op.TOP_K, "a", a, ("f32",))
        if not 1 <= k <= a.ne[0]:
            raise self._err(Op.TOP_K, "k", f"1 <= k <= a.ne[0] = {a.ne[0]}", str(k))
        return self._new(Op.TOP_K, (int(k), a.ne[1], a.ne[2], a.ne[3]), "i32", (a,), {"k": int(k)})

    def roll(self, a: Tensor, shift0: int, shift1: int, shift2: int, shift3: int) -> Tensor:
        """``ggml_roll``: elements shifted (with wrap-around) by shift_i along ggml dim i, as numpy.roll."""
        self._check_tensor(Op.ROLL, "a", a, ("f32",))
        shifts = (shift0, shift1, shift2, shift3)
        for i, sh in enumerate(shifts):
            if abs(sh) >= a.ne[i]:
                raise self._err(Op.ROLL, f"shift{i}", f"|shift{i}| < a.ne[{i}] = {a.ne[i]}", str(sh))
        params = {f"shift{i}": int(sh) for i, sh in enumerate(shifts)}
        return self._new(Op.ROLL, a.ne, a.dtype, (a,), params)

    # ------------------------------------------------------------------ softmax / attention
    def diag_mask_inf(self, a: Tensor, n_past: int) -> Tensor:
        """``ggml_diag_mask_inf``: a with −inf where column i > n_past + row j (causal mask)."""
        return self._float_unary(Op.DIAG_MASK_INF, a, {"n_past": int(n_past)}, ("f32",))

    def soft_max(self, a: Tensor) -> Tensor:
        """``ggml_soft_max``: softmax along rows."""
        return self.soft_max_ext(a, None, 1.0, 0.0)

    def soft_max_ext(self, a: Tensor, mask: Tensor | None, scale: float, max_bias: float) -> Tensor:
        """``ggml_soft_max_ext``: softmax(a·scale + mask·slope) along rows (ALiBi slope if max_bias>0)."""
        op = Op.SOFT_MAX
        self._check_tensor(op, "a", a, ("f32",))
        self._check_mask(op, mask, ("f16", "f32"), max_bias, a.ne, f"{a.ne[0]}")
        return self._new(
            op, a.ne, a.dtype, (a, mask, None), {"scale": float(scale), "max_bias": float(max_bias)}
        )

    def _check_mask(
        self,
        op: Op,
        mask: Tensor | None,
        types: Sequence[str],
        max_bias: float,
        ne: Sequence[int],
        ne0: str,
        q: str = "",
    ) -> None:
        """A softmax/attention mask: contiguous, ``ne0`` columns (``ne[0]``), at least the ``ne[1]``
        rows and dividing ``ne[2]``, ``ne[3]``; required when ``max_bias`` > 0 (ALiBi)."""
        if mask is None:
            if max_bias > 0:
                raise self._err(op, "mask", "a mask when max_bias > 0 (ALiBi)", "None")
            return
        self._check_tensor(op, "mask", mask, types)
        if not mask.is_contiguous:
            raise self._err(op, "mask", "a contiguous tensor", f"nb {list(mask.nb)}")
        if mask.ne[0] != ne[0] or mask.ne[1] < ne[1] or ne[2] % mask.ne[2] or ne[3] % mask.ne[3]:
            expected = f"ne[0] == {ne0}, ne[1] >= {q}{ne[1]}, ne[2] | {ne[2]}, ne[3] | {ne[3]}"
            raise self._ne_err(op, "mask", expected, mask)

    def soft_max_add_sinks(self, a: Tensor, sinks: Tensor | None) -> None:
        """``ggml_soft_max_add_sinks``: attach per-head sink logits (f32, ne0 == a.ne[2]) to a SOFT_MAX."""
        self._add_sinks(Op.SOFT_MAX, a, sinks, 2, a.ne[2])

    def _add_sinks(self, op: str, a: Tensor, sinks: Tensor | None, slot: int, heads: int) -> None:
        self._check_tensor(op, "a", a)
        if a.op != op:
            raise self._err(op, "a", f"a {op} result", a.op)
        srcs = list(a.srcs) + [None] * (slot + 1 - len(a.srcs))
        if sinks is not None:
            self._check_tensor(op, "sinks", sinks, ("f32",))
            if sinks.nelements != heads or sinks.ne[0] != heads:
                raise self._ne_err(op, "sinks", f"ne[0] == {heads} (one per head)", sinks)
        srcs[slot] = sinks
        a.srcs = tuple(srcs)
        self._edited()

    def flash_attn_ext(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        scale: float,
        max_bias: float,
        logit_softcap: float,
    ) -> Tensor:
        """``ggml_flash_attn_ext``: softmax(q·kᵀ·scale + mask)·v; result ne [Dv, n_head, n_q, n_batch]."""
        op = Op.FLASH_ATTN_EXT
        # ggml's CPU kernel reads q as f32 whatever its type (an f16 q gives garbage there)
        self._check_tensor(op, "q", q, ("f32",))
        self._check_tensor(op, "k", k, FLOAT_TYPES, quantized=True)
        self._check_tensor(op, "v", v, FLOAT_TYPES, quantized=True)
        if k.ne[0] != q.ne[0]:
            raise self._ne_err(op, "k", f"ne[0] == q.ne[0] = {q.ne[0]}", k)
        if q.ne[2] % k.ne[2] or q.ne[3] % k.ne[3]:
            raise self._ne_err(op, "k", f"ne[2], ne[3] dividing q's ({q.ne[2]}, {q.ne[3]})", k)
        if v.ne[1] != k.ne[1] or v.ne[2] != k.ne[2] or v.ne[3] != k.ne[3]:
            raise self._ne_err(op, "v", f"ne[1:4] == k's {list(k.ne[1:])}", v)
        self._check_mask(op, mask, ("f16",), max_bias, (k.ne[1], *q.ne[1:]), f"n_kv = {k.ne[1]}", "n_q = ")
        ne = (v.ne[0], q.ne[2], q.ne[1], q.ne[3])
        params = {
            "scale": float(scale),
            "max_bias": float(max_bias),
            "logit_softcap": float(logit_softcap),
            "prec": GGML_PREC_DEFAULT,
        }
        return self._new(op, ne, "f32", (q, k, v, mask, None), params)

    def flash_attn_ext_set_prec(self, a: Tensor, prec: int) -> None:
        """``ggml_flash_attn_ext_set_prec`` (recorded in params)."""
        a.set_param("prec", int(prec))

    def flash_attn_ext_add_sinks(self, a: Tensor, sinks: Tensor | None) -> None:
        """``ggml_flash_attn_ext_add_sinks``: per-head sink logits (f32, ne0 == n_head)."""
        self._add_sinks(Op.FLASH_ATTN_EXT, a, sinks, 4, a.ne[1])

    # ------------------------------------------------------------------ rope
    def rope_ext(
        self,
        a: Tensor,
        b: Tensor,
        c: Tensor | None,
        n_dims: int,
        mode: int,
        n_ctx_orig: int,
        freq_base: float,
        freq_scale: float,
        ext_factor: float,
        attn_factor: float,
        beta_fast: float,
        beta_slow: float,
    ) -> Tensor:
        """``ggml_rope_ext``: rotary embedding of the first n_dims of each row; b = i32 positions."""
        if mode & RopeType.MROPE:
            raise self._err(
                Op.ROPE, "mode", "NORMAL (0) or NEOX (2); use rope_multi for MROPE/IMROPE/VISION", str(mode)
            )
        rest = (freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow)
        return self._rope(a, b, c, n_dims, (), mode, n_ctx_orig, *rest)

    def rope(self, a: Tensor, b: Tensor, n_dims: int, mode: int) -> Tensor:
        """``ggml_rope``: rope_ext with ggml's defaults (base 10000, no scaling, no YaRN)."""
        return self.rope_ext(a, b, None, n_dims, mode, 0, 10000.0, 1.0, 0.0, 1.0, 0.0, 0.0)

    def rope_multi(
        self,
        a: Tensor,
        b: Tensor,
        c: Tensor | None,
        n_dims: int,
        sections: Sequence[int],
        mode: int,
        n_ctx_orig: int,
        freq_base: float,
        freq_scale: float,
        ext_factor: float,
        attn_factor: float,
        beta_fast: float,
        beta_slow: float,
    ) -> Tensor:
        """``ggml_rope_multi``: multi-section rope (MROPE 8, VISION 24, IMROPE 40); b has 4 planes."""
        if not mode & RopeType.MROPE:
            raise self._err(Op.ROPE, "mode", "MROPE (8), VISION (24) or IMROPE (40)", str(mode))
        rest = (freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow)
        return self._rope(a, b, c, n_dims, sections, mode, n_ctx_orig, *rest)

    def rope_ext_back(self, *args: Any, **kwargs: Any) -> Tensor:
        """``ggml_rope_ext_back`` (rope_ext's arguments): the inverse rotation, op ROPE_BACK."""
        t = self.rope_ext(*args, **kwargs)
        t.op = Op.ROPE_BACK  # ggml builds the forward node and relabels it, exactly so
        return t

    def rope_multi_back(self, *args: Any, **kwargs: Any) -> Tensor:
        """``ggml_rope_multi_back`` (rope_multi's arguments): the inverse of rope_multi, op ROPE_BACK."""
        t = self.rope_multi(*args, **kwargs)
        t.op = Op.ROPE_BACK
        return t

    def _rope(
        self,
        a: Tensor,
        b: Tensor,
        c: Tensor | None,
        n_dims: int,
        sections: Sequence[int],
        mode: int,
        *rest: float,
    ) -> Tensor:
        """ROPE's checks and node; ``rest``: n_ctx_orig, freq_base, ..., beta_slow."""
        op = Op.ROPE
        sections = (*(int(s) for s in sections), 0, 0, 0, 0)[:4]
        self._check_tensor(op, "a", a, ("f32", "f16"))
        self._check_tensor(op, "b", b, ("i32",))
        if b.ne[1] != 1 or b.ne[2] != 1 or b.ne[3] != 1:
            raise self._ne_err(op, "b", "a 1-D position vector", b)
        planes = 4 if mode & RopeType.MROPE else 1
        if b.ne[0] != planes * a.ne[2]:
            raise self._ne_err(op, "b", f"ne[0] == {planes}·a.ne[2] = {planes * a.ne[2]} positions", b)
        if n_dims > a.ne[0] or n_dims < 0:
            raise self._err(op, "n_dims", f"0 <= n_dims <= a.ne[0] = {a.ne[0]}", str(n_dims))
        if n_dims % 2 and not mode & (RopeType.NEOX | RopeType.MROPE):  # ggml's pairs would cross n_dims
            raise self._err(op, "n_dims", "an even n_dims for NORMAL mode (adjacent pairs)", str(n_dims))
        if mode == RopeType.VISION and a.ne[0] != 2 * n_dims:
            raise self._err(
                op, "n_dims", f"a.ne[0] / 2 = {a.ne[0] // 2} for VISION (pairs i, i + n_dims)", str(n_dims)
            )
        if mode & RopeType.MROPE and sum(sections) <= 0:
            raise self._err(op, "sections", "at least one non-empty section", str(list(sections)))
        if c is not None:
            self._check_tensor(op, "c", c, ("f32",))
            pairs = a.ne[0] // 2 if mode == RopeType.VISION else n_dims // 2
            if c.ne[0] < pairs:
                raise self._ne_err(op, "c", f"ne[0] >= {pairs} freq factors (one per rotated pair)", c)
        names = ("freq_base", "freq_scale", "ext_factor", "attn_factor", "beta_fast", "beta_slow")
        params = {"n_dims": int(n_dims), "mode": int(mode), "n_ctx_orig": int(rest[0]), "sections": sections}
        params.update((k, float(v)) for k, v in zip(names, rest[1:], strict=True))
        return self._new(op, a.ne, a.dtype, (a, b, c), params)

    # ------------------------------------------------------------------ conv-like
    def im2col(
        self,
        a: Tensor,
        b: Tensor,
        s0: int,
        s1: int,
        p0: int,
        p1: int,
        d0: int,
        d1: int,
        is_2D: bool,
        dst_type: str | int,  # noqa: N803
    ) -> Tensor:
        """``ggml_im2col``: a = kernel [OC, IC, KH, KW], b = input [N, IC, IH, IW] (numpy order)."""
        op = Op.IM2COL
        self._check_tensor(op, "a", a)
        self._check_tensor(op, "b", b, ("f32", "f16"))
        dt = self._dst_type(op, dst_type)
        if dt == "f16" and a.dtype != "f16":
            raise self._err(op, "a", "an f16 kernel for an f16 dst_type (ggml's CPU im2col)", a.dtype)
        if is_2D:
            if a.ne[2] != b.ne[2]:
                raise self._ne_err(op, "b", f"ne[2] == a.ne[2] = {a.ne[2]} channels", b)
        elif b.ne[1] != a.ne[1] or b.ne[3] != 1:
            raise self._ne_err(op, "b", f"ne[1] == a.ne[1] = {a.ne[1]} channels, ne[3] == 1", b)
        # ggml divides by the strides (s1 only for 2-D); any dilation sign is accepted, as in ggml
        self._conv_params(op, s0=s0, **({"s1": s1} if is_2D else {}))
        n = 2 if is_2D else 1
        ow, *oh = self._conv_out(op, a, b, (s0, s1)[:n], (p0, p1)[:n], (d0, d1)[:n])
        ne = (a.ne[2] * a.ne[1] * a.ne[0], ow, *oh, b.ne[3]) if is_2D else (a.ne[1] * a.ne[0], ow, b.ne[2], 1)
        params = {"s0": s0, "s1": s1, "p0": p0, "p1": p1, "d0": d0, "d1": d1, "is_2D": bool(is_2D)}
        return self._new(op, ne, dt, (a, b), params)

    def _dst_type(self, op: str, dst_type: str | int) -> str:
        """An im2col ``dst_type``: a type name or ggml's enum value (0 f32, 1 f16)."""
        dt = {0: "f32", 1: "f16"}.get(dst_type, dst_type) if isinstance(dst_type, int) else dst_type
        if dt not in ("f32", "f16"):
            raise self._err(op, "dst_type", "f32 or f16", str(dst_type))
        return str(dt)

    # ------------------------------------------------------------------ resampling
    def upscale(self, a: Tensor, scale_factor: int, mode: int) -> Tensor:
        """``ggml_upscale``: dims 0 and 1 times ``scale_factor`` (> 1)."""
        if scale_factor <= 1:
            raise self._err(Op.UPSCALE, "scale_factor", "an integer > 1", str(scale_factor))
        return self.interpolate(a, a.ne[0] * scale_factor, a.ne[1] * scale_factor, a.ne[2], a.ne[3], mode)

    def interpolate(self, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, mode: int) -> Tensor:
        """``ggml_interpolate``: resample to ne; mode NEAREST 0, BILINEAR 1, BICUBIC 2 on dims 0, 1
        (| ALIGN_CORNERS 256, | ANTIALIAS 512 for bilinear); dims 2, 3 by nearest index."""
        op = Op.UPSCALE
        self._check_tensor(op, "a", a, ("f32",))
        base, flags = mode & 0xFF, mode & ~0xFF
        if base > GGML_SCALE_MODE_BICUBIC or flags & ~(
            GGML_SCALE_FLAG_ALIGN_CORNERS | GGML_SCALE_FLAG_ANTIALIAS
        ):
            expected = "NEAREST/BILINEAR/BICUBIC (0..2) | ALIGN_CORNERS | ANTIALIAS"
            raise self._err(op, "mode", expected, str(mode))
        if flags & GGML_SCALE_FLAG_ANTIALIAS and base != GGML_SCALE_MODE_BILINEAR:
            raise self._err(op, "mode", "ANTIALIAS with BILINEAR only", str(mode))
        ne = (int(ne0), int(ne1), int(ne2), int(ne3))
        if any(n < 1 for n in ne):
            raise self._err(op, "ne", "positive sizes", str(list(ne)))
        return self._new(op, ne, a.dtype, (a,), {"mode": int(mode)})

    upscale_ext = interpolate  # ggml_upscale_ext: ggml_interpolate's arguments and node

    # ------------------------------------------------------------------ backward ops
    def cross_entropy_loss_back(self, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
        """``ggml_cross_entropy_loss_back``: a = the loss gradient [1], b = logits, c = labels →
        (softmax(b) − c)·a / rows of b."""
        op = Op.CROSS_ENTROPY_LOSS_BACK
        self._same_as_a(op, b, c, ("f32",), "b", "c")
        self._check_tensor(op, "a", a, ("f32",))
        if a.nelements != 1:
            raise self._ne_err(op, "a", "a scalar loss gradient (1 element)", a)
        return self._new(op, b.ne, "f32", (a, b, c))

    def arange(self, start: float, stop: float, step: float) -> Tensor:
        """``ggml_arange``: f32 [ceil((stop − start)/step)] of start + i·step."""
        n = math.ceil((stop - start) / step) if step else 0
        if n < 1:
            raise self._err(
                Op.ARANGE, "step", f"a step giving at least one value from {start} to {stop}", str(step)
            )
        return self._new(Op.ARANGE, (n, 1, 1, 1), "f32", (), {"start": float(start), "step": float(step)})

    def timestep_embedding(self, a: Tensor, dim: int, max_period: int) -> Tensor:
        """``ggml_timestep_embedding``: per timestep t of a [N], [cos(t·f_j) | sin(t·f_j)] with
        f_j = max_period^(−j/half), half = dim // 2 (an odd dim ends in a 0)."""
        op = Op.TIMESTEP_EMBEDDING
        self._check_tensor(op, "a", a, ("f32",))
        if a.ne[1:] != (1, 1, 1) or dim < 1 or max_period < 1:
            raise self._ne_err(op, "a", "a vector of timesteps, dim >= 1, max_period >= 1", a)
        return self._new(
            op, (dim, a.ne[0], 1, 1), "f32", (a,), {"dim": int(dim), "max_period": int(max_period)}
        )

    def set_param(self, a: Tensor) -> None:
        """``ggml_set_param``: marks a as trained (ggml's optimizer steps require it; recorded)."""
        a.set_param("param", True)

    def opt_step_sgd(self, a: Tensor, grad: Tensor, params: Tensor) -> Tensor:
        """``ggml_opt_step_sgd``: a·(1 − lr·wd) − lr·grad with params = [lr, wd] (ggml updates a
        in place; ovkit returns the updated value)."""
        op = Op.OPT_STEP_SGD
        self._same_as_a(op, a, grad, ("f32",), "a", "grad")
        self._check_tensor(op, "params", params, ("f32",))
        if params.nelements != 2:
            raise self._ne_err(op, "params", "2 values [learning rate, weight decay]", params)
        return self._new(op, a.ne, a.dtype, (a, grad, params))

    def soft_max_ext_back(self, a: Tensor, b: Tensor, scale: float, max_bias: float) -> Tensor:
        """``ggml_soft_max_ext_back``: a = dy, b = the softmax output y → scale·y·(dy − Σ y·dy)."""
        op = Op.SOFT_MAX_BACK
        self._same_as_a(op, a, b)
        if max_bias != 0.0:
            raise self._err(op, "max_bias", "0 (ggml's CPU kernel has no ALiBi backward)", str(max_bias))
        return self._new(op, a.ne, a.dtype, (a, b), {"scale": float(scale), "max_bias": float(max_bias)})

    def silu_back(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_silu_back``: a = dy, b = x → dy·σ(x)·(1 + x·(1 − σ(x)))."""
        self._same_as_a(Op.SILU_BACK, a, b, ("f32", "f16"))
        return self._new(Op.SILU_BACK, a.ne, a.dtype, (a, b))

    def rms_norm_back(self, a: Tensor, b: Tensor, eps: float) -> Tensor:
        """``ggml_rms_norm_back``: a = dz, b = x → the gradient of rms_norm(x, eps) along rows."""
        self._same_as_a(Op.RMS_NORM_BACK, a, b)
        return self._new(Op.RMS_NORM_BACK, a.ne, a.dtype, (a, b), {"eps": float(eps)})

    def get_rows_back(self, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
        """``ggml_get_rows_back``: rows of a (gradients) added into a zero [c.ne1, c.ne0] at rows b."""
        op = Op.GET_ROWS_BACK
        self._check_tensor(op, "a", a, ("f32", "f16"))
        self._check_tensor(op, "b", b, ("i32",))
        self._check_tensor(op, "c", c)
        if a.ne[2] != 1 or a.ne[3] != 1 or c.ne[2] != 1 or c.ne[3] != 1 or a.ne[0] != c.ne[0]:
            raise self._ne_err(op, "c", f"matrices a, c with c.ne[0] == a.ne[0] = {a.ne[0]}", c)
        if b.ne[1:] != (1, 1, 1) or b.ne[0] > a.ne[1]:  # ggml reads the first b.ne[0] rows of a
            raise self._ne_err(op, "b", f"a vector of at most a.ne[1] = {a.ne[1]} row ids", b)
        return self._indexed(self._new(op, (c.ne[0], c.ne[1], 1, 1), "f32", (a, b)))  # c: shape only, as ggml

    def repeat_back(self, a: Tensor, b: Tensor) -> Tensor:
        """``ggml_repeat_back``: a summed over its repetitions of b's shape (the inverse of repeat)."""
        op = Op.REPEAT_BACK
        self._check_tensor(op, "a", a, ("f32",))
        self._check_tensor(op, "b", b)
        self._can_repeat(op, b, a, "b", "a")
        return self._new(op, b.ne, a.dtype, (a,))  # b gives the shape only, as in ggml

    # ------------------------------------------------------------------ convolutions, pooling
    def _conv_params(self, op: str, **values: float) -> dict[str, int]:
        """Stride/dilation arguments as ints, each at least 1 (ggml divides by the strides)."""
        for k, v in values.items():
            if k[0] in "sdk" and int(v) < 1:
                raise self._err(op, k, f"{k} >= 1", str(v))
        return {k: int(v) for k, v in values.items()}

    def _conv_out(self, op: str, a: Tensor, b: Tensor, *spd: tuple[int, ...]) -> list[int]:
        """Output sizes of kernel a over input b along dims 0.. (strides, pads, dilations per dim);
        GraphError when the input is smaller than the dilated kernel."""
        sizes = [
            conv_output_size(b.ne[i], a.ne[i], s, p, d) for i, (s, p, d) in enumerate(zip(*spd, strict=True))
        ]
        if any(n <= 0 for n in sizes):
            raise self._err(
                op,
                "b",
                "an input at least as large as the dilated kernel",
                f"ne {ne_str(b.ne)} → {list(sizes)}",
            )
        return sizes

    def conv_2d_direct(
        self, a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int
    ) -> Tensor:
        """``ggml_conv_2d_direct``: a kernel [OC, IC, KH, KW], b input [N, IC, H, W] (numpy) →
        [N, OC, OH, OW]; an f16 kernel rounds the input patches to f16 as ggml's CPU does."""
        op = Op.CONV_2D
        self._check_tensor(op, "a", a, ("f32", "f16"))
        self._check_tensor(op, "b", b, ("f32",))
        p = self._conv_params(op, s0=s0, s1=s1, p0=p0, p1=p1, d0=d0, d1=d1)
        if a.ne[2] != b.ne[2]:
            raise self._ne_err(op, "b", f"ne[2] == a.ne[2] = {a.ne[2]} channels", b)
        ow, oh = self._conv_out(op, a, b, (s0, s1), (p0, p1), (d0, d1))
        return self._new(op, (ow, oh, a.ne[3], b.ne[3]), b.dtype, (a, b), p)

    def conv_2d_dw_direct(
        self,
        a: Tensor,
        b: Tensor,
        stride0: int,
        stride1: int,
        pad0: int,
        pad1: int,
        dilation0: int,
        dilation1: int,
    ) -> Tensor:
        """``ggml_conv_2d_dw_direct``: depthwise; a kernel [C, 1, KH, KW], b [N, C, H, W] (numpy)."""
        op = Op.CONV_2D_DW
        self._check_tensor(op, "a", a, ("f32", "f16"))
        self._check_tensor(op, "b", b, ("f32",))
        p = self._conv_params(op, s0=stride0, s1=stride1, p0=pad0, p1=pad1, d0=dilation0, d1=dilation1)
        if a.ne[2] != 1 or a.ne[3] != b.ne[2]:
            raise self._ne_err(op, "a", f"ne[2] == 1, ne[3] == b.ne[2] = {b.ne[2]} channels", a)
        ow, oh = self._conv_out(op, a, b, (stride0, stride1), (pad0, pad1), (dilation0, dilation1))
        return self._new(op, (ow, oh, b.ne[2], b.ne[3]), b.dtype, (a, b), p)

    def conv_3d_direct(
        self,
        a: Tensor,
        b: Tensor,
        s0: int,
        s1: int,
        s2: int,
        p0: int,
        p1: int,
        p2: int,
        d0: int,
        d1: int,
        d2: int,
        c: int,
        n: int,
        oc: int,
    ) -> Tensor:
        """``ggml_conv_3d_direct``: a kernel [OC·IC, KD, KH, KW], b [N·IC, D, H, W] (numpy) →
        [N·OC, OD, OH, OW] (c = IC, n = N, oc = OC)."""
        op = Op.CONV_3D
        self._check_tensor(op, "a", a, ("f32", "f16"))
        self._check_tensor(op, "b", b, ("f32",))
        p = self._conv_params(op, s0=s0, s1=s1, s2=s2, p0=p0, p1=p1, p2=p2, d0=d0, d1=d1, d2=d2)
        if c < 1 or n < 1 or oc < 1 or a.ne[3] != c * oc:
            raise self._ne_err(op, "a", f"ne[3] == c·oc = {c}·{oc}", a)
        if b.ne[3] != c * n:
            raise self._ne_err(op, "b", f"ne[3] == c·n = {c}·{n}", b)
        out = self._conv_out(op, a, b, (s0, s1, s2), (p0, p1, p2), (d0, d1, d2))
        return self._new(op, (*out, oc * n), "f32", (a, b), {**p, "c": int(c), "n": int(n), "oc": int(oc)})

    def im2col_3d(
        self,
        a: Tensor,
        b: Tensor,
        IC: int,  # noqa: N803
        s0: int,
        s1: int,
        s2: int,
        p0: int,
        p1: int,
        p2: int,
        d0: int,
        d1: int,
        d2: int,
        dst_type: str | int,
    ) -> Tensor:
        """``ggml_im2col_3d``: a kernel [OC·IC, KD, KH, KW] (shape only), b [N·IC, D, H, W] (numpy) →
        columns [N·OD, OH, OW, IC·KD·KH·KW]."""
        op = Op.IM2COL_3D
        self._check_tensor(op, "a", a)
        self._check_tensor(op, "b", b, ("f32",))
        dt = self._dst_type(op, dst_type)
        p = self._conv_params(op, s0=s0, s1=s1, s2=s2, p0=p0, p1=p1, p2=p2, d0=d0, d1=d1, d2=d2)
        if IC < 1:  # ggml takes N = b.ne[3] // IC batches (0 batches: an empty result)
            raise self._err(op, "IC", "a channel count >= 1", str(IC))
        out = self._conv_out(op, a, b, (s0, s1, s2), (p0, p1, p2), (d0, d1, d2))
        ne = (a.ne[0] * a.ne[1] * a.ne[2] * IC, out[0], out[1], out[2] * (b.ne[3] // IC))
        return self._new(op, ne, dt, (a, b), {**p, "IC": int(IC)})

    def col2im_1d(self, a: Tensor, s0: int, oc: int, p0: int) -> Tensor:
        """``ggml_col2im_1d``: columns a [T_in, OC·K] (numpy) scatter-added into a signal
        [OC, (T_in − 1)·s0 + K − 2·p0]: out[oc, t] = Σ a[i, oc·K + k] over i·s0 + k − p0 = t."""
        op = Op.COL2IM_1D
        self._check_tensor(op, "a", a, FLOAT_TYPES)
        self._conv_params(op, s0=s0)
        if oc < 1 or a.ne[0] % oc or a.ne[2] != 1 or a.ne[3] != 1:
            raise self._ne_err(op, "a", f"a matrix [T_in, OC·K] with ne[0] a multiple of OC = {oc}", a)
        t_out = (a.ne[1] - 1) * s0 + a.ne[0] // oc - 2 * p0
        if p0 < 0 or t_out < 1:
            raise self._err(op, "p0", f"0 <= p0 with a positive output length, here {t_out}", str(p0))
        return self._new(op, (t_out, oc, 1, 1), a.dtype, (a,), {"s0": int(s0), "oc": int(oc), "p0": int(p0)})

    def conv_transpose_1d(self, a: Tensor, b: Tensor, s0: int, p0: int, d0: int) -> Tensor:
        """``ggml_conv_transpose_1d``: a kernel [IC, OC, K], b input [IC, L] (numpy) → [OC, (L−1)·s0 + K]."""
        op = Op.CONV_TRANSPOSE_1D
        self._check_tensor(op, "a", a, ("f32", "f16"))
        self._check_tensor(op, "b", b, ("f32",))
        self._conv_params(op, s0=s0)
        if p0 != 0 or d0 != 1:
            raise self._err(
                op, "p0/d0", "p0 == 0 and d0 == 1 (ggml implements no other)", f"p0 {p0}, d0 {d0}"
            )
        if b.ne[2] != 1 or b.ne[3] != 1:
            raise self._ne_err(op, "b", "a matrix [IC, L]", b)
        if a.ne[2] != b.ne[1] or a.ne[3] != 1:
            raise self._ne_err(op, "a", f"ne[2] == b.ne[1] = {b.ne[1]} channels, ne[3] == 1", a)
        ne = ((b.ne[0] - 1) * s0 + a.ne[0], a.ne[1], 1, 1)
        return self._new(op, ne, "f32", (a, b), {"s0": int(s0), "p0": 0, "d0": 1})

    def conv_transpose_2d_p0(self, a: Tensor, b: Tensor, stride: int) -> Tensor:
        """``ggml_conv_transpose_2d_p0``: a kernel [IC, OC, KH, KW], b [N, IC, H, W] (numpy) →
        [N, OC, (H−1)·stride + KH, (W−1)·stride + KW]."""
        op = Op.CONV_TRANSPOSE_2D
        self._check_tensor(op, "a", a, ("f32", "f16"))
        self._check_tensor(op, "b", b, ("f32",))
        self._conv_params(op, stride=stride)
        if a.ne[3] != b.ne[2]:
            raise self._ne_err(op, "a", f"ne[3] == b.ne[2] = {b.ne[2]} channels", a)
        ne = ((b.ne[0] - 1) * stride + a.ne[0], (b.ne[1] - 1) * stride + a.ne[1], a.ne[2], b.ne[3])
        return self._new(op, ne, "f32", (a, b), {"stride": int(stride)})

    def pool_1d(self, a: Tensor, op: int, k0: int, s0: int, p0: int) -> Tensor:
        """``ggml_pool_1d``: max (0) or average (1, over the in-bounds taps) pooling along ne0."""
        return self._pool(Op.POOL_1D, a, op, {"k0": k0, "s0": s0, "p0": p0})

    def pool_2d(self, a: Tensor, op: int, k0: int, k1: int, s0: int, s1: int, p0: float, p1: float) -> Tensor:
        """``ggml_pool_2d``: max (0) or average (1, divided by k0·k1) pooling over ne0, ne1."""
        return self._pool(Op.POOL_2D, a, op, {"k0": k0, "k1": k1, "s0": s0, "s1": s1, "p0": p0, "p1": p1})

    def _pool(self, name: Op, a: Tensor, op: int, window: dict[str, float]) -> Tensor:
        self._check_tensor(name, "a", a, ("f32", "f16"))
        if op not in (GGML_OP_POOL_MAX, GGML_OP_POOL_AVG):
            raise self._err(name, "op", "0 (MAX) or 1 (AVG)", str(op))
        params = {"op": int(op), **self._conv_params(name, **window)}
        # ggml computes the sizes in float and truncates; its kernel uses the int padding
        dims = range(1 if name == Op.POOL_1D else 2)
        out = [int((a.ne[i] + 2 * window[f"p{i}"] - window[f"k{i}"]) / window[f"s{i}"]) + 1 for i in dims]
        if min(out) <= 0:
            kernel = [window[f"k{i}"] for i in dims]
            raise self._ne_err(name, "a", f"ne[0:{len(out)}] + 2·p at least the kernel {kernel}", a)
        return self._new(name, (*out, *a.ne[len(out) :]), "f32", (a,), params)

    def ssm_conv(self, sx: Tensor, c: Tensor) -> Tensor:
        """``ggml_ssm_conv``: depthwise causal conv; sx [n_s, d_inner, d_conv-1+n_t], c [d_inner, d_conv]."""
        op = Op.SSM_CONV
        self._check_tensor(op, "sx", sx, ("f32",))
        self._check_tensor(op, "c", c, ("f32",))
        d_conv = c.ne[0]
        d_inner = c.ne[1]
        n_t = sx.ne[0] - d_conv + 1
        if sx.ne[0] != d_conv - 1 + n_t or sx.ne[1] != d_inner or n_t < 0 or c.ne[2] != 1 or c.ne[3] != 1:
            raise self._ne_err(
                op, "sx", f"ne[1] == c.ne[1] = {d_inner}, ne[0] >= d_conv - 1 = {d_conv - 1}", sx
            )
        return self._new(op, (d_inner, n_t, sx.ne[2], 1), "f32", (sx, c))

    def gated_delta_net(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        g: Tensor,
        beta: Tensor,
        state: Tensor,
        K: int = 1,  # noqa: N803
    ) -> Tensor:
        """``ggml_gated_delta_net`` (see ovkit.ops.reference.gated_delta_net for the recurrence)."""
        op = Op.GATED_DELTA_NET
        for nm, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("state", state)):
            self._check_tensor(op, nm, t, ("f32",))
        s_k, h_k, n_tokens, n_seqs = q.ne
        s_v, h_v = v.ne[0], v.ne[1]
        if k.ne != q.ne:
            raise self._ne_err(op, "k", f"ne {ne_str(q.ne)} (as q)", k)
        if s_v != s_k or v.ne[2] != n_tokens or v.ne[3] != n_seqs or h_v % h_k:
            raise self._ne_err(op, "v", f"ne [{s_k}, a multiple of {h_k}, {n_tokens}, {n_seqs}]", v)
        if g.ne[0] not in (1, s_v) or g.ne[1:] != v.ne[1:]:
            raise self._ne_err(op, "g", f"ne [1 or {s_v}, {h_v}, {n_tokens}, {n_seqs}]", g)
        if beta.ne != (1, h_v, n_tokens, n_seqs):
            raise self._ne_err(op, "beta", f"ne [1, {h_v}, {n_tokens}, {n_seqs}]", beta)
        if state.ne != (s_v, s_v, h_v, n_seqs):
            raise self._ne_err(op, "state", f"ne [{s_v}, {s_v}, {h_v}, {n_seqs}]", state)
        if K < 1:
            raise self._err(op, "K", "K >= 1 state snapshots", str(K))
        ne = (s_v * h_v, n_tokens * n_seqs + K * s_v * n_seqs, 1, 1)
        return self._new(op, ne, "f32", (q, k, v, g, beta, state), {"K": int(K)})

    def solve_tri(self, a: Tensor, b: Tensor, left: bool, lower: bool, uni: bool) -> Tensor:
        """``ggml_solve_tri``: x with A·x = B for triangular A (numpy: a (n, n), b (n, m)); only
        ``mode="reference"`` runs it (upstream's translator is disabled)."""
        op = Op.SOLVE_TRI
        self._check_tensor(op, "a", a, ("f32",))
        self._check_tensor(op, "b", b, ("f32",))
        if a.ne[0] != a.ne[1]:
            raise self._ne_err(op, "a", "square matrices (ne[0] == ne[1])", a)
        if a.ne[1] != b.ne[1] or a.ne[2:] != b.ne[2:]:
            raise self._ne_err(op, "b", f"ne[1] == {a.ne[1]} rows and batch dims {list(a.ne[2:])}", b)
        if not left:
            raise self._err(op, "left", "True (ggml implements A·x = B only)", str(left))
        params = {"left": bool(left), "lower": bool(lower), "uni": bool(uni)}
        return self._new(op, b.ne, "f32", (a, b), params)

    # ------------------------------------------------------------------ misc
    def diag(self, a: Tensor) -> Tensor:
        """``ggml_diag``: a row vector [.., 1, n] → diagonal matrix [.., n, n]."""
        self._check_tensor(Op.DIAG, "a", a, ("f32",))
        if a.ne[1] != 1:
            raise self._ne_err(Op.DIAG, "a", "ne[1] == 1 (a row vector per matrix)", a)
        return self._new(Op.DIAG, (a.ne[0], a.ne[0], a.ne[2], a.ne[3]), a.dtype, (a,))

    def tri(self, a: Tensor, type_: int) -> Tensor:
        """``ggml_tri``: keep a triangle of square matrices (0 upper+diag, 1 upper, 2 lower+diag, 3 lower)."""
        self._check_tensor(Op.TRI, "a", a, ("f32",))
        if type_ not in (0, 1, 2, 3):
            raise self._err(Op.TRI, "type", "0..3 (ggml_tri_type)", str(type_))
        if a.ne[0] != a.ne[1]:
            raise self._ne_err(Op.TRI, "a", "square matrices (ne[0] == ne[1])", a)
        return self._new(Op.TRI, a.ne, a.dtype, (a,), {"type": int(type_)})

    def __repr__(self) -> str:
        ops = sum(1 for t in self.nodes if not t.is_leaf)
        return f"<ovkit.Graph: {len(self.nodes)} tensors, {ops} ops>"

    def to_frame(self) -> Any:
        """The graph's tensors as a pandas DataFrame (id, op, sub_op, name, shape, dtype, srcs, view)."""
        import pandas as pd

        rows = [
            {
                "id": t.id,
                "op": t.op,
                "sub_op": t.sub_op or "",
                "name": t.name,
                "shape": t.shape,
                "dtype": t.dtype,
                "srcs": tuple(s.id for s in t.srcs if s is not None),
                "view_of": t.view_src.id if t.view_src is not None else None,
                "contiguous": t.is_contiguous if not t.is_quantized else True,
            }
            for t in self.nodes
        ]
        return pd.DataFrame(rows).set_index("id")

    # ------------------------------------------------------------------ in-place variants
    # ggml's *_inplace builders write the result into a's memory and return a view of a; ovkit's
    # values are immutable, so each computes its op's result (the value test-backend-ops compares).
    rope_ext_inplace = rope_ext
    rope_multi_inplace = rope_multi
    soft_max_ext_inplace = soft_max_ext
    scale_bias_inplace = scale_bias
    rms_norm_inplace = rms_norm
    norm_inplace = norm
    set_inplace = set

    # ------------------------------------------------------------------ running
    def to_model(
        self, outputs: Tensor | Sequence[Tensor], *, manual_gqa: bool | None = None
    ) -> tuple[Any, list[str]]:
        """The OpenVINO model computing ``outputs`` and the names of its Parameters (in order);
        ``manual_gqa`` picks FLASH_ATTN_EXT's form (``ovkit.ops.translate.attention_form``)."""
        from ovkit.ops.translate import build_model

        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        leaves = self.inputs_of(outs)
        return build_model(self, outs, leaves, manual_gqa=manual_gqa), [t.name for t in leaves]

    def translation(
        self, outputs: Tensor | Sequence[Tensor], inputs: Mapping[str, Any]
    ) -> tuple[Any, list[np.ndarray]]:
        """``outputs``' OpenVINO model (:meth:`to_model`) and the arrays ``inputs`` feed its
        Parameters, in order: the translation as it is, no support policy asked."""
        from ovkit.ops.translate import model_inputs

        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        model, names = self.to_model(outs)
        return model, model_inputs(names, prepare_feed(self, outs, inputs))

    def compute(
        self,
        outputs: Tensor | Sequence[Tensor],
        inputs: Mapping[str, Any] | None = None,
        device: str | None = None,
        mode: Mode = "device",
        *,
        core: Core | None = None,
        config: Any = None,
        policy: bool = True,
    ) -> Any:
        """Run the graph: a numpy array per output (one array when ``outputs`` is one Tensor).

        ``mode="device"``: on ``device`` (default: the selected one) through the engine, after the
        device's support policy (:class:`UnsupportedOpError`; ``policy=False`` skips it), with
        ``config``'s compile hints (None: exact f32); ``mode="reference"``: ovkit's numpy reference.
        """
        single = isinstance(outputs, Tensor)
        outs: list[Tensor] = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        for o in outs:
            self._check_tensor("compute", "outputs", o)
        # fed index operands, before OpenVINO sees them; found once per graph version
        walk_key = ("ovkit.graph.fed_index_nodes", self.version, len(self.nodes), tuple(map(id, outs)))
        indexed = self.derived.get(walk_key)
        if indexed is None:
            indexed = self.derived[walk_key] = fed_index_nodes(self.value_nodes(outs))
        if indexed:
            check_feed(indexed, inputs or {})
        if mode == "reference":
            from ovkit.ops.reference import evaluate

            results = evaluate(self, outs, prepare_feed(self, outs, inputs or {}))
        elif mode == "device" and not policy:
            model, arrays = self.translation(outs, inputs or {})
            raw = run_model(model, arrays, device, run_config_from(config, GRAPH_RUN_CONFIG), core=core)
            results = [from_model_output(o, r) for o, r in zip(outs, raw, strict=True)]
        elif mode == "device":
            results = compute_graph(self, outs, inputs or {}, device, core=core, config=config)
        else:
            raise GraphError(f"compute: mode: expected 'device' or 'reference', given {mode!r}")
        return results[0] if single else results


def _sub_op_builder(entry: OpEntry, name: str) -> Callable[..., Tensor]:
    """ggml's one-line wrapper ``name`` of the generic ``unary``/``glu``/``glu_split`` for
    ``entry``'s sub-op: ``gelu(a)``, ``swiglu(a)``, ``swiglu_swapped(a)``, ``swiglu_split(a, b)``."""
    op = entry.key
    forms: dict[str, Callable[..., Tensor]] = {
        "_split": lambda self, a, b: self.glu_split(a, b, op),
        "_swapped": lambda self, a: self.glu(a, op, True),
        "": lambda self, a: self.unary(a, op) if op.kind == "unary" else self.glu(a, op),
    }
    fn = forms[name.removeprefix(str(op.sub_op).lower())]  # swiglu_split -> "_split"
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``ggml_{name}``: the {op.label} sub-op ({entry.openvino})."
    return fn


for _entry in ENTRIES:
    if not GENERIC_BUILDERS.isdisjoint(_entry.builders):  # XIELU, SWIGLU_OAI: methods of their own
        for _name in set(_entry.builders) - GENERIC_BUILDERS:
            setattr(Graph, _name, _sub_op_builder(_entry, _name))
