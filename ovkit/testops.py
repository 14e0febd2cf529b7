"""``ovkit test-ops``: a harness in the spirit of llama.cpp's ``test-backend-ops``.

``mode test`` builds every catalogue case as an ovkit :class:`~ovkit.graph.Graph`, asks the
device's support policy first (unsupported cases are listed with the policy's reason and not
run), runs the supported ones on the selected device through the engine, and compares with the
reference: real ggml (``ovkit.oracle``, via ggml-python) when it is installed, ovkit's numpy
reference of ggml's semantics otherwise.  The verdict is test-backend-ops' (NaN/inf checks, then
NMSE against the op's threshold).  ``mode perf`` times larger cases and reports time per run and
GFLOPS (matrix/attention ops) or GB/s (memory-bound ops).

A case is data: an op key, the inputs (name, numpy shape, dtype, value kind) and a *program*
written once against the builder API shared by ``Graph`` and ``oracle.GgmlBuilder``, so the
very same code builds the ovkit graph and the ggml graph.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ovkit.dtypes import NUMPY_DTYPE
from ovkit.ir import Op

if TYPE_CHECKING:
    import pandas as pd

Status = Literal["OK", "FAIL", "not supported"]
#: Compile hints for the cases: ``exact`` = f32 inference precision (ovkit's default, ggml's
#: numbers); ``upstream`` = upstream's naive path: EXECUTION_MODE PERFORMANCE when the
#: first node is MUL_MAT, else ACCURACY, no precision hint (bf16 MatMuls on CPUs with bf16).
HINTS: tuple[str, ...] = ("exact", "upstream")
Reference = Literal["auto", "ggml", "numpy"]
Program = Callable[[Any, Mapping[str, Any]], Any]


class _NumpyOf(dict[str, Any]):
    """dtype name -> numpy type of the values a case draws; quantized types draw float32 values
    (quantized afterwards), so lookups of those give float32 too (``in`` still tells them apart)."""

    def __missing__(self, key: str) -> Any:
        return np.float32


NUMPY_OF: dict[str, Any] = _NumpyOf(NUMPY_DTYPE)


# ---------------------------------------------------------------------------------------------
# Cases as data.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Inp:
    """One input: numpy-order shape, dtype, and how its values are drawn.

    kinds: ``uniform`` in [lo, hi] (test-backend-ops: [-1, 1]); ``positive`` in [0.5, 1.5];
    ``index`` integers in [0, hi) (rows, experts); ``distinct`` a permutation of distinct values
    (argsort without ties, set_rows without duplicate targets); ``pos`` 0..n-1 positions.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "f32"
    kind: str = "uniform"
    lo: float = -1.0
    hi: float = 1.0

    def make(self, rng: np.random.Generator) -> np.ndarray:
        n = int(np.prod(self.shape))
        values: np.ndarray
        if self.kind == "index":
            values = rng.integers(0, int(self.hi), size=self.shape)
        elif self.kind == "distinct":
            values = (
                rng.permutation(int(self.hi))[:n].reshape(self.shape) if self.hi > 0 else rng.permutation(n)
            )
            if self.dtype in ("f32", "f16", "bf16"):
                values = (rng.permutation(n).reshape(self.shape) - n / 2) / n
        elif self.kind == "pos":
            values = np.arange(n).reshape(self.shape)
        elif self.kind == "positive":
            values = rng.uniform(0.5, 1.5, size=self.shape)
        else:
            values = rng.uniform(self.lo, self.hi, size=self.shape)
        return np.ascontiguousarray(np.asarray(values).astype(NUMPY_OF[self.dtype]))

    @property
    def quantized(self) -> bool:
        """A ggml block-quantized type (q4_0, q8_0, q4_K, ...): a constant weight, not a Graph input."""
        return self.dtype not in NUMPY_OF


@dataclass(frozen=True, slots=True)
class Case:
    """One test: op key (``Op.ADD``, ``Op.GELU``, ``Op.SWIGLU``), label params, inputs,
    the program, the builder whose NMSE threshold applies, and the work done (for perf)."""

    op: str
    params: tuple[tuple[str, Any], ...]
    inputs: tuple[Inp, ...]
    program: Program = field(repr=False, compare=False)
    builder: str = ""
    flops: int = 0  # > 0: perf reports GFLOPS; else GB/s over inputs + output
    nbytes: int = 0  # bytes really moved when not every input byte is read (get_rows)

    @property
    def name(self) -> str:
        """``OP(k=v,...)`` as test-backend-ops prints a case (ne in ggml order)."""
        parts = [f"{k}={_fmt(v)}" for k, v in self.params]
        return f"{self.op}({','.join(parts)})"


def _fmt(v: Any) -> str:
    if isinstance(v, tuple | list):
        return "[" + ",".join(str(x) for x in v) + "]"
    return str(v)


def _ne(shape: Sequence[int]) -> tuple[int, ...]:
    r = list(reversed([int(s) for s in shape]))
    return tuple(r + [1] * (4 - len(r)))


def case(
    op: str,
    inputs: Sequence[Inp],
    program: Program,
    builder: str,
    flops: int = 0,
    **params: Any,
) -> Case:
    """A case whose label shows the type and ne of every input, then ``params``."""
    label: list[tuple[str, Any]] = []
    types = sorted({i.dtype for i in inputs if i.kind not in ("index", "pos")})
    label.append(("type", "/".join(types) if types else inputs[0].dtype))
    for i in inputs:
        label.append((f"ne_{i.name}", _ne(i.shape)))
    label.extend(params.items())
    return Case(op, tuple(label), tuple(inputs), program, builder, flops)


def _binary(op: str, builder: str, sa: tuple[int, ...], sb: tuple[int, ...], dtype: str = "f32") -> Case:
    kind_b = "positive" if op == "DIV" else "uniform"
    return case(
        op,
        [Inp("a", sa, dtype), Inp("b", sb, dtype, kind_b)],
        lambda g, x: getattr(g, builder)(x["a"], x["b"]),
        builder,
    )


def _unary(sub: str, dtype: str = "f32", shape: tuple[int, ...] = (5, 128)) -> Case:
    name = sub.lower()
    return case(Op[sub], [Inp("a", shape, dtype)], lambda g, x: getattr(g, name)(x["a"]), name)


def _call(builder: str, names: Sequence[str], *extra: Any) -> Program:
    """A program calling ``builder`` on the named inputs, then ``extra`` arguments."""
    return lambda g, x: getattr(g, builder)(*[x[n] for n in names], *extra)


