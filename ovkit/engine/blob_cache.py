"""``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR``: compiled models exported once and imported by a later
process without translating or compiling anything (the engine's graphs, and ``ovkit.model.lean``).

An entry is ``<prefix><16 hex>.blob`` (``export_model``, streamed to the file) and ``.manifest``
(JSON: the full key with OpenVINO's build and a digest of ovkit's sources, the blob's size and
sha256, the caller's extra values), each written to a temporary file and renamed, blob first.  An
entry that is not the one its manifest describes, or not regular files, is never imported: the
model is compiled again and the entry replaced, with one warning naming the file.  A hit is
imported from a read-only mapping of the blob (``MappedBlob``), kept with the compiled model.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import mmap
import os
import re
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ovkit.engine.keys import PROCESS_LOCAL, CacheKey
from ovkit.runtime import Core

logger = logging.getLogger("ovkit")
_T = TypeVar("_T")

#: A manifest is a few KiB (a line per state input); anything larger is not one ovkit wrote.
MANIFEST_MAX_BYTES = 1 << 20
#: Paths warned about in this process (until an entry is written there again): an entry that
#: cannot be replaced (a directory in its place) would otherwise warn on every compile.
_warned: set[Path] = set()


def _warn_once(path: Path, message: str, *args: object) -> None:
    if path not in _warned:
        _warned.add(path)
        logger.warning(message, *args)


def open_regular(path: Path, size: int | None = None) -> int:
    """A read-only descriptor of ``path`` if it is a regular file (a symlink to one is followed)
    of exactly ``size`` bytes when given, else ``ValueError`` (opened non-blocking: a FIFO cannot
    hang the open)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"not a regular file ({stat.filemode(st.st_mode)})")
        if size is not None and st.st_size != size:
            raise ValueError(f"{st.st_size} bytes, its manifest says {size}")
    except BaseException:
        os.close(fd)
        raise
    return fd


@functools.cache
def openvino_build() -> str:
    import openvino as ov

    return str(ov.get_version())


@functools.cache
def ovkit_build() -> str:
    """A digest of ovkit's own sources: a blob translated by other code is never imported."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def engine_key(key: CacheKey) -> dict[str, Any] | None:
    """The entry key of an engine's compiled graph; None when its structure is not content
    addressed (a bare name such as "square16", or one marked ``PROCESS_LOCAL``: two processes
    could mean different graphs by it)."""
    text = repr(key.structure)
    if PROCESS_LOCAL in text or re.search(r"[0-9a-f]{64}", text) is None:
        return None
    # never OpenVINO's own cache dir in the properties: compile_properties leaves it out here
    fields = ("device", "properties", "stateful", "states")
    return {"structure": text, **{f: getattr(key, f) for f in fields}}


class _FileStream(io.BytesIO):
    """A ``BytesIO`` in name only (``export_model`` takes nothing else): each chunk the plugin
    writes, and each seek, goes to ``file``."""

    def __init__(self, file: io.BufferedRandom) -> None:
        super().__init__()
        self.file = file

    def write(self, chunk: Any) -> int:
        return self.file.write(chunk)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.file.seek(offset, whence)

    def tell(self) -> int:
        return self.file.tell()

    def flush(self) -> None:
        self.file.flush()


def replace_file(path: Path, write: Callable[[io.BufferedRandom], _T]) -> _T:
    """Write ``path`` atomically: ``write(f)`` fills a temporary file of its own, created
    exclusively (never one that is there, which could be a FIFO), renamed over it."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with open(fd, "w+b") as f:
            done = write(f)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return done


class MappedBlob:
    """An imported blob, mapped read-only: ``release`` gives its pages back (they are read
    again from the file if touched)."""

    def __init__(self, mapping: mmap.mmap) -> None:
        self.mapping = mapping

    def release(self) -> None:
        self.mapping.madvise(mmap.MADV_DONTNEED)


@dataclass(frozen=True, slots=True)
class Hit:
    """An imported entry: the compiled model, the mapping it was imported from, and what the
    manifest kept besides."""

    compiled: Any
    blob: MappedBlob
    extra: dict[str, Any]


