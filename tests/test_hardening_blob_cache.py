"""The compiled-model cache (GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR) never serves another model's
answers: a blob is imported only when it is the one its manifest describes (size and sha256),
only regular files are read, and a bad entry is compiled again, reported once and replaced.

Each run uses a fresh OpenVINO Core, so a fresh engine, whose in-memory cache is empty: every
compiled model comes from the blob cache or from a compile, as in a new process."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from model_helpers import cache_entry as entry
from model_helpers import cache_warnings

from ovkit.model import Model
from ovkit.model.synthetic import synthetic

PROMPT = [1, 17, 42, 99, 7, 300]  # one prefill: one shape bucket, one compiled model per model


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two tiny random-weight llama models of the same shapes (different seeds)."""
    d = tmp_path_factory.mktemp("models")
    return synthetic("llama", d / "a.gguf", seed=0), synthetic("llama", d / "b.gguf", seed=1)


def run(path: Path, core: object = None) -> tuple[np.ndarray, bool]:
    """The prompt's logits and whether the compiled model was imported from the blob cache (on
    a fresh Core, or on ``core``, whose engine then looks at the blob cache again)."""
    import openvino as ov

    model = Model(path, n_ctx=64, core=core or ov.Core(), shapes="buckets")
    logits = model.eval(PROMPT)
    (session,) = model.sessions()
    imported = bool(session.effective.loaded_from_cache)
    model.close()
    return logits, imported


def test_a_blob_swapped_for_another_models_is_compiled_again(
    models: tuple[Path, Path], blobs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Model B's blob copied over model A's: A answers with A's logits (compiled, not imported),
    says so once naming the file, and the entry is A's again afterwards."""
    a, b = models
    logits_a, imported = run(a)
    assert not imported
    blob_a = entry(blobs)
    logits_b, _ = run(b)
    blob_b = entry(blobs, {blob_a})  # the two models never share an entry
    assert np.argmax(logits_a[-1]) != np.argmax(logits_b[-1])  # the test tells them apart

    shutil.copyfile(blob_b, blob_a)
    with caplog.at_level(logging.WARNING, logger="ovkit"):
        logits, imported = run(a)
    assert not imported
    np.testing.assert_array_equal(logits, logits_a)
    (warning,) = cache_warnings(caplog)
    assert str(blob_a) in warning and "recompiling" in warning

    logits, imported = run(a)  # replaced: imported again, A's answer
    assert imported
    np.testing.assert_array_equal(logits, logits_a)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_blob_is_compiled_again(
    models: tuple[Path, Path], blobs: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """600 bytes flipped in the middle of the output weights the blob holds (same size: the
    blob still imports, and would answer wrong), or its second half cut off: the right answer,
    compiled, with one warning naming the blob."""
    from ovkit.gguf import read_gguf

    a, _ = models
    want, _ = run(a)
    blob = entry(blobs)
    data = bytearray(blob.read_bytes())
    if damage == "flip":
        weights = np.asarray(read_gguf(a).constant("output.weight")).tobytes()
        at = data.find(weights)
        assert at >= 0, "the blob holds the f32 output weights as they are"
        mid = at + len(weights) // 2
        data[mid : mid + 600] = bytes(x ^ 0xFF for x in data[mid : mid + 600])
    else:
        del data[len(data) // 2 :]
    blob.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="ovkit"):
        logits, imported = run(a)
    assert not imported
    np.testing.assert_array_equal(logits, want)
    (warning,) = cache_warnings(caplog)
    assert str(blob) in warning


@pytest.mark.timeout(120)  # a FIFO read would block forever: fail instead
@pytest.mark.parametrize("kind", ["fifo", "directory", "/dev/zero"])
@pytest.mark.parametrize("part", [".manifest", ".blob"])
def test_an_entry_that_is_not_a_regular_file_is_skipped(
    models: tuple[Path, Path], blobs: Path, caplog: pytest.LogCaptureFixture, part: str, kind: str
) -> None:
    """A FIFO, a directory or a symlink to /dev/zero in place of a manifest or a blob: no hang,
    no crash, the right answer compiled, one warning naming the file."""
    import openvino as ov

    a, _ = models
    want, _ = run(a)
    path = entry(blobs).with_suffix(part)
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    with caplog.at_level(logging.WARNING, logger="ovkit"):
        core = ov.Core()
        logits, imported = run(a, core)
        again, _ = run(a, core)  # a directory cannot be replaced: still one warning
    assert not imported
    np.testing.assert_array_equal(logits, want)
    np.testing.assert_array_equal(again, want)
    (warning,) = cache_warnings(caplog)
    assert str(path) in warning and "not a regular file" in warning and "recompiling" in warning


def test_an_oversized_manifest_is_not_read(
    models: tuple[Path, Path], blobs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A manifest of 64 MiB is refused after its first MiB, with one warning naming it."""
    a, _ = models
    want, _ = run(a)
    manifest = entry(blobs).with_suffix(".manifest")
    with manifest.open("ab") as f:
        f.truncate(64 << 20)
    with caplog.at_level(logging.WARNING, logger="ovkit"):
        logits, imported = run(a)
    assert not imported
    np.testing.assert_array_equal(logits, want)
    (warning,) = cache_warnings(caplog)
    assert str(manifest) in warning and "larger than" in warning


def test_a_graph_with_a_weight_known_only_by_identity_is_not_exported(blobs: Path) -> None:
    """A constant whose bytes the structure key cannot see (a weight object without a digest)
    is keyed by its identity, which another process may reuse for other values: such a graph
    is never written to the blob cache, where that process could import it."""
    import openvino as ov
    from openvino import opset13 as ops

    from ovkit.graph import Graph

    class OpaqueWeight:  # the quantized-weight protocol of Graph.constant, without a digest
        dtype = "f32"
        name = "w"

        def __init__(self, values: list[float]) -> None:
            self.values = np.asarray(values, np.float32)
            self.shape = self.values.shape

        def to_ov_node(self) -> object:
            return ops.constant(self.values).output(0)

        def dequantize(self) -> np.ndarray:
            return self.values

    g = Graph()
    x = g.input("x", (4,), "f32")
    y = g.add(x, g.constant(OpaqueWeight([1, 2, 3, 4]), "w"))
    out = g.compute(y, {"x": np.ones(4, np.float32)}, core=ov.Core())
    np.testing.assert_array_equal(out, [2, 3, 4, 5])
    assert not blobs.exists() or not list(blobs.iterdir())
