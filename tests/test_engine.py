"""The execution engine on the real OpenVINO CPU device (and the simulated device set)."""

from __future__ import annotations

import gc

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest

from ovkit.config import read_config
from ovkit.engine import (
    Engine,
    EngineError,
    InputError,
    ProfilingOffError,
    RunConfig,
    compile_properties,
    model_structure_key,
    run_config_from,
)


def add_model(n: int = 8) -> ov.Model:
    a = ops.parameter([n, n], np.float32, name="a")
    b = ops.parameter([n, n], np.float32, name="b")
    y = ops.add(a, b)
    y.output(0).get_tensor().set_names({"y"})
    return ov.Model([y], [a, b], "add")


def kv_model(width: int = 4) -> ov.Model:
    """A growing cache: cache_out = concat(cache, x); total = column sums of cache_out."""
    cache = ops.parameter(ov.PartialShape([-1, width]), np.float32, name="cache")
    x = ops.parameter(ov.PartialShape([-1, width]), np.float32, name="x")
    cat = ops.concat([cache, x], 0)
    out = ops.result(cat)
    out.output(0).get_tensor().set_names({"cache_out"})
    total = ops.result(ops.reduce_sum(cat, np.array([0]), False))
    total.output(0).get_tensor().set_names({"total"})
    return ov.Model([out, total], [cache, x], "kv")


@pytest.fixture
def engine() -> Engine:
    return Engine(env={})


def test_second_run_hits_the_cache_and_does_not_compile(engine: Engine) -> None:
    built = []

    def factory() -> ov.Model:
        built.append(1)
        return add_model()

    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    first = engine.run("add8", factory, {"a": a, "b": a})[0]
    second = engine.run("add8", factory, {"a": a, "b": a})[0]
    np.testing.assert_array_equal(first, 2 * a)
    np.testing.assert_array_equal(second, 2 * a)
    stats = engine.stats()
    assert (stats.hits, stats.misses, stats.compiles) == (1, 1, 1)
    assert len(built) == 1  # the factory (graph -> model) ran once
    assert stats.compile_seconds > 0


def test_key_separates_device_config_and_structure(engine: Engine) -> None:
    a = np.ones((8, 8), np.float32)
    engine.run("add8", add_model, [a, a])
    engine.run("add8", add_model, [a, a], run_config=RunConfig(execution_mode="ACCURACY"))
    engine.run("add4", lambda: add_model(4), [a[:4, :4], a[:4, :4]])
    assert engine.stats().compiles == 3
    assert model_structure_key(add_model(8)) == model_structure_key(add_model(8))
    assert model_structure_key(add_model(8)) != model_structure_key(add_model(4))


def test_lru_evicts_least_recently_used() -> None:
    engine = Engine(env={}, maxsize=2)
    x = {n: np.ones((n, n), np.float32) for n in (2, 3, 4)}
    for n in (2, 3):
        engine.run(f"add{n}", lambda n=n: add_model(n), [x[n], x[n]])
    engine.run("add2", lambda: add_model(2), [x[2], x[2]])  # 2 is now most recent
    engine.run("add4", lambda: add_model(4), [x[4], x[4]])  # evicts 3
    stats = engine.stats()
    assert stats.evictions == 1 and stats.size == 2
    assert {e.key.structure for e in engine.entries()} == {"add2", "add4"}
    engine.run("add3", lambda: add_model(3), [x[3], x[3]])
    assert engine.stats().misses == 4  # 3 had to be compiled again


def test_cache_size_from_environment() -> None:
    assert Engine(env={}).stats().maxsize == 64
    assert (
        Engine(env={"OVKIT_ENGINE_CACHE_SIZE": "3"}).stats().maxsize == 3
    )  # the mapping given, not os.environ
    with pytest.raises(ValueError, match="maxsize=0"):
        Engine(env={}, maxsize=0)


