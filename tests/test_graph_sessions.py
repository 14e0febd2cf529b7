"""Graphs edited after a compute, dropped graphs, careless input and long sessions.

Each test is the regression test of one defect: the device path must see every in-place edit
(device result == reference result), the engine must not keep dropped graphs alive, and bad
shapes, names and environment values get a specific error or warning.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
import threading
import warnings
import weakref
from pathlib import Path

import numpy as np
import pytest

from ovkit.config import OvkitConfigWarning
from ovkit.engine import Engine, get_engine
from ovkit.graph import Graph, GraphError, Tensor, UnsupportedOpError
from ovkit.ir import shape_of

RNG = np.random.default_rng(11)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def both(g: Graph, out: Tensor, feed: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(device result on the CPU, numpy reference result)."""
    return g.compute(out, feed, device="CPU"), g.compute(out, feed, mode="reference")


# ------------------------------------------------------------------------------ in-place edits
def test_soft_max_add_sinks_after_a_compute_changes_the_device_result() -> None:
    g = Graph()
    a, mask, sinks = g.input("a", (2, 4, 8, 16)), g.input("m", (8, 16)), g.input("s", (4,))
    sm = g.soft_max_ext(a, mask, 0.3, 8.0)
    feed = {"a": rand(2, 4, 8, 16), "m": rand(8, 16), "s": rand(4) * 3}
    before, _ = both(g, sm, feed)
    g.soft_max_add_sinks(sm, sinks)
    dev, ref = both(g, sm, feed)
    assert np.abs(dev - before).max() > 1e-3  # the sinks change the numbers...
    np.testing.assert_allclose(dev, ref, rtol=1e-5, atol=1e-6)  # ...and the device sees them


def _attention_operand(g: Graph, name: str, shape: tuple[int, ...], dtype: str = "f32") -> Tensor:
    """Q/K/V as llama.cpp builds them (PERMUTE<-VIEW<-base, the pattern the CPU policy accepts):
    ``shape`` is the numpy (tokens, heads, head_dim) layout of the base tensor."""
    return g.permute(g.view_tensor(g.input(name, shape, dtype)), 0, 2, 1, 3)


def _attention(g: Graph) -> tuple[Tensor, dict[str, np.ndarray]]:
    q = _attention_operand(g, "q", (6, 8, 32))
    k = _attention_operand(g, "k", (16, 2, 32), "f16")
    v = _attention_operand(g, "v", (16, 2, 32), "f16")
    feed = {
        "q": rand(6, 8, 32),
        "k": rand(16, 2, 32).astype(np.float16),
        "v": rand(16, 2, 32).astype(np.float16),
    }
    return g.flash_attn_ext(q, k, v, None, 0.2, 0.0, 0.0), feed


def test_flash_attn_ext_add_sinks_after_a_compute_is_checked_again() -> None:
    """Upstream's policy rejects attention sinks: after the edit the device refuses the graph
    (a stale plan returned the sink-less result instead)."""
    g = Graph()
    sinks = g.input("s", (8,))
    fa, feed = _attention(g)
    before, ref = both(g, fa, feed)
    np.testing.assert_allclose(before, ref, rtol=1e-3, atol=1e-3)
    g.flash_attn_ext_add_sinks(fa, sinks)
    feed["s"] = rand(8) * 3
    with pytest.raises(UnsupportedOpError, match=r"sinks \(src4\) present"):
        g.compute(fa, feed, device="CPU")
    assert np.abs(g.compute(fa, feed, mode="reference") - before).max() > 1e-3


@pytest.mark.parametrize("edit", ["mul_mat_set_prec", "flash_attn_ext_set_prec"])
def test_set_prec_after_a_compute_makes_a_new_plan(edit: str) -> None:
    g = Graph()
    if edit == "mul_mat_set_prec":
        out = g.mul_mat(g.input("a", (4, 16)), g.input("b", (3, 16)))
        feed = {"a": rand(4, 16), "b": rand(3, 16)}
    else:
        out, feed = _attention(g)
    engine = get_engine()
    both(g, out, feed)
    made, version = engine.stats().plans, g.version
    getattr(g, edit)(out, 10)
    dev, ref = both(g, out, feed)
    assert g.version == version + 1 and engine.stats().plans == made + 1  # the edit was seen
    assert out.params["prec"] == 10
    np.testing.assert_allclose(dev, ref, rtol=1e-4, atol=1e-5)


