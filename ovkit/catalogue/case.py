"""One op case as data: its leaves (ggml ``ne``, type, value draw), one program building both
``ovkit.Graph`` and ``oracle.GgmlBuilder`` graphs, and how its result is judged; values are drawn
from a seed of the case's name, the same in every process."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ovkit.dtypes import STORAGE_DTYPE

#: ``program(builder, leaves) -> output tensor``: the case's graph on either builder.
Program = Callable[[Any, Mapping[str, Any]], Any]

#: Plain (non block-quantized) types and the numpy type their values are drawn in (bf16: as f32).
PLAIN_TYPES: dict[str, Any] = {**STORAGE_DTYPE, "bf16": np.float32}


@dataclass(frozen=True, slots=True)
class Init:
    """How a leaf's values are drawn (test-backend-ops' ``initialize_tensors``; kinds: :func:`draw`)."""

    kind: str = "uniform"
    lo: float = -1.0
    hi: float = 1.0
    n: int = 0


UNIFORM = Init()
#: test-backend-ops' range for inputs that must stay positive (sqrt, rope frequency factors).
POSITIVE = Init(lo=0.5, hi=1.5)


@dataclass(frozen=True, slots=True)
class Leaf:
    """One input tensor of a case: name, ggml ``ne`` (innermost first), type and value draw."""

    name: str
    ne: tuple[int, int, int, int]
    dtype: str = "f32"
    init: Init = UNIFORM

    @property
    def shape(self) -> tuple[int, ...]:
        """The numpy shape (outermost first, all four dims kept)."""
        return tuple(reversed(self.ne))

    @property
    def quantized(self) -> bool:
        """A ggml block-quantized type (q4_0, q8_0, q4_K, ...): a constant weight on ovkit's side."""
        return self.dtype not in PLAIN_TYPES


@dataclass(frozen=True, slots=True)
class Case:
    """One executable case: op and parameters in test-backend-ops notation, leaves, program, error
    check (``err`` within ``max_err``); ``ggml_f32``: leaves the installed ggml gets as f32."""

    op: str
    params: str
    leaves: tuple[Leaf, ...]
    program: Program = field(repr=False, compare=False)
    max_err: float = 1e-7
    err: str = "nmse"
    flops: int = 0
    ggml_f32: tuple[str, ...] = ()
    nbytes: int = 0
    tags: frozenset[str] = frozenset()
    rejected: str = ""
    why: str = ""

    @property
    def name(self) -> str:
        """``OP(params)`` as test-backend-ops prints a case."""
        return f"{self.op}({self.params})"

    def seed(self) -> int:
        return zlib.crc32(self.name.encode())


def _rows(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape[:-1])) if len(shape) > 1 else 1


def draw(leaf: Leaf, rng: np.random.Generator) -> np.ndarray:
    """The leaf's values in its numpy shape, as its ``init`` kind draws them (quantized: f32)."""
    shape, init = leaf.shape, leaf.init
    k = init.kind  # the kinds are test-backend-ops' initialize_tensors draws
    if k == "uniform":
        a: np.ndarray = rng.uniform(init.lo, init.hi, shape)
    elif k == "rows":
        a = rng.integers(0, max(1, init.n), shape)
    elif k == "set_rows":
        a = np.stack([rng.permutation(init.n)[: shape[-1]] for _ in range(_rows(shape))]).reshape(shape)
    elif k == "experts":
        a = np.stack([rng.permutation(np.arange(shape[-1]) % init.n) for _ in range(_rows(shape))])
        a = a.reshape(shape)
    elif k == "hadamard":  # ±1/sqrt(ne0) by the parity of popcount(row & col): a Hadamard matrix
        rows, cols = _rows(shape), shape[-1]
        r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
        parity = np.vectorize(lambda v: bin(v).count("1") & 1)(r & c)
        a = np.where(parity == 0, 1.0, -1.0).reshape(shape) / np.sqrt(cols)
    elif k == "distinct":
        a = np.stack([rng.permutation(shape[-1]) for _ in range(_rows(shape))]).reshape(shape)
        a = a / init.n if init.n else a
    elif k == "kq_mask":
        a = rng.uniform(init.lo, init.hi, shape)
        ne0, ne1, ne2, ne3 = leaf.ne
        n_blocks = int(0.2 * ne0 * ne1 * ne2 * ne3 / (128 * 64))
        flat = a.reshape(ne3, ne2, ne1, ne0)
        for _ in range(n_blocks):
            p3, p2, p1, p0 = (int(rng.integers(0, n)) for n in (ne3, ne2, ne1, ne0))
            flat[p3, p2, p1 : p1 + 64, p0 : p0 + 128] = -np.inf if rng.integers(0, 2) else 0.0
    elif k in ("causal_mask", "padded_mask"):
        a = rng.uniform(init.lo, init.hi, shape)
        n_kv, n_q = leaf.ne[0], leaf.ne[1]
        above = np.arange(n_kv)[None, :] > np.arange(n_q)[:, None] + max(0, n_kv - n_q)
        a = np.where(above, -np.inf, a)
        if k == "padded_mask":
            a[..., [1, 3], :] = -np.inf
    elif k == "pos":
        a = np.arange(int(np.prod(shape))).reshape(shape)
    elif k == "tril":
        a = np.tril(rng.uniform(init.lo, init.hi, shape))
    else:
        raise ValueError(f"leaf {leaf.name!r}: unknown init kind {k!r}")
    return np.ascontiguousarray(a.astype(PLAIN_TYPES.get(leaf.dtype, np.float32)))


