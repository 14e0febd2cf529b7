"""Which optional parts a walkthrough notebook can use here (the real backend, ggml-python,
llama.cpp, real models): a missing one is named in one ``skipped:`` line, never a traceback."""

from __future__ import annotations

import functools
from collections.abc import Sequence


def _backend_missing(_: str | None) -> str | None:
    from ovkit.upstream.build import UpstreamUnavailableError, require

    try:
        require()
    except UpstreamUnavailableError as exc:
        return str(exc)
    return None


def _ggml_missing(_: str | None) -> str | None:
    from ovkit import oracle
    from ovkit.upstream.build import INSTALL_SCRIPT

    return (
        None
        if oracle.ggml_available()
        else f"ggml-python (ggml itself) is not installed; run {INSTALL_SCRIPT}"
    )


def _llama_missing(_: str | None) -> str | None:
    import importlib.util

    from ovkit.upstream.build import INSTALL_SCRIPT

    if importlib.util.find_spec("llama_cpp") is not None:
        return None
    return f"llama-cpp-python (llama.cpp's CPU build) is not installed; run {INSTALL_SCRIPT}"


def _model_missing(path: str | None) -> str | None:
    from pathlib import Path

    if not path:
        return "no real model file given (a GGUF path in the parameters cell, or papermill -p)"
    return None if Path(path).is_file() else f"the model file {path} does not exist"


def _real_models_missing(names: str | None) -> str | None:
    from ovkit.model.fetch import FETCH_COMMAND, MissingModelError, real_model

    missing = []
    for name in filter(None, (names or "").split(",")):
        try:
            real_model(name)
        except MissingModelError:
            missing.append(name)
    return f"{', '.join(missing)} not fetched; run `{FETCH_COMMAND}`" if missing else None


#: The parts a walkthrough can do without: each gives why it is missing (None: present).
OPTIONAL_PARTS = {
    "backend": _backend_missing,  # the real ggml-openvino backend (scripts/install-upstream)
    "ggml": _ggml_missing,  # ggml-python: ggml's own ops and quantizers, the oracle
    "llama.cpp": _llama_missing,  # llama-cpp-python: llama.cpp itself, the whole-model reference
    "model": _model_missing,  # a real GGUF model file (path)
    "real-models": _real_models_missing,  # ovkit.model.fetch's real models (comma-separated names)
}


def _missing(part: str, path: str | None) -> str | None:
    check = OPTIONAL_PARTS.get(part)
    if check is None:
        raise ValueError(f"unknown optional part {part!r}; expected one of {', '.join(OPTIONAL_PARTS)}")
    return check(path)


def present(part: str, path: str | None = None) -> bool:
    """True when ``part`` (a key of :data:`OPTIONAL_PARTS`) is here; says nothing either way."""
    return _missing(part, path) is None


def optional(part: str, skipped: str, path: str | None = None) -> bool:
    """True when ``part`` (a key of :data:`OPTIONAL_PARTS`) is here; otherwise print one line
    saying what is skipped and why, so Run All goes on without a traceback."""
    missing = _missing(part, path)
    if missing is not None:
        print(f"skipped: {skipped} ({missing})")
    return missing is None


@functools.cache
def can_quantize(qtype: str) -> bool:
    """True when this install quantizes ``qtype``: ggml's quantizer (ggml-python) does every type,
    the ``gguf`` package only some (not the K-quants); asked once per type on one block row."""
    import numpy as np

    from ovkit import quant

    row = np.linspace(-1.0, 1.0, 256, dtype=np.float32)[None, :]  # one block of every type
    try:
        quant.quantize(qtype, row)
    except NotImplementedError:
        return False
    return True


def quantizable(types: Sequence[str], skipped: str) -> list[str]:
    """The ``types`` this install can quantize; the others are named in one ``skipped:`` line."""
    missing = [t for t in types if not can_quantize(t)]
    if missing:
        needs = f"{', '.join(missing)} need{'' if len(missing) > 1 else 's'} ggml's quantizer"
        print(f"skipped: {skipped} ({needs}: {_ggml_missing(None) or 'ggml-python failed to quantize'})")
    return [t for t in types if t not in missing]
