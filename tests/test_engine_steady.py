"""The steady state of ``Graph.compute``: a repeated call of one graph reuses its plan, compiled
model and bound arrays, and gives the results and errors a first call gives.  Every test compares
a repeated call with a fresh graph's first call, or with numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from ovkit.engine import RunConfig, compute_graph, get_engine, reload_engines
from ovkit.graph import Graph, Tensor

RNG = np.random.default_rng(22)


def rand(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def add8() -> tuple[Graph, Tensor]:
    """An 8x8 add (a tiny graph: the op explorer and test-ops run thousands of these)."""
    g = Graph()
    return g, g.add(g.input("a", (8, 8)), g.input("b", (8, 8)))


def warm(g: Graph, y: Tensor, **kw: Any) -> None:
    """Three calls: the first makes the plan and compiles, the others reuse them."""
    feed = {"a": rand(8, 8), "b": rand(8, 8)}
    for _ in range(3):
        np.testing.assert_array_equal(g.compute(y, feed, **kw), feed["a"] + feed["b"])


# Bad feeds built around the arrays of the last good call (the ones a repeated call reuses).
BAD_FEEDS: dict[str, Callable[[np.ndarray, np.ndarray], dict[str, Any]]] = {
    "missing": lambda a, b: {"a": a},
    "unknown": lambda a, b: {"a": a, "b": b, "c": a},
    "misnamed": lambda a, b: {"a": a, "c": b},
    "shape": lambda a, b: {"a": a, "b": rand(4, 8)},
    "transposed 1-D": lambda a, b: {"a": rand(64), "b": b},
    "text": lambda a, b: {"a": a, "b": np.full((8, 8), "x")},
    "none": lambda a, b: {"a": a, "b": None},
}


def error_of(g: Graph, y: Tensor, feed: dict[str, Any]) -> tuple[type[BaseException], str]:
    with pytest.raises(Exception) as caught:
        g.compute(y, feed)
    return type(caught.value), str(caught.value)


@pytest.mark.parametrize("bad", list(BAD_FEEDS))
def test_the_steady_state_rejects_a_bad_feed_with_a_first_calls_error(bad: str) -> None:
    a, b = rand(8, 8), rand(8, 8)
    fresh, y_fresh = add8()
    expected = error_of(fresh, y_fresh, BAD_FEEDS[bad](a, b))
    g, y = add8()
    warm(g, y)
    np.testing.assert_array_equal(g.compute(y, {"a": a, "b": b}), a + b)
    assert error_of(g, y, BAD_FEEDS[bad](a, b)) == expected
    assert error_of(g, y, BAD_FEEDS[bad](a, b)) == expected  # and again, after the failed call
    np.testing.assert_array_equal(g.compute(y, {"a": a, "b": b}), a + b)  # and recovers
    c = rand(8, 8)
    np.testing.assert_array_equal(g.compute(y, {"a": a, "b": c}), a + c)


def feeds() -> Iterator[tuple[str, dict[str, Any], np.ndarray]]:
    """(what, feed, expected a + b) in an order that changes one thing at a time."""
    a, b = rand(8, 8), rand(8, 8)
    yield "first arrays", {"a": a, "b": b}, a + b
    yield "the same arrays", {"a": a, "b": b}, a + b
    a[...] = rand(8, 8)
    yield "in-place edit", {"a": a, "b": b}, a + b
    yield "a new dict of the same arrays", dict(b=b, a=a), a + b
    c = rand(8, 8)
    yield "one new array", {"a": a, "b": c}, a + c
    yield "the other order", {"a": c, "b": a}, c + a
    wide = rand(8, 8, dtype=np.float64)
    yield "float64 (converted)", {"a": wide, "b": b}, (wide.astype(np.float32) + b)
    wide[...] = 3.0
    yield "float64 edited in place", {"a": wide, "b": b}, 3.0 + b
    strided = rand(16, 16)[::2, ::2]
    yield "not contiguous", {"a": strided, "b": b}, strided + b
    frozen = rand(8, 8)
    frozen.flags.writeable = False
    yield "read-only", {"a": frozen, "b": b}, frozen + b
    yield "a list", {"a": a.tolist(), "b": b}, a + b
    yield "back to the first arrays", {"a": a, "b": b}, a + b


def test_the_steady_state_gives_a_first_calls_results_for_every_kind_of_feed() -> None:
    g, y = add8()
    warm(g, y)
    for what, feed, expected in feeds():
        np.testing.assert_allclose(g.compute(y, feed), expected, rtol=1e-6, err_msg=what)
        fresh, y_fresh = add8()
        np.testing.assert_array_equal(g.compute(y, feed), fresh.compute(y_fresh, feed), err_msg=what)


def test_graphs_sharing_one_compiled_model_each_get_their_own_inputs() -> None:
    """Two graphs of one structure share the compiled model and its request: each call binds
    its own arrays even when the other graph bound others in between."""
    (g1, y1), (g2, y2) = add8(), add8()
    f1 = {"a": rand(8, 8), "b": rand(8, 8)}
    f2 = {"a": rand(8, 8), "b": rand(8, 8)}
    for _ in range(3):
        np.testing.assert_array_equal(g1.compute(y1, f1), f1["a"] + f1["b"])
        np.testing.assert_array_equal(g2.compute(y2, f2), f2["a"] + f2["b"])
    r1, r2 = g1.compute(y1, f1), g2.compute(y2, f2)
    assert not np.shares_memory(r1, r2)


def test_outputs_and_counters_of_repeated_calls() -> None:
    g, y = add8()
    warm(g, y)
    engine = get_engine()
    a, b = rand(8, 8), rand(8, 8)
    before = engine.stats()
    first = g.compute(y, {"a": a, "b": b})
    second = g.compute(y, {"a": a, "b": b})
    after = engine.stats()
    assert (after.hits - before.hits, after.misses, after.compiles) == (2, before.misses, before.compiles)
    assert not np.shares_memory(first, second)  # a result never aliases the next run
    first[...] = 0
    np.testing.assert_array_equal(g.compute(y, {"a": a, "b": b}), a + b)


def test_the_engine_reads_the_environment_when_made_and_on_reload(monkeypatch: pytest.MonkeyPatch) -> None:
    """Configuration is fixed at construction: changing ``os.environ`` changes nothing until
    ``reload()``, after which the very next call follows it."""
    engine = get_engine()
    g, y = add8()
    warm(g, y)
    a = rand(8, 8)
    feed = {"a": a, "b": a}
    before = engine.stats()
    monkeypatch.setenv("GGML_OPENVINO_DISABLE_CACHE", "1")
    g.compute(y, feed)  # not reloaded: still a hit
    assert (engine.stats().hits, engine.stats().compiles) == (before.hits + 1, before.compiles)
    engine.reload()
    for _ in range(2):
        np.testing.assert_array_equal(g.compute(y, feed), 2 * a)
    assert engine.stats().compiles == before.compiles + 2
    monkeypatch.delenv("GGML_OPENVINO_DISABLE_CACHE")
    reload_engines()  # every process-wide engine
    g.compute(y, feed)
    compiles = engine.stats().compiles
    g.compute(y, feed)
    assert engine.stats().compiles == compiles


def test_each_call_uses_its_own_config_and_device() -> None:
    engine = get_engine()
    g, y = add8()
    warm(g, y)
    a = rand(8, 8)
    feed = {"a": a, "b": a}
    bf16 = RunConfig(inference_precision="bf16", num_threads=1)
    for _ in range(2):
        np.testing.assert_allclose(g.compute(y, feed, config=bf16), 2 * a, rtol=1e-2)
        assert engine.last_runner is not None
        assert engine.last_runner.graph.run_config == bf16
    np.testing.assert_array_equal(g.compute(y, feed), 2 * a)
    assert engine.last_runner.graph.run_config != bf16
    np.testing.assert_array_equal(g.compute(y, feed, device="CPU"), 2 * a)


def test_repeated_calls_bind_the_callers_arrays_without_a_copy() -> None:
    """Arrays of the Parameter's dtype, C-contiguous, are read in place by the request (an edit
    between calls is seen); a converted feed is copied on every call, never reused stale."""
    g, y = add8()
    a, b = rand(8, 8), rand(8, 8)
    engine = get_engine()
    for _ in range(3):
        np.testing.assert_array_equal(g.compute(y, {"a": a, "b": b}), a + b)
    assert engine.last_runner is not None
    request = engine.last_runner.request
    bound = [request.get_input_tensor(i).data for i in range(2)]
    assert np.shares_memory(bound[0], a) and np.shares_memory(bound[1], b)
    a[...] = 1.0
    np.testing.assert_array_equal(g.compute(y, {"a": a, "b": b}), 1.0 + b)
    wide = rand(8, 8, dtype=np.float64)
    for value in (1.0, 2.0):
        wide[...] = value
        np.testing.assert_array_equal(g.compute(y, {"a": wide, "b": b}), value + b)
        assert not np.shares_memory(request.get_input_tensor(0).data, wide)


def test_edits_and_other_outputs_after_the_steady_state_are_seen() -> None:
    """An in-place edit (renamed input, sinks added), a new node or other outputs of the same
    graph after repeated calls make a new plan: the device computes the edited graph."""
    g, y = add8()
    a, b = rand(8, 8), rand(8, 8)
    product = g.mul(g.input("p", (8, 8)), g.input("q", (8, 8)))
    warm(g, y)
    np.testing.assert_array_equal(g.compute(product, {"p": a, "q": b}), a * b)  # other outputs
    np.testing.assert_array_equal(g.compute([y, product], {"a": a, "b": b, "p": a, "q": b})[1], a * b)
    warm(g, y)
    g.input("c", (8, 8))  # a new input: fed to the graph (not needed by y), it is known
    np.testing.assert_array_equal(g.compute(y, {"a": a, "b": b, "c": a}), a + b)
    warm(g, y)
    (b_leaf,) = (t for t in g.nodes if t.is_input and t.name == "b")
    b_leaf.set_name("bb")  # an in-place edit: the old name is now unknown
    np.testing.assert_array_equal(g.compute(y, {"a": a, "bb": b}), a + b)
    with pytest.raises(Exception, match="'b'"):
        g.compute(y, {"a": a, "b": b})
    # sinks added after the steady state: the device sees them (a stale call would not)
    s = Graph()
    logits, mask, sinks = s.input("x", (2, 4, 8, 16)), s.input("m", (8, 16)), s.input("s", (4,))
    sm = s.soft_max_ext(logits, mask, 0.3, 8.0)
    feed = {"x": rand(2, 4, 8, 16), "m": rand(8, 16), "s": rand(4) * 3}
    for _ in range(3):
        before = s.compute(sm, feed)
    s.soft_max_add_sinks(sm, sinks)
    after = s.compute(sm, feed)
    np.testing.assert_allclose(after, s.compute(sm, feed, mode="reference"), rtol=1e-5, atol=1e-6)
    assert np.abs(after - before).max() > 1e-3


def test_each_call_runs_on_its_own_device() -> None:
    from ovkit.simulate import SimulatedCore

    core = SimulatedCore("laptop")
    engine = get_engine(core)
    g = Graph()
    y = g.scale(g.input("x", (4,)), 2.0)
    x = np.ones(4, np.float32)
    for dev in ("CPU", "CPU", "CPU", "GPU", "GPU", "GPU", "CPU"):
        np.testing.assert_array_equal(compute_graph(g, [y], {"x": x}, dev, core=core)[0], 2 * x)
        assert engine.last_runner is not None and engine.last_runner.graph.device == dev