def _attention_inputs(n_q: int, n_kv: int, heads: int, kv_heads: int, hd: int) -> list[Inp]:
    # q/k/v are stored token-major ([tokens, heads, head_dim]) and permuted to [heads, tokens, hd]
    # as llama.cpp does; the mask is f16 [n_q, n_kv].
    return [
        Inp("q", (n_q, heads, hd)),
        Inp("k", (n_kv, kv_heads, hd), "f16"),
        Inp("v", (n_kv, kv_heads, hd), "f16"),
        Inp("mask", (n_q, n_kv), "f16", "uniform", -1.0, 0.0),
    ]


def _fa_program(scale: float, max_bias: float = 0.0, softcap: float = 0.0) -> Program:
    def program(g: Any, x: Mapping[str, Any]) -> Any:
        # PERMUTE <- VIEW <- base, the pattern llama.cpp builds (and upstream's policy requires); a
        # full view_3d, as ggml_view_tensor is op NONE in ggml (the real backend rejects that)
        def viewed(t: Any) -> Any:
            return g.permute(g.view_3d(t, *t.ne[:3], t.nb[1], t.nb[2], 0), 0, 2, 1, 3)

        q, k, v = viewed(x["q"]), viewed(x["k"]), viewed(x["v"])
        return g.flash_attn_ext(q, k, v, x["mask"], scale, max_bias, softcap)

    return program


def _rope(mode: int, n_dims: int = 64) -> Program:
    return lambda g, x: g.rope_ext(x["a"], x["pos"], None, n_dims, mode, 0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)


def _sinks_softmax(g: Any, x: Mapping[str, Any]) -> Any:
    sm = g.soft_max_ext(x["a"], x["mask"], 1.0, 0.0)
    g.soft_max_add_sinks(sm, x["sinks"])
    return sm


def _sinks_fa(g: Any, x: Mapping[str, Any]) -> Any:
    fa = _fa_program(0.125)(g, x)
    g.flash_attn_ext_add_sinks(fa, x["sinks"])
    return fa


def _variety_cases() -> list[Case]:
    """More parameter variety (as test-backend-ops has): layouts, types, rope and attention
    variants — several of them rejected by upstream's policy, so the listing shows why."""
    pos = Inp("pos", (5,), "i32", "pos")
    rope_args = (0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)
    return [
        case(
            "ADD",
            [Inp("a", (3, 10)), Inp("b", (10, 3))],
            lambda g, x: g.add(x["a"], g.permute(x["b"], 1, 0, 2, 3)),
            "add",
            b="permuted",
        ),
        case(
            "MUL_MAT",
            [Inp("a", (2, 16, 32)), Inp("b", (5, 2, 32))],
            lambda g, x: g.mul_mat(x["a"], g.permute(x["b"], 0, 2, 1, 3)),
            "mul_mat",
            2 * 2 * 16 * 32 * 5,
            per=(0, 2, 1, 3),
        ),
        case(
            "CPY",
            [Inp("a", (4, 10), "f16"), Inp("b", (4, 10))],
            lambda g, x: g.cpy(x["a"], x["b"]),
            "cpy",
            src="f16",
            dst="f32",
        ),
        case(
            "CPY", [Inp("a", (4, 10)), Inp("b", (4, 10), "bf16")], lambda g, x: g.cpy(x["a"], x["b"]), "cpy"
        ),
        case(
            "CONCAT",
            [Inp("a", (2, 4, 10), "f16"), Inp("b", (3, 4, 10), "f16")],
            _call("concat", ["a", "b"], 2),
            "concat",
            dim=2,
        ),
        case("CLAMP", [Inp("a", (10, 10), "f16")], lambda g, x: g.clamp(x["a"], -0.5, 0.5), "clamp"),
        case(Op.GELU, [Inp("a", (5, 128), "f16")], lambda g, x: g.gelu(x["a"]), "gelu"),
        case(
            "SUM_ROWS",
            [Inp("a", (10, 4))],
            lambda g, x: g.sum_rows(g.permute(x["a"], 1, 0, 2, 3)),
            "sum_rows",
            a="permuted",
        ),
        case(
            "PAD",
            [Inp("a", (3, 4, 10))],
            lambda g, x: g.pad_ext(x["a"], 1, 2, 0, 1, 2, 0, 0, 0),
            "pad_ext",
            pads=(1, 2, 0, 1, 2, 0, 0, 0),
        ),
        case(
            "GET_ROWS",
            [Inp("a", (2, 1, 10, 16)), Inp("rows", (2, 1, 5), "i32", "index", hi=10)],
            lambda g, x: g.get_rows(x["a"], x["rows"]),
            "get_rows",
        ),
        case(
            "SET_ROWS",
            [Inp("dst", (10, 16), "f16"), Inp("src", (3, 16)), Inp("idx", (3,), "i32", "distinct", hi=10)],
            lambda g, x: g.set_rows(x["dst"], x["src"], x["idx"]),
            "set_rows",
        ),
        case(
            "MUL_MAT_ID",
            [Inp("as", (1, 16, 32)), Inp("b", (3, 1, 32)), Inp("ids", (3, 1), "i32", "index", hi=1)],
            lambda g, x: g.mul_mat_id(x["as"], x["b"], x["ids"]),
            "mul_mat_id",
            experts=1,
        ),
        case(
            "SOFT_MAX",
            [Inp("a", (4, 3, 32)), Inp("mask", (3, 32), "f16", "uniform", -1.0, 0.0), Inp("sinks", (4,))],
            _sinks_softmax,
            "soft_max_ext",
            sinks=1,
        ),
        case(
            "ROPE",
            [Inp("a", (5, 4, 64)), pos],
            lambda g, x: g.rope_ext(x["a"], x["pos"], None, 32, 2, *rope_args),
            "rope_ext",
            n_dims=32,
            mode=2,
        ),
        case(
            "ROPE",
            [Inp("a", (5, 4, 64)), pos, Inp("ff", (32,), kind="positive")],
            lambda g, x: g.rope_ext(
                x["a"], x["pos"], x["ff"], 64, 0, 4096, 10000.0, 0.5, 1.0, 1.0, 32.0, 1.0
            ),
            "rope_ext",
            n_dims=64,
            mode=0,
            freq_factors=1,
            yarn="ext_factor=1,freq_scale=0.5",
        ),
        case(
            "ROPE",
            [Inp("a", (5, 4, 64)), Inp("pos", (20,), "i32", "pos")],
            lambda g, x: g.rope_multi(x["a"], x["pos"], None, 64, [8, 12, 12, 0], 40, *rope_args),
            "rope_multi",
            n_dims=64,
            mode=40,
            sections=(8, 12, 12, 0),
        ),
        case(
            "ROPE",
            [Inp("a", (5, 4, 64)), Inp("pos", (20,), "i32", "pos")],
            lambda g, x: g.rope_multi(x["a"], x["pos"], None, 64, [8, 12, 12, 0], 8, *rope_args),
            "rope_multi",
            n_dims=64,
            mode=8,
            sections=(8, 12, 12, 0),
        ),
        case(
            "FLASH_ATTN_EXT",
            _attention_inputs(5, 32, 4, 4, 64),
            _fa_program(0.125, softcap=30.0),
            "flash_attn_ext",
            scale=0.125,
            logit_softcap=30.0,
        ),
        case(
            "FLASH_ATTN_EXT",
            [*_attention_inputs(5, 32, 4, 4, 64), Inp("sinks", (4,))],
            _sinks_fa,
            "flash_attn_ext",
            scale=0.125,
            sinks=1,
        ),
        case(
            "IM2COL",
            [Inp("kernel", (2, 3, 3), "f16"), Inp("img", (1, 3, 16))],
            lambda g, x: g.im2col(x["kernel"], x["img"], 1, 0, 1, 0, 1, 0, False, "f32"),
            "im2col",
            is_2D=0,
        ),
    ]