def test_a_long_unavailable_device_falls_back_with_the_value_cut(caplog: pytest.LogCaptureFixture) -> None:
    from ovkit.simulate import SimulatedCore

    engine = Engine(env={"GGML_OPENVINO_DEVICE": "GPU" + "x" * 5000}, core=SimulatedCore("laptop"))
    with caplog.at_level("WARNING", logger="ovkit"):
        assert engine.selected_device() == "CPU"
        assert engine.selected_device() == "CPU"  # resolved once: one line
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("GGML OpenVINO Backend: device 'GPUxxx") and line.endswith(", fallback to CPU")
    assert len(line) < 300


def test_disable_cache_compiles_every_call() -> None:
    engine = Engine(env={"GGML_OPENVINO_DISABLE_CACHE": "1"})
    a = np.ones((8, 8), np.float32)
    for _ in range(2):
        engine.run("add8", add_model, [a, a])
    stats = engine.stats()
    assert stats.compiles == 2 and stats.size == 0 and not stats.enabled


def test_inputs_deleted_by_the_caller_do_not_corrupt_later_runs(engine: Engine) -> None:
    """OpenVINO's request holds no reference to bound arrays: freed inputs must not be read."""
    engine.run("add8", add_model, {"a": np.full((8, 8), 3, np.float32), "b": np.full((8, 8), 4, np.float32)})
    a = np.full((8, 8), 2, np.float32)
    b = np.full((8, 8), 5, np.float32)
    engine.run("add8", add_model, {"a": a, "b": b})
    del a, b
    gc.collect()
    garbage = [np.random.rand(8, 8).astype(np.float32) for _ in range(200)]  # reuse freed memory
    c = np.full((8, 8), 1, np.float32)
    out = engine.run("add8", add_model, {"a": c, "b": c})[0]
    np.testing.assert_array_equal(out, np.full((8, 8), 2, np.float32))
    assert len(garbage) == 200


def test_outputs_do_not_alias_the_next_run(engine: Engine) -> None:
    one = np.ones((8, 8), np.float32)
    first = engine.run("add8", add_model, [one, one])[0]
    engine.run("add8", add_model, [one * 5, one])
    np.testing.assert_array_equal(first, 2 * one)


def test_in_place_edits_of_a_bound_array_are_seen(engine: Engine) -> None:
    a = np.ones((8, 8), np.float32)
    engine.run("add8", add_model, [a, a])
    a[...] = 7
    np.testing.assert_array_equal(engine.run("add8", add_model, [a, a])[0], np.full((8, 8), 14, np.float32))


def test_non_contiguous_and_converted_inputs(engine: Engine) -> None:
    base = np.arange(256, dtype=np.float64).reshape(16, 16)
    view = base[::2, ::2]  # not contiguous, float64
    out = engine.run("add8", add_model, [view, view])[0]
    np.testing.assert_array_equal(out, (2 * view).astype(np.float32))


def test_bad_inputs_are_named(engine: Engine) -> None:
    a = np.ones((8, 8), np.float32)
    with pytest.raises(
        InputError, match=r"input 'a': shape \[4, 4\] does not fit the compiled shape \[8, 8\]"
    ):
        engine.run("add8", add_model, {"a": a[:4, :4], "b": a})
    with pytest.raises(InputError, match=r"missing input\(s\) \['b'\]"):
        engine.run("add8", add_model, {"a": a})
    with pytest.raises(InputError, match="unknown input"):
        engine.run("add8", add_model, {"a": a, "b": a, "c": a})
    with pytest.raises(InputError, match="cannot be converted"):
        engine.run("add8", add_model, {"a": a, "b": np.full((8, 8), "x")})


def test_bad_hint_values_are_rejected() -> None:
    with pytest.raises(
        ValueError, match=r"inference_precision='f8' is not valid \(expected one of: f32, f16, bf16\)"
    ):
        RunConfig(inference_precision="f8")
    with pytest.raises(ValueError, match="execution_mode"):
        RunConfig(execution_mode="FAST")


