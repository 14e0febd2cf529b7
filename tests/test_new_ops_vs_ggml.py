"""The ops upstream does not register: ovkit's OpenVINO translation and numpy reference vs real ggml.

Each case is one program over the builder API, run three ways: ``program(Graph(), leaves)`` on
OpenVINO's CPU device (the translation; the upstream policy must refuse the op as not
registered, so the model is compiled directly), the same graph in ``mode="reference"``, and
``program(GgmlBuilder, leaves)`` on ggml's CPU backend. Shapes, value ranges and variants follow
the op's test in llama.cpp's tests/test-backend-ops.cpp (ne order, innermost first); results
are compared with test-backend-ops' check (NaN/inf rules, NMSE ≤ the op's threshold).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from ovkit import oracle
from ovkit.graph import Graph, UnsupportedOpError, _from_model_output, _run_on_device
from ovkit.ops.translate import model_inputs

pytest.importorskip("ggml", reason="ggml-python (the test extra) provides the real ggml oracle")

Program = Callable[[Any, dict[str, Any]], Any]


@dataclass(frozen=True)
class In:
    """One input: ggml ``ne`` (innermost first), dtype and uniform range (or ``ints`` below ``high``)."""

    ne: tuple[int, ...]
    dtype: str = "f32"
    lo: float = -1.0
    hi: float = 1.0
    high: int = 0  # > 0: integers in [0, high)
    distinct: bool = False  # distinct values per row (argmax/top_k, as test-backend-ops shuffles)

    def make(self, rng: np.random.Generator) -> np.ndarray:
        shape = tuple(reversed(self.ne))
        if self.high:
            return rng.integers(0, self.high, shape).astype(np.int64 if self.dtype == "i64" else np.int32)
        if self.distinct:
            rows = int(np.prod(shape[:-1]))
            vals = np.stack([rng.permutation(shape[-1]) for _ in range(rows)]).reshape(shape)
            a = (vals / shape[-1] * (self.hi - self.lo) + self.lo).astype(np.float32)
        else:
            a = rng.uniform(self.lo, self.hi, shape).astype(np.float32)
        if self.dtype == "bf16":
            return oracle.bf16_round(a)
        return a.astype(np.float16) if self.dtype == "f16" else a


@dataclass(frozen=True)
class Case:
    id: str
    program: Program
    inputs: dict[str, In]
    max_nmse: float = oracle.DEFAULT_MAX_NMSE
    why: str = ""  # reason for a threshold other than test-backend-ops' default
    marks: tuple[Any, ...] = field(default=())


CASES: list[Case] = []


def case(id: str, program: Program, inputs: dict[str, In], **kw: Any) -> None:
    CASES.append(Case(id, program, inputs, **kw))


def _view(b: Any, a: Any, ne: tuple[int, ...]) -> Any:
    """test-backend-ops' ``v=1``: the leading block ne of a larger tensor (non-contiguous)."""
    return b.view_4d(a, *ne, a.nb[1], a.nb[2], a.nb[3], 0)


def _big(ne: tuple[int, int, int, int], v: int) -> tuple[int, ...]:
    return (ne[0] * 3, ne[1] * 2, ne[2] * 5, ne[3] * 4) if v else ne


# --- unary (test_unary: x in [-150, 150], f16 exp/expm1 in [-10, 10]; ne_a [128,2,2,2] / [5,7,11,13])
UNARY = (
    "abs", "sgn", "step", "elu", "relu", "gelu_quick", "gelu_erf", "hardswish", "hardsigmoid",
    "expm1", "floor", "ceil", "round", "trunc",
)  # fmt: skip
for _u in UNARY:
    for _dt in ("f32", "f16"):
        for _ne in ((128, 2, 2, 2), (5, 7, 11, 13)):
            for _v in (0, 1):
                _lim = 10.0 if _dt == "f16" and _u == "expm1" else 150.0

                def _unary(b: Any, t: dict[str, Any], _u: str = _u, _ne: Any = _ne, _v: int = _v) -> Any:
                    return getattr(b, _u)(_view(b, t["a"], _ne) if _v else t["a"])

                case(
                    f"{_u}-{_dt}-{'x'.join(map(str, _ne))}-v{_v}",
                    _unary,
                    {"a": In(_big(_ne, _v), _dt, -_lim, _lim)},
                )
for _u in ("abs", "sgn", "floor", "hardswish", "elu"):
    case(
        f"{_u}-bf16", lambda b, t, _u=_u: getattr(b, _u)(t["a"]), {"a": In((128, 2, 2, 2), "bf16", -150, 150)}
    )
case("leaky_relu", lambda b, t: b.leaky_relu(t["a"], 0.1, False), {"a": In((10, 5, 4, 3))})

