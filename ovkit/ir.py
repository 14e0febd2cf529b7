"""The tensor IR every layer shares: the op codes, tensor nodes with ggml's memory layout, views,
traversals and the errors a graph raises.

Nodes store ggml's ``ne`` (innermost first, 4 entries; the API takes numpy-order shapes) and ggml's
memory layout: the base owning the memory (``view_src``), a byte offset and byte strides ``nb``, so
views and permutes are non-contiguous exactly as in ggml.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Container, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ovkit.dtypes import NUMPY_DTYPE, TYPE_SIZE, bf16_round, contiguous_nb, layout, norm_type
from ovkit.errors import OvkitError


class Op(enum.StrEnum):
    """One ggml op, the key of every op table: ``Op.ADD`` is ``GGML_OP_ADD``; UNARY and GLU sub-ops
    are members valued ``"UNARY.GELU"`` (``Op.GELU.parent is Op.UNARY``)."""

    # ggml_op, in ggml.h order (GGML_OP_NONE = 0 ...)
    NONE = "NONE"
    DUP = "DUP"
    ADD = "ADD"
    ADD_ID = "ADD_ID"
    ADD1 = "ADD1"
    ACC = "ACC"
    SUB = "SUB"
    MUL = "MUL"
    DIV = "DIV"
    SQR = "SQR"
    SQRT = "SQRT"
    LOG = "LOG"
    SIN = "SIN"
    COS = "COS"
    SUM = "SUM"
    SUM_ROWS = "SUM_ROWS"
    CUMSUM = "CUMSUM"
    MEAN = "MEAN"
    ARGMAX = "ARGMAX"
    COUNT_EQUAL = "COUNT_EQUAL"
    REPEAT = "REPEAT"
    REPEAT_BACK = "REPEAT_BACK"
    CONCAT = "CONCAT"
    SILU_BACK = "SILU_BACK"
    NORM = "NORM"
    RMS_NORM = "RMS_NORM"
    RMS_NORM_BACK = "RMS_NORM_BACK"
    GROUP_NORM = "GROUP_NORM"
    L2_NORM = "L2_NORM"
    MUL_MAT = "MUL_MAT"
    MUL_MAT_ID = "MUL_MAT_ID"
    OUT_PROD = "OUT_PROD"
    SCALE = "SCALE"
    SET = "SET"
    CPY = "CPY"
    CONT = "CONT"
    RESHAPE = "RESHAPE"
    VIEW = "VIEW"
    PERMUTE = "PERMUTE"
    TRANSPOSE = "TRANSPOSE"
    GET_ROWS = "GET_ROWS"
    GET_ROWS_BACK = "GET_ROWS_BACK"
    SET_ROWS = "SET_ROWS"
    DIAG = "DIAG"
    DIAG_MASK_INF = "DIAG_MASK_INF"
    DIAG_MASK_ZERO = "DIAG_MASK_ZERO"
    SOFT_MAX = "SOFT_MAX"
    SOFT_MAX_BACK = "SOFT_MAX_BACK"
    ROPE = "ROPE"
    ROPE_BACK = "ROPE_BACK"
    CLAMP = "CLAMP"
    CONV_TRANSPOSE_1D = "CONV_TRANSPOSE_1D"
    IM2COL = "IM2COL"
    IM2COL_BACK = "IM2COL_BACK"
    IM2COL_3D = "IM2COL_3D"
    COL2IM_1D = "COL2IM_1D"
    CONV_2D = "CONV_2D"
    CONV_3D = "CONV_3D"
    CONV_2D_DW = "CONV_2D_DW"
    CONV_TRANSPOSE_2D = "CONV_TRANSPOSE_2D"
    POOL_1D = "POOL_1D"
    POOL_2D = "POOL_2D"
    POOL_2D_BACK = "POOL_2D_BACK"
    UPSCALE = "UPSCALE"
    PAD = "PAD"
    PAD_REFLECT_1D = "PAD_REFLECT_1D"
    ROLL = "ROLL"
    ARANGE = "ARANGE"
    TIMESTEP_EMBEDDING = "TIMESTEP_EMBEDDING"
    ARGSORT = "ARGSORT"
    TOP_K = "TOP_K"
    LEAKY_RELU = "LEAKY_RELU"
    TRI = "TRI"
    FILL = "FILL"
    FLASH_ATTN_EXT = "FLASH_ATTN_EXT"
    FLASH_ATTN_BACK = "FLASH_ATTN_BACK"
    SSM_CONV = "SSM_CONV"
    SSM_SCAN = "SSM_SCAN"
    WIN_PART = "WIN_PART"
    WIN_UNPART = "WIN_UNPART"
    GET_REL_POS = "GET_REL_POS"
    ADD_REL_POS = "ADD_REL_POS"
    RWKV_WKV6 = "RWKV_WKV6"
    GATED_LINEAR_ATTN = "GATED_LINEAR_ATTN"
    RWKV_WKV7 = "RWKV_WKV7"
    SOLVE_TRI = "SOLVE_TRI"
    GATED_DELTA_NET = "GATED_DELTA_NET"
    UNARY = "UNARY"
    MAP_CUSTOM1 = "MAP_CUSTOM1"
    MAP_CUSTOM2 = "MAP_CUSTOM2"
    MAP_CUSTOM3 = "MAP_CUSTOM3"
    CUSTOM = "CUSTOM"
    CROSS_ENTROPY_LOSS = "CROSS_ENTROPY_LOSS"
    CROSS_ENTROPY_LOSS_BACK = "CROSS_ENTROPY_LOSS_BACK"
    OPT_STEP_ADAMW = "OPT_STEP_ADAMW"
    OPT_STEP_SGD = "OPT_STEP_SGD"
    GLU = "GLU"
    # ggml_unary_op sub-ops of UNARY, in ggml.h order (GGML_UNARY_OP_ABS = 0 ...)
    ABS = "UNARY.ABS"
    SGN = "UNARY.SGN"
    NEG = "UNARY.NEG"
    STEP = "UNARY.STEP"
    TANH = "UNARY.TANH"
    ELU = "UNARY.ELU"
    RELU = "UNARY.RELU"
    SIGMOID = "UNARY.SIGMOID"
    GELU = "UNARY.GELU"
    GELU_QUICK = "UNARY.GELU_QUICK"
    SILU = "UNARY.SILU"
    HARDSWISH = "UNARY.HARDSWISH"
    HARDSIGMOID = "UNARY.HARDSIGMOID"
    EXP = "UNARY.EXP"
    EXPM1 = "UNARY.EXPM1"
    SOFTPLUS = "UNARY.SOFTPLUS"
    GELU_ERF = "UNARY.GELU_ERF"
    XIELU = "UNARY.XIELU"
    FLOOR = "UNARY.FLOOR"
    CEIL = "UNARY.CEIL"
    ROUND = "UNARY.ROUND"
    TRUNC = "UNARY.TRUNC"
    # ggml_glu_op sub-ops of GLU, in ggml.h order (GGML_GLU_OP_REGLU = 0 ...)
    REGLU = "GLU.REGLU"
    GEGLU = "GLU.GEGLU"
    SWIGLU = "GLU.SWIGLU"
    SWIGLU_OAI = "GLU.SWIGLU_OAI"
    GEGLU_ERF = "GLU.GEGLU_ERF"
    GEGLU_QUICK = "GLU.GEGLU_QUICK"

    @property
    def parent(self) -> Op:
        """The ggml op of a node of this kind: ``Op.UNARY`` for ``Op.GELU``, else the op itself."""
        head, _, _ = self.value.partition(".")
        return Op(head)

    @property
    def sub_op(self) -> str | None:
        """The unary/GLU sub-op name (``"GELU"``), None for a plain op."""
        _, dot, tail = self.value.partition(".")
        return tail if dot else None

    @property
    def kind(self) -> str:
        """``"op"``, or ``"unary"`` / ``"glu"`` for sub-ops."""
        return self.parent.value.lower() if self.sub_op else "op"

    @property
    def ggml_name(self) -> str:
        """``GGML_OP_ADD``, ``GGML_UNARY_OP_GELU``, ``GGML_GLU_OP_SWIGLU``."""
        sub = self.sub_op
        return f"GGML_{self.parent.value}_OP_{sub}" if sub else "GGML_OP_" + self.value

    @property
    def enum_value(self) -> int:
        """The C enum value: ``GGML_OP_*`` for ops, ``GGML_UNARY_OP_*``/``GGML_GLU_OP_*`` for sub-ops."""
        return _ENUM_VALUE[self]

    @property
    def label(self) -> str:
        """``ADD``, ``UNARY(GELU)``, ``GLU(SWIGLU)``: the op as messages name it."""
        sub = self.sub_op
        return f"{self.parent.value}({sub})" if sub else self.value

    @classmethod
    def of(cls, op: str, sub_op: str | None = None) -> Op:
        """The member for a ggml op and optional sub-op name (``Op.of("UNARY", "GELU") is Op.GELU``)."""
        return cls(f"{op}.{sub_op}" if sub_op else op)

    @classmethod
    def sub_op_named(cls, parent: Op, name: int | str) -> Op | None:
        """The sub-op of ``parent`` (UNARY or GLU) by ggml enum value or name, None if unknown."""
        if isinstance(name, int) and not isinstance(name, bool):
            return _SUB_OPS_BY_ID.get((parent, name))
        try:
            return cls(f"{parent.value}.{str(name).upper()}")
        except ValueError:
            return None


#: The sub-ops of UNARY and of GLU, in ggml enum order.
UNARY_OPS: tuple[Op, ...] = tuple(o for o in Op if o.parent is Op.UNARY and o.sub_op)
GLU_OPS: tuple[Op, ...] = tuple(o for o in Op if o.parent is Op.GLU and o.sub_op)
_PLAIN_OPS: tuple[Op, ...] = tuple(o for o in Op if not o.sub_op)
_ENUM_VALUE: dict[Op, int] = {o: i for ops in (_PLAIN_OPS, UNARY_OPS, GLU_OPS) for i, o in enumerate(ops)}
_SUB_OPS_BY_ID: dict[tuple[Op, int], Op] = {(o.parent, _ENUM_VALUE[o]): o for o in UNARY_OPS + GLU_OPS}

#: ops whose result is a view of ``src[0]`` (no computation, ggml's view semantics).
VIEW_OPS: frozenset[Op] = frozenset({Op.VIEW, Op.RESHAPE, Op.PERMUTE, Op.TRANSPOSE})
#: sources an op needs only for their shape/type, never their values (op -> src indices).
SHAPE_ONLY_SRCS: dict[Op, frozenset[int]] = {Op.CPY: frozenset({1}), Op.FILL: frozenset({0})}


#: ops whose ggml CPU kernel reads each row of src[0] as ne[0] consecutive elements whatever its
#: nb[0], at i1·nb[1] + i2·nb[2] + i3·nb[3] (True, "flat": at row·nb[1]); ovkit too (``dense_rows``).
DENSE_ROW_READS: dict[Op, bool] = {
    Op.SUM: False,
    Op.MEAN: False,
    Op.ARGMAX: False,
    Op.ARGSORT: True,
    Op.TOP_K: True,
    Op.LEAKY_RELU: True,
}
#: in-place writes ``Graph.build_forward_expand`` orders before later views of their destination
#: (op -> index of the destination source).
IN_PLACE_WRITES: dict[Op, int] = {Op.SET_ROWS: 0, Op.CPY: 1}
#: ops whose ggml node orders its sources unlike the builder's arguments: op -> the builder source
#: at each ggml src index (ggml_set_rows(a, b, c) keeps src = [b, c, a]; the gates read those).
GGML_SRC_ORDER: dict[Op, tuple[int, ...]] = {Op.SET_ROWS: (1, 2, 0)}


class RopeType(enum.IntEnum):
    """``GGML_ROPE_TYPE_*``: ROPE's ``mode``. MROPE is a bit the VISION and IMROPE modes include."""

    NORMAL = 0
    NEOX = 2
    MROPE = 8
    VISION = 24
    IMROPE = 40


