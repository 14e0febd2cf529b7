"""Which real llama.cpp OpenVINO backend is installed, read from the files alone: ggml-python with
``libggml-openvino.so`` and the OpenVINO ``llama_cpp`` under ``<prefix>/share/ovkit/llama-openvino``
(``scripts/install-upstream``); features are the strings the library embeds."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ovkit.errors import OvkitError
from ovkit.native import INSTALL_SCRIPT
from ovkit.ops.policy import Revision

#: Where the script installs the OpenVINO build of llama-cpp-python (override: the variable).
LLAMA_OPENVINO_ENV = "OVKIT_LLAMA_OPENVINO"
LLAMA_OPENVINO_SUBDIR = Path("share", "ovkit", "llama-openvino")

#: ggml-python version -> the policy revision its vendored ggml-openvino follows (checked live by
#: ``python -m ovkit.upstream agreement``).  Unknown versions fall back on the features below.
KNOWN_GGML_PYTHON: dict[str, Revision] = {"0.0.45": Revision.P}

#: Embedded strings that tell which upstream features a ``libggml-openvino`` has.
FEATURE_MARKERS: dict[str, bytes] = {
    "model_cache": b"GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR",  # model-cache.cpp's blob cache
    "release_weights": b"GGML_OPENVINO_RELEASE_WEIGHTS",
    "memory_optimize": b"GGML_OPENVINO_MEMORY_OPTIMIZE",
    "mxfp4": b"MXFP4",
}


class UpstreamUnavailableError(OvkitError, RuntimeError):
    """The real backend is not installed (or not in the flavour a feature needs)."""


@dataclass(frozen=True, slots=True)
class LibraryBuild:
    """One installed package that carries (or lacks) ``libggml-openvino``."""

    package: str  #: distribution name (``ggml-python``, ``llama-cpp-python``)
    version: str
    lib_dir: Path  #: the directory holding the package's shared libraries
    openvino_lib: Path | None  #: ``libggml-openvino.so`` when the package was built with it
    features: tuple[str, ...] = ()  #: :data:`FEATURE_MARKERS` keys the library embeds

    @property
    def has_openvino(self) -> bool:
        return self.openvino_lib is not None

    @property
    def flavour(self) -> str:
        """``openvino`` (the backend is built in) or ``cpu`` (ggml's CPU backend only)."""
        return "openvino" if self.has_openvino else "cpu"

    @property
    def has_model_cache(self) -> bool:
        return "model_cache" in self.features


@dataclass(frozen=True, slots=True)
class UpstreamBuild:
    """What :func:`detect` found: the ggml-python build and the OpenVINO llama-cpp-python."""

    ggml: LibraryBuild | None
    llama: LibraryBuild | None
    revision: Revision | None  #: the policy revision the ggml-python build's rules follow

    @property
    def available(self) -> bool:
        """The real backend can be driven (ggml-python carries ``libggml-openvino``)."""
        return self.ggml is not None and self.ggml.has_openvino

    def describe(self) -> str:
        """One line per build, for the CLI and notebooks."""
        lines = []
        for b in (self.ggml, self.llama):
            if b is None:
                continue
            feats = ", ".join(b.features) or "no optional features"
            lines.append(f"{b.package} {b.version} ({b.flavour}; {feats}) at {b.lib_dir}")
        if self.revision is not None:
            lines.append(f"policy revision of the ggml-python build: {self.revision.value}")
        return "\n".join(lines) or f"no real backend installed (run {INSTALL_SCRIPT})"


def _library_build(package: str, version: str, lib_dir: Path) -> LibraryBuild:
    """The build in ``lib_dir``: its ``libggml-openvino.so`` (if any) and the features it embeds."""
    found = sorted(lib_dir.glob("libggml-openvino.so*"))
    data = found[0].read_bytes() if found else b""
    features = tuple(k for k, marker in FEATURE_MARKERS.items() if marker in data)
    return LibraryBuild(package, version, lib_dir, found[0] if found else None, features)


def _environment_build(module: str, package: str) -> LibraryBuild | None:
    """The environment's ``package`` (imported as ``module``, its libraries in ``<module>/lib``)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    try:
        version = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return _library_build(package, version, Path(spec.origin).parent / "lib")


def ggml_python_build() -> LibraryBuild | None:
    """The environment's ggml-python, or None when it is not installed."""
    return _environment_build("ggml", "ggml-python")


def llama_cpu_build() -> LibraryBuild | None:
    """The environment's own llama-cpp-python (llama.cpp's CPU reference), or None."""
    return _environment_build("llama_cpp", "llama-cpp-python")


def llama_openvino_dir() -> Path:
    """Where the OpenVINO build of llama-cpp-python lives (``$OVKIT_LLAMA_OPENVINO`` overrides)."""
    override = os.environ.get(LLAMA_OPENVINO_ENV)
    return Path(override) if override else Path(sys.prefix) / LLAMA_OPENVINO_SUBDIR


def _dist_version(target: Path, name: str) -> str:
    for info in sorted(target.glob(f"{name}-*.dist-info")):
        return info.name[len(name) + 1 : -len(".dist-info")]
    return "unknown"


def llama_openvino_build() -> LibraryBuild | None:
    """The OpenVINO llama-cpp-python under :func:`llama_openvino_dir`, or None."""
    target = llama_openvino_dir()
    lib_dir = target / "llama_cpp" / "lib"
    if not (lib_dir / "libllama.so").exists():
        return None
    return _library_build("llama-cpp-python", _dist_version(target, "llama_cpp_python"), lib_dir)


def revision_of(build: LibraryBuild | None) -> Revision | None:
    """The policy revision a ggml-openvino build follows: known versions first, then features."""
    if build is None or not build.has_openvino:
        return None
    known = KNOWN_GGML_PYTHON.get(build.version)
    if known is not None:
        return known
    return Revision.N if build.has_model_cache else Revision.V


def detect() -> UpstreamBuild:
    """Both builds as installed now (cheap: reads directories and one library file)."""
    ggml = ggml_python_build()
    return UpstreamBuild(ggml, llama_openvino_build(), revision_of(ggml))


def require() -> UpstreamBuild:
    """:func:`detect`, or :class:`UpstreamUnavailableError` when the backend is missing."""
    found = detect()
    if found.ggml is None:
        raise UpstreamUnavailableError(
            f"the real ggml-openvino backend is not installed: ggml-python is missing; run {INSTALL_SCRIPT}"
        )
    if not found.available:
        raise UpstreamUnavailableError(
            f"the installed ggml-python {found.ggml.version} is the CPU-only build (no "
            f"libggml-openvino.so in {found.ggml.lib_dir}); run {INSTALL_SCRIPT} to rebuild it "
            "with the OpenVINO backend"
        )
    return found


def llama_openvino_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process whose ``import llama_cpp`` is the OpenVINO build."""
    build = llama_openvino_build()
    if build is None:
        raise UpstreamUnavailableError(
            f"the OpenVINO build of llama-cpp-python is not installed at {llama_openvino_dir()}; "
            f"run {INSTALL_SCRIPT}"
        )
    env = dict(os.environ if base is None else base)

    def prepend(var: str, path: str) -> None:
        env[var] = os.pathsep.join([path, *filter(None, [env.get(var)])])

    prepend("PYTHONPATH", str(build.lib_dir.parent.parent))
    env["LLAMA_CPP_LIB_PATH"] = str(build.lib_dir)
    # libggml-openvino.so links libopenvino.so.* without a path to it: the openvino wheel's libs
    ov = importlib.util.find_spec("openvino")
    if ov is not None and ov.submodule_search_locations:
        prepend("LD_LIBRARY_PATH", str(Path(list(ov.submodule_search_locations)[0]) / "libs"))
    return env


#: Run in the child: import llama_cpp (the OpenVINO build), initialise it, list ggml's devices.
_LLAMA_DEVICES = """
import ctypes, os, sys
import llama_cpp
from llama_cpp import llama_cpp as L
L.llama_backend_init()
g = ctypes.CDLL(os.path.join(os.environ["LLAMA_CPP_LIB_PATH"], "libggml.so"))
g.ggml_backend_dev_get.restype = ctypes.c_void_p
g.ggml_backend_dev_name.restype = ctypes.c_char_p
print(llama_cpp.__file__)
print(*[g.ggml_backend_dev_name(ctypes.c_void_p(g.ggml_backend_dev_get(i))).decode() for i in range(g.ggml_backend_dev_count())])
"""


def llama_openvino_devices() -> tuple[Path, list[str]]:
    """``(the llama_cpp package file, its ggml device names)`` as a child with
    :func:`llama_openvino_env` sees them."""
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _LLAMA_DEVICES], env=llama_openvino_env(), capture_output=True, text=True
    )
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or [f"exit code {out.returncode}"]
        raise UpstreamUnavailableError(f"the OpenVINO llama-cpp-python failed to load: {tail[0]}")
    where, names = out.stdout.strip().splitlines()[-2:]
    return Path(where), names.split()