# --- SIN / COS / LOG (test_sin/test_cos: [-π, π]·... as test-backend-ops: [-6.28, 6.28]; log: positive)
for _op in ("sin", "cos"):
    for _dt, _ne in (("f32", (10, 2, 2, 2)), ("f16", (10, 2, 2, 2)), ("f32", (7, 1, 5, 3))):
        case(
            f"{_op}-{_dt}-{'x'.join(map(str, _ne))}",
            lambda b, t, _op=_op: getattr(b, _op)(t["a"]),
            {"a": In(_ne, _dt, -6.0, 6.0)},
        )
for _dt, _ne in (("f32", (10, 5, 4, 3)), ("f16", (64, 16, 1, 1)), ("f32", (7, 1, 5, 3))):
    case(f"log-{_dt}-{'x'.join(map(str, _ne))}", lambda b, t: b.log(t["a"]), {"a": In(_ne, _dt, 0.9, 1.1)})

# --- SUM / MEAN / ARGMAX (test_sum: permuted input; test_mean; test_argmax: distinct values)
case("sum", lambda b, t: b.sum(t["a"]), {"a": In((10, 5, 4, 3))})
case("sum-permuted", lambda b, t: b.sum(b.permute(t["a"], 0, 3, 2, 1)), {"a": In((11, 5, 6, 3))})
case("sum-f16", lambda b, t: b.sum(t["a"]), {"a": In((10, 5, 4, 3), "f16")})
for _ne in ((10, 5, 4, 3), (32769, 1, 1, 1), (32, 256, 1, 1)):
    case(f"mean-{'x'.join(map(str, _ne))}", lambda b, t: b.mean(t["a"]), {"a": In(_ne)})
for _ne in ((32, 1, 1, 1), (32, 513, 1, 1), (100, 10, 1, 1), (1024, 12, 1, 1)):
    case(
        f"argmax-{'x'.join(map(str, _ne))}",
        lambda b, t: b.argmax(t["a"]),
        {"a": In(_ne, distinct=True)},
    )

# --- GLU sub-ops (test_glu: [-150, 150]; swapped, split)
for _g in ("reglu", "geglu_erf", "geglu_quick"):
    for _dt in ("f32", "f16"):
        case(
            f"{_g}-{_dt}",
            lambda b, t, _g=_g: getattr(b, _g)(t["a"]),
            {"a": In((256, 2, 2, 2), _dt, -150, 150)},
        )
        case(
            f"{_g}-{_dt}-swapped",
            lambda b, t, _g=_g: getattr(b, f"{_g}_swapped")(t["a"]),
            {"a": In((10, 7, 11, 13), _dt, -150, 150)},
        )
        case(
            f"{_g}-{_dt}-split",
            lambda b, t, _g=_g: getattr(b, f"{_g}_split")(t["a"], t["b"]),
            {"a": In((128, 2, 2, 2), _dt, -150, 150), "b": In((128, 2, 2, 2), _dt, -150, 150)},
        )


# ---------------------------------------------------------------------------------------------
# Running a case three ways
# ---------------------------------------------------------------------------------------------


def _data(c: Case) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(c.id.encode()))
    return {n: spec.make(rng) for n, spec in c.inputs.items()}


def _build(c: Case) -> tuple[Any, Any]:
    g = Graph()
    leaves = {n: g.input(n, tuple(reversed(spec.ne)), spec.dtype) for n, spec in c.inputs.items()}
    return g, c.program(g, leaves)


def _on_device(g: Any, out: Any, data: dict[str, np.ndarray]) -> np.ndarray:
    """The OpenVINO translation on the CPU device; the upstream policy must refuse the graph."""
    with pytest.raises(UnsupportedOpError, match="not registered"):
        g.compute(out, data, device="CPU")
    model, names = g.to_model([out])
    feed = g._prepare_inputs([out], data)
    return _from_model_output(out, _run_on_device(model, model_inputs(g, names, feed), "CPU")[0])


def _ggml(c: Case, data: dict[str, np.ndarray]) -> np.ndarray:
    feed = {n: oracle.as_bf16(data[n]) if c.inputs[n].dtype == "bf16" else data[n] for n in data}
    return np.asarray(oracle.ggml_program(c.program, feed))


def _check(c: Case, got: np.ndarray, want: np.ndarray) -> None:
    assert (got.shape, got.dtype) == (want.shape, want.dtype), c.id
    verdict = oracle.compare(got, want, c.max_nmse)
    assert verdict.ok, f"{c.id}: {verdict}"


@pytest.mark.parametrize("c", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_translation_matches_ggml(c: Case) -> None:
    data = _data(c)
    g, out = _build(c)
    got = _on_device(g, out, data)
    _check(c, got, _ggml(c, data))


@pytest.mark.parametrize("c", [pytest.param(c, id=c.id) for c in CASES])
def test_reference_matches_ggml(c: Case) -> None:
    data = _data(c)
    g, out = _build(c)
    got = np.asarray(g.compute(out, data, mode="reference"))
    _check(c, got, _ggml(c, data))


def test_thresholds_other_than_the_default_say_why() -> None:
    for c in CASES:
        assert c.max_nmse == oracle.DEFAULT_MAX_NMSE or c.why, c.id
