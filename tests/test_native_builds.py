"""The native builds ovkit compares with run on every x86 CPU kind (``scripts/install-upstream``).

ggml's AMX kernels die with SIGILL on Xeons that list AMX without granting its tile state, so
every build is ``-march=native`` minus AMX and says so in its record.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ovkit import native
from ovkit.upstream import build

#: AMX instructions ggml's AMX kernels use (any one of them in a library means AMX code is in).
AMX_MNEMONICS = re.compile(
    r"\s(tilezero|tileloadd|tileloaddt1|tilestored|ldtilecfg|tdpbusd|tdpbssd|tdpbf16ps)\s"
)

LIBRARIES = {
    "llama-cpp-python-cpu": build.llama_cpu_build,
    "ggml-python-openvino": build.ggml_python_build,
    "llama-cpp-python-openvino": build.llama_openvino_build,
}


def test_the_no_amx_flags_win_over_an_amx_march() -> None:
    """GCC drops AMX for -march=<an AMX CPU> plus the build's flags, whatever their order: the
    claim the build rests on, checked on any host."""
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the references"

    def macros(*flags: str) -> str:
        return subprocess.run(
            [gcc, *flags, "-dM", "-E", "-"], input="", capture_output=True, text=True, check=True
        ).stdout

    flags = native.NATIVE_CFLAGS.split()
    assert "__AMX_TILE__" in macros("-march=sapphirerapids")
    for order in ([*flags, "-march=sapphirerapids"], ["-march=sapphirerapids", *flags]):
        got = macros(*order)
        assert not re.search(r"__AMX_\w+__", got), order
        assert "__AVX512F__" in got  # AVX-512 itself stays


@pytest.mark.parametrize("name", native.BUILD_NAMES)
def test_every_build_is_recorded_with_the_no_amx_flags(name: str) -> None:
    stamp = native.read_build_stamp(name)
    assert stamp is not None, f"{name} has no build record: run scripts/install-upstream"
    assert stamp.cflags == native.native_cflags()
    assert {"-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"} <= set(stamp.cflags.split())
    found = LIBRARIES[name]()
    assert found is not None and found.version == stamp.version


@pytest.mark.slow
@pytest.mark.parametrize("name", native.BUILD_NAMES)
def test_no_installed_cpu_kernel_holds_an_amx_instruction(name: str) -> None:
    found = LIBRARIES[name]()
    assert found is not None, f"{name} is not installed: run scripts/install-upstream"
    libs = sorted(Path(found.lib_dir).glob("libggml-cpu*.so*"))
    assert libs, f"no libggml-cpu in {found.lib_dir}"
    for lib in libs:
        asm = subprocess.run(
            ["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True
        )
        assert asm.returncode == 0, asm.stderr
        hits = AMX_MNEMONICS.findall(asm.stdout)
        assert not hits, f"{lib} holds AMX instructions: {sorted(set(hits))}"


def _stamp(tmp_path: Path, name: str, cflags: str, isa: tuple[str, ...]) -> None:
    (tmp_path / f"{name}.json").write_text(
        json.dumps({"name": name, "version": "0", "cflags": cflags, "machine": "x86_64", "cpu_flags": isa})
    )


def test_build_isa_is_the_build_hosts_less_what_its_flags_turn_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ggml compiled for decides its kernels (ggml_numerics.f16_kernels): the recorded build
    host's ISA, less an -mno-* of the build's flags (-mno-avx512f takes every AVX-512 family)."""
    monkeypatch.setattr(native, "build_stamp_dir", lambda: tmp_path)
    host = ("amx_tile", "avx2", "avx512_bf16", "avx512_fp16", "avx512f")
    _stamp(tmp_path, "llama-cpp-python-cpu", native.NATIVE_CFLAGS, host)
    assert native.build_isa("llama-cpp-python-cpu") == {"avx2", "avx512_bf16", "avx512_fp16", "avx512f"}
    _stamp(tmp_path, "ggml-python-openvino", f"{native.NATIVE_CFLAGS} -mno-avx512fp16", host)
    assert native.build_isa("ggml-python-openvino") == {"avx2", "avx512_bf16", "avx512f"}
    _stamp(tmp_path, "ggml-python-openvino", "-mno-avx512f", host)
    assert native.build_isa("ggml-python-openvino") == {"amx_tile", "avx2"}
    # not recorded: what a native build here with the default flags would have
    here = {f for f in native.cpu_flags() if f in native.ISA_OFF_FLAGS} - {"amx_tile", "amx_int8", "amx_bf16"}
    assert native.build_isa("llama-cpp-python-openvino") == here
    with pytest.raises(ValueError, match="unknown build name 'llama'; expected one of llama-cpp-python-cpu"):
        native.build_isa("llama")
