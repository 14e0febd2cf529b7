"""The lean form of ``Model`` (``ovkit.model.lean``): one compiled model built from the GGUF's blocks,
weights held once, the KV cache in OpenVINO state; checked against the ggml-graph form and
llama.cpp (the model tests in ``test_model.py`` run it too: it is ``Model``'s default on the CPU)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ovkit.model import Model, footprint, synthetic
from ovkit.model.arch import ModelError

PROMPT = [1, 17, 42, 99, 7, 300, 256, 12, 480, 33, 5, 71, 250, 140, 9, 401]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    made: dict[tuple[object, ...], Path] = {}

    def make(arch: str, wtype: str, **kw: object) -> Path:
        key = (arch, wtype, tuple(sorted(kw.items())))
        if key not in made:
            sizes = {"n_embd": 64, "n_ff": 128, **kw}
            path = tmp_path_factory.mktemp("lean") / f"{arch}-{wtype}.gguf"
            made[key] = synthetic(arch, path, weight_type=wtype, **sizes)  # type: ignore[arg-type]
        return made[key]

    return make


def _nmse(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.sum((ours - theirs) ** 2) / np.sum(theirs.astype(np.float64) ** 2))


@pytest.mark.parametrize(
    ("arch", "wtype"), [("llama", "q8_0"), ("qwen2", "q4_0"), ("qwen3", "q4_1"), ("gemma3", "f16")]
)
def test_one_lean_model_serves_every_length_as_the_graph_form_does(
    model_file: Callable[..., Path], arch: str, wtype: str
) -> None:
    """Prompts of 1, 5, 16 and 70 tokens and their decode steps: one compiled model, the greedy
    tokens and logits of the ggml-graph form's static buckets (f32, f16 KV cache in both)."""
    kw = {"sliding_window": 4, "sliding_window_pattern": 2} if arch == "gemma3" else {}
    path = model_file(arch, wtype, **kw)
    ours, graph = Model(path, n_ctx=128), Model(path, n_ctx=128, shapes="buckets", max_buckets=99)
    assert ours.shapes == "lean"
    prompt = (PROMPT * 5)[:70]
    for n in (1, 5, 16, 70):
        a = ours.generate(prompt[:n], 5, all_logits=True)
        b = graph.generate(prompt[:n], 5, all_logits=True)
        assert a.tokens == b.tokens, n
        assert _nmse(a.prompt_logits, b.prompt_logits) < 1e-6, n
        assert _nmse(a.decode_logits, b.decode_logits) < 1e-6, n
    assert len(ours.sessions()) == 1 and len(graph.sessions()) > 1


def test_released_weight_pages_are_read_again_from_the_file(model_file: Callable[..., Path]) -> None:
    """The weight file's mapped pages are given back after the first token (the plugin has packed
    its copy; bench_scale.py measures what that saves); any page the model reads later (an
    embedding row, a weight the plugin uses in place) comes back from the file, so releasing them
    again between runs never changes an answer."""
    path = model_file("llama", "q8_0", n_embd=256, n_ff=512, n_vocab=4096)
    model = Model(path, n_ctx=64)
    first = model.generate(PROMPT, 4, all_logits=True)
    (session,) = model.sessions()
    assert session.store is not None and session.store.maps
    session.store.release()
    again = model.generate(PROMPT, 4, all_logits=True)
    assert again.tokens == first.tokens
    assert np.array_equal(again.prompt_logits, first.prompt_logits)


def test_device_precision_stays_close_to_exact_past_the_sdpa_threshold(
    model_file: Callable[..., Path],
) -> None:
    """``precision="device"`` (bf16 on CPUs with AMX or avx512_bf16) with dynamic shapes and a
    200-token prompt: every row within bf16's error of exact f32 (the graph form's manual
    attention was wrong here at a dynamic n_kv, so it fell back to static buckets)."""
    path = model_file("llama", "q8_0")
    exact, device = Model(path, n_ctx=256, precision="exact"), Model(path, n_ctx=256, precision="device")
    prompt = (PROMPT * 13)[:200]
    want, got = exact.eval(prompt), device.eval(prompt)
    assert max(_nmse(got[i], want[i]) for i in range(len(prompt))) < 1e-3
    for t in (5, 9):
        assert _nmse(device.eval([t])[0], exact.eval([t])[0]) < 1e-3