def test_effective_precision_is_read_back(engine: Engine) -> None:
    exact = engine.compiled("add8", add_model, run_config=RunConfig(inference_precision="f32")).effective
    assert exact.inference_precision == "f32"
    asked_f16 = engine.compiled("add8", add_model, run_config=RunConfig(inference_precision="f16")).effective
    # This CPU has no native f16 compute: it reports what it really uses, not what was asked.
    assert asked_f16.requested.inference_precision == "f16"
    assert asked_f16.inference_precision in ("f32", "bf16", "f16")
    accurate = engine.compiled("add8", add_model, run_config=RunConfig(execution_mode="ACCURACY")).effective
    assert accurate.execution_mode == "ACCURACY"
    assert accurate.inference_precision == "model"  # no lowering: the model's own f32
    rows = {r["property"]: r for r in accurate.as_rows()}
    assert rows["EXECUTION_MODE_HINT"]["effective"] == "ACCURACY"
    assert rows["INFERENCE_PRECISION_HINT"]["requested"] == "(device default)"


def test_profiling_gives_per_node_timings(engine: Engine) -> None:
    a = np.ones((64, 64), np.float32)
    engine.run("add64", lambda: add_model(64), [a, a], run_config=RunConfig(profiling=True))
    assert engine.last_runner is not None and engine.last_runner.graph.effective.profiling
    df = engine.last_profile()
    assert list(df.columns) == ["node", "type", "exec_type", "status", "real_time_us", "cpu_time_us"]
    assert (df["status"] == "EXECUTED").any()
    assert df.loc[df["status"] == "EXECUTED", "real_time_us"].sum() > 0


def test_profiling_off_gives_no_fake_numbers(engine: Engine) -> None:
    a = np.ones((8, 8), np.float32)
    engine.run("add8", add_model, [a, a])
    assert engine.last_runner is not None and not engine.last_runner.graph.effective.profiling
    with pytest.raises(ProfilingOffError, match="PERF_COUNT reports off"):
        engine.last_profile()


def test_state_grows_and_resets(engine: Engine) -> None:
    for stateful in (True, False):
        session = engine.session("kv", kv_model, states={"cache": "cache_out"}, stateful=stateful)
        assert session.graph.stateful is stateful
        assert [p.name for p in session.graph.inputs] == (["x"] if stateful else ["cache", "x"])
        sizes = []
        for step in range(1, 4):
            (total,) = session.run({"x": np.full((2, 4), step, np.float32)})
            sizes.append(session.state("cache").shape[0])
        assert sizes == [2, 4, 6]
        np.testing.assert_array_equal(total, np.full(4, 2 * (1 + 2 + 3), np.float32))
        session.reset_state()
        assert session.state("cache").shape == (0, 4)
        session.set_state("cache", np.full((3, 4), 5, np.float32))
        (total,) = session.run({"x": np.ones((1, 4), np.float32)})
        np.testing.assert_array_equal(total, np.full(4, 16, np.float32))
        assert session.state("cache").shape == (4, 4)
        with pytest.raises(KeyError, match="no state named 'v'"):
            session.state("v")


def test_two_sessions_have_independent_state(engine: Engine) -> None:
    s1 = engine.session("kv", kv_model, states={"cache": "cache_out"}, stateful=True)
    s2 = engine.session("kv", kv_model, states={"cache": "cache_out"}, stateful=True)
    s1.run({"x": np.ones((3, 4), np.float32)})
    s2.run({"x": np.ones((1, 4), np.float32)})
    assert (s1.state("cache").shape[0], s2.state("cache").shape[0]) == (3, 1)
    assert engine.stats().compiles == 1


def test_stateful_follows_environment_and_is_off_on_npu() -> None:
    from ovkit.simulate import SimulatedCore

    engine = Engine(env={"GGML_OPENVINO_STATEFUL_EXECUTION": "1"}, core=SimulatedCore("laptop"))
    on_cpu = engine.session("kv", kv_model, states={"cache": "cache_out"})
    on_npu = engine.session("kv", kv_model, "NPU", states={"cache": "cache_out"})
    assert on_cpu.graph.stateful and not on_npu.graph.stateful
    for session in (on_cpu, on_npu):
        session.run({"x": np.ones((2, 4), np.float32)})
        session.run({"x": np.ones((2, 4), np.float32)})
        assert session.state("cache").shape == (4, 4)


