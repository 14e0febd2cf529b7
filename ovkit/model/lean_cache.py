"""``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR`` for the lean model: a second start imports it.

The key is the file itself (real path, size, mtime, inode, sha256 of its header) and every setting
that changes the compiled model, with OpenVINO's build, a digest of ovkit's sources and ``FORMAT``.
An entry is ``lean-<16 hex>.blob`` (``export_model``, streamed to the file) and ``.manifest`` (the
key, the blob's size and sha256, the weight stats), each written to a temporary file and renamed,
blob first.  An entry that is not the one its manifest describes, or not regular files, is never
imported: the model is compiled again and the entry replaced, with one warning naming the file.
On a hit the blob is mapped read-only and imported from the mapping, whose pages are given back
once the plugin has packed its own copy (``MappedBlob.release``): the weights are held once.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import mmap
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ovkit.engine.blob_cache import (
    MANIFEST_MAX_BYTES,
    open_regular,
    openvino_build,
    ovkit_build,
    read_regular,
    replace_file,
)
from ovkit.gguf import GGUFModel
from ovkit.runtime import Core

logger = logging.getLogger("ovkit")

#: The entry's layout; a change makes every older entry a miss.
FORMAT = 2
_IMPORT_FAILED = "ovkit: lean model cache entry %s not imported (%s), recompiling"
#: Paths already warned about in this process (until an entry is written there again): an entry
#: that cannot be replaced (a directory in its place) would otherwise warn on every start.
_warned: set[Path] = set()


def _warn_once(path: Path, message: str, *args: object) -> None:
    if path not in _warned:
        _warned.add(path)
        logger.warning(message, *args)


def _header_sha256(gguf: GGUFModel) -> str:
    """sha256 of the file up to its first tensor's data: metadata and tensor table, a few MiB
    (read, not mapped: no page stays ours)."""
    end = min((t.offset for t in gguf.tensors.values()), default=gguf.file_size)
    h = hashlib.sha256()
    with open(gguf.path, "rb", buffering=0) as fh:
        done = 0
        while done < end:
            chunk = fh.read(min(1 << 20, end - done))
            if not chunk:
                break
            h.update(chunk)
            done += len(chunk)
    return h.hexdigest()


def lean_key(
    gguf: GGUFModel,
    device: str,
    *,
    core: Core,
    exact: bool,
    no_requant: bool,
    n_threads: int | None,
    profiling: bool,
) -> dict[str, Any]:
    """Everything the compiled lean model depends on, as JSON values."""
    st = os.stat(gguf.path)
    return {
        "format": FORMAT,
        "gguf": os.path.realpath(gguf.path),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "inode": [st.st_dev, st.st_ino],
        "header_sha256": _header_sha256(gguf),
        "exact": exact,
        "no_requant": no_requant,
        "device": device,
        "cpu": str(core.get_property(device, "FULL_DEVICE_NAME")),
        "n_threads": n_threads,
        "profiling": profiling,
        "openvino": openvino_build(),
        "ovkit": ovkit_build(),
    }


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


def export_blob(compiled: Any, path: Path) -> tuple[int, str]:
    """Export ``compiled`` to ``path`` through a temporary file of its own (created exclusively,
    renamed over it); its size and sha256, hashed from the file once written (the plugin seeks
    back to finish its header)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with open(fd, "w+b") as f:
            compiled.export_model(_FileStream(f))
            f.flush()
            size = f.seek(0, os.SEEK_END)
            f.seek(0)
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size, digest


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
    manifest kept besides (the weight stats)."""

    compiled: Any
    blob: MappedBlob
    extra: dict[str, Any]


class LeanCache:
    """The lean model's entries under one directory, for one key."""

    def __init__(self, directory: str | os.PathLike[str], key: dict[str, Any]) -> None:
        self.key = key
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        stem = Path(directory) / f"lean-{digest[:16]}"
        self.blob, self.manifest = stem.with_suffix(".blob"), stem.with_suffix(".manifest")

    def load(self, device: str, props: dict[str, Any], *, core: Core) -> Hit | None:
        """The imported entry, or None: a miss, or an entry that is not sound (reported once,
        naming the file)."""
        import openvino as ov

        try:
            size, digest, extra = self._read_manifest()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            _warn_once(self.manifest, _IMPORT_FAILED, self.manifest, exc)
            return None
        try:
            fd = open_regular(self.blob, size)
            try:
                mapping = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
        except FileNotFoundError:
            return None  # the manifest of a blob removed since: a miss
        except (OSError, ValueError) as exc:
            _warn_once(self.blob, _IMPORT_FAILED, self.blob, exc)
            return None
        got = hashlib.sha256(mapping).hexdigest()
        if got != digest:
            mapping.close()
            reason = f"its sha256 is {got[:16]}…, the manifest says {digest[:16]}…"
            _warn_once(self.blob, _IMPORT_FAILED, self.blob, reason)
            return None
        tensor = ov.Tensor(np.frombuffer(mapping, np.uint8), ov.Shape([size]), ov.Type.u8)
        try:
            compiled = core.import_model(tensor, device, props)
        except (RuntimeError, ValueError, TypeError) as exc:
            _warn_once(self.blob, _IMPORT_FAILED, self.blob, str(exc).splitlines()[0])
            return None
        logger.info("ovkit: lean model cache HIT %s", self.blob)
        return Hit(compiled, MappedBlob(mapping), extra)

    def _read_manifest(self) -> tuple[int, str, dict[str, Any]]:
        """The blob's size and sha256 and the extra values, from a manifest holding this key
        (else ``ValueError``, or the ``OSError`` of reading it)."""
        manifest = json.loads(read_regular(self.manifest, limit=MANIFEST_MAX_BYTES))  # or a ValueError
        if not isinstance(manifest, dict) or manifest.get("key") != self.key:
            raise ValueError("it is the entry of another model or setting")
        size, digest, extra = manifest.get("blob_size"), manifest.get("blob_sha256"), manifest.get("extra")
        if not isinstance(size, int) or not isinstance(digest, str) or not isinstance(extra, dict):
            raise ValueError("it does not give the blob's size, sha256 and extra values")
        return size, digest, extra

    def store(self, compiled: Any, extra: dict[str, Any]) -> None:
        """Export ``compiled`` with ``extra`` (JSON values) beside it, replacing any entry."""
        path = self.blob
        try:
            self.blob.parent.mkdir(parents=True, exist_ok=True)
            size, digest = export_blob(compiled, self.blob)
            manifest = {"key": self.key, "blob_size": size, "blob_sha256": digest, "extra": extra}
            path = self.manifest
            replace_file(self.manifest, json.dumps(manifest, sort_keys=True).encode())
        except (OSError, RuntimeError) as exc:
            _warn_once(
                path, "ovkit: lean model cache export to %s failed: %s", path, str(exc).splitlines()[0]
            )
            return
        _warned.difference_update((self.blob, self.manifest))
        logger.info("ovkit: lean model cache WROTE %s", self.blob)
