"""The native builds of ``scripts/install-upstream`` (``-march=native`` plus :data:`NATIVE_CFLAGS`),
recorded under ``<prefix>/share/ovkit/builds/`` so a child dead of SIGILL can say which instruction
set it most likely was and how to rebuild.  A platform module: it imports nothing of ovkit."""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

#: The script that makes the native builds (named in every "not installed" or "rebuild" message).
INSTALL_SCRIPT = "scripts/install-upstream"

#: Added to ``-march=native``: ggml's AMX kernels fault with SIGILL where the CPU lists ``amx_tile``
#: but the process lacks the XTILEDATA state; ``-mno-*`` wins over ``-march=native`` in GCC, so
#: AVX-512 and VNNI stay.  ``OVKIT_NATIVE_CFLAGS`` overrides (empty: pure native).
NATIVE_CFLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
NATIVE_CFLAGS_ENV = "OVKIT_NATIVE_CFLAGS"

#: Where the install script records how each native build was made (one JSON file per build).
BUILD_STAMP_SUBDIR = Path("share", "ovkit", "builds")

#: The script's three native builds: the CPU-only llama.cpp reference, ggml-python and
#: llama-cpp-python with the backend.
BUILD_NAMES = ("llama-cpp-python-cpu", "ggml-python-openvino", "llama-cpp-python-openvino")

#: The GCC flag that turns each ISA family (by its /proc/cpuinfo flag) off (``-mno-avx512f``/``-mno-avx2``:
#: all of AVX-512).
ISA_OFF_FLAGS = {
    "amx_tile": "-mno-amx-tile",
    "amx_int8": "-mno-amx-int8",
    "amx_bf16": "-mno-amx-bf16",
    "avx512_fp16": "-mno-avx512fp16",
    "avx512_bf16": "-mno-avx512bf16",
    "avx512_vnni": "-mno-avx512vnni",
    "avx512f": "-mno-avx512f",
    "avx2": "-mno-avx2",
}
#: ISA families a SIGILL most likely comes from (all but AVX2).
ISA_FAMILIES = tuple(f for f in ISA_OFF_FLAGS if f != "avx2")


def native_cflags() -> str:
    """The extra compiler flags for a native build: ``$OVKIT_NATIVE_CFLAGS`` or :data:`NATIVE_CFLAGS`."""
    return os.environ.get(NATIVE_CFLAGS_ENV, NATIVE_CFLAGS)


def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags as /proc/cpuinfo lists them (empty where there is no such file)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


@dataclass(frozen=True, slots=True)
class BuildStamp:
    """How one native build was made: its compiler flags and the CPU it was built on."""

    name: str  #: one of :data:`BUILD_NAMES`
    version: str
    cflags: str  #: the flags added to ggml's own (``-march=native`` ...)
    machine: str  #: ``platform.machine()`` of the build host
    cpu_flags: tuple[str, ...]  #: the build host's ISA flags among :data:`ISA_OFF_FLAGS`

    def describe(self) -> str:
        return f"{self.name} {self.version} built with -march=native {self.cflags or '(no extra flags)'}"


def build_stamp_dir() -> Path:
    return Path(sys.prefix) / BUILD_STAMP_SUBDIR


def check_build_name(name: str) -> str:
    """``name`` when one of :data:`BUILD_NAMES`, else a ValueError naming it."""
    if name not in BUILD_NAMES:
        raise ValueError(f"unknown build name {name!r}; expected one of {', '.join(BUILD_NAMES)}")
    return name


def write_build_stamp(name: str, version: str, cflags: str) -> BuildStamp:
    """Record a build made on this machine now (called by ``scripts/install-upstream``)."""
    check_build_name(name)
    isa = tuple(sorted(f for f in cpu_flags() if f in ISA_OFF_FLAGS))
    stamp = BuildStamp(name, version, cflags, platform.machine(), isa)
    build_stamp_dir().mkdir(parents=True, exist_ok=True)
    (build_stamp_dir() / f"{name}.json").write_text(json.dumps(asdict(stamp), indent=1))
    return stamp


def read_build_stamp(name: str) -> BuildStamp | None:
    """The recorded build ``name``, or None (not built by the script, or an unreadable record)."""
    try:
        data = json.loads((build_stamp_dir() / f"{name}.json").read_text())
        return BuildStamp(**{**data, "cpu_flags": tuple(data["cpu_flags"])})
    except (OSError, ValueError, TypeError, KeyError):
        return None


def build_isa(name: str) -> frozenset[str]:
    """The ISA families native build ``name`` has code for: its recorded build host's less those its
    flags turn off (unrecorded: what a native build here with :func:`native_cflags` would have)."""
    stamp = read_build_stamp(check_build_name(name))
    if stamp is None:
        host, cflags = frozenset(f for f in cpu_flags() if f in ISA_OFF_FLAGS), native_cflags()
    else:
        host, cflags = frozenset(stamp.cpu_flags), stamp.cflags
    off = {isa for isa, flag in ISA_OFF_FLAGS.items() if flag in cflags.split()}
    if off & {"avx512f", "avx2"}:
        off |= {isa for isa in host if isa.startswith("avx512")}
    return host - off


def sigill_hint(stamp: BuildStamp | None, host_flags: frozenset[str] | None = None) -> str:
    """Why a native library most likely died of SIGILL here and how to rebuild it: an ISA the build
    host had and this CPU lacks first, else AMX when the CPU lists it and the build kept it."""
    host = cpu_flags() if host_flags is None else host_flags
    rebuild = f"rebuild with {INSTALL_SCRIPT} (it compiles with -march=native {NATIVE_CFLAGS})"
    if stamp is None:
        if "amx_tile" in host:
            return (
                "illegal instruction: most likely ggml's AMX kernels (this CPU lists amx_tile, and a "
                f"build not made by {INSTALL_SCRIPT} may include them); {rebuild}"
            )
        return f"illegal instruction: the library was built for another CPU; {rebuild}"
    missing = [f for f in stamp.cpu_flags if f not in host]
    if missing and host:
        return (
            f"illegal instruction: {stamp.name} was built on a CPU with {', '.join(missing)}, which "
            f"this CPU lacks; {rebuild}"
        )
    if "amx_tile" in host and "-mno-amx-tile" not in stamp.cflags:
        return (
            f"illegal instruction: most likely ggml's AMX kernels (this CPU lists amx_tile; "
            f"{stamp.describe()}); {rebuild}"
        )
    return f"illegal instruction in {stamp.describe()}; {rebuild}"


def sigill_hint_for(name: str) -> str:
    """:func:`sigill_hint` for the native build ``name`` on this CPU (what its child reports)."""
    return sigill_hint(read_build_stamp(check_build_name(name)))


def main(argv: list[str] | None = None) -> int:
    """``python -m ovkit.native stamp NAME VERSION`` records a build (the install script's
    step); ``... show NAME`` prints its record, or ``none``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 3 and args[0] == "stamp":
        print(write_build_stamp(args[1], args[2], native_cflags()).describe())
        return 0
    if len(args) == 2 and args[0] == "show":
        stamp = read_build_stamp(args[1])
        print(f"{stamp.version} {stamp.cflags}" if stamp else "none")
        return 0
    print("usage: python -m ovkit.native (stamp NAME VERSION | show NAME)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
