"""Every walkthrough after the README's first command only (``pip install -e .``): no real
backend, no ggml-python, no llama-cpp-python, no real model file.

The kernel runs with a ``sitecustomize`` shim first on ``PYTHONPATH`` that marks ``ggml`` and
``llama_cpp`` as absent (``import`` fails, ``importlib.util.find_spec`` finds nothing) and with
``OVKIT_LLAMA_OPENVINO`` and ``OVKIT_MODEL_CACHE`` pointing nowhere (``notebook_runs.plain_env``),
so the tests mean the same on a machine where ``scripts/install-upstream`` has run.  Each
notebook runs top to bottom once, in JupyterLab (``notebook_runs``), with no error output, and
each part it skips is announced in one ``skipped: ...`` line naming what is missing.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from notebook_runs import NOTEBOOKS, NotebookRuns, plain_env
from test_notebooks import cell, text

pytestmark = [pytest.mark.notebooks]

#: Per notebook, the cells that skip a part and what their one line must name.
SKIPS: dict[str, dict[str, str]] = {
    "01-devices": {"upstream-lists": "the real ggml-openvino backend is not installed"},
    "03-compute-graphs": {"check": "ggml-python (ggml itself) is not installed"},
    "05-op-coverage": {
        "upstream-three-way": "the real ggml-openvino backend is not installed",
        "upstream-agreement": "the real ggml-openvino backend is not installed",
    },
    "04-memory-and-allocations": {"quant": "q4_K, q5_K, q6_K need ggml's quantizer"},
    "06-gguf": {
        "write": "q6_K needs ggml's quantizer",
        "result": "ggml-python (ggml itself) is not installed",
    },
    "07-models": {
        "placement-rejected": "q4_K needs ggml's quantizer",
        "placement-live": "the real ggml-openvino backend is not installed",
        "compare": "llama-cpp-python (llama.cpp's CPU build) is not installed",
        "real-model": "no real model file given",
    },
    "08-real-models": {"setup": "smollm2-135m, gemma3-270m not fetched; run `python -m ovkit.model.fetch`"},
}


@pytest.fixture
def plain(notebook_runs: NotebookRuns) -> Callable[[str], Any]:
    """``plain("01-devices")`` → the notebook as JupyterLab saved it after a plain install."""
    return lambda name: notebook_runs.notebook(name, "plain")


def test_the_shim_hides_the_optional_parts(tmp_path: Path) -> None:
    probe = (
        "import importlib.util, ovkit.upstream as u, ovkit.oracle as o\n"
        "print(importlib.util.find_spec('ggml'), importlib.util.find_spec('llama_cpp'), "
        "o.ggml_available(), u.detect().available, u.build.llama_openvino_build())\n"
        "import ggml\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=plain_env(tmp_path), capture_output=True, text=True
    )
    assert out.stdout.split() == ["None"] * 2 + ["False"] * 2 + ["None"], out.stderr
    assert "ModuleNotFoundError: import of ggml halted" in out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_to_the_end_and_announces_each_skip(plain: Callable[[str], Any], path: Path) -> None:
    nb = plain(path.stem)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
    skipped = {
        tag: line
        for c in nb.cells
        if c.cell_type == "code"
        for tag in c.metadata.get("tags", [])[:1]
        for line in text(nb, tag, "stdout").splitlines()
        if line.startswith("skipped: ")
    }
    expected = SKIPS.get(path.stem, {})
    assert sorted(skipped) == sorted(expected), skipped
    for tag, why in expected.items():
        assert why in skipped[tag], skipped[tag]
        assert text(nb, tag, "stdout").count("skipped: ") == 1, text(nb, tag)  # one line per part
    assert "Traceback" not in "".join(text(nb, t) for c in nb.cells for t in c.metadata.get("tags", [])[:1])
    assert cell(nb, "parameters") is not None


def test_optional_names_what_is_skipped_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ovkit import notebook
    from ovkit.oracle import loader

    monkeypatch.setattr(loader, "load_ggml", lambda: None)  # as without ggml-python
    assert notebook.optional("ggml", "the ggml answer") is False
    assert capsys.readouterr().out == (
        "skipped: the ggml answer (ggml-python (ggml itself) is not installed; run scripts/install-upstream)\n"
    )
    missing = tmp_path / "model.gguf"
    assert notebook.optional("model", "a real run", str(missing)) is False
    assert capsys.readouterr().out == f"skipped: a real run (the model file {missing} does not exist)\n"
    missing.write_bytes(b"GGUF")
    assert notebook.optional("model", "a real run", str(missing)) and capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="unknown optional part 'gpu'; expected one of backend, ggml"):
        notebook.optional("gpu", "x")


def test_quantizable_keeps_what_gguf_can_quantize(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ovkit import notebook
    from ovkit.oracle import loader

    monkeypatch.setattr(loader, "load_ggml", lambda: None)
    notebook.can_quantize.cache_clear()
    try:
        assert notebook.quantizable(["q4_0", "q8_0", "q4_K"], "the K rows") == ["q4_0", "q8_0"]
    finally:
        notebook.can_quantize.cache_clear()
    assert capsys.readouterr().out.startswith("skipped: the K rows (q4_K needs ggml's quantizer: ")