# ggml's other enums as module constants (ggml's C spelling, for code ported from C).
GGML_SORT_ORDER_ASC = 0
GGML_SORT_ORDER_DESC = 1
GGML_PREC_DEFAULT = 0
GGML_PREC_F32 = 10  # ggml_prec: accumulate in f32 (ggml_mul_mat_set_prec, *_set_prec)
GGML_OP_POOL_MAX = 0
GGML_OP_POOL_AVG = 1
GGML_SCALE_MODE_BILINEAR = 1
GGML_SCALE_MODE_BICUBIC = 2
GGML_SCALE_FLAG_ALIGN_CORNERS = 1 << 8
GGML_SCALE_FLAG_ANTIALIAS = 1 << 9


class GraphError(OvkitError, ValueError):
    """A shape, type or parameter ggml would reject, raised when the op is built."""


class TranslationGapError(GraphError):
    """ovkit has no OpenVINO translation for a node of the graph: a gap of ovkit, not a wrong
    result (harnesses report it as ``not translatable``, not as a FAIL)."""


class UnsupportedOpError(OvkitError, RuntimeError):
    """The selected device's support policy rejects an op of the graph."""

    def __init__(self, tensor: Tensor, reason: str, device: str) -> None:
        self.tensor = tensor
        self.reason = reason
        self.device = device
        super().__init__(f"{tensor.describe()} is not supported on {device}: {reason}")


