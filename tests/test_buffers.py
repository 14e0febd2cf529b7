"""Buffer types, single-owner storage, placed tensors, extras, allocation tracking, leaks."""

from __future__ import annotations

import gc
import os

import numpy as np
import psutil
import pytest

from ovkit import buffers
from ovkit.buffers import BufferKind, BufferType, BufferUsageError, ExtraKind, TensorExtra, Usage
from ovkit.simulate import SimulatedCore


def test_names_and_kinds() -> None:
    dev = buffers.buffer_type("GPU.1")
    host = buffers.host_buffer_type("GPU.1")
    assert (dev.name, dev.kind) == ("GPU.1", BufferKind.DEVICE)
    assert (host.name, host.kind) == ("GPU.1_HOST", BufferKind.HOST)
    assert dev.alignment == host.alignment == 32
    assert dev.max_size == buffers.SIZE_MAX


def test_buffer_types_are_stable_objects() -> None:
    assert buffers.buffer_type("CPU") is buffers.buffer_type("CPU")
    assert buffers.host_buffer_type("CPU").name is buffers.host_buffer_type("CPU").name


def test_registry_reads_metadata_not_names() -> None:
    lookalike = BufferType("CPU_HOST", "CPU", BufferKind.HOST)
    assert not buffers.is_ovkit_buffer_type(lookalike)
    assert buffers.buffer_type_kind(lookalike) is None
    assert buffers.buffer_type_kind(buffers.host_buffer_type("CPU")) is BufferKind.HOST
    # a device literally named "..._HOST" is still a device buffer type
    odd = buffers.buffer_type("X_HOST")
    assert buffers.buffer_type_kind(odd) is BufferKind.DEVICE


def test_foreign_buffer_type_cannot_allocate() -> None:
    with pytest.raises(BufferUsageError, match="not an ovkit buffer type"):
        buffers.Buffer(BufferType("CPU", "CPU", BufferKind.DEVICE), 64)


def test_bad_device_name() -> None:
    with pytest.raises(ValueError, match="expected a device id"):
        buffers.buffer_type("")


def test_host_memory_zeroed_aligned_and_shared_with_ov_tensor() -> None:
    with buffers.alloc_buffer("CPU", 4096, "compute") as buf:
        assert buf.size == 4096
        assert buf.data.ctypes.data % 64 == 0
        assert not buf.data.any()
        t = buf.ov_tensor
        assert t.get_byte_size() == 4096
        buf.data[10] = 7
        assert np.asarray(t.data)[10] == 7  # one storage, no copies
        assert buf.storage.note == "host memory"


def test_zero_size_allocates_nothing() -> None:
    with buffers.alloc_buffer("CPU", 0) as buf:
        assert buf.size == 0


def test_negative_size_rejected() -> None:
    with pytest.raises(ValueError, match="non-negative integer, got -1"):
        buffers.alloc_buffer("CPU", -1)


def test_simulated_gpu_kv_cache_uses_host_memory_and_says_so() -> None:
    core = SimulatedCore("laptop")
    with buffers.alloc_buffer("GPU", 1 << 16, Usage.KV_CACHE, core=core) as buf:
        assert buf.storage.note == "simulated GPU: host memory"
        assert not buf.is_remote
        row = buffers.current_allocations().set_index("buffer_id").loc[buf.id]
        assert row["storage"] == "simulated GPU: host memory"


def test_place_set_get_and_offsets() -> None:
    with buffers.alloc_buffer("CPU", 1024, "weights", host=True) as buf:
        a = buf.place("a", (3, 5), "f32")
        b = buf.place("b", (4,), "f16")
        assert a.offset == 0
        assert b.offset == 64  # 60 bytes rounded up to the 32-byte alignment
        values = np.arange(15, dtype=np.float32).reshape(3, 5)
        buf.set_tensor(a, values)
        np.testing.assert_array_equal(buf.get_tensor(a), values)
        np.testing.assert_array_equal(a.numpy(), values)