def test_set_name_on_an_input_after_a_compute_renames_the_feed() -> None:
    g = Graph()
    x = g.input("x", (4,))
    out = g.scale(x, 2.0)
    g.compute(out, {"x": np.ones(4, np.float32)}, device="CPU")
    x.set_name("y")
    dev, ref = both(g, out, {"y": np.full(4, 3, np.float32)})
    np.testing.assert_array_equal(dev, np.full(4, 6, np.float32))
    np.testing.assert_array_equal(dev, ref)
    with pytest.raises(GraphError, match="'x'"):
        g.compute(out, {"x": np.ones(4, np.float32)}, device="CPU")


def test_set_name_refuses_another_inputs_name_and_an_empty_name() -> None:
    g = Graph()
    p, q = g.input("p", (3,)), g.input("q", (3,))
    with pytest.raises(GraphError, match=r"set_name: input 'q': the name 'p' is already used"):
        q.set_name("p")
    with pytest.raises(GraphError, match="non-empty name"):
        q.set_name("")
    out = g.sub(p, q)  # both inputs still fed by their own names
    res = g.compute(out, {"p": np.full(3, 5, np.float32), "q": np.full(3, 2, np.float32)}, device="CPU")
    np.testing.assert_array_equal(res, np.full(3, 3, np.float32))
    q.set_name("q2")  # a fresh name is fine, and frees "q"
    g.input("q", (3,))


def test_constant_is_copied_on_entry() -> None:
    w = np.ones(4, np.float32)
    g = Graph()
    c = g.constant(w, "w")
    out = g.add(g.input("x", (4,)), c)
    feed = {"x": np.zeros(4, np.float32)}
    g.compute(out, feed, device="CPU")
    w[:] = 5  # the caller's array changes after the first compute
    dev, ref = both(g, out, feed)
    np.testing.assert_array_equal(dev, np.ones(4, np.float32))
    np.testing.assert_array_equal(ref, np.ones(4, np.float32))
    with pytest.raises(ValueError, match="read-only"):
        c.value[0] = 7  # the graph's own copy is frozen


# ------------------------------------------------------------------------------ dropped graphs
def _throwaway_graph(i: int) -> tuple[weakref.ref[Graph], np.ndarray]:
    g = Graph()
    c = g.constant(np.full(1 << 18, float(i), np.float32))  # 1 MiB constant
    out = g.add(g.input("x", (1 << 18,)), c)
    res = g.compute(out, {"x": np.ones(1 << 18, np.float32)}, device="CPU")
    return weakref.ref(g), res[:1]


def test_the_engine_keeps_no_dropped_graph_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OVKIT_ENGINE_CACHE_SIZE", "4")
    get_engine().reload()
    refs = []
    for i in range(30):
        ref, first = _throwaway_graph(i)
        assert first[0] == i + 1
        refs.append(ref)
    gc.collect()
    assert [r for r in refs if r() is not None] == []
    assert get_engine().stats().size <= 4


SOAK = r"""
import gc, json, sys, weakref
import numpy as np, psutil
from ovkit.graph import Graph

def one(i):
    g = Graph()
    c = g.constant(np.random.default_rng(i).standard_normal(1 << 18).astype(np.float32))  # 1 MiB
    out = g.add(g.input("x", (1 << 18,)), c)
    g.compute(out, {"x": np.ones(1 << 18, np.float32)}, device="CPU")
    return weakref.ref(g)

proc = psutil.Process()
refs = [one(i) for i in range(20)]  # warm up: plugin loaded, LRU full
gc.collect()
start = proc.memory_info().rss
refs += [one(i) for i in range(20, 500)]
gc.collect()
end = proc.memory_info().rss
print(json.dumps({"start": start, "end": end, "alive": sum(r() is not None for r in refs)}))
"""