def test_simulated_core_runs_and_labels(engine: Engine) -> None:
    from ovkit.simulate import SimulatedCore

    sim = Engine(env={}, core=SimulatedCore("laptop"))
    a = np.ones((8, 8), np.float32)
    np.testing.assert_array_equal(sim.run("add8", add_model, [a, a], "GPU")[0], 2 * a)
    effective = sim.compiled("add8", add_model, "GPU").effective
    assert effective.simulated
    assert {"property": "SIMULATED", "requested": "", "effective": "yes: compiled and run on the CPU"} in (
        effective.as_rows()
    )
    with pytest.raises(EngineError, match="not registered"):
        sim.run("add8", add_model, [a, a], "TPU")


def test_cache_dir_maps_like_upstream(tmp_path) -> None:
    cfg = read_config({"GGML_OPENVINO_CACHE_DIR": str(tmp_path)})
    assert compile_properties(RunConfig(), "CPU", cfg) == {
        "CACHE_DIR": str(tmp_path),
        "CACHE_MODE": "OPTIMIZE_SIZE",
    }
    assert compile_properties(RunConfig(), "NPU", cfg) == {
        "NPUW_CACHE_DIR": str(tmp_path),
        "CACHE_MODE": "OPTIMIZE_SIZE",
    }
    engine = Engine(env={"GGML_OPENVINO_CACHE_DIR": str(tmp_path)})
    a = np.ones((32, 32), np.float32)
    engine.run("add32", lambda: add_model(32), [a, a])
    assert any(p.suffix == ".blob" for p in tmp_path.iterdir())
    again = Engine(env={"GGML_OPENVINO_CACHE_DIR": str(tmp_path)})
    assert again.compiled("add32", lambda: add_model(32)).effective.loaded_from_cache is True


