"""``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR``: the backend's own cache of compiled models.

Keyed on the graph's structure digest (every node and weight), an entry is imported without
translating or compiling anything.  Files, as the backend writes them: ``<16 hex>.blob`` and
``<16 hex>.manifest`` (renamed from ``.tmp``, blob first); the manifest holds the full fingerprint,
OpenVINO's build, the state specs and the blob's size and sha256.  A mismatching or irregular
entry is compiled again and replaced, with one warning naming the file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import secrets
import stat
from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ovkit.engine.keys import PROCESS_LOCAL, CacheKey
from ovkit.engine.ov_model import PortSpec
from ovkit.runtime import Core

logger = logging.getLogger("ovkit")

#: A structure key is content-addressed when it holds a sha256 digest (keys.py); a bare name
#: such as "square16" is not, nor a key marked ``PROCESS_LOCAL``: two processes could mean
#: different graphs by it.
_DIGEST = re.compile(r"[0-9a-f]{64}")


#: A manifest is a few KiB (a line per state input); anything larger is not one ovkit wrote.
MANIFEST_MAX_BYTES = 1 << 20
#: The backend's warning for an entry it does not import (here the reason names the file).
_IMPORT_FAILED = "ggml-openvino: model cache import failed (%s), recompiling"
#: The manifest line describing the blob (sha256: ~900 MiB/s with the CPU's SHA extensions, a
#: few tenths of a second per import beside the seconds of compile it saves).
_BLOB_LINE = re.compile(r"blob_sha256 ([0-9a-f]{64}) ([0-9]+)\n")


def _content_addressed(structure: Hashable) -> bool:
    text = repr(structure)
    return PROCESS_LOCAL not in text and _DIGEST.search(text) is not None


def open_regular(path: Path, size: int | None = None) -> int:
    """A read-only descriptor of ``path`` if it is a regular file (a symlink to one is followed)
    of exactly ``size`` bytes when given, else ``ValueError`` (a FIFO, a directory or a device is
    refused before anything is read; opened non-blocking, a FIFO cannot hang the open either)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file ({stat.filemode(st.st_mode)})")
        if size is not None and st.st_size != size:
            raise ValueError(f"{path} has {st.st_size} bytes, its manifest says {size}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, limit: int | None = None, size: int | None = None) -> bytes:
    """The bytes of ``path`` if it is a regular file (``open_regular``) of at most ``limit`` or
    exactly ``size`` bytes, else ``ValueError``."""
    fd = open_regular(path, size)
    try:
        with open(fd, "rb", closefd=False) as f:
            data = f.read() if limit is None else f.read(limit + 1)
    finally:
        os.close(fd)
    if limit is not None and len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data


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


@dataclass(frozen=True, slots=True)
class BlobEntry:
    """What an imported blob brings back besides the compiled model."""

    variables: dict[str, str]
    state_specs: dict[str, PortSpec]


class BlobCache:
    """Export/import of compiled models under one directory, keyed by the engine's cache key."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.usable = True
        self._warned: set[Path] = set()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            logger.warning(
                "ggml-openvino: could not create model cache dir '%s' (errno=%s); caching disabled",
                self.directory,
                exc.errno,
            )
            self.usable = False

    def fingerprint(self, key: CacheKey) -> str | None:
        """The full fingerprint of ``key`` and of the code that translated it (None: the
        structure is a name, not a digest)."""
        if not self.usable or not _content_addressed(key.structure):
            return None
        fields = (
            repr(key.structure),
            key.device,
            key.properties,  # never OpenVINO's own cache dir: compile_properties leaves it out here
            key.stateful,
            key.states,
            openvino_build(),
            ovkit_build(),
        )
        return hashlib.sha256(repr(fields).encode()).hexdigest()

    def _paths(self, fingerprint: str) -> tuple[Path, Path]:
        stem = self.directory / fingerprint[:16]
        return stem.with_suffix(".blob"), stem.with_suffix(".manifest")

    def _manifest_head(self, fingerprint: str) -> str:
        return f"fingerprint {fingerprint}\nov_version {openvino_build()}\n"

    def _warn_once(self, path: Path, message: str, *args: object) -> None:
        """A warning about ``path``, once until an entry is written there again (a bad entry
        that cannot be replaced, e.g. a directory, would otherwise warn on every compile)."""
        if path not in self._warned:
            self._warned.add(path)
            logger.warning(message, *args)

    def load(
        self, fingerprint: str, device: str, props: Mapping[str, Any], *, core: Core
    ) -> tuple[Any, BlobEntry] | None:
        """The imported compiled model and its entry, or None: a miss, or an unsound entry (reported
        once and compiled again)."""
        blob, manifest = self._paths(fingerprint)
        try:
            text = read_regular(manifest, limit=MANIFEST_MAX_BYTES).decode()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:  # also UnicodeDecodeError
            self._warn_once(manifest, _IMPORT_FAILED, exc)
            return None
        head = self._manifest_head(fingerprint)
        if not text.startswith(head):
            return None  # another fingerprint or OpenVINO build: a miss, replaced by this one
        described = _BLOB_LINE.match(text, len(head))
        try:
            if described is None:
                raise ValueError(f"{manifest} does not give the blob's size and sha256")
            extra = json.loads(text[described.end() :].removeprefix("entry "))
            entry = BlobEntry(
                dict(extra["variables"]),
                {k: PortSpec(**{**v, "shape": tuple(v["shape"])}) for k, v in extra["state_specs"].items()},
            )
            data = read_regular(blob, size=int(described[2]))
            digest = hashlib.sha256(data).hexdigest()
            if digest != described[1]:
                raise ValueError(f"{blob} has sha256 {digest[:16]}…, its manifest says {described[1][:16]}…")
        except FileNotFoundError:
            return None  # the manifest of a blob removed since: a miss
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._warn_once(blob, _IMPORT_FAILED, exc)
            return None
        try:
            compiled = core.import_model(data, device, dict(props))
        except (RuntimeError, ValueError, TypeError) as exc:
            self._warn_once(blob, _IMPORT_FAILED, f"{blob}: {str(exc).splitlines()[0]}")
            return None
        logger.info("ggml-openvino: model cache HIT %s", blob)
        return compiled, entry

    def store(self, compiled: Any, fingerprint: str, entry: BlobEntry) -> None:
        """Export ``compiled`` (atomic: fresh ``.tmp`` files renamed, blob first, then manifest;
        an entry that was there, sound or not, is replaced)."""
        blob, manifest = self._paths(fingerprint)
        extra = {
            "variables": entry.variables,
            "state_specs": {k: asdict(v) for k, v in entry.state_specs.items()},
        }
        path = blob
        try:
            exported = compiled.export_model()  # a BytesIO in OpenVINO's Python API
            data = exported.getvalue() if hasattr(exported, "getvalue") else bytes(exported)
            described = f"blob_sha256 {hashlib.sha256(data).hexdigest()} {len(data)}\n"
            text = self._manifest_head(fingerprint) + described + "entry " + json.dumps(extra)
            for path, content in ((blob, data), (manifest, text.encode())):
                replace_file(path, content)
        except (OSError, RuntimeError) as exc:
            self._warn_once(path, "ggml-openvino: model cache export failed: %s", str(exc).splitlines()[0])
            return
        self._warned.difference_update((blob, manifest))
        logger.info("ggml-openvino: model cache WROTE %s", blob)


def replace_file(path: Path, content: bytes | memoryview) -> None:
    """Write ``path`` atomically: a temporary file of its own, created exclusively (never one
    that is there, which could be a FIFO; permissions as the umask gives), renamed over it."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with open(fd, "wb") as f:
            f.write(content)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