class BlobCache:
    """Entries under one directory; ``who`` starts each log line ("ggml-openvino: model cache",
    as the backend logs), ``prefix`` each file name."""

    def __init__(
        self, directory: str | os.PathLike[str], who: str = "ggml-openvino: model cache", prefix: str = ""
    ) -> None:
        self.directory = Path(directory)
        self.who = who
        self.prefix = prefix

    def _entry(self, key: dict[str, Any]) -> tuple[Path, Path, str]:
        """The blob and manifest paths of ``key``, and its full key as canonical JSON."""
        text = json.dumps({**key, "openvino": openvino_build(), "ovkit": ovkit_build()}, sort_keys=True)
        stem = self.directory / f"{self.prefix}{hashlib.sha256(text.encode()).hexdigest()[:16]}"
        return stem.with_suffix(".blob"), stem.with_suffix(".manifest"), text

    def load(self, key: dict[str, Any], device: str, props: dict[str, Any], *, core: Core) -> Hit | None:
        """The imported entry of ``key`` (JSON values), or None: a miss, or an entry that is not
        sound (reported once, naming the file)."""
        import openvino as ov

        blob, manifest, text = self._entry(key)
        path = manifest
        failed = f"{self.who} import failed (%s: %s), recompiling"
        try:
            fd = open_regular(manifest)
            with open(fd, "rb") as f:
                data = f.read(MANIFEST_MAX_BYTES + 1)
            if len(data) > MANIFEST_MAX_BYTES:
                raise ValueError(f"larger than {MANIFEST_MAX_BYTES} bytes")
            size, digest, extra = _described(json.loads(data), text)
            path = blob
            fd = open_regular(blob, size)
            try:
                mapping = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
        except FileNotFoundError:
            return None  # a miss, or the manifest of a blob removed since
        except (OSError, ValueError) as exc:  # also UnicodeDecodeError, json's errors
            _warn_once(path, failed, path, exc)
            return None
        got = hashlib.sha256(mapping).hexdigest()
        if got != digest:
            mapping.close()
            _warn_once(blob, failed, blob, f"its sha256 is {got[:16]}…, the manifest says {digest[:16]}…")
            return None
        tensor = ov.Tensor(np.frombuffer(mapping, np.uint8), ov.Shape([size]), ov.Type.u8)
        try:
            compiled = core.import_model(tensor, device, dict(props))
        except (RuntimeError, ValueError, TypeError) as exc:
            _warn_once(blob, failed, blob, str(exc).splitlines()[0])
            return None
        logger.info("%s HIT %s", self.who, blob)
        return Hit(compiled, MappedBlob(mapping), extra)

    def store(self, compiled: Any, key: dict[str, Any], extra: dict[str, Any]) -> None:
        """Export ``compiled`` with ``extra`` (JSON values) beside it, replacing any entry."""
        blob, manifest, text = self._entry(key)

        def export(f: io.BufferedRandom) -> tuple[int, str]:  # hashed once written: the plugin seeks back
            compiled.export_model(_FileStream(f))
            f.flush()
            size = f.seek(0, os.SEEK_END)
            f.seek(0)
            return size, hashlib.file_digest(f, "sha256").hexdigest()

        path = blob
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            size, digest = replace_file(blob, export)
            path = manifest
            described = {"key": json.loads(text), "blob_size": size, "blob_sha256": digest, "extra": extra}
            content = json.dumps(described, sort_keys=True)
            replace_file(manifest, lambda f: f.write(content.encode()))
        except (OSError, RuntimeError) as exc:
            _warn_once(path, "%s export to %s failed: %s", self.who, path, str(exc).splitlines()[0])
            return
        _warned.difference_update((blob, manifest))
        logger.info("%s WROTE %s", self.who, blob)


def _described(manifest: Any, key: str) -> tuple[int, str, dict[str, Any]]:
    """The blob's size and sha256 and the extra values of a manifest holding ``key`` (canonical
    JSON), else ``ValueError``."""
    if not isinstance(manifest, dict) or json.dumps(manifest.get("key"), sort_keys=True) != key:
        raise ValueError("it is the entry of another model or setting")
    size, digest, extra = manifest.get("blob_size"), manifest.get("blob_sha256"), manifest.get("extra")
    if not isinstance(size, int) or not isinstance(digest, str) or not isinstance(extra, dict):
        raise ValueError("it does not give the blob's size, sha256 and extra values")
    return size, digest, extra