# ---------------------------------------------------------------------------------------------
# Shapes and layout
# ---------------------------------------------------------------------------------------------
def ne_str(ne: Sequence[int]) -> str:
    """``[4, 2, 1, 1]``: ne as messages show it."""
    return "[" + ", ".join(str(int(d)) for d in ne) + "]"


#: ggml's ``ne`` entries and element counts are ``int64_t``.
INT64_MAX = 2**63 - 1


def pad_ne(ne: Sequence[int]) -> tuple[int, int, int, int]:
    """ggml ``ne`` given innermost first with up to 4 entries, padded with 1s to four ints."""
    n = [int(x) for x in ne] + [1] * (4 - len(ne))
    return (n[0], n[1], n[2], n[3])


def ne4(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """ggml ``ne`` (4 entries) of a numpy-order shape; GraphError for anything but at most 4
    integers in ``0..2**63-1`` whose product fits ``int64_t`` too (no silent truncation of 2.5)."""
    dims = tuple(shape)
    if len(dims) > 4:
        raise GraphError(f"ggml tensors have at most 4 dims; got shape {dims}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int | np.integer) or not 0 <= d <= INT64_MAX:
            raise GraphError(f"shape {dims}: dimension {d!r}: expected an integer in 0..2**63-1 (int64_t)")
    ne = pad_ne(dims[::-1])
    if math.prod(ne) > INT64_MAX:
        raise GraphError(f"shape {dims}: {math.prod(ne)} elements do not fit ggml's int64_t element count")
    return ne


def n_dims(ne: Sequence[int]) -> int:
    """``ggml_n_dims``: 1 + the last dim with ne > 1 (at least 1)."""
    return next((i + 1 for i in range(3, 0, -1) if ne[i] > 1), 1)


def shape_of(ne: Sequence[int]) -> tuple[int, ...]:
    """The numpy shape of ``ne`` as ``ggml.utils.to_numpy`` returns it (trailing 1s of ne dropped;
    a zero dim is kept, so ne [4, 0, 1, 1] is shape (0, 4), never (4,))."""
    keep = max((i + 1 for i in range(4) if ne[i] != 1), default=1)
    return tuple(int(d) for d in reversed(tuple(ne)[:keep]))


class _OpKind:
    """What OpInfo and Tensor share: the op-kind tests (both carry a ggml ``op``) and ggml's
    layout questions, answered once from ``dtype``, ``ne`` and the byte ``strides``."""

    __slots__ = ()
    op: str
    dtype: str
    ne: tuple[int, int, int, int]

    @property
    def strides(self) -> tuple[int, int, int, int]:
        """The byte strides ``nb`` (ggml order)."""
        raise NotImplementedError

    @property
    def nelements(self) -> int:
        return math.prod(self.ne)

    @property
    def is_view(self) -> bool:
        """True for a VIEW op result (ggml ``op == GGML_OP_VIEW``)."""
        return self.op == Op.VIEW

    @property
    def is_permute(self) -> bool:
        return self.op == Op.PERMUTE

    @property
    def nbytes(self) -> int:
        """``ggml_nbytes``: the byte span the tensor covers (quantized: whole blocks along ne[0])."""
        if any(d <= 0 for d in self.ne):
            return 0
        blck, tsize = layout(self.dtype)
        nb = self.strides
        if blck > 1:
            return self.ne[0] * nb[0] // blck + sum((self.ne[i] - 1) * nb[i] for i in range(1, 4))
        return tsize + sum((self.ne[i] - 1) * nb[i] for i in range(4))

    @property
    def is_contiguous(self) -> bool:
        """``ggml_is_contiguous``: rows and planes packed, innermost dim dense, size-1 dims ignored."""
        blck, nxt = layout(self.dtype)
        nb = self.strides
        if self.ne[0] != blck and nb[0] != nxt:
            return False
        nxt *= self.ne[0] // blck
        for i in range(1, 4):
            if self.ne[i] != 1:
                if nb[i] != nxt:
                    return False
                nxt *= self.ne[i]
        return True


# ---------------------------------------------------------------------------------------------
# OpInfo: a node as the support policy sees it
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OpInfo(_OpKind):
    """One ggml node as the support policy sees it (a stable contract, constructible without a
    Graph; :meth:`Tensor.op_info` builds one from a graph node)."""

    op: str  #: ggml op name, upper case without prefix: "ADD", "UNARY", "NONE" (a leaf), "VIEW"...
    dtype: str  #: output type, a ggml type name ("f32", "q4_K", "mxfp4"...; case-insensitive)
    ne: tuple[int, int, int, int]  #: output shape in ggml order (innermost first)
    #: the sources in ggml ``src[i]`` order (each says what produced it: a "PERMUTE" source is a
    #: permuted tensor), None for an absent optional source (a FLASH_ATTN_EXT without mask)
    srcs: tuple[OpInfo | None, ...] = ()
    sub_op: str | None = None  #: the UNARY/GLU op ("GELU", "SWIGLU"), else None
    #: the op's parameters by ggml builder argument name (missing keys take ggml's defaults)
    params: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=True)
    name: str = ""  #: the tensor name (only quirk gates read it)
    nb: tuple[int, int, int, int] | None = None  #: byte strides (ggml order); None: contiguous
    view_src: OpInfo | None = None  #: the tensor whose memory a view (or in-place result) views
    view_offs: int = 0  #: byte offset of a view into ``view_src``

    def __post_init__(self) -> None:
        ne = tuple(int(x) for x in self.ne)
        if len(ne) > 4 or len(ne) == 0:
            raise ValueError(f"OpInfo.ne must have 1 to 4 entries (ggml order), got {self.ne!r}")
        object.__setattr__(self, "ne", ne + (1,) * (4 - len(ne)))
        object.__setattr__(self, "op", str(self.op).upper())
        if self.sub_op is not None:
            object.__setattr__(self, "sub_op", str(self.sub_op).upper())
        object.__setattr__(self, "srcs", tuple(self.srcs))

    @classmethod
    def leaf(cls, dtype: str, ne: Iterable[int], name: str = "") -> OpInfo:
        """A leaf (op NONE): an input or a weight."""
        return cls("NONE", dtype, tuple(ne), name=name)  # type: ignore[arg-type]

    def src(self, i: int) -> OpInfo | None:
        """``src[i]`` or None when absent."""
        return self.srcs[i] if i < len(self.srcs) else None

    @property
    def type(self) -> str:
        """The canonical (lower-case) output type."""
        return norm_type(self.dtype)

    @property
    def label(self) -> str:
        """``ADD``, ``UNARY(GELU)``, ``GLU(SWIGLU)``: the op as reasons name it."""
        return f"{self.op}({self.sub_op})" if self.sub_op else self.op

    @property
    def strides(self) -> tuple[int, int, int, int]:
        """``nb``, or the contiguous strides when ``nb`` is None."""
        return self.nb if self.nb is not None else contiguous_nb(self.dtype, self.ne)

    def param(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)


# ---------------------------------------------------------------------------------------------
# Tensors and the node list
# ---------------------------------------------------------------------------------------------
@dataclass(eq=False)
class Tensor(_OpKind):
    """One node of a graph: a leaf (op ``NONE``) or the result of a ggml op."""

    graph: GraphIR = field(repr=False)
    id: int
    op: Op
    ne: tuple[int, int, int, int]
    dtype: str
    srcs: tuple[Tensor | None, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    sub_op: str | None = None
    name: str = ""
    nb: tuple[int, int, int, int] = (0, 0, 0, 0)
    view_src: Tensor | None = field(default=None, repr=False)
    view_offs: int = 0
    #: a leaf's constant value (numpy array, or a quantized-weight object), else None.
    value: Any = field(default=None, repr=False)
    is_input: bool = False
    #: a view made after an in-place write into its base (``Graph.build_forward_expand``): that
    #: write, whose result is the base's memory this view reads. An ordering edge, not an operand.
    after: Tensor | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        """Numpy-order shape (``ggml.utils.to_numpy``'s: leading size-1 dims dropped)."""
        return shape_of(self.ne)

    @property
    def type_size(self) -> int:
        return TYPE_SIZE.get(self.dtype, 0)

    @property
    def op_key(self) -> Op:
        """The op-table key: ``Op.ADD``, or the sub-op member (``Op.GELU``) for UNARY/GLU nodes."""
        return Op.of(self.op, self.sub_op)

    @property
    def is_leaf(self) -> bool:
        return self.op == Op.NONE

    @property
    def is_quantized(self) -> bool:
        return self.dtype not in TYPE_SIZE

    @property
    def strides(self) -> tuple[int, int, int, int]:
        """``nb``: the byte strides (ggml order)."""
        return self.nb

    @property
    def elem_offset(self) -> int:
        """``view_offs`` in elements of the base's flattened values (a quantized view starts on a
        block boundary, checked when built: block ``b`` holds elements ``b*blck ...``)."""
        blck, tsize = layout(self.dtype)
        return self.view_offs // tsize * blck

    @property
    def elem_strides(self) -> tuple[int, ...]:
        """``nb`` in elements of the base's flattened values (quantized: blocks along ne[0] are
        dense, the other strides whole blocks, checked when built)."""
        blck, tsize = layout(self.dtype)
        if blck == 1:
            return tuple(b // tsize for b in self.nb)
        return (1, *(b // tsize * blck for b in self.nb[1:]))

    def operand(self, i: int) -> Tensor:
        """Source ``i``, which the op requires (GraphError naming the node if it is absent)."""
        s = self.srcs[i] if i < len(self.srcs) else None
        if s is None:
            raise GraphError(f"{self.describe()}: operand src[{i}] is absent")
        return s

    def is_transposed(self) -> bool:
        """``ggml_is_transposed``: nb[0] > nb[1]."""
        return self.nb[0] > self.nb[1]

    @property
    def base(self) -> Tensor:
        """The tensor that owns this tensor's memory (itself when not a view)."""
        return self.view_src if self.view_src is not None else self

    @property
    def memory(self) -> Tensor:
        """The node whose value is the memory a view reads: the in-place write it follows, else its base."""
        return self.after if self.after is not None else self.base

    def describe(self) -> str:
        name = f" {self.name!r}" if self.name else ""
        return f"{self.op_key.label}{name} {self.dtype}{list(self.ne)}"

    def set_name(self, name: str) -> Tensor:
        """``ggml_set_name``; returns the tensor for chaining."""
        if self.is_input:
            self.graph._rename_input(self, name)
        self.name = name
        self.graph._edited()
        return self

    def set_param(self, key: str, value: Any) -> Tensor:
        """Set one op param after creation (a translation mark, such as precision="ggml"'s): what
        was derived from the graph before (policy decisions, plans) is derived again."""
        self.params[key] = value
        self.graph._edited()
        return self

    def op_info(self) -> OpInfo:
        """This node as an :class:`OpInfo` (sources and view source included), built iteratively
        (no recursion limit) and cached per graph until a node is edited (sinks, precision, name)."""
        cache = self.graph._info_cache
        for t in post_order([self], lambda t: (*t.srcs, t.view_src), cache):
            view_src, view_offs, nb = t.view_src, t.view_offs, t.nb
            if t.op is Op.CPY:  # a view of its destination, as ggml's (the destination-view gates read it)
                dst = t.operand(1)  # a source, so it and its base are cached
                view_src, view_offs, nb = dst.base, dst.view_offs, dst.nb
            ggml_srcs = [t.srcs[i] for i in GGML_SRC_ORDER[t.op]] if t.op in GGML_SRC_ORDER else t.srcs
            srcs = tuple(cache[s.id] if s is not None else None for s in ggml_srcs)
            view = cache[view_src.id] if view_src is not None else None
            cache[t.id] = OpInfo(
                t.op.value, t.dtype, t.ne, srcs, t.sub_op, dict(t.params), t.name, nb, view, view_offs
            )
        return cache[self.id]


class GraphIR:
    """A graph's nodes in build order (a topological order) and the walks over them."""

    def __init__(self) -> None:
        self.nodes: list[Tensor] = []
        self._names: set[str] = set()
        self._info_cache: dict[int, OpInfo] = {}  # Tensor.op_info() results (cleared on edits)
        #: base id -> the last in-place write into it that ``build_forward_expand`` scheduled.
        self._writes: dict[int, Tensor] = {}
        #: Bumped by every in-place edit of a node (name, precision, sinks).
        self.version = 0
        #: What higher layers derive from this graph (the engine's plans); cleared on every edit.
        self.derived: dict[Hashable, Any] = {}

    def _edited(self) -> None:
        """A node changed after creation: everything derived from the graph is stale."""
        self.version += 1
        self._info_cache.clear()
        self.derived.clear()

    def _rename_input(self, t: Tensor, name: str) -> None:
        """Inputs are fed by name: a new name must be non-empty and not another input's."""
        if not name:
            raise GraphError(f"set_name: input {t.name!r}: expected a non-empty name")
        if name != t.name and name in self._names:
            raise GraphError(f"set_name: input {t.name!r}: the name {name!r} is already used in this graph")
        self._names.discard(t.name)
        self._names.add(name)

    def _new(
        self,
        op: Op | str,
        ne: Sequence[int],
        dtype: str,
        srcs: Sequence[Tensor | None] = (),
        params: Mapping[str, Any] | None = None,
        sub_op: str | None = None,
        *,
        view_of: Tensor | None = None,
        nb: Sequence[int] | None = None,
        offset: int = 0,
    ) -> Tensor:
        """Append a node (``view_of``: the tensor whose memory it views, with strides ``nb``)."""
        code = Op(op)
        ne4_ = (int(ne[0]), int(ne[1]), int(ne[2]), int(ne[3]))
        if any(d < 0 for d in ne4_):
            raise GraphError(f"{code.value}: negative dimension in result ne {ne_str(ne4_)}")
        for s in (s for s in srcs if s is not None):
            # ggml allows empty tensors; a non-empty value computed from an empty operand needs the
            # op's own answer, which only SET_ROWS has (no rows to set: the destination unchanged)
            if 0 in s.ne and 0 not in ne4_ and code is not Op.SET_ROWS:
                raise GraphError(
                    f"{code.value}: operand {s.describe()} is empty (ne {ne_str(s.ne)}): expected "
                    "a non-empty operand for a non-empty result"
                )
            if s.graph is not self:
                raise GraphError(f"{code.value}: operand {s.describe()} belongs to another Graph")
            if code not in VIEW_OPS and s.id in self._writes:
                # after an in-place write, ovkit reads that memory only through views (``after``)
                raise GraphError(
                    f"{code.value}: operand {s.describe()} was written in place by "
                    f"{self._writes[s.id].describe()}: expected a view of it (ggml_view_*), so that "
                    "the read follows the write"
                )
        _check_row_reads(code, srcs)
        t = Tensor(self, len(self.nodes), code, ne4_, dtype, tuple(srcs), dict(params or {}), sub_op)
        if view_of is not None:
            base = view_of.base
            t.view_src = base
            t.view_offs = view_of.view_offs + offset
            t.after = view_of.after if view_of.view_src is not None else self._writes.get(base.id)
            t.nb = (int(nb[0]), int(nb[1]), int(nb[2]), int(nb[3])) if nb is not None else t.nb
        else:
            t.nb = contiguous_nb(dtype, ne4_)
        self.nodes.append(t)
        return t

    def topo(self, outputs: Sequence[Tensor]) -> list[Tensor]:
        """The nodes ``outputs`` depend on, in build order (a topological order)."""
        return self._reached(outputs, lambda t: (*t.srcs, t.view_src, t.after))

    def inputs_of(self, outputs: Sequence[Tensor]) -> list[Tensor]:
        """The input leaves whose values ``outputs`` need."""
        return [t for t in self.value_nodes(outputs) if t.is_input]

    def value_nodes(self, outputs: Sequence[Tensor]) -> list[Tensor]:
        """Nodes whose values are needed (shape-only sources such as cpy's dst are skipped)."""
        return self._reached(outputs, lambda t: [t.memory] if t.op in VIEW_OPS else value_srcs(t))

    def _reached(
        self, outputs: Sequence[Tensor], nexts: Callable[[Tensor], Iterable[Tensor | None]]
    ) -> list[Tensor]:
        """The nodes reached from ``outputs`` by ``nexts``, in dependency order."""
        seen: set[int] = set()
        stack = list(outputs)
        while stack:
            t = stack.pop()
            if t.id not in seen:
                seen.add(t.id)
                stack.extend(d for d in nexts(t) if d is not None)
        return self._dependency_order(seen)

    def _dependency_order(self, selected: Container[int]) -> list[Tensor]:
        """The ``selected`` nodes in build order, except that a node follows every source it reads
        even when that source was created later (a ``*_add_sinks`` tensor made after its node)."""
        order: list[Tensor] = []
        done: set[int] = set()

        def deps(t: Tensor) -> list[Tensor]:
            return [d for d in (*t.srcs, t.view_src, t.after) if d is not None and d.id in selected]

        for t in post_order((t for t in self.nodes if t.id in selected), deps, done):
            done.add(t.id)
            order.append(t)
        return order


def post_order(
    roots: Iterable[Tensor], deps: Callable[[Tensor], Iterable[Tensor | None]], done: Container[int]
) -> Iterator[Tensor]:
    """The nodes reached from ``roots`` by ``deps`` and not ``done``, each after its dependencies
    (iterative: no recursion limit); the caller adds each node it is given to ``done``."""
    for root in roots:
        stack = [(root, False)]
        while stack:
            t, ready = stack.pop()
            if t.id in done:
                continue
            todo = [d for d in deps(t) if d is not None and d.id not in done]
            if ready or not todo:
                yield t
                continue
            stack.append((t, True))
            stack.extend((d, False) for d in reversed(todo))


V = TypeVar("V")


def value_srcs(t: Tensor) -> list[Tensor | None]:
    """``t``'s sources whose values its op reads (None for absent and shape-only ones)."""
    skip = SHAPE_ONLY_SRCS.get(t.op, frozenset())
    return [None if i in skip else s for i, s in enumerate(t.srcs)]


def interpret(
    graph: GraphIR,
    outputs: Sequence[Tensor],
    leaf: Callable[[Tensor], V],
    view: Callable[[Tensor, dict[int, V]], V],
    node: Callable[[Tensor, list[Any]], V],
) -> dict[int, V]:
    """One walk of the IR shared by the interpreters (numpy reference, OpenVINO translation), in
    build order: ``leaf(t)``, ``view(t, values)`` (views read their ``memory``'s value) or
    ``node(t, srcs)`` (None for absent and shape-only sources); the values by node id."""
    values: dict[int, V] = {}
    for t in graph.value_nodes(outputs):
        if t.is_leaf:
            values[t.id] = leaf(t)
        elif t.op in VIEW_OPS:
            values[t.id] = view(t, values)
        else:
            srcs = [None if s is None else values[s.id] for s in value_srcs(t)]
            dense = dense_rows(t.op, t.srcs)
            if dense is not None:  # the memory ggml's kernel reads, not the view's elements
                srcs[0] = view(dense, values)
            values[t.id] = node(t, srcs)
    return values


def _check_row_reads(op: Op, srcs: Sequence[Tensor | None]) -> None:
    """GraphError for a src[0] whose rows ``op``'s ggml kernel reads past the end of its buffer
    (``DENSE_ROW_READS``: ggml reads other memory there)."""
    dense = dense_rows(op, srcs)
    if dense is not None:
        s = srcs[0]
        assert s is not None
        last = dense.elem_offset + sum(
            (n - 1) * st for n, st in zip(dense.ne, dense.elem_strides, strict=True)
        )
        if last >= s.base.nelements:
            raise GraphError(
                f"{op.value}: operand {s.describe()}: expected rows ggml's kernel reads inside the "
                f"buffer (use cont), given nb {list(s.nb)}: read as {s.ne[0]} consecutive elements at "
                f"nb {list(dense.nb)}, the rows end at element {last}, past the {s.base.nelements} of its buffer"
            )


def dense_rows(op: Op, srcs: Sequence[Tensor | None]) -> Tensor | None:
    """The view of src[0] ``op``'s kernel reads (``DENSE_ROW_READS``; nb[0] the element size, as
    ggml_view_4d builds it), or None when that is src[0] itself."""
    t = srcs[0] if srcs else None
    flat = DENSE_ROW_READS.get(op)
    if t is None or flat is None or t.is_quantized or t.op not in VIEW_OPS:  # others are contiguous
        return None
    es, nb1 = t.type_size, t.nb[1]
    nb = (es, nb1, nb1 * t.ne[1], nb1 * t.ne[1] * t.ne[2]) if flat else (es, nb1, t.nb[2], t.nb[3])
    if all(n == 1 or x == y for n, x, y in zip(t.ne, nb, t.nb, strict=True)):
        return None
    return replace(t, nb=nb)


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------
def round_to(dtype: str, arr: Any) -> np.ndarray:
    """``arr`` stored as ggml would store ``dtype`` (bf16: float32 rounded to nearest-even bf16)."""
    a = np.asarray(arr)
    if dtype == "bf16":
        return bf16_round(a)
    with np.errstate(over="ignore", invalid="ignore"):  # f32 → f16 overflow is ±inf, as in ggml
        return np.asarray(a, dtype=NUMPY_DTYPE[dtype])


def from_model_output(t: Tensor, arr: np.ndarray) -> np.ndarray:
    """A model output as the value of graph tensor ``t`` (its numpy shape and dtype)."""
    out = np.asarray(arr)
    if t.dtype == "bf16":  # read back as float32
        return round_to("bf16", out).reshape(t.shape)
    return out.astype(NUMPY_DTYPE.get(t.dtype, np.dtype(np.float32)), copy=False).reshape(t.shape)


def ggml_index_map(t: Tensor) -> npt.NDArray[np.int64]:
    """Element indices (into the flattened base memory) of every element of view ``t``, shape [ne3,ne2,ne1,ne0]."""
    axes = np.ogrid[tuple(slice(n) for n in reversed(t.ne))]  # index grids of dims 3, 2, 1, 0
    idx = t.elem_offset + sum(ax * st for ax, st in zip(axes, reversed(t.elem_strides), strict=True))
    return np.broadcast_to(idx, tuple(reversed(t.ne))).astype(np.int64)