@pytest.mark.parametrize("wtype", ["q4_0", "q4_K_M"])
def test_big_models_decode_with_int8_activations_at_device_precision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wtype: str
) -> None:
    """Weights past ``DYNAMIC_INT8_FROM_BYTES`` (lowered here to this tiny file) run with f32
    activations quantized to int8 per 32, llama.cpp's own Q8_0 activations: the report says so,
    and the logits stay within that quantization's error of exact f32, prompt and decode."""
    from ovkit.model import lean

    path = synthetic(
        "llama", tmp_path / "m.gguf", weight_type=wtype, n_embd=128, n_ff=256, random_blocks=True
    )
    monkeypatch.setattr(lean, "DYNAMIC_INT8_FROM_BYTES", 0)
    big, exact = Model(path, n_ctx=128, precision="device"), Model(path, n_ctx=128, precision="exact")
    want, got = exact.eval(PROMPT), big.eval(PROMPT)
    assert big.effective_precision() == "f32 + int8 activations per 32"
    assert exact.effective_precision() == "f32"
    assert max(_nmse(got[i], want[i]) for i in range(len(PROMPT))) < 1e-2
    assert _nmse(big.eval([5])[0], exact.eval([5])[0]) < 1e-2


def test_a_model_that_will_not_fit_is_refused_before_loading(
    model_file: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With less memory available than the load's predicted peak, ``Model`` says so up front with
    both figures, before any weight is read."""
    path = model_file("llama", "q8_0")
    monkeypatch.setattr(footprint, "available_memory", lambda core=None: 64 * 2**20)
    with pytest.raises(ModelError, match=r"needs about .* at its peak .* but only 64\.0 MiB is available"):
        Model(path, n_ctx=64)


def test_the_cache_is_bounded_by_n_ctx(model_file: Callable[..., Path]) -> None:
    """The cache grows in OpenVINO state, but never past ``n_ctx``: the next token is refused."""
    model = Model(model_file("llama", "q8_0"), n_ctx=20)
    model.eval(PROMPT)
    model.eval([1, 2, 3, 4])
    with pytest.raises(ModelError, match="exceed n_ctx=20"):
        model.eval([5])


@pytest.mark.parametrize("where", ["missing/sub", "a-file"])
def test_the_weight_file_goes_where_spill_dir_says_or_to_the_temp_directory(
    model_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """``GGML_OPENVINO_SPILL_DIR`` naming a directory not made yet gets it made and the weight file
    put there; one naming a file (the configuration warns) leaves the weights in the temp
    directory: either way the model loads and answers as without it."""
    path = model_file("llama", "q8_0")
    plain = Model(path, n_ctx=32).generate(PROMPT, 3).tokens
    spill = tmp_path / where
    if where == "a-file":
        spill.write_text("")
    monkeypatch.setenv("GGML_OPENVINO_SPILL_DIR", str(spill))
    with pytest.warns() if where == "a-file" else contextlib.nullcontext():
        model = Model(path, n_ctx=32)
    assert model.generate(PROMPT, 3).tokens == plain
    (session,) = model.sessions()
    assert session.store is not None
    held_in = os.path.dirname(os.readlink(f"/proc/self/fd/{session.store.fd}"))
    assert held_in == (str(spill) if where != "a-file" else tempfile.gettempdir())


@pytest.mark.parametrize("wtype", ["q4_0", "q4_K_M", "q5_0"])
def test_weights_converted_on_several_threads_are_the_same_bytes(tmp_path: Path, wtype: str) -> None:
    """The conversion runs on every core ahead of the graph; every Constant of the model it builds
    holds the bytes the one-thread conversion gives (mixed block types included)."""
    from ovkit.gguf import read_gguf
    from ovkit.model import lean
    from ovkit.model.limits import model_hparams

    path = synthetic(
        "llama", tmp_path / "m.gguf", weight_type=wtype, n_embd=64, n_ff=128, random_blocks=wtype == "q4_K_M"
    )
    gguf = read_gguf(path)
    hp = model_hparams(gguf)

    def constants(workers: int) -> list[bytes]:
        store = lean.WeightFile()  # the Constants are views of its mapped file: kept till read
        model = lean.build(gguf, hp, store, workers=workers)
        ops = [op for op in model.get_ordered_ops() if op.get_type_name() == "Constant"]
        return [bytes(op.get_data().tobytes()) for op in ops]

    one, three = constants(1), constants(3)
    assert len(one) == len(three) > 20
    assert one == three


def test_a_model_alive_at_exit_closes_quietly(model_file: Callable[..., Path]) -> None:
    """A script that keeps a lean session to the end (here reached from a patched function, so
    it is freed while the modules are torn down) exits without an "Exception ignored" traceback."""
    import subprocess
    import sys

    code = (
        "import sys, openvino as ov\n"
        "from ovkit.gguf import read_gguf\n"
        "from ovkit.model import lean\n"
        "from ovkit.model.limits import model_hparams\n"
        "orig = lean.compile_properties\n"
        "lean.compile_properties = lambda *a: orig(*a)\n"
        "g = read_gguf(sys.argv[1])\n"
        "s = lean.compile_lean(g, model_hparams(g), 'CPU', core=ov.Core(), exact=False)\n"
    )
    path = str(model_file("llama", "q4_0"))
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True)
    assert "Exception ignored" not in out.stderr, out.stderr