def build_catalogue() -> list[Case]:
    """Every test case, grouped by op (the order ``ovkit test-ops`` prints them in)."""
    cases: list[Case] = []
    for op, b in (("ADD", "add"), ("SUB", "sub"), ("MUL", "mul"), ("DIV", "div")):
        cases.append(_binary(op, b, (4, 3, 10), (4, 3, 10)))
        cases.append(_binary(op, b, (2, 3, 5, 10), (1, 1, 1, 10)))
    cases.append(_binary("ADD", "add", (3, 10), (3, 10), "f16"))
    cases.append(_binary("ADD", "add", (3, 10), (3, 10), "bf16"))
    cases.append(
        case("ADD1", [Inp("a", (3, 10)), Inp("b", (1,))], lambda g, x: g.add1(x["a"], x["b"]), "add1")
    )
    cases.append(
        case(
            "ADD_ID",
            [Inp("a", (4, 2, 16)), Inp("b", (3, 16)), Inp("ids", (4, 2), "i32", "index", hi=3)],
            lambda g, x: g.add_id(x["a"], x["b"], x["ids"]),
            "add_id",
        )
    )
    cases.append(case("SCALE", [Inp("a", (10, 10))], lambda g, x: g.scale(x["a"], 0.5), "scale", s=0.5))
    cases.append(
        case(
            "SCALE",
            [Inp("a", (10, 10))],
            lambda g, x: g.scale_bias(x["a"], 2.0, 0.25),
            "scale_bias",
            s=2.0,
            b=0.25,
        )
    )
    cases.append(case("SQR", [Inp("a", (10, 10))], lambda g, x: g.sqr(x["a"]), "sqr"))
    cases.append(case("SQRT", [Inp("a", (10, 10), kind="positive")], lambda g, x: g.sqrt(x["a"]), "sqrt"))
    cases.append(
        case(
            "CLAMP", [Inp("a", (10, 10))], lambda g, x: g.clamp(x["a"], -0.5, 0.5), "clamp", min=-0.5, max=0.5
        )
    )
    cases.append(case("FILL", [Inp("a", (4, 10))], lambda g, x: g.fill(x["a"], 1.5), "fill", c=1.5))
    for sub in ("GELU", "SIGMOID", "SILU", "SOFTPLUS", "TANH", "NEG"):
        cases.append(_unary(sub))
    cases.append(_unary("EXP", "f32"))  # upstream rejects EXP with an f32 output
    cases.append(_unary("EXP", "f16"))
    cases.append(_unary("SILU", "f16"))
    cases.append(case(Op.SWIGLU, [Inp("a", (4, 32))], lambda g, x: g.swiglu(x["a"]), "swiglu"))
    cases.append(
        case(
            Op.SWIGLU,
            [Inp("a", (4, 32))],
            lambda g, x: g.swiglu_swapped(x["a"]),
            "swiglu_swapped",
            swapped=1,
        )
    )
    cases.append(case(Op.SWIGLU, [Inp("a", (4, 33))], lambda g, x: g.swiglu(x["a"]), "swiglu"))  # odd ne0
    cases.append(
        case(
            Op.SWIGLU,
            [Inp("a", (4, 16)), Inp("b", (4, 16))],
            lambda g, x: g.swiglu_split(x["a"], x["b"]),
            "swiglu_split",
            split=1,
        )
    )
    cases.append(case(Op.GEGLU, [Inp("a", (4, 32))], lambda g, x: g.geglu(x["a"]), "geglu"))
    cases.append(
        case(
            Op.SWIGLU_OAI,
            [Inp("a", (4, 16)), Inp("b", (4, 16))],
            lambda g, x: g.swiglu_oai(x["a"], x["b"], 1.702, 7.0),
            "swiglu_oai",
            alpha=1.702,
            limit=7.0,
        )
    )
    cases.append(
        case(
            "CONT",
            [Inp("a", (3, 5, 8))],
            lambda g, x: g.cont(g.permute(x["a"], 1, 0, 2, 3)),
            "cont",
            perm=(1, 0, 2, 3),
        )
    )
    cases.append(case("TRANSPOSE", [Inp("a", (6, 8))], lambda g, x: g.cont(g.transpose(x["a"])), "cont"))
    cases.append(
        case(
            "PERMUTE",
            [Inp("a", (3, 5, 8), "bf16")],
            lambda g, x: g.cont(g.permute(x["a"], 1, 0, 2, 3)),
            "cont",
            perm=(1, 0, 2, 3),
        )
    )
    cases.append(
        case("RESHAPE", [Inp("a", (6, 8))], lambda g, x: g.scale(g.reshape_2d(x["a"], 16, 3), 1.0), "scale")
    )
    cases.append(
        case(
            "VIEW",
            [Inp("a", (6, 8))],
            lambda g, x: g.cont(g.view_2d(x["a"], 4, 6, 32, 8)),
            "cont",
            view="ne=[4,6],nb1=32,offs=8",
        )
    )
    cases.append(
        case("CPY", [Inp("a", (4, 10)), Inp("b", (4, 10), "f16")], lambda g, x: g.cpy(x["a"], x["b"]), "cpy")
    )
    for dim in (0, 1):
        sb = (4, 6) if dim == 0 else (3, 10)
        cases.append(
            case(
                "CONCAT",
                [Inp("a", (4, 10)), Inp("b", sb)],
                _call("concat", ["a", "b"], dim),
                "concat",
                dim=dim,
            )
        )
    cases.append(
        case(
            "REPEAT", [Inp("a", (1, 10)), Inp("b", (4, 10))], lambda g, x: g.repeat(x["a"], x["b"]), "repeat"
        )
    )
    cases.append(
        case("PAD", [Inp("a", (4, 10))], lambda g, x: g.pad(x["a"], 1, 2, 0, 0), "pad", pad=(1, 2, 0, 0))
    )
    cases.append(
        case(
            "GET_ROWS",
            [Inp("a", (10, 16)), Inp("rows", (5,), "i32", "index", hi=10)],
            lambda g, x: g.get_rows(x["a"], x["rows"]),
            "get_rows",
        )
    )
    cases.append(
        case(
            "GET_ROWS",
            [Inp("a", (10, 16), "f16"), Inp("rows", (5,), "i32", "index", hi=10)],
            lambda g, x: g.get_rows(x["a"], x["rows"]),
            "get_rows",
        )
    )
    cases.append(
        case(
            "SET_ROWS",
            [Inp("dst", (10, 16)), Inp("src", (3, 16)), Inp("idx", (3,), "i64", "distinct", hi=10)],
            lambda g, x: g.set_rows(x["dst"], x["src"], x["idx"]),
            "set_rows",
        )
    )
    cases.append(
        case(
            "SET",
            [Inp("a", (6, 8)), Inp("b", (2, 8))],
            lambda g, x: g.set_2d(x["a"], x["b"], 32, 64),
            "set_2d",
            nb1=32,
            offset=64,
        )
    )
    cases.append(
        case(
            "MUL_MAT",
            [Inp("a", (32, 64)), Inp("b", (8, 64))],
            lambda g, x: g.mul_mat(x["a"], x["b"]),
            "mul_mat",
            2 * 32 * 64 * 8,
        )
    )
    cases.append(
        case(
            "MUL_MAT",
            [Inp("a", (32, 64), "f16"), Inp("b", (8, 64))],
            lambda g, x: g.mul_mat(x["a"], x["b"]),
            "mul_mat",
            2 * 32 * 64 * 8,
        )
    )
    cases.append(
        case(
            "MUL_MAT",
            [Inp("a", (2, 16, 32)), Inp("b", (4, 5, 32))],
            lambda g, x: g.mul_mat(x["a"], x["b"]),
            "mul_mat",
            2 * 4 * 16 * 32 * 5,
            bcast="gqa",
        )
    )
    for qtype in ("q4_0", "q4_1", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K", "mxfp4"):
        cases.append(
            case(
                "MUL_MAT",
                [Inp("a", (16, 256), qtype), Inp("b", (4, 256))],
                lambda g, x: g.mul_mat(x["a"], x["b"]),
                "mul_mat",
                2 * 16 * 256 * 4,
            )
        )
    for qtype in ("q4_0", "q8_0", "q4_K"):  # q4_K rows of 256 hit upstream's get_rows gate
        cases.append(
            case(
                "GET_ROWS",
                [Inp("a", (10, 256), qtype), Inp("rows", (5,), "i32", "index", hi=10)],
                lambda g, x: g.get_rows(x["a"], x["rows"]),
                "get_rows",
            )
        )
    cases.append(
        case(
            "MUL_MAT_ID",
            [Inp("as", (4, 16, 32)), Inp("b", (3, 2, 32)), Inp("ids", (3, 2), "i32", "index", hi=4)],
            lambda g, x: g.mul_mat_id(x["as"], x["b"], x["ids"]),
            "mul_mat_id",
            2 * 3 * 2 * 16 * 32,
        )
    )
    for op, b in (("NORM", "norm"), ("RMS_NORM", "rms_norm"), ("L2_NORM", "l2_norm")):
        cases.append(case(op, [Inp("a", (4, 64))], _call(b, ["a"], 1e-6), b, eps=1e-6))
    cases.append(case("SUM_ROWS", [Inp("a", (4, 3, 10))], lambda g, x: g.sum_rows(x["a"]), "sum_rows"))
    cases.append(case("CUMSUM", [Inp("a", (4, 10))], lambda g, x: g.cumsum(x["a"]), "cumsum"))
    for order in (0, 1):
        cases.append(
            case(
                "ARGSORT",
                [Inp("a", (4, 16), kind="distinct", hi=0)],
                _call("argsort", ["a"], order),
                "argsort",
                order=order,
            )
        )
    cases.append(case("SOFT_MAX", [Inp("a", (4, 32))], lambda g, x: g.soft_max(x["a"]), "soft_max"))
    for a_shape, mask_shape, scale, max_bias in (
        ((4, 32), (4, 32), 0.5, 0.0),
        ((4, 3, 32), (3, 32), 1.0, 8.0),
    ):
        cases.append(
            case(
                "SOFT_MAX",
                [Inp("a", a_shape), Inp("mask", mask_shape, "f32", "uniform", -1.0, 0.0)],
                _call("soft_max_ext", ["a", "mask"], scale, max_bias),
                "soft_max_ext",
                scale=scale,
                max_bias=max_bias,
            )
        )
    for dtype, mode, n_dims in (("f32", 0, 64), ("f32", 2, 64), ("f16", 2, 64), ("f32", 2, 33)):
        cases.append(
            case(
                "ROPE",
                [Inp("a", (5, 4, 64), dtype), Inp("pos", (5,), "i32", "pos")],
                _rope(mode, n_dims),
                "rope_ext",
                n_dims=n_dims,
                mode=mode,
            )
        )
    for heads, kv_heads in ((4, 4), (4, 2)):
        cases.append(
            case(
                "FLASH_ATTN_EXT",
                _attention_inputs(5, 32, heads, kv_heads, 64),
                _fa_program(0.125),
                "flash_attn_ext",
                4 * heads * 5 * 32 * 64,
                scale=0.125,
            )
        )
    cases.append(
        case(
            "FLASH_ATTN_EXT",
            _attention_inputs(5, 32, 4, 4, 64),
            _fa_program(0.125, max_bias=8.0),
            "flash_attn_ext",
            scale=0.125,
            max_bias=8.0,
        )
    )
    cases.append(
        case(
            "IM2COL",
            [Inp("kernel", (2, 3, 3, 3), "f16"), Inp("img", (1, 3, 8, 8))],
            lambda g, x: g.im2col(x["kernel"], x["img"], 1, 1, 1, 1, 1, 1, True, "f32"),
            "im2col",
            s=1,
            p=1,
            d=1,
        )
    )
    cases.append(
        case(
            "SSM_CONV",
            [Inp("sx", (1, 16, 8)), Inp("c", (16, 4))],
            lambda g, x: g.ssm_conv(x["sx"], x["c"]),
            "ssm_conv",
        )
    )
    cases.append(
        case(
            "GATED_DELTA_NET",
            [
                Inp("q", (4, 2, 16), lo=-0.25, hi=0.25),
                Inp("k", (4, 2, 16), lo=-0.25, hi=0.25),
                Inp("v", (4, 2, 16)),
                Inp("g", (4, 2, 1), lo=-1.0, hi=0.0),
                Inp("beta", (4, 2, 1), lo=0.0, hi=1.0),
                Inp("state", (2, 16, 16), lo=-0.5, hi=0.5),
            ],
            _call("gated_delta_net", ["q", "k", "v", "g", "beta", "state"], 1),
            "gated_delta_net",
        )
    )
    cases.extend(_variety_cases())
    cases.append(case("DIAG", [Inp("a", (1, 8))], lambda g, x: g.diag(x["a"]), "diag"))
    for tri in range(4):
        cases.append(case("TRI", [Inp("a", (8, 8))], _call("tri", ["a"], tri), "tri", tri_type=tri))
    return cases


def build_perf_catalogue() -> list[Case]:
    """Larger cases for ``mode perf`` (time per run, GFLOPS or GB/s)."""
    n_tok, heads, hd, ctx = 32, 8, 64, 512
    emb = heads * hd
    cases = [
        _binary("ADD", "add", (512, 4096), (512, 4096)),
        _binary("MUL", "mul", (512, 4096), (1, 4096)),
        case("SCALE", [Inp("a", (512, 4096))], lambda g, x: g.scale(x["a"], 0.5), "scale", s=0.5),
        _unary("SILU", shape=(512, 4096)),
        _unary("GELU", shape=(512, 4096)),
        case(Op.SWIGLU, [Inp("a", (512, 4096))], lambda g, x: g.swiglu(x["a"]), "swiglu"),
        case(
            "RMS_NORM", [Inp("a", (512, 4096))], lambda g, x: g.rms_norm(x["a"], 1e-6), "rms_norm", eps=1e-6
        ),
        case("SOFT_MAX", [Inp("a", (512, 4096))], lambda g, x: g.soft_max(x["a"]), "soft_max"),
        replace(
            case(
                "GET_ROWS",
                [Inp("a", (32000, 256)), Inp("rows", (512,), "i32", "index", hi=32000)],
                lambda g, x: g.get_rows(x["a"], x["rows"]),
                "get_rows",
            ),
            nbytes=2 * 512 * 256 * 4 + 512 * 4,  # rows read + written, and the indices
        ),
        case(
            "CPY",
            [Inp("a", (512, 4096)), Inp("b", (512, 4096), "f16")],
            lambda g, x: g.cpy(x["a"], x["b"]),
            "cpy",
        ),
        case(
            "ROPE",
            [Inp("a", (n_tok, heads, hd)), Inp("pos", (n_tok,), "i32", "pos")],
            _rope(2, hd),
            "rope_ext",
            n_dims=hd,
            mode=2,
        ),
    ]
    for m, k, n in ((4096, 4096, 1), (4096, 4096, 32), (512, 512, 512), (4096, 4096, 512)):
        cases.append(
            case(
                "MUL_MAT",
                [Inp("a", (m, k)), Inp("b", (n, k))],
                lambda g, x: g.mul_mat(x["a"], x["b"]),
                "mul_mat",
                2 * m * k * n,
            )
        )
    for qtype in ("q4_0", "q8_0", "q4_K"):
        cases.append(
            case(
                "MUL_MAT",
                [Inp("a", (4096, 4096), qtype), Inp("b", (32, 4096))],
                lambda g, x: g.mul_mat(x["a"], x["b"]),
                "mul_mat",
                2 * 4096 * 4096 * 32,
            )
        )
    cases.append(
        case(
            "MUL_MAT",
            [Inp("a", (4096, 4096), "f16"), Inp("b", (32, 4096))],
            lambda g, x: g.mul_mat(x["a"], x["b"]),
            "mul_mat",
            2 * 4096 * 4096 * 32,
        )
    )
    for n_q in (1, n_tok):
        cases.append(
            case(
                "FLASH_ATTN_EXT",
                _attention_inputs(n_q, ctx, heads, heads, hd),
                _fa_program(1 / hd**0.5),
                "flash_attn_ext",
                4 * heads * n_q * ctx * hd,
                emb=emb,
            )
        )
    return cases


# ---------------------------------------------------------------------------------------------
# Running.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CaseResult:
    """One line of output: the verdict with its error, or the policy's reason."""

    op: str
    case: str
    status: Status
    detail: str = ""
    nmse: float | None = None
    max_nmse: float | None = None
    reference: str = ""
    device: str = ""
    us_per_run: float | None = None
    gflops: float | None = None
    gbps: float | None = None
    precision: str = ""  # effective inference precision the device reported
    ggml_us_per_run: float | None = None  # perf --vs-ggml: ggml's CPU backend on the same case

    def line(self) -> str:
        """The text line, like test-backend-ops prints it."""
        if self.status == "not supported":
            return f"  {self.case}: not supported [{self.device}] {self.detail}"
        if self.us_per_run is not None and self.status == "OK":
            rate = (
                f"{self.gflops:10.2f} GFLOPS" if self.gflops is not None else f"{self.gbps or 0.0:10.2f} GB/s"
            )
            vs = (
                f"   ggml CPU {self.ggml_us_per_run:10.2f} us/run ({self.us_per_run / self.ggml_us_per_run:5.2f}x)"
                if self.ggml_us_per_run
                else ""
            )
            return f"  {self.case:70s} {self.us_per_run:12.2f} us/run {rate}{vs}"
        if self.status == "OK":
            prec = f", {self.precision}" if self.precision not in ("", "f32", "model") else ""
            err = (
                ""
                if self.nmse is None
                else f" (NMSE {self.nmse:.2e} <= {self.max_nmse:.0e}, ref {self.reference}{prec})"
            )
            return f"  {self.case}: OK{err}"
        return f"  {self.case}: FAIL {self.detail}"


@dataclass(frozen=True, slots=True)
class Summary:
    """Totals of a run."""

    device: str
    mode: str
    reference: str
    passed: int
    failed: int
    unsupported: int

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def lines(self) -> list[str]:
        ran = self.passed + self.failed
        return [
            f"  {self.passed}/{ran} tests passed, {self.unsupported} not supported",
            f"  Backend {self.device}: {'OK' if self.ok else 'FAIL'}",
        ]


def select(cases: Iterable[Case], ops: Sequence[str] | str | None) -> list[Case]:
    """Cases whose op key (``"UNARY.GELU"``), its op (``"UNARY"``) or its sub-op (``"GELU"``)
    matches ``ops`` (case-insensitive; ``UNARY:GELU`` is read as ``UNARY.GELU``)."""
    if ops is None:
        return list(cases)
    wanted = {o.upper().replace(":", ".") for o in ([ops] if isinstance(ops, str) else ops)}
    picked = [
        c for c in cases if c.op in wanted or c.op.split(".")[0] in wanted or c.op.split(".")[-1] in wanted
    ]
    return picked


def _resolve(device: str | None, core: Any) -> str:
    if device is not None:
        return device
    from ovkit.engine import get_engine

    return get_engine(core).selected_device()


def _reference_kind(reference: Reference) -> str:
    from ovkit import oracle

    if reference == "ggml":
        if not oracle.ggml_available():
            raise RuntimeError(
                "reference 'ggml' asked for but ggml-python is not installed (pip install ggml-python)"
            )
        return "ggml"
    if reference == "numpy":
        return "numpy"
    return "ggml" if oracle.ggml_available() else "numpy"


def _ggml_input(inp: Inp, arr: np.ndarray, blocks: Mapping[str, bytes] | None = None) -> Any:
    from ovkit import oracle

    if inp.quantized:
        return oracle.QuantArray(inp.dtype, tuple(inp.shape), (blocks or {})[inp.name])
    return oracle.as_bf16(arr) if inp.dtype == "bf16" else arr


def _materialize(c: Case, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], dict[str, bytes]]:
    """Input values (f32 for quantized inputs) and the ggml blocks of the quantized ones."""
    arrays = {i.name: i.make(rng) for i in c.inputs}
    blocks: dict[str, bytes] = {}
    for i in c.inputs:
        if i.quantized:
            from ovkit import quant

            blocks[i.name] = quant.quantize(i.dtype, arrays[i.name]).raw  # ggml's own quantizer
    return arrays, blocks


