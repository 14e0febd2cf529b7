"""``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR``: the backend's own cache of compiled models.

OpenVINO's model cache (``CACHE_DIR``) keys a blob on the translated ``openvino.Model``, weights
included, so a hit still needs every graph translated and every weight decoded.  The backend's
blob cache instead keys on the ggml graph's fingerprint and imports the exported model without
building it; ovkit keys on the graph's structure digest (:mod:`ovkit.engine.keys`: every node,
every weight's bytes), so a new process skips translation and compile alike.

Files, as the backend writes them: ``<dir>/<16 hex>.blob`` and ``<dir>/<16 hex>.manifest``,
written to ``.tmp`` files and renamed (blob first, then manifest); a hit needs both and a manifest
that matches the full fingerprint and OpenVINO's build.  The manifest also carries what the
runner needs that only the translated model knew (state variables and state input specs).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ovkit.engine.keys import CacheKey
from ovkit.engine.model import PortSpec

logger = logging.getLogger("ovkit")

#: A structure key is content-addressed when it holds a sha256 digest (keys.py); a bare name
#: such as "square16" is not, and two processes could mean different graphs by it.
_DIGEST = re.compile(r"[0-9a-f]{64}")


def _content_addressed(structure: Hashable) -> bool:
    return _DIGEST.search(repr(structure)) is not None


@functools.cache
def _openvino_build() -> str:
    import openvino as ov

    return str(ov.get_version())


@functools.cache
def _ovkit_build() -> str:
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
            key.dynamic,
            _openvino_build(),
            _ovkit_build(),
        )
        return hashlib.sha256(repr(fields).encode()).hexdigest()

    def _paths(self, fingerprint: str) -> tuple[Path, Path]:
        stem = self.directory / fingerprint[:16]
        return stem.with_suffix(".blob"), stem.with_suffix(".manifest")

    def _manifest_head(self, fingerprint: str) -> str:
        return f"fingerprint {fingerprint}\nov_version {_openvino_build()}\n"

    def load(
        self, core: Any, fingerprint: str, device: str, props: Mapping[str, Any]
    ) -> tuple[Any, BlobEntry] | None:
        """The imported compiled model and its entry, or None (a miss or a blob that fails)."""
        blob, manifest = self._paths(fingerprint)
        try:
            text = manifest.read_text()
        except OSError:
            return None
        head = self._manifest_head(fingerprint)
        if not text.startswith(head):
            return None
        try:
            extra = json.loads(text[len(head) :].removeprefix("entry "))
            entry = BlobEntry(
                dict(extra["variables"]),
                {k: PortSpec(**{**v, "shape": tuple(v["shape"])}) for k, v in extra["state_specs"].items()},
            )
            compiled = core.import_model(blob.read_bytes(), device, dict(props))
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:
            logger.warning(
                "ggml-openvino: model cache import failed (%s), recompiling", str(exc).splitlines()[0]
            )
            return None
        logger.info("ggml-openvino: model cache HIT %s", blob)
        return compiled, entry

    def store(self, compiled: Any, fingerprint: str, entry: BlobEntry) -> None:
        """Export ``compiled`` (atomic: ``.tmp`` files renamed, blob first, then manifest)."""
        blob, manifest = self._paths(fingerprint)
        extra = {
            "variables": entry.variables,
            "state_specs": {k: asdict(v) for k, v in entry.state_specs.items()},
        }
        try:
            exported = compiled.export_model()  # a BytesIO in OpenVINO's Python API
            data = exported.getvalue() if hasattr(exported, "getvalue") else bytes(exported)
            for path, content in (
                (blob, data),
                (manifest, (self._manifest_head(fingerprint) + "entry " + json.dumps(extra)).encode()),
            ):
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_bytes(content)
                os.replace(tmp, path)
        except (OSError, RuntimeError) as exc:
            logger.warning("ggml-openvino: model cache export failed: %s", str(exc).splitlines()[0])
            return
        logger.info("ggml-openvino: model cache WROTE %s", blob)