def draw_all(case: Case) -> dict[str, np.ndarray]:
    """Every leaf's values, from the case's own seed (the same in every process)."""
    rng = np.random.default_rng(case.seed())
    return {leaf.name: draw(leaf, rng) for leaf in case.leaves}


def ggml_inputs(case: Case, values: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The values as ggml leaves: bf16 marked, quantized types as ggml's blocks (or gguf's, the same)."""
    from ovkit import oracle, quant

    out: dict[str, Any] = {}
    for leaf in case.leaves:
        v = values[leaf.name]
        if leaf.quantized:
            out[leaf.name] = (
                oracle.quantize(leaf.dtype, v)
                if oracle.ggml_available()
                else oracle.QuantArray(leaf.dtype, leaf.shape, quant.quantize(leaf.dtype, v).raw)
            )
        elif leaf.dtype == "bf16":
            out[leaf.name] = oracle.as_bf16(v)
        else:
            out[leaf.name] = v
    return out


def oracle_inputs(case: Case, ggml_leaves: Mapping[str, Any]) -> dict[str, Any]:
    """``ggml_leaves`` with the ``ggml_f32`` leaves as f32 arrays of the same (decoded) values."""
    from ovkit import oracle

    out = dict(ggml_leaves)
    for name in case.ggml_f32:
        v = ggml_leaves[name]
        if isinstance(v, oracle.QuantArray):
            out[name] = v.dequantize()
        elif isinstance(v, oracle.Typed):  # bf16: the values ggml stores
            out[name] = oracle.bf16_round(v.array)
        else:
            out[name] = np.asarray(v, np.float32)
    return out


def build_ovkit(
    case: Case, ggml_leaves: Mapping[str, Any] | None = None
) -> tuple[Any, Any, dict[str, np.ndarray]]:
    """The case's ovkit ``Graph``, output and feed; quantized leaves are constants of ggml's blocks
    (without ``ggml_leaves``: all-zero blocks and no feed, enough to ask what ovkit translates)."""
    from ovkit.graph import Graph
    from ovkit.quant import from_blocks, row_bytes

    g = Graph()
    leaves: dict[str, Any] = {}
    feed: dict[str, np.ndarray] = {}
    for leaf in case.leaves:
        v = None if ggml_leaves is None else ggml_leaves[leaf.name]
        if leaf.quantized:  # ggml's blocks (all-zero without values)
            raw = (
                v.data if v is not None else bytes(row_bytes(leaf.dtype, leaf.ne[0]) * math.prod(leaf.ne[1:]))
            )
            leaves[leaf.name] = g.constant(from_blocks(leaf.dtype, raw, leaf.shape, leaf.name))
        else:
            leaves[leaf.name] = g.input(leaf.name, leaf.shape, leaf.dtype)
            if v is not None:
                feed[leaf.name] = np.asarray(getattr(v, "array", v))
    return g, case.program(g, leaves), feed


def ovkit_graph(case: Case) -> tuple[Any, Any]:
    """The case's ovkit ``Graph`` and output without values (:func:`build_ovkit` without leaves)."""
    g, out, _ = build_ovkit(case)
    return g, out


def index_set_err(actual: np.ndarray, expected: np.ndarray) -> float:
    """test_top_k's ``err``: the multiset distance of the two index lists (unmatched / 2n) plus
    any non-integer part."""
    from collections import Counter

    a = np.asarray(actual, np.float64).ravel()
    b = np.asarray(expected, np.float64).ravel()
    diff = float(np.abs(a - np.trunc(a)).sum() + np.abs(b - np.trunc(b)).sum())
    ca, cb = Counter(a.astype(np.int64).tolist()), Counter(b.astype(np.int64).tolist())
    unmatched = sum(abs(ca[x] - cb[x]) for x in ca) + sum(n for x, n in cb.items() if x not in ca)
    return diff + (unmatched / (2 * a.size) if a.size else 0.0)