def _build(c: Case, blocks: Mapping[str, bytes] | None = None) -> tuple[Any, Any]:
    """The ovkit graph of a case; quantized inputs become constants holding ``blocks``."""
    from ovkit.graph import Graph

    g = Graph()
    leaves: dict[str, Any] = {}
    for i in c.inputs:
        if i.quantized:
            from ovkit import quant

            raw = (blocks or {}).get(i.name) or bytes(
                quant.row_bytes(i.dtype, i.shape[-1]) * int(np.prod(i.shape[:-1]))
            )
            leaves[i.name] = g.constant(quant.from_blocks(i.dtype, raw, i.shape, i.name))
        else:
            leaves[i.name] = g.input(i.name, i.shape, i.dtype)
    return g, c.program(g, leaves)


def _feed(c: Case, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {i.name: arrays[i.name] for i in c.inputs if not i.quantized}


def _policy(g: Any, out: Any, device: str) -> str | None:
    """The first rejection's reason for ``device``, or None when every op is supported."""
    from ovkit.devices import device_class

    for t, decision in g.check_support([out], str(device_class(device))):
        if not decision.supported:
            return decision.reason or f"{t.describe()} rejected"
    return None


def _threshold(c: Case) -> float:
    from ovkit import oracle

    return oracle.max_nmse(c.builder)


def _first_line(exc: BaseException) -> str:
    """The first line of an error's message (OpenVINO's often span many lines)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def _run_config(g: Any, out: Any, hints: str) -> Any:
    from ovkit.engine import DEFAULT_RUN_CONFIG, naive_run_config

    if hints not in HINTS:
        raise ValueError(f"hints={hints!r} is not valid (expected one of: {', '.join(HINTS)})")
    if hints == "exact":
        return None  # Graph.compute's own default: f32 (one thread for tiny graphs)
    first = next((t.op for t in g.topo([out]) if not t.is_leaf), None)
    return naive_run_config(first, DEFAULT_RUN_CONFIG)


def _effective_precision(core: Any) -> str:
    from ovkit.engine import get_engine

    runner = get_engine(core).last_runner
    return (runner.graph.effective.inference_precision or "") if runner is not None else ""


def run_case(
    c: Case, device: str, core: Any = None, reference: str = "numpy", seed: int = 0, hints: str = "exact"
) -> CaseResult:
    """Build, check the policy, run on ``device``, compare with the reference."""
    from ovkit import oracle
    from ovkit.engine import compute_graph

    base: dict[str, Any] = {"op": c.op, "case": c.name, "device": device}
    try:
        arrays, blocks = _materialize(c, np.random.default_rng(seed))
        g, out = _build(c, blocks)
    except Exception as exc:  # the builder rejected the case: a catalogue or graph bug
        return CaseResult(**base, status="FAIL", detail=f"build: {type(exc).__name__}: {exc}")
    reason = _policy(g, out, device)
    if reason is not None:
        return CaseResult(**base, status="not supported", detail=reason)
    try:
        feed = _feed(c, arrays)
        actual = compute_graph(g, [out], feed, device, core=core, config=_run_config(g, out, hints))[0]
        base["precision"] = _effective_precision(core)
    except Exception as exc:
        return CaseResult(**base, status="FAIL", detail=f"{type(exc).__name__}: {_first_line(exc)}")
    ref = reference
    try:
        if ref == "ggml":
            expected = oracle.ggml_program(
                c.program, {i.name: _ggml_input(i, arrays[i.name], blocks) for i in c.inputs}
            )
        else:
            expected = g.compute(out, feed, mode="reference")
    except Exception as exc:
        return CaseResult(**base, status="FAIL", detail=f"reference ({ref}) failed: {_first_line(exc)}")
    expected = np.asarray(expected)
    if not oracle.same_ne(np.shape(actual), expected.shape):
        return CaseResult(
            **base,
            status="FAIL",
            detail=f"shape {np.shape(actual)} vs reference {expected.shape}",
            reference=ref,
        )
    limit = _threshold(c)
    verdict = oracle.compare(np.asarray(actual), expected, limit)
    if not verdict.ok:
        return CaseResult(
            **base, status="FAIL", detail=verdict.reason, nmse=verdict.err, max_nmse=limit, reference=ref
        )
    return CaseResult(**base, status="OK", nmse=verdict.err, max_nmse=limit, reference=ref)


def perf_case(
    c: Case,
    device: str,
    core: Any = None,
    *,
    min_seconds: float = 0.2,
    max_runs: int = 200,
    hints: str = "exact",
    vs_ggml: bool = False,
) -> CaseResult:
    """Median time per steady-state run (compile excluded) and GFLOPS or GB/s."""
    from ovkit.engine import compute_graph

    base: dict[str, Any] = {"op": c.op, "case": c.name, "device": device}
    try:
        arrays, blocks = _materialize(c, np.random.default_rng(0))
        g, out = _build(c, blocks)
    except Exception as exc:
        return CaseResult(**base, status="FAIL", detail=f"build: {type(exc).__name__}: {exc}")
    reason = _policy(g, out, device)
    if reason is not None:
        return CaseResult(**base, status="not supported", detail=reason)
    feed = _feed(c, arrays)
    cfg = _run_config(g, out, hints)
    try:
        result = compute_graph(g, [out], feed, device, core=core, config=cfg)[0]  # compile + warm up
        compute_graph(g, [out], feed, device, core=core, config=cfg)
        base["precision"] = _effective_precision(core)
        times: list[float] = []
        start = time.perf_counter()
        while len(times) < 3 or (time.perf_counter() - start < min_seconds and len(times) < max_runs):
            t0 = time.perf_counter()
            compute_graph(g, [out], feed, device, core=core, config=cfg)
            times.append(time.perf_counter() - t0)
    except Exception as exc:
        return CaseResult(**base, status="FAIL", detail=f"{type(exc).__name__}: {_first_line(exc)}")
    seconds = statistics.median(times)
    if vs_ggml:
        from ovkit import oracle

        if oracle.ggml_available():
            ggml_feed = {i.name: _ggml_input(i, arrays[i.name], blocks) for i in c.inputs}
            runs = max(3, min(len(times), 50))
            time.sleep(0.1)  # let OpenVINO's worker threads go idle before ggml's OpenMP threads run
            bench = oracle.ggml_benchmark_program(c.program, ggml_feed, n_runs=runs, warmup=2)
            base["ggml_us_per_run"] = bench.median_s * 1e6
    if c.flops:
        return CaseResult(**base, status="OK", us_per_run=seconds * 1e6, gflops=c.flops / seconds / 1e9)
    weights = sum(len(b) for b in blocks.values())  # quantized inputs move their block bytes
    moved = c.nbytes or sum(a.nbytes for a in feed.values()) + weights + np.asarray(result).nbytes
    return CaseResult(**base, status="OK", us_per_run=seconds * 1e6, gbps=moved / seconds / 1e9)


def iter_results(
    mode: str = "test",
    ops: Sequence[str] | str | None = None,
    device: str | None = None,
    core: Any = None,
    reference: Reference = "auto",
    *,
    progress: bool | None = None,
    cases: Sequence[Case] | None = None,
    hints: str = "exact",
    vs_ggml: bool = False,
) -> Iterator[CaseResult]:
    """Run the (filtered) catalogue, yielding one result per case, with a tqdm bar on stderr."""
    from tqdm import tqdm

    if mode not in ("test", "perf"):
        raise ValueError(f"mode={mode!r} is not valid (expected 'test' or 'perf')")
    if hints not in HINTS:
        raise ValueError(f"hints={hints!r} is not valid (expected one of: {', '.join(HINTS)})")
    dev = _resolve(device, core)
    pool = cases if cases is not None else (build_catalogue() if mode == "test" else build_perf_catalogue())
    picked = select(pool, ops)
    ref = _reference_kind(reference) if mode == "test" else ""
    bar = tqdm(
        picked,
        desc=f"test-ops {mode} {dev}",
        unit="case",
        file=sys.stderr,
        leave=False,
        disable=not progress if progress is not None else None,
    )
    for c in bar:
        if mode == "test":
            yield run_case(c, dev, core, ref, hints=hints)
        else:
            yield perf_case(c, dev, core, hints=hints, vs_ggml=vs_ggml)


def summarize(results: Sequence[CaseResult], mode: str, device: str, reference: str) -> Summary:
    return Summary(
        device=device,
        mode=mode,
        reference=reference,
        passed=sum(r.status == "OK" for r in results),
        failed=sum(r.status == "FAIL" for r in results),
        unsupported=sum(r.status == "not supported" for r in results),
    )


def _frame(results: Sequence[CaseResult]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame([asdict(r) for r in results])


def test_ops(
    ops: Sequence[str] | str | None = None,
    device: str | None = None,
    core: Any = None,
    reference: Reference = "auto",
    *,
    progress: bool | None = None,
    hints: str = "exact",
) -> pd.DataFrame:
    """``mode test`` as a DataFrame (one row per case: op, case, status, detail, nmse, ...)."""
    return _frame(list(iter_results("test", ops, device, core, reference, progress=progress, hints=hints)))


# Not a pytest test despite its name.
test_ops.__test__ = False  # type: ignore[attr-defined]


def perf_ops(
    ops: Sequence[str] | str | None = None,
    device: str | None = None,
    core: Any = None,
    *,
    progress: bool | None = None,
    hints: str = "exact",
    vs_ggml: bool = False,
) -> pd.DataFrame:
    """``mode perf`` as a DataFrame (us_per_run, gflops or gbps per case; ggml_us_per_run with
    ``vs_ggml=True``: ggml's own CPU backend timed on the same case)."""
    return _frame(
        list(iter_results("perf", ops, device, core, progress=progress, hints=hints, vs_ggml=vs_ggml))
    )


def catalogue_table(mode: str = "test") -> pd.DataFrame:
    """The cases themselves (op, case label, inputs) without running anything."""
    import pandas as pd

    cases = build_catalogue() if mode == "test" else build_perf_catalogue()
    return pd.DataFrame(
        [
            {
                "op": c.op,
                "case": c.name,
                "inputs": ", ".join(f"{i.name}:{i.dtype}{list(i.shape)}" for i in c.inputs),
            }
            for c in cases
        ]
    )


def main(
    mode: str = "test",
    ops: Sequence[str] | str | None = None,
    device: str | None = None,
    core: Any = None,
    reference: Reference = "auto",
    *,
    as_json: bool = False,
    progress: bool | None = None,
    out: Any = None,
    isolate: bool = False,
    hints: str = "exact",
    vs_ggml: bool = False,
) -> int:
    """The CLI body: print one line per case and the totals (or JSON); 1 on any failure.

    ``isolate=True`` runs each op in its own process, so a crash inside OpenVINO (a segfault in
    one translation) becomes FAIL lines for that op instead of killing the whole run."""
    from tqdm import tqdm

    stream = out or sys.stdout
    dev = _resolve(device, core)
    ref = _reference_kind(reference) if mode == "test" else ""
    results: list[CaseResult] = []
    from ovkit.runtime import is_simulated

    simulated = core is not None and is_simulated(core)
    label = (
        f"{dev} [SIMULATED {core.profile.name}: policy of the {dev} class, runs on the CPU]"
        if simulated
        else dev
    )
    if not as_json:
        hint_text = "" if hints == "exact" else f", {hints} hints"
        print(f"Testing {label} (mode {mode}{', reference ' + ref if ref else ''}{hint_text})", file=stream)
    source = (
        _isolated_results(mode, ops, dev, core, ref or "numpy", progress, hints)
        if isolate
        else iter_results(mode, ops, dev, core, reference, progress=progress, hints=hints, vs_ggml=vs_ggml)
    )
    for r in source:
        results.append(r)
        if not as_json:
            tqdm.write(r.line(), file=stream)
    summary = summarize(results, mode, dev, ref)
    if as_json:
        payload = {
            "device": dev,
            "simulated": simulated,
            "mode": mode,
            "hints": hints,
            "reference": ref,
            "summary": {
                "passed": summary.passed,
                "failed": summary.failed,
                "not_supported": summary.unsupported,
            },
            "cases": [asdict(r) for r in results],
        }
        print(json.dumps(payload, indent=2), file=stream)
    else:
        for line in summary.lines():
            print(line, file=stream)
    return 0 if summary.ok else 1


# ---------------------------------------------------------------------------------------------
# Command line (``ovkit test-ops``; registered in ovkit.cli.COMMANDS).
# ---------------------------------------------------------------------------------------------
def add_cli_args(p: Any) -> None:
    """Arguments of ``ovkit test-ops`` (test-backend-ops' ``[mode] [-o op] [-b backend]``)."""
    p.add_argument("mode", nargs="?", default="test", choices=("test", "perf"), help="test (default) or perf")
    p.add_argument(
        "-o", "--op", action="append", metavar="OP", help="only this op (repeatable), e.g. MUL_MAT, GELU"
    )
    p.add_argument("-b", "--device", metavar="DEVICE", help="device id (default: GGML_OPENVINO_DEVICE)")
    p.add_argument(
        "--reference", choices=("auto", "ggml", "numpy"), default="auto", help="reference (default auto)"
    )
    p.add_argument("--simulate", metavar="PROFILE", help="use a simulated device set (e.g. laptop)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--isolate", action="store_true", help="one process per op: a crash becomes FAIL lines")
    p.add_argument("--vs-ggml", action="store_true", help="perf: also time ggml's CPU backend on each case")
    p.add_argument(
        "--catalogue",
        choices=("ovkit", "test-backend-ops"),
        default="ovkit",
        help="ovkit's own cases (default) or test-backend-ops' catalogue (the shipped half, or --cases)",
    )
    p.add_argument("--cases", metavar="FILE", help="test-backend-ops: a case list CSV (op_name,op_params)")
    p.add_argument(
        "--policy",
        choices=("upstream", "none"),
        default="upstream",
        help="test-backend-ops: upstream = only what the backend accepts (default); none = every case",
    )
    p.add_argument("--workers", type=int, default=2, metavar="N", help="test-backend-ops: worker processes")
    p.add_argument(
        "--sample", type=int, metavar="N", help="test-backend-ops: a stratified sample of about N rows"
    )
    p.add_argument(
        "--hints",
        choices=HINTS,
        default="exact",
        help="exact: f32 inference precision (default); upstream: the naive path's execution-mode hint",
    )


def cli(args: Any) -> int:
    """Run ``ovkit test-ops`` from parsed arguments."""
    from ovkit.usage import UsageError, make_core

    if args.catalogue == "test-backend-ops":
        return _backend_ops_cli(args)
    core = make_core(args.simulate)
    if args.device is not None and args.device not in list(core.available_devices):
        raise UsageError(
            f"device {args.device!r} is not available (expected one of: {', '.join(core.available_devices)})"
        )
    known = {c.op for c in build_catalogue()} | {c.op for c in build_perf_catalogue()}
    keys = {str(k) for k in known} | {k.split(".")[0] for k in known} | {k.split(".")[-1] for k in known}
    unknown = [o for o in args.op or [] if o.upper().replace(":", ".") not in keys]
    if unknown:
        raise UsageError(f"unknown op {unknown[0]!r} (expected one of: {', '.join(sorted(keys))})")
    progress = False if args.no_progress else None
    return main(
        args.mode,
        args.op,
        args.device,
        core,
        args.reference,
        as_json=args.json,
        progress=progress,
        isolate=args.isolate,
        hints=args.hints,
        vs_ggml=args.vs_ggml,
    )


def backend_ops_rows(args: Any) -> list[Any]:
    """The test-backend-ops rows ``--cases``, ``-o`` and ``--sample`` pick."""
    from ovkit.catalogue import run as catalogue
    from ovkit.usage import UsageError

    if args.mode != "test":
        raise UsageError("--catalogue test-backend-ops runs mode test only")
    try:
        rows = catalogue.read_rows(args.cases)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if args.op:
        wanted = {o.upper() for o in args.op}
        unknown = sorted(wanted - {r.op for r in rows})
        if unknown:
            raise UsageError(f"unknown op {unknown[0]!r} in this case list")
        rows = [r for r in rows if r.op in wanted]
    if args.sample:
        rows = catalogue.stratified(rows, args.sample)
    return rows


def _backend_ops_cli(args: Any) -> int:
    """``ovkit test-ops --catalogue test-backend-ops``: test-backend-ops' own case list."""
    from ovkit.catalogue import run as catalogue
    from ovkit.usage import UsageError

    if args.workers < 0:
        raise UsageError(f"--workers {args.workers}: expected 0 or more")
    rows = backend_ops_rows(args)
    device = args.device or "CPU"
    progress = False if args.no_progress else None
    return catalogue.main(
        rows, args.policy, device, workers=args.workers, isolate=args.isolate, progress=progress
    )


def _isolated_results(
    mode: str,
    ops: Sequence[str] | str | None,
    device: str,
    core: Any,
    reference: str,
    progress: bool | None,
    hints: str = "exact",
) -> Iterator[CaseResult]:
    """One child process per op (``python -m ovkit test-ops ... --json``); crashes become FAILs."""
    import subprocess

    from tqdm import tqdm

    pool = build_catalogue() if mode == "test" else build_perf_catalogue()
    picked = select(pool, ops)
    keys = list(dict.fromkeys(c.op for c in picked))
    base = [
        sys.executable,
        "-m",
        "ovkit",
        "test-ops",
        mode,
        "--json",
        "--no-progress",
        "-b",
        device,
        "--hints",
        hints,
    ]
    if mode == "test":
        base += ["--reference", reference]
    profile = getattr(getattr(core, "profile", None), "name", None)
    if profile:
        base += ["--simulate", profile]
    bar = tqdm(
        keys,
        desc=f"test-ops {mode} {device} (isolated)",
        unit="op",
        file=sys.stderr,
        leave=False,
        disable=not progress if progress is not None else None,
    )
    for key in bar:
        proc = subprocess.run([*base, "-o", key], capture_output=True, text=True)
        try:
            payload = json.loads(proc.stdout)
        except json.JSONDecodeError:
            payload = None
        if proc.returncode in (0, 1) and payload is not None:
            for row in payload["cases"]:
                yield CaseResult(**row)
            continue
        why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
        tail = proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else []
        for c in picked:
            if c.op == key:
                detail = f"the process crashed ({why}){': ' + tail[0] if tail else ''}"
                yield CaseResult(op=c.op, case=c.name, status="FAIL", detail=detail, device=device)