def test_place_out_of_range_and_misaligned() -> None:
    with buffers.alloc_buffer("CPU", 128) as buf:
        with pytest.raises(
            BufferUsageError, match=r"'big' \(256 bytes at offset 0\) does not fit .* of 128 bytes"
        ):
            buf.place("big", (64,), "f32")
        with pytest.raises(BufferUsageError, match="offset 8 is not a multiple of 32"):
            buf.place("x", (2,), "f32", offset=8)


def test_quantized_alloc_size_covers_extracted_layout() -> None:
    nbytes = buffers.tensor_nbytes((64, 256), "q4_0")
    assert nbytes == 64 * 8 * 18
    assert buffers.alloc_size((64, 256), "q4_0") >= nbytes


def test_views_share_their_source_extra() -> None:
    with buffers.alloc_buffer("CPU", 1024) as buf:
        src = buf.place("src", (8, 8), "f32")
        view = buf.view(src, "row1", (8,), offset=32)
        view2 = buf.view(view, "half", (4,), offset=16)
        assert src.extra is not None and src.extra.kind is ExtraKind.TENSOR
        assert view.extra is src.extra
        assert view2.extra is src.extra
        buf.set_tensor(src, np.arange(64, dtype=np.float32).reshape(8, 8))
        np.testing.assert_array_equal(buf.get_tensor(view2), [12, 13, 14, 15])


def test_view_past_source_rejected() -> None:
    with buffers.alloc_buffer("CPU", 1024) as buf:
        src = buf.place("src", (4,), "f32")
        with pytest.raises(BufferUsageError, match="exceed source 'src'"):
            buf.view(src, "v", (4,), offset=4)


def test_replacing_extra_releases_old_once_and_free_releases_all() -> None:
    buf = buffers.alloc_buffer("CPU", 1024, "weights")
    t = buf.place("w", (16,), "f32")
    first = t.extra
    assert first is not None
    second = buf.set_extra(t, TensorExtra(ExtraKind.WEIGHT, weight="node"))
    assert first.released and not second.released
    buf.set_extra(t, second)  # same extra again: nothing released
    assert not second.released
    buf.free()
    assert second.released and buf.extras == []
    buf.free()  # idempotent, no double release


def test_use_after_free_is_an_error() -> None:
    buf = buffers.alloc_buffer("CPU", 256)
    buf.free()
    with pytest.raises(BufferUsageError, match="used after free"):
        _ = buf.data


def test_tracking_records_alloc_and_free() -> None:
    start = len(buffers.allocation_history())
    buf = buffers.alloc_buffer("CPU", 12345, Usage.KV_CACHE)
    cur = buffers.current_allocations()
    row = cur.set_index("buffer_id").loc[buf.id]
    assert (row["device"], row["buffer_type"], row["usage"], row["bytes"]) == (
        "CPU",
        "CPU",
        "kv_cache",
        12345,
    )
    buf.free()
    hist = buffers.allocation_history().iloc[start:]
    mine = hist[hist["buffer_id"] == buf.id]
    assert list(mine["event"]) == ["alloc", "free"]
    assert buf.id not in set(buffers.current_allocations()["buffer_id"])


def test_frames_of_an_empty_record_keep_their_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buffers, "HISTORY", [])
    assert list(buffers.current_allocations().columns)[:2] == ["buffer_id", "device"]
    history = buffers.allocation_history()
    assert history.empty and list(history.columns)[-1] == "live_bytes"


def live_bytes() -> int:
    return int(buffers.current_allocations()["bytes"].sum())


def test_garbage_collected_buffer_is_released_and_recorded() -> None:
    before = live_bytes()
    buf = buffers.alloc_buffer("CPU", 4096)
    bid = buf.id
    del buf
    gc.collect()
    assert live_bytes() == before
    assert bid not in set(buffers.current_allocations()["buffer_id"])


