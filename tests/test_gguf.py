"""GGUF reading on small files the tests write with the gguf package (no downloads)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

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
    with pytest.raises(og.GGUFError, match=r"nope\.gguf: no such file$"):
        og.read_gguf(tmp_path / "nope.gguf")


def test_directory_is_named_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ovkit.cli import main

    with pytest.raises(og.GGUFError, match=r": is a directory, expected a GGUF file$"):
        og.read_gguf(tmp_path)
    assert main(["gguf", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"ovkit: {tmp_path}: is a directory, expected a GGUF file\n"


def test_unknown_tensor_name(model_file: Path) -> None:
    with pytest.raises(KeyError, match="no tensor 'nope'"):
        og.read_gguf(model_file).constant("nope")


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


# -- hostile files: counts, lengths and offsets checked before anything is read -----------------


def _info_fields(data: bytes | bytearray, name: str) -> tuple[int, int, int]:
    """Positions of a tensor info's first dimension and its offset field, and its n_dims."""
    key = struct.pack("<Q", len(name)) + name.encode()
    pos = data.index(key) + len(key)
    n_dims = struct.unpack_from("<I", data, pos)[0]
    return pos + 4, pos + 4 + 8 * n_dims + 4, n_dims


def _patched(src: Path, dst: Path, name: str, *, ne0: int | None = None, offset: int | None = None) -> Path:
    data = bytearray(src.read_bytes())
    dims, off, _ = _info_fields(data, name)
    if ne0 is not None:
        struct.pack_into("<q", data, dims, ne0)
    if offset is not None:
        struct.pack_into("<Q", data, off, offset)
    dst.write_bytes(bytes(data))
    return dst


@pytest.mark.parametrize("offset", [2**64 - 1, 2**64 - 32, 2**64 - 4096, 2**63])
def test_offsets_near_2_64_do_not_wrap(model_file: Path, tmp_path: Path, offset: int) -> None:
    bad = _patched(model_file, tmp_path / "wrap.gguf", "blk.0.attn_norm.weight", offset=offset)
    size = bad.stat().st_size
    with pytest.raises(og.GGUFError) as err:
        og.read_gguf(bad)
    msg = str(err.value)
    assert "tensor 'blk.0.attn_norm.weight'" in msg and "needs 1024 bytes at file offset" in msg
    assert f"but the file has {size} bytes" in msg


def _with_array(tmp_path: Path, declared: int, strings: bool = False) -> Path:
    p = tmp_path / f"arr{declared}.gguf"
    w = gguf_writer(p)
    w.add_array("test.values", ["a", "b", "c"] if strings else [1, 2, 3])
    w.add_tensor("t", np.ones((2, 32), np.float32))
    _finish(w)
    data = bytearray(p.read_bytes())
    key = b"test.values"
    count_pos = data.index(key) + len(key) + 4 + 4
    assert struct.unpack_from("<Q", data, count_pos)[0] == 3
    struct.pack_into("<Q", data, count_pos, declared)
    p.write_bytes(bytes(data))
    return p


def gguf_writer(p: Path) -> Any:
    """The gguf package's writer for a llama file at ``p``."""
    import gguf

    return gguf.GGUFWriter(p, "llama")


def _finish(w: Any) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("declared", [10**6, 10**7, 2**63, 2**64 - 1])
@pytest.mark.parametrize("strings", [False, True])
def test_huge_metadata_array_lengths_fail_at_once(tmp_path: Path, declared: int, strings: bool) -> None:
    bad = _with_array(tmp_path, declared, strings)
    kind = "strings" if strings else "int32 values"
    with pytest.raises(og.GGUFError, match=rf"array 'test\.values' of {declared} {kind} needs \d+ bytes"):
        og.read_gguf(bad)


def test_array_within_the_file_still_reads(tmp_path: Path) -> None:
    assert og.read_gguf(_with_array(tmp_path, 3)).metadata["test.values"] == [1, 2, 3]
    assert og.read_gguf(_with_array(tmp_path, 3, strings=True)).metadata["test.values"] == ["a", "b", "c"]


def test_quantized_tensor_with_zero_row_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ovkit.cli import main

    src = og.write_gguf(
        tmp_path / "q.gguf",
        {"a": np.ones((4,), np.float32), "w": quant.quantize("q4_0", np.ones((2, 32), np.float32))},
    )
    bad = _patched(src, tmp_path / "ne0.gguf", "w", ne0=0)  # the last tensor: zero bytes, in the file
    m = og.read_gguf(bad)
    assert (m.tensors["w"].shape, m.tensors["w"].nbytes) == ((2, 0), 0)
    fit = m.fit_check(SimulatedCore("laptop")).set_index("device")
    assert fit.loc["CPU", "weight_bytes"] == 16  # the f32 tensor only: an empty weight needs nothing
    with pytest.raises(
        og.GGUFError, match=r"tensor 'w' cannot be a constant: .*is 0, expected a positive size"
    ):
        m.constant("w")
    assert main(["gguf", str(bad), "--simulate", "laptop"]) == 0
    assert "2 tensors" in capsys.readouterr().out


