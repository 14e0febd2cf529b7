"""Host weight release: RSS drops, results stay correct, recompiles and new models are refused."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import numpy as np
import psutil
import pytest

from ovkit import buffers, read_config, weight_release
from ovkit.weight_release import WeightsReleasedError


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    weight_release.reset()
    yield
    weight_release.reset()


def _weights_model(m: int, k: int) -> tuple[buffers.Buffer, np.ndarray, object]:
    """f16 weights in an ovkit host buffer; the OpenVINO Constant shares the buffer's memory."""
    import openvino as ov
    import openvino.opset13 as ops

    buf = buffers.alloc_buffer("CPU", m * k * 2, buffers.Usage.WEIGHTS, host=True)
    t = buf.place("blk.0.ffn_up.weight", (m, k), "f16")
    w = (np.random.default_rng(0).standard_normal((m, k)) * 0.05).astype(np.float16)
    buf.set_tensor(t, w)
    x = ops.parameter([1, k], ov.Type.f32, name="x")
    const = ops.constant(t.numpy(), shared_memory=True)  # zero-copy, like upstream's weight Constant
    model = ov.Model([ops.matmul(x, ops.convert(const, "f32"), False, True)], [x])
    compiled = ov.Core().compile_model(model, "CPU")  # the CPU plugin repacks FC weights: its own copy
    return buf, w, compiled


def test_release_returns_pages_and_results_stay_correct(caplog: pytest.LogCaptureFixture) -> None:
    m, k = 2048, 16384  # 64 MiB of f16 weights
    buf, w, compiled = _weights_model(m, k)
    assert weight_release.register_weight_buffer(buf)
    assert not weight_release.register_weight_buffer(buf)  # idempotent per address
    x = np.random.default_rng(1).standard_normal((1, k)).astype(np.float32)
    req = compiled.create_infer_request()  # type: ignore[attr-defined]
    before = np.array(req.infer({0: x})[0])
    config = read_config({"GGML_OPENVINO_RELEASE_WEIGHTS": "1"})

    rss0 = psutil.Process(os.getpid()).memory_info().rss
    with caplog.at_level(logging.INFO, logger="ovkit.weight_release"):
        result = weight_release.on_cache_hit("CPU", config)
    rss1 = psutil.Process(os.getpid()).memory_info().rss

    assert result is not None
    assert result.released_bytes == m * k * 2
    assert result.buffers == 1
    assert (rss0 - rss1) >= 0.9 * result.released_bytes
    assert (
        "ggml_openvino_release_weight_buffers: released 64 MB of host weight buffers (1 buffers)"
        in caplog.text
    )
    assert not buf.data.any()  # the host copy is gone (pages read back as zeros) ...
    after = np.array(req.infer({0: x})[0])
    np.testing.assert_array_equal(after, before)  # ... but the runtime's own copy still computes
    np.testing.assert_allclose(after, x @ w.astype(np.float32).T, rtol=0.05, atol=0.05)
    assert weight_release.on_cache_hit("CPU", config) is None  # only the first hit releases
    buf.free()


def test_recompile_after_release_raises_documented_error() -> None:
    buf, _, _ = _weights_model(64, 256)
    weight_release.register_weight_buffer(buf)
    weight_release.on_cache_hit("CPU", read_config({"GGML_OPENVINO_RELEASE_WEIGHTS": "1"}))
    with pytest.raises(WeightsReleasedError) as err:
        weight_release.before_compile("CPU")
    assert str(err.value).startswith(
        "ggml-openvino: a new graph needs to be compiled but host weight buffers were already released "
        "via GGML_OPENVINO_RELEASE_WEIGHTS/GGML_OPENVINO_MEMORY_OPTIMIZE."
    )
    other = buffers.alloc_buffer("CPU", 4096, buffers.Usage.WEIGHTS, host=True)
    with pytest.raises(
        WeightsReleasedError, match="loading a new model while GGML_OPENVINO_RELEASE_WEIGHTS pinned"
    ):
        weight_release.register_weight_buffer(other)
    other.free()
    buf.free()