@pytest.mark.slow
def test_soak_500_throwaway_graphs_release_their_memory(tmp_path: Path) -> None:
    env = {**os.environ, "OVKIT_ENGINE_CACHE_SIZE": "4", "PYTHONPATH": str(Path(__file__).parents[1])}
    env = {k: v for k, v in env.items() if not k.startswith("GGML_OPENVINO_")}
    run = subprocess.run(
        [sys.executable, "-c", SOAK], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    assert res["alive"] == 0
    grown = (res["end"] - res["start"]) / 2**20
    assert grown < 20, f"RSS grew {grown:.1f} MiB over 480 throw-away graphs"


# ------------------------------------------------------------------------------ careless input
@pytest.mark.parametrize(
    ("shape", "bad"),
    [((2.5, 3), "2.5"), ((2**64, 1), str(2**64)), ((-1, 4), "-1"), ((True, 4), "True"), (("3",), "'3'")],
)
def test_input_shapes_must_be_non_negative_integers(shape: tuple[object, ...], bad: str) -> None:
    g = Graph()
    with pytest.raises(GraphError, match=rf"input 'a': .*{bad}"):
        g.input("a", shape)  # type: ignore[arg-type]
    assert g.nodes == []
    g.input("a", (2, 3))  # the name was not taken by the failed attempt


def test_zero_size_leaves_are_refused_and_empty_results_compute_to_empty_arrays() -> None:
    assert shape_of((4, 0, 1, 1)) == (0, 4)  # the zero dim is kept, not dropped as a size-1 dim
    g = Graph()
    with pytest.raises(GraphError, match=r"input 'x': zero-size shape \(0, 4\)"):
        g.input("x", (0, 4))
    with pytest.raises(GraphError, match=r"constant 'w': zero-size shape \(3, 0\)"):
        g.constant(np.zeros((3, 0), np.float32), "w")
    x = g.input("x", (2, 4))
    empty = g.unary(g.view_1d(x, 0, 0), "NEG")  # ggml: an empty view, an op over no elements
    (out,) = g.compute([empty], {"x": np.ones((2, 4), np.float32)})
    assert out.size == 0
    with pytest.raises(GraphError, match=r"SUM: operand VIEW f32\[0, 1, 1, 1\] is empty"):
        g.sum(g.view_1d(x, 0, 0))  # a value from no elements: ovkit has no answer for it


@pytest.mark.parametrize("kind", ["setflags", "frombuffer", "mmap"])
def test_read_only_inputs_run_on_the_device(kind: str, tmp_path: Path) -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    if kind == "setflags":
        arr = data.copy()
        arr.setflags(write=False)
    elif kind == "frombuffer":
        arr = np.frombuffer(data.tobytes(), np.float32).reshape(3, 4)
    else:
        np.save(tmp_path / "x.npy", data)
        arr = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert not arr.flags.writeable
    g = Graph()
    out = g.scale(g.input("x", (3, 4)), 2.0)
    for _ in range(2):  # the second call takes the engine's fast path
        dev, ref = both(g, out, {"x": arr})
        np.testing.assert_array_equal(dev, data * 2)
        np.testing.assert_array_equal(dev, ref)


# ------------------------------------------------------------------------------ environment
def test_a_device_fallback_during_compute_logs_upstreams_warning_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    wanted = f"GPU.{os.getpid() % 1000 + 100}"  # a value no earlier test resolved
    monkeypatch.setenv("GGML_OPENVINO_DEVICE", wanted)
    get_engine().reload()
    g = Graph()
    out = g.scale(g.input("x", (4,)), 2.0)
    with caplog.at_level(logging.WARNING, logger="ovkit"):
        for _ in range(3):
            res = g.compute(out, {"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(res, np.full(4, 2, np.float32))
    fallback = [r.getMessage() for r in caplog.records if "fallback to CPU" in r.getMessage()]
    assert fallback == [f"GGML OpenVINO Backend: device {wanted} is not available, fallback to CPU"]


def test_cache_dir_naming_a_file_warns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "cache.bin"
    not_a_dir.write_bytes(b"x")
    monkeypatch.setenv("GGML_OPENVINO_CACHE_DIR", str(not_a_dir))
    with pytest.warns(OvkitConfigWarning, match="is not a directory"):
        Engine()  # an engine reads its configuration when made: that warns


def test_invalid_engine_cache_size_warns_and_falls_back_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine()
    for bad in ("lots", "0", "-3"):
        monkeypatch.setenv("OVKIT_ENGINE_CACHE_SIZE", bad)
        with pytest.warns(OvkitConfigWarning, match=rf"OVKIT_ENGINE_CACHE_SIZE='{bad}' is not a cache size"):
            engine.reload()
        assert engine.stats().maxsize == 64
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the same value does not warn again
            assert engine.run("add1", _add_model, [np.ones(2, np.float32)] * 2)[0].tolist() == [2, 2]
    monkeypatch.setenv("OVKIT_ENGINE_CACHE_SIZE", "3")
    engine.reload()
    assert engine.stats().maxsize == 3


def _add_model() -> object:
    import openvino as ov
    import openvino.opset16 as ops

    a, b = ops.parameter([2], ov.Type.f32, name="a"), ops.parameter([2], ov.Type.f32, name="b")
    return ov.Model([ops.add(a, b)], [a, b], "add")


def test_hit_and_miss_counters_count_every_concurrent_run() -> None:
    g = Graph()
    out = g.scale(g.input("x", (8,)), 2.0)
    engine = get_engine()
    g.compute(out, {"x": np.ones(8, np.float32)}, device="CPU")
    before = engine.stats()
    runs, threads = 300, 8
    barrier = threading.Barrier(threads)

    def work() -> None:
        barrier.wait()
        for _ in range(runs):
            g.compute(out, {"x": np.ones(8, np.float32)}, device="CPU")

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    after = engine.stats()
    counted = (after.hits - before.hits) + (after.misses - before.misses)
    assert counted == runs * threads