def test_f32_runs_turn_the_cpu_plugins_activation_quantization_off() -> None:
    """An f32 run on the CPU class asks for exact activations (no int8 dynamic quantization, which
    VNNI/AMX CPUs apply to compressed weights at f32 too); the device default and other device
    classes are left alone, and a run's own setting wins."""
    cfg = read_config({})
    assert compile_properties(RunConfig(inference_precision="f32"), "CPU", cfg) == {
        "INFERENCE_PRECISION_HINT": "f32",
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0,
    }
    assert compile_properties(RunConfig(), "CPU", cfg) == {}
    assert compile_properties(RunConfig(inference_precision="f32"), "GPU", cfg) == {
        "INFERENCE_PRECISION_HINT": "f32"
    }
    own = run_config_from({"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 32})
    assert compile_properties(own, "CPU", cfg)["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == "32"


@pytest.mark.slow
def test_ten_thousand_runs_keep_memory_flat() -> None:
    import psutil

    from ovkit.graph import Graph

    g = Graph()
    y = g.mul(g.add(g.input("a", (8, 8)), g.input("b", (8, 8))), g.constant(np.full((8, 8), 2, np.float32)))
    b = np.ones((8, 8), np.float32)
    proc = psutil.Process()
    for i in range(500):  # warm up allocator pools and the compile cache
        g.compute(y, {"a": np.full((8, 8), i, np.float32), "b": b})
    gc.collect()
    before = proc.memory_info().rss
    for i in range(10_000):  # a fresh input array every call: bound, kept, then released
        out = g.compute(y, {"a": np.full((8, 8), i, np.float32), "b": b})
    gc.collect()
    grown = proc.memory_info().rss - before
    np.testing.assert_array_equal(out, np.full((8, 8), 2 * (9_999 + 1), np.float32))
    assert grown < 5 * 1024 * 1024, f"RSS grew by {grown / 2**20:.2f} MiB over 10,000 runs"


# --- through ovkit.graph.Graph -----------------------------------------------------------------
def test_graph_compute_compiles_once_per_structure() -> None:
    from ovkit.engine import get_engine
    from ovkit.graph import Graph

    engine = get_engine()

    def build() -> tuple[Graph, object]:
        g = Graph()
        return g, g.scale(g.add(g.input("a", (3, 37)), g.input("b", (3, 37))), 0.5)

    a = np.arange(111, dtype=np.float32).reshape(3, 37)
    before = engine.stats()
    g1, y1 = build()
    first = g1.compute(y1, {"a": a, "b": a})
    g2, y2 = build()  # a new Graph object with the same structure
    second = g2.compute(y2, {"a": a, "b": 2 * a})
    after = engine.stats()
    np.testing.assert_allclose(first, a)
    np.testing.assert_allclose(second, 1.5 * a)
    assert after.compiles - before.compiles == 1
    assert after.hits - before.hits == 1


def test_graph_unsupported_op_names_the_policy_reason() -> None:
    from ovkit.graph import Graph, UnsupportedOpError

    g = Graph()
    y = g.exp(g.input("x", (4,)))
    with pytest.raises(UnsupportedOpError, match="EXP"):
        g.compute(y, {"x": np.zeros(4, np.float32)}, "CPU")


def test_graph_effective_precision_and_profile() -> None:
    from ovkit.engine import compute_graph, get_engine
    from ovkit.graph import Graph

    g = Graph()
    y = g.mul_mat(g.input("w", (16, 32)), g.input("x", (4, 32)))
    feed = {"w": np.ones((16, 32), np.float32), "x": np.ones((4, 32), np.float32)}
    out = compute_graph(g, [y], feed, "CPU", config=RunConfig(inference_precision="f32", profiling=True))[0]
    np.testing.assert_allclose(out, np.full((4, 16), 32, np.float32))
    runner = get_engine().last_runner
    assert runner is not None and runner.graph.effective.inference_precision == "f32"
    profile = runner.profile()
    executed = profile[profile["status"] == "EXECUTED"]
    assert len(executed) >= 1 and executed["real_time_us"].sum() > 0
    assert {"w", "x"} <= set(profile["node"])  # the Parameters are listed (NOT_RUN)


def test_graph_session_kv_cache_fills_and_resets() -> None:
    """A fixed-size KV buffer written with set_rows, as llama.cpp keeps its cache."""
    from ovkit.engine import graph_session
    from ovkit.graph import Graph

    ctx, width = 8, 4
    g = Graph()
    cache = g.input("cache", (ctx, width))
    rows = g.input("rows", (2, width))
    idx = g.input("idx", (2,), "i64")
    nxt = g.set_rows(cache, rows, idx)
    total = g.scale(nxt, 1.0)
    for stateful in (True, False):
        s = graph_session(g, [total], {"cache": nxt}, stateful=stateful)
        assert s.stateful is stateful
        filled = []
        for step in range(3):
            s.compute(
                {"rows": np.full((2, width), step + 1, np.float32), "idx": np.array([2 * step, 2 * step + 1])}
            )
            filled.append(int(np.count_nonzero(s.state("cache").any(axis=1))))
        assert filled == [2, 4, 6]
        np.testing.assert_array_equal(s.state("cache")[:6, 0], [1, 1, 2, 2, 3, 3])
        s.reset_state()
        assert not s.state("cache").any()
        s.set_state("cache", np.full((ctx, width), 9, np.float32))
        (out,) = s.compute({"rows": np.zeros((2, width), np.float32), "idx": np.array([0, 1])})
        np.testing.assert_array_equal(out[:, 0], [0, 0, 9, 9, 9, 9, 9, 9])


def test_profiling_env_logs_upstream_timing_lines(caplog: pytest.LogCaptureFixture) -> None:
    engine = Engine(env={"GGML_OPENVINO_PROFILING": "1"})
    a = np.ones((8, 8), np.float32)
    with caplog.at_level("INFO", logger="ovkit"):
        engine.run("add8", add_model, [a, a])
    text = caplog.text
    assert (
        "GGML OpenVINO Backend:" in text and "Graph compile time:" in text and "Graph inference time:" in text
    )


@pytest.mark.parametrize("stateful", [True, False])
def test_transformer_decode_with_kv_cache_equals_full_recompute(stateful: bool) -> None:
    """Prefill 5 tokens, then decode the 6th from the cached K/V: same as running all 6 at once."""
    from ovkit.decoder_layer import CACHE_NAMES, BlockConfig, block_inputs, block_weights, transformer_block
    from ovkit.engine import graph_session

    cfg = BlockConfig(d=64, heads=4, kv_heads=2, head_dim=16, ff=128, ctx=16)
    weights = block_weights(cfg)
    xs = np.random.default_rng(1).standard_normal((6, cfg.d)).astype(np.float32)
    sessions = {}
    for n in (5, 1, 6):
        g, out, states = transformer_block(cfg, n, weights)
        sessions[n] = graph_session(g, [out], states, stateful=stateful)
    assert sessions[1].stateful is stateful
    sessions[5].compute(block_inputs(cfg, xs[:5], 0))
    assert np.count_nonzero(sessions[5].state("cache_k_l0").any(axis=1)) == 5
    for name in CACHE_NAMES:
        sessions[1].set_state(name, sessions[5].state(name))
    (last,) = sessions[1].compute(block_inputs(cfg, xs[5:6], 5))
    assert np.count_nonzero(sessions[1].state("cache_k_l0").any(axis=1)) == 6
    (full,) = sessions[6].compute(block_inputs(cfg, xs, 0))
    np.testing.assert_allclose(last.reshape(-1), full[5], rtol=1e-5, atol=1e-5)


def test_graph_plans_follow_eviction_and_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    from ovkit.engine import get_engine
    from ovkit.graph import Graph
    from ovkit.simulate import SimulatedCore

    core = SimulatedCore("laptop")
    engine = get_engine(core)
    monkeypatch.setenv("OVKIT_ENGINE_CACHE_SIZE", "1")
    engine.reload()
    ga, gb = Graph(), Graph()
    ya = ga.scale(ga.input("x", (4,)), 2.0)
    yb = gb.scale(gb.input("x", (4,)), 3.0)
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(ga.compute(ya, {"x": x}, core=core), 2 * x)
    np.testing.assert_array_equal(gb.compute(yb, {"x": x}, core=core), 3 * x)  # evicts a
    np.testing.assert_array_equal(ga.compute(ya, {"x": x}, core=core), 2 * x)  # compiles a again
    stats = engine.stats()
    assert (stats.misses, stats.evictions, stats.size) == (3, 2, 1)
    np.testing.assert_array_equal(ga.compute(ya, {"x": x}, core=core), 2 * x)
    assert engine.stats().hits == 1
    engine.clear()
    np.testing.assert_array_equal(ga.compute(ya, {"x": x}, core=core), 2 * x)
    assert engine.stats().misses == 4


def test_clear_and_eviction_free_compiled_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in the engine (plans, last runner) keeps a dropped compiled model alive."""
    import weakref

    from ovkit.engine import get_engine
    from ovkit.graph import Graph
    from ovkit.simulate import SimulatedCore

    core = SimulatedCore("laptop")
    engine = get_engine(core)
    monkeypatch.setenv("OVKIT_ENGINE_CACHE_SIZE", "1")
    engine.reload()
    x = np.ones(4, np.float32)
    ga = Graph()
    ya = ga.scale(ga.input("x", (4,)), 2.0)
    ga.compute(ya, {"x": x}, core=core)
    first = weakref.ref(engine.entries()[0])
    gb = Graph()
    yb = gb.scale(gb.input("x", (4,)), 5.0)
    gb.compute(yb, {"x": x}, core=core)  # evicts the first model
    gc.collect()
    assert first() is None
    second = weakref.ref(engine.entries()[0])
    engine.clear()
    gc.collect()
    assert second() is None and engine.last_runner is None


def test_run_model_keys_each_model_object_once(engine: Engine) -> None:
    model = add_model(8)
    a = np.ones((8, 8), np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(engine.run_model(model, [a, a])[0], 2 * a)
    assert engine.stats().compiles == 1
    model.reshape({"a": [4, 8], "b": [4, 8]})  # a mutated model gets a new key
    np.testing.assert_array_equal(engine.run_model(model, [a[:4], a[:4]])[0], 2 * a[:4])
    assert engine.stats().compiles == 2


def test_graph_default_config_by_size_and_dict_configs_reuse_plans() -> None:
    from ovkit.engine import TINY_ELEMENTS, compute_graph, get_engine
    from ovkit.graph import Graph

    engine = get_engine()
    g = Graph()
    tiny = g.scale(g.input("t", (8, 8)), 2.0)
    big = g.scale(g.input("b", (2, TINY_ELEMENTS)), 2.0)
    compute_graph(g, [tiny], {"t": np.ones((8, 8), np.float32)})
    assert engine.last_runner is not None
    tiny_eff = engine.last_runner.graph.effective
    assert (tiny_eff.inference_precision, tiny_eff.num_threads) == ("f32", 1)
    compute_graph(g, [big], {"b": np.ones((2, TINY_ELEMENTS), np.float32)})
    big_eff = engine.last_runner.graph.effective
    assert big_eff.inference_precision == "f32" and big_eff.requested.num_threads is None
    plans = engine.stats().plans
    for _ in range(3):  # a raw dict config (as Graph.compute passes it) maps to one plan
        compute_graph(
            g, [tiny], {"t": np.ones((8, 8), np.float32)}, config={"INFERENCE_PRECISION_HINT": "bf16"}
        )
    assert engine.stats().plans == plans + 1
    assert engine.last_runner.graph.effective.requested.inference_precision == "bf16"


def test_concurrent_compute_from_threads() -> None:
    """Threads share compiled models and requests safely (each call binds and reads under a lock)."""
    from concurrent.futures import ThreadPoolExecutor

    from ovkit.graph import Graph

    g = Graph()
    y = g.scale(g.input("x", (16,)), 3.0)

    def work(i: int) -> bool:
        x = np.full(16, i, np.float32)
        return all(np.array_equal(g.compute(y, {"x": x}), 3 * x) for _ in range(50))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(8)))


def test_thread_hint_only_on_the_cpu_class() -> None:
    from ovkit.engine import compute_graph, get_engine
    from ovkit.graph import Graph
    from ovkit.simulate import SimulatedCore

    core = SimulatedCore("laptop")
    g = Graph()
    y = g.scale(g.input("x", (4,)), 2.0)
    for dev, threads, precision in (("CPU", 1, "f32"), ("GPU", None, "f32"), ("NPU", None, None)):
        compute_graph(g, [y], {"x": np.ones(4, np.float32)}, dev, core=core)
        runner = get_engine(core).last_runner
        assert runner is not None, dev
        assert (runner.graph.run_config.num_threads, runner.graph.run_config.inference_precision) == (
            threads,
            precision,
        ), dev


def repeated_constants_model(n: int = 40) -> ov.Model:
    """``n`` steps of reshape and add, each with its own copies of the same shape and scalar,
    plus two equal weight-sized constants (distinct nodes that must stay distinct)."""
    x = ops.parameter([8, 64], np.float32, name="x")
    y = x.output(0)
    for i in range(n):
        shape = [64, 8] if i % 2 == 0 else [8, 64]
        y = ops.add(
            ops.reshape(y, ops.constant(np.array(shape, np.int64)), False), ops.constant(np.float32(0.5))
        ).output(0)
    w = np.full((64, 64), 0.01, np.float32)
    y = ops.add(ops.matmul(y, ops.constant(w), False, False), ops.matmul(y, ops.constant(w), False, False))
    y.output(0).get_tensor().set_names({"y"})
    return ov.Model([y], [x], "repeated")


def test_engine_compiles_repeated_small_constants_as_one_node_each() -> None:
    from ovkit.engine.ov_model import share_constants

    def constants(m: ov.Model) -> int:
        return sum(op.get_type_name() == "Constant" for op in m.get_ordered_ops())

    model = repeated_constants_model()
    before = constants(model)  # 2 shapes and a scalar per step, 2 weights
    assert share_constants(model) == before - 5 and constants(model) == 5  # the weights stay two
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    want = x + 0.5 * 40
    want = 2 * (want @ np.full((64, 64), 0.01, np.float32))
    got = Engine(env={}).run("repeated", repeated_constants_model, {"x": x}, device="CPU")[0]
    np.testing.assert_allclose(got, want, rtol=1e-2)  # the CPU's default precision may be bf16