def test_data_shorter_than_the_tensor_names_bytes_needed_and_present(
    model_file: Path, tmp_path: Path
) -> None:
    data = model_file.read_bytes()
    bad = tmp_path / "short.gguf"
    bad.write_bytes(data[:-100])
    with pytest.raises(og.GGUFError) as err:
        og.read_gguf(bad)
    msg = str(err.value)
    assert "tensor 'blk.0.attn_norm.weight'" in msg and "needs 1024 bytes" in msg
    assert f"the file has {len(data) - 100} bytes" in msg
    assert "reshape" not in msg and "out of bounds" not in msg


def test_changed_tensor_type_names_tensor_and_bytes_not_numpy(model_file: Path, tmp_path: Path) -> None:
    """A q4_K tensor re-typed as q6_K: its blocks no longer fit where the table says."""
    import gguf

    data = bytearray(model_file.read_bytes())
    _, off_pos, _ = _info_fields(data, "blk.0.ffn_up.weight")
    struct.pack_into("<i", data, off_pos - 4, int(gguf.GGMLQuantizationType.Q6_K))
    bad = tmp_path / "retyped.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(og.GGUFError) as err:
        og.read_gguf(bad)
    msg = str(err.value)
    assert "reshape" not in msg and "out of bounds" not in msg
    # the next tensor now starts inside the re-typed one's (larger) blocks
    assert (
        "tensor 'output.weight' has data offset 4608, expected 6720 right after tensor "
        "'blk.0.ffn_up.weight' (q6_K, 6720 bytes at offset 0)"
    ) in msg


def test_cli_shows_bytes_in_units_by_magnitude(model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ovkit.cli import main

    assert main(["gguf", str(model_file), "--simulate", "laptop"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{model_file}: 4 tensors, 10.0 KiB of tensor data (file ")
    assert lines[1].split() == ["type", "tensors", "bytes"]
    assert lines[2].split() == ["q4_K", "1", "4.5", "KiB"]  # the largest first
    fit = [line.split() for line in lines if "(SIMULATED)" in line]
    assert [row[0] for row in fit] == ["CPU", "GPU", "NPU"]
    assert all(row[3] == "KiB" and row[5] == "GiB" and row[-1] == "fits" for row in fit), fit


def test_cli_unreadable_free_memory_is_unknown_in_text_and_strict_json(
    model_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from ovkit.cli import main

    assert main(["gguf", str(model_file), "--simulate", "gpu-memory-error"]) == 0
    gpu = next(line for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith("GPU"))
    assert gpu.split()[-7:] == ["KiB", "unknown", "unknown", "unknown:", "free", "memory", "unreadable"]
    assert main(["gguf", str(model_file), "--simulate", "gpu-memory-error", "--json"]) == 0

    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: {constant}")

    fit = json.loads(capsys.readouterr().out, parse_constant=refuse)["fit"]
    by_device = {r["device"]: r for r in fit}
    assert (by_device["GPU"]["free_bytes"], by_device["GPU"]["fits"]) == (None, None)
    assert isinstance(by_device["CPU"]["free_bytes"], int) and by_device["CPU"]["fits"] is True


def test_every_metadata_type_reads_as_the_gguf_package_reads_it(tmp_path: Path) -> None:
    import gguf

    p = tmp_path / "types.gguf"
    w = gguf.GGUFWriter(p, "llama")
    adders: dict[str, tuple[str, Any]] = {
        "s": ("add_string", "héllo"),
        "u8": ("add_uint8", 200),
        "i8": ("add_int8", -5),
        "u16": ("add_uint16", 65000),
        "i16": ("add_int16", -3),
        "u32": ("add_uint32", 4_000_000_000),
        "i32": ("add_int32", -7),
        "f32": ("add_float32", 1.5),
        "b": ("add_bool", True),
        "u64": ("add_uint64", 2**64 - 1),
        "i64": ("add_int64", -(2**63)),
        "f64": ("add_float64", 0.1),
    }
    for key, (adder, v) in adders.items():
        getattr(w, adder)(key, v)
    values = {key: v for key, (_, v) in adders.items()}
    w.add_array("tokens", ["a", "", "wörld"])
    w.add_array("scores", [0.5, -1.25])
    w.add_tensor("t", np.arange(6, dtype=np.float32).reshape(2, 3))
    _finish(w)
    ours = og.read_gguf(p)
    theirs = gguf.GGUFReader(p)
    assert ours.metadata == {
        **values,
        "general.architecture": "llama",
        "tokens": ["a", "", "wörld"],
        "scores": [0.5, -1.25],
    }
    for key, f in theirs.fields.items():
        if not key.startswith("GGUF."):
            assert f.contents() == ours.metadata[key], key
    np.testing.assert_array_equal(ours.constant("t"), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_a_q5_0_tensor_is_a_constant_of_its_lossless_q8_0_repack(tmp_path: Path) -> None:
    """Upstream refuses Q5_0 weights; ``constant`` gives the same values as Q8_0 blocks, bit for
    bit (it was a GGUFError before)."""
    from ovkit.model import synthetic

    m = og.read_gguf(synthetic("llama", tmp_path / "q5.gguf", weight_type="q5_0"))
    info = m.tensors["blk.0.attn_q.weight"]
    assert info.type == "q5_0" and not info.supported
    got = m.constant(info.name)
    assert isinstance(got, quant.QuantizedWeight) and got.qtype == "q8_0"
    want = quant.reference_dequantize("q5_0", m.raw(info.name), info.shape)
    assert np.array_equal(got.dequantize().view(np.uint32), want.view(np.uint32))