def test_memory_optimize_releases_on_gpu_class_only() -> None:
    config = read_config({"GGML_OPENVINO_MEMORY_OPTIMIZE": "1"})
    buf = buffers.alloc_buffer("CPU", 1 << 20, buffers.Usage.WEIGHTS, host=True)
    buf.data[:] = 1
    weight_release.register_weight_buffer(buf)
    assert weight_release.on_cache_hit("CPU", config) is None
    assert not weight_release.REGISTRY.released
    result = weight_release.on_cache_hit("GPU.1", config)
    assert result is not None and result.released_bytes == 1 << 20
    buf.free()


def test_disabled_by_default_everywhere() -> None:
    config = read_config({})
    buf = buffers.alloc_buffer("CPU", 1 << 16, buffers.Usage.WEIGHTS, host=True)
    weight_release.register_weight_buffer(buf)
    for device in ("CPU", "GPU", "NPU"):
        assert weight_release.on_cache_hit(device, config) is None
    weight_release.before_compile("CPU")  # nothing released: compiling is fine
    buf.free()


def test_page_range_rounds_inward() -> None:
    assert weight_release.page_range(100, 10000, 4096) == (4096, 4096)
    assert weight_release.page_range(4096, 8192, 4096) == (4096, 8192)
    assert weight_release.page_range(10, 100, 4096) == (4096, 0)


def test_freed_buffer_is_skipped() -> None:
    buf = buffers.alloc_buffer("CPU", 1 << 16, buffers.Usage.WEIGHTS, host=True)
    weight_release.register_weight_buffer(buf)
    buf.free()
    result = weight_release.REGISTRY.release("CPU")
    assert (result.released_bytes, result.buffers) == (0, 0)


def test_engine_first_cache_hit_releases_and_recompile_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end through ovkit.engine: miss compiles, the first hit releases, a new graph is refused."""
    import openvino as ov
    import openvino.opset13 as ops

    from ovkit.engine import Engine

    monkeypatch.setenv("GGML_OPENVINO_RELEASE_WEIGHTS", "1")
    buf, w, _ = _weights_model(256, 1024)
    weight_release.register_weight_buffer(buf)
    t = buf.tensor("blk.0.ffn_up.weight")
    x = ops.parameter([1, 1024], ov.Type.f32, name="x")
    model = ov.Model(
        [ops.matmul(x, ops.convert(ops.constant(t.numpy(), shared_memory=True), "f32"), False, True)], [x]
    )
    engine = Engine(core=ov.Core())
    xv = np.random.default_rng(2).standard_normal((1, 1024)).astype(np.float32)
    # keyed by structure like upstream's cgraph fingerprint (the weights are read by pointer, so
    # their bytes are not part of the key: after the release they read as zeros)
    key = ("ffn_up", (1, 1024))
    first = engine.run(key, model.clone, {"x": xv}, "CPU")[0]
    assert not weight_release.REGISTRY.released
    second = engine.run(key, model.clone, {"x": xv}, "CPU")[0]  # cache hit -> release
    assert weight_release.REGISTRY.released
    assert not buf.data.any()
    np.testing.assert_array_equal(second, first)
    third = engine.run(key, model.clone, {"x": xv}, "CPU")[0]  # still served from the pinned cache
    np.testing.assert_array_equal(third, first)
    other = ov.Model([ops.relu(x)], [x])
    with pytest.raises(WeightsReleasedError, match="a new graph needs to be compiled"):
        engine.run(("relu", (1, 1024)), other.clone, {"x": xv}, "CPU")
    buf.free()


def test_dropped_buffer_leaves_the_registry_and_a_new_one_at_its_address_is_released() -> None:
    import gc

    size = 1 << 16
    old = buffers.alloc_buffer("CPU", size, buffers.Usage.WEIGHTS, host=True)
    assert weight_release.register_weight_buffer(old)
    old_address = old.storage.address
    del old  # dropped without free()
    gc.collect()
    assert weight_release.REGISTRY.count == 0
    new = buffers.alloc_buffer("CPU", size, buffers.Usage.WEIGHTS, host=True)
    new.data[:] = 1
    # the kernel usually hands the same pages' address back; either way the new buffer is new
    assert weight_release.register_weight_buffer(new), f"same address: {new.storage.address == old_address}"
    assert not weight_release.register_weight_buffer(new)  # idempotent per buffer
    result = weight_release.REGISTRY.release("CPU")
    assert (result.released_bytes, result.buffers) == (size, 1)
    assert not new.data.any()  # its pages were really given back (read back as zeros)
    new.free()
