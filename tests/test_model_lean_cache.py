"""The lean model and GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR (``ovkit.engine.blob_cache``): a second
start imports the compiled model with the first start's answers; an entry that is not the one its
manifest describes, or not a regular file, is compiled again (one warning naming the file, no hang);
another setting is another entry."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from model_helpers import cache_entry as entry
from model_helpers import cache_warnings, fresh_start, real_model

from ovkit.model import Model
from ovkit.model.synthetic import synthetic

PROMPT = [1, 17, 42, 99, 7, 300]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two tiny random-weight llama models of the same shapes (different seeds), Q8_0 blocks."""
    d = tmp_path_factory.mktemp("lean-models")

    def make(name: str, seed: int) -> Path:
        return synthetic("llama", d / f"{name}.gguf", seed=seed, weight_type="q8_0", n_embd=64, n_ff=128)

    return make("a", 0), make("b", 1)


def run(path: Path, precision: str = "exact") -> tuple[np.ndarray, bool]:
    """The prompt's logits from a new lean ``Model``, and whether it was imported from the cache."""
    model = Model(path, n_ctx=64, precision=precision)
    assert model.shapes == "lean"
    logits = model.eval(PROMPT)
    (session,) = model.sessions()
    return logits, session.loaded_from_cache


_START = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from ovkit.model import Model
m = Model(sys.argv[1], n_ctx=64)
g = m.generate([1, 17, 42, 99, 7, 300], 4, all_logits=True)
(s,) = m.sessions()
print(json.dumps({"tokens": g.tokens, "prompt": g.prompt_logits.tolist(), "decode": g.decode_logits.tolist(),
                  "imported": s.loaded_from_cache, "shapes": m.shapes}))
"""


def test_a_second_start_imports_the_lean_model_with_the_same_answers(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    """A second process with the same cache directory imports the compiled lean model (no build,
    no compile) and generates the first process's tokens with its logits bit for bit."""
    first, first_log = fresh_start(_START, models[0], tmp_path / "blobs")
    assert first["shapes"] == "lean" and first["imported"] is False
    assert "lean model cache WROTE" in first_log and "lean model cache HIT" not in first_log
    second, second_log = fresh_start(_START, models[0], tmp_path / "blobs")
    assert second["imported"] is True
    assert "lean model cache HIT" in second_log and "lean model cache WROTE" not in second_log
    for part in ("tokens", "prompt", "decode"):
        assert second[part] == first[part], part


_PEAK = """
import json, sys
from ovkit.model import Model
Model(sys.argv[1], n_ctx=64).generate([1, 17, 42, 99], 2)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM")).split()[1]
print(json.dumps({"peak": int(hwm) * 1024}))
"""


def test_a_first_start_writes_the_blob_without_holding_it_in_memory(tmp_path: Path) -> None:
    """Exporting SmolLM2's compiled model (a 130 MiB blob) streams it to the file: the first start
    filling the cache peaks no higher than a start without one (it was 84 MiB higher)."""
    path = real_model("smollm2-135m")
    without, _ = fresh_start(_PEAK, path, None)
    first, _ = fresh_start(_PEAK, path, tmp_path / "blobs")
    (blob,) = (tmp_path / "blobs").glob("*.blob")
    assert first["peak"] - without["peak"] < blob.stat().st_size // 8, (first, without)


@pytest.mark.timeout(300)  # a FIFO read would block forever: fail instead
@pytest.mark.parametrize("damage", ["swapped entry", "swapped blob", "flipped", "fifo manifest", "fifo blob"])
def test_a_bad_entry_is_compiled_again_with_one_warning(
    models: tuple[Path, Path], blobs: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """Model B's entry (or its blob alone) copied over model A's, 600 bytes of A's weights flipped
    in its blob, or a FIFO in place of its manifest or blob: A answers with its own logits, compiled (not
    imported), warns once naming the file, and the entry is sound again afterwards."""
    a, b = models
    want, imported = run(a)
    assert not imported
    blob_a = entry(blobs)
    manifest_a = blob_a.with_suffix(".manifest")
    other, _ = run(b)
    blob_b = entry(blobs, {blob_a})
    assert np.argmax(want[-1]) != np.argmax(other[-1])  # the test tells the two apart

    named = blob_a
    if damage == "swapped entry":
        shutil.copyfile(blob_b, blob_a)
        shutil.copyfile(blob_b.with_suffix(".manifest"), manifest_a)
        named = manifest_a
    elif damage == "swapped blob":
        shutil.copyfile(blob_b, blob_a)
    elif damage == "flipped":
        from ovkit.gguf import read_gguf
        from ovkit.model.lean import read_tensor

        gguf = read_gguf(a)
        raw = read_tensor(gguf, gguf.tensors["blk.0.ffn_down.weight"]).reshape(-1, 34)
        weights = raw[:, 2:].tobytes()  # Q8_0's int8 values, held on the device as they are
        data = bytearray(blob_a.read_bytes())
        at = data.find(weights)
        assert at >= 0, "the blob holds the Q8_0 weights as they are"
        mid = at + len(weights) // 2
        data[mid : mid + 600] = bytes(x ^ 0xFF for x in data[mid : mid + 600])
        blob_a.write_bytes(bytes(data))
    else:
        named = manifest_a if damage == "fifo manifest" else blob_a
        named.unlink()
        os.mkfifo(named)
    with caplog.at_level(logging.WARNING, logger="ovkit"):
        logits, imported = run(a)
    assert not imported
    np.testing.assert_array_equal(logits, want)
    (warning,) = cache_warnings(caplog)
    assert str(named) in warning and "recompiling" in warning

    logits, imported = run(a)  # the entry was written again: imported, A's answer
    assert imported
    np.testing.assert_array_equal(logits, want)


def test_another_setting_is_another_entry(models: tuple[Path, Path], blobs: Path) -> None:
    """precision="device" after "exact" on the same file misses (its own entry, compiled), and
    each setting imports its own entry afterwards."""
    a, _ = models
    exact, imported = run(a, "exact")
    assert not imported
    first = entry(blobs)
    device, imported = run(a, "device")
    assert not imported
    entry(blobs, {first})  # a second entry beside the first
    for precision, want in (("exact", exact), ("device", device)):
        logits, imported = run(a, precision)
        assert imported, precision
        np.testing.assert_array_equal(logits, want)


def test_an_imported_models_released_pages_are_read_again_from_the_blob(
    models: tuple[Path, Path], blobs: Path
) -> None:
    """The imported model keeps the blob mapped and its pages are given back after the warm-up;
    any page the plugin reads later (weights it uses in place) comes back from the file, so
    releasing them again between runs never changes an answer."""
    from ovkit.engine.blob_cache import MappedBlob

    a, _ = models
    want, _ = run(a)
    model = Model(a, n_ctx=64)
    first = model.generate(PROMPT, 4, all_logits=True)
    (session,) = model.sessions()
    assert session.loaded_from_cache and isinstance(session.store, MappedBlob)
    np.testing.assert_array_equal(first.prompt_logits, want)
    session.store.release()
    again = model.generate(PROMPT, 4, all_logits=True)
    assert again.tokens == first.tokens
    np.testing.assert_array_equal(again.prompt_logits, first.prompt_logits)
    np.testing.assert_array_equal(again.decode_logits, first.decode_logits)
