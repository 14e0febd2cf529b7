"""GGUF reading on small files the tests write with the gguf package (no downloads)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from ovkit import gguf as og
from ovkit import quant
from ovkit.graph import Graph
from ovkit.simulate import SimulatedCore


@pytest.fixture(scope="module")
def weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "up": rng.standard_normal((32, 256)).astype(np.float32),
        "out": rng.standard_normal((16, 256)).astype(np.float32),
        "emb": rng.standard_normal((10, 64)).astype(np.float32),
        "norm": rng.standard_normal((256,)).astype(np.float32),
    }


@pytest.fixture()
def model_file(tmp_path: Path, weights: dict[str, np.ndarray]) -> Path:
    return og.write_gguf(
        tmp_path / "tiny.gguf",
        {
            "blk.0.ffn_up.weight": quant.quantize("q4_K", weights["up"]),
            "output.weight": quant.quantize("q6_K", weights["out"]),
            "token_embd.weight": weights["emb"].astype(np.float16),
            "blk.0.attn_norm.weight": weights["norm"],
        },
        metadata={"general.name": "tiny", "llama.context_length": 128},
    )


def test_metadata(model_file: Path) -> None:
    m = og.read_gguf(model_file)
    assert m.architecture == "llama"
    assert m.metadata["general.name"] == "tiny"
    assert m.metadata["llama.context_length"] == 128
    assert "general.name" in set(m.metadata_table()["key"])


def test_tensor_table(model_file: Path) -> None:
    df = og.read_gguf(model_file).tensor_table().set_index("name")
    assert list(df.columns) == ["type", "shape", "bytes", "offset", "supported"]
    assert df.loc["blk.0.ffn_up.weight", "type"] == "q4_K"
    assert df.loc["blk.0.ffn_up.weight", "shape"] == (32, 256)  # numpy order: rows, ne0
    assert df.loc["blk.0.ffn_up.weight", "bytes"] == 32 * 144
    assert df.loc["output.weight", "bytes"] == 16 * 210
    assert df.loc["token_embd.weight", "type"] == "f16"
    assert df.loc["token_embd.weight", "bytes"] == 10 * 64 * 2
    assert df.loc["blk.0.attn_norm.weight", "shape"] == (256,)
    assert df["supported"].all()


def test_constants_quantized_stay_quantized(model_file: Path, weights: dict[str, np.ndarray]) -> None:
    m = og.read_gguf(model_file)
    up = m.constant("blk.0.ffn_up.weight")
    assert isinstance(up, quant.QuantizedWeight)
    assert (up.dtype, up.shape, up.nbytes) == ("q4_K", (32, 256), 32 * 144)
    np.testing.assert_array_equal(up.dequantize(), quant.quantize("q4_K", weights["up"]).dequantize())
    emb = m.constant("token_embd.weight")
    assert isinstance(emb, np.ndarray) and emb.dtype == np.float16
    np.testing.assert_array_equal(emb, weights["emb"].astype(np.float16))
    assert dict(m.constants()).keys() == m.tensors.keys()


def test_gguf_weight_in_a_graph_on_cpu(model_file: Path) -> None:
    m = og.read_gguf(model_file)
    up = m.constant("blk.0.ffn_up.weight")
    assert isinstance(up, quant.QuantizedWeight)
    x = np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)
    g = Graph()
    out = g.compute(g.mul_mat(g.constant(up), g.input("x", x.shape)), {"x": x}, device="CPU")
    expected = x @ up.dequantize().T
    assert float(np.mean((out.reshape(expected.shape) - expected) ** 2) / np.mean(expected**2)) < 5e-4


def test_fit_check_uses_policy_and_free_memory(model_file: Path) -> None:
    m = og.read_gguf(model_file)
    core = SimulatedCore("laptop")
    df = m.fit_check(core).set_index("device")
    assert set(df.index) == {"CPU", "GPU", "NPU"}
    # q4_K native extraction: u4 weights + f16 scales + u4 zero points per 32-group;
    # output.weight (q6_K) becomes per-row i8 on CPU/GPU: 16*256 weights + 16 f16 scales
    q4k = 32 * 256 // 2 + (32 * 256 // 32) * 2 + (32 * 256 // 32) // 2
    expected_cpu = q4k + (16 * 256 + 16 * 2) + 10 * 64 * 2 + 256 * 4
    assert df.loc["CPU", "weight_bytes"] == expected_cpu
    assert df.loc["CPU", "file_bytes"] == m.total_bytes
    assert df["fits"].all()
    core.set_property_value("GPU", "GPU_DEVICE_TOTAL_MEM_SIZE", 1000)
    df2 = m.fit_check(core).set_index("device")
    assert not df2.loc["GPU", "fits"]
    assert df2.loc["GPU", "headroom_bytes"] < 0


def test_truncated_file_clear_error(model_file: Path, tmp_path: Path) -> None:
    data = model_file.read_bytes()
    for cut in (3, 12, 40, len(data) // 2, len(data) - 7):
        bad = tmp_path / f"cut{cut}.gguf"
        bad.write_bytes(data[:cut])
        with pytest.raises(og.GGUFError, match=str(bad.name)):
            og.read_gguf(bad)


def test_offsets_past_end_clear_error(model_file: Path, tmp_path: Path) -> None:
    data = bytearray(model_file.read_bytes())
    # tensor info of the f32 norm: name, n_dims (u32), dims (u64 each), type (u32), offset (u64)
    name = b"blk.0.attn_norm.weight"
    pos = data.index(name) + len(name)
    n_dims = struct.unpack_from("<I", data, pos)[0]
    off_pos = pos + 4 + 8 * n_dims + 4
    struct.pack_into("<Q", data, off_pos, 10_000_000)
    bad = tmp_path / "past_end.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(
        og.GGUFError, match=r"past_end\.gguf.*(blk\.0\.attn_norm\.weight|truncated or corrupt)"
    ):
        og.read_gguf(bad)


def test_not_a_gguf(tmp_path: Path) -> None:
    p = tmp_path / "x.gguf"
    p.write_bytes(b"PK\x03\x04hello")
    with pytest.raises(og.GGUFError, match=r"not a GGUF file \(magic b'PK\\x03\\x04'"):
        og.read_gguf(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(og.GGUFError, match="no such GGUF file"):
        og.read_gguf(tmp_path / "nope.gguf")


def test_unknown_tensor_name(model_file: Path) -> None:
    with pytest.raises(KeyError, match="no tensor 'nope'"):
        og.read_gguf(model_file).constant("nope")


def test_load_into_buffer_tracks_weights(model_file: Path) -> None:
    from ovkit import buffers, weight_release

    weight_release.reset()
    m = og.read_gguf(model_file)
    buf, placed = m.load_into_buffer("CPU")
    try:
        assert set(placed) == set(m.tensors)
        row = buffers.current_allocations().set_index("buffer_id").loc[buf.id]
        assert (row["usage"], row["buffer_type"]) == ("weights", "CPU_HOST")
        up = placed["blk.0.ffn_up.weight"].extra
        assert up is not None and isinstance(up.weight, quant.QuantizedWeight)
        assert up.weight.dtype == "q4_K"
    finally:
        buf.free()
        weight_release.reset()


def test_cli_summary_and_fit(model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ovkit.cli import main

    assert main(["gguf", str(model_file), "--simulate", "laptop"]) == 0
    out = capsys.readouterr().out
    assert "4 tensors" in out and "q4_K" in out
    assert "GPU" in out and "fits" in out


def test_cli_broken_file_exit_2(model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ovkit.cli import main

    bad = tmp_path / "cut.gguf"
    bad.write_bytes(model_file.read_bytes()[:50])
    assert main(["gguf", str(bad)]) == 2
    assert "cut.gguf: truncated or corrupt" in capsys.readouterr().err