def test_no_leak_after_1000_allocate_free_cycles() -> None:
    proc = psutil.Process(os.getpid())
    bytes0 = live_bytes()
    extras = []
    for _ in range(50):  # warm up allocator and OpenVINO tensor wrappers
        with buffers.alloc_buffer("CPU", 1 << 20, Usage.COMPUTE) as buf:
            buf.place("t", (1024,), "f32")
            _ = buf.ov_tensor
    gc.collect()
    rss0 = proc.memory_info().rss
    for i in range(1000):
        buf = buffers.alloc_buffer(
            "CPU", 1 << 20, Usage.COMPUTE if i % 2 else Usage.WEIGHTS, host=bool(i % 3)
        )
        t = buf.place("t", (1024,), "f32")
        buf.view(t, "v", (512,))
        buf.data[:4096] = 1  # touch pages
        _ = buf.ov_tensor
        extras.append(t.extra)
        buf.free()
    gc.collect()
    grown = proc.memory_info().rss - rss0
    assert live_bytes() == bytes0
    assert all(e is not None and e.released for e in extras)
    assert grown < 16 << 20, f"resident memory grew by {grown} bytes over 1000 cycles of 1 MiB buffers"


def test_set_weight_builds_weight_extras_and_registers_for_release() -> None:
    from ovkit import quant, weight_release

    weight_release.reset()
    qw = quant.quantize("q4_0", np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32))
    with buffers.alloc_buffer("CPU", 4096, Usage.WEIGHTS, host=True) as buf:
        t = buf.place("blk.0.attn_q.weight", qw.shape, "q4_0")
        extra = buf.set_weight(t, qw.raw)
        assert extra.kind is ExtraKind.QUANTIZED_WEIGHT
        assert isinstance(extra.weight, quant.QuantizedWeight)
        np.testing.assert_array_equal(extra.weight.dequantize(), qw.dequantize())
        n = buf.place("norm", (64,), "f32")
        assert buf.set_weight(n, np.ones(64, np.float32)).kind is ExtraKind.WEIGHT
        assert weight_release.REGISTRY.count == 1
    assert weight_release.REGISTRY.count == 0  # freeing the buffer unregisters it
    weight_release.reset()


def test_kv_cache_tensor_moves_gpu_buffer_to_device_memory() -> None:
    """Upstream's cache-tensor migration on a simulated GPU: the first cache_* tensor migrates the buffer, offsets kept."""
    core = SimulatedCore("laptop")
    start = len(buffers.allocation_history())
    with buffers.alloc_buffer("GPU", 4096, Usage.ANY, core=core) as buf:
        assert not buf.is_device_side
        buf.data[:16] = 7  # bytes written before the migration survive it
        k = buf.place("cache_k_l0", (8, 16), "f32")
        assert buf.is_device_side
        assert buf.storage.note == "simulated GPU: host memory"
        assert k.offset == 0 and (buf.data[:16] == 7).all()
        v = buf.place("cache_v_l0", (8, 16), "f32")
        assert v.offset == 8 * 16 * 4
        events = buffers.allocation_history().iloc[start:]
        mine = events[events["buffer_id"] == buf.id]
        assert list(mine["event"]) == ["alloc", "free", "alloc"]
        assert list(mine["storage"]) == ["host memory", "host memory", "simulated GPU: host memory"]


def test_kv_cache_stays_on_host_when_stateful_or_not_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    core = SimulatedCore("laptop")
    with buffers.alloc_buffer("CPU", 4096, core=core) as cpu:
        cpu.place("cache_k_l0", (8, 16), "f32")
        assert not cpu.is_device_side
    monkeypatch.setenv("GGML_OPENVINO_STATEFUL_EXECUTION", "1")
    with buffers.alloc_buffer("GPU", 4096, core=core) as gpu:
        gpu.place("cache_k_l0", (8, 16), "f32")
        assert not gpu.is_device_side


def test_kv_migration_after_extras_is_refused() -> None:
    core = SimulatedCore("laptop")
    with buffers.alloc_buffer("GPU", 4096, core=core) as buf:
        buf.place("inp_pos", (4,), "i32")
        with pytest.raises(BufferUsageError, match="must be the first tensor placed"):
            buf.place("cache_k_l0", (8, 16), "f32")
