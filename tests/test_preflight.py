"""``ovkit check`` / ``ovkit.check``: verdicts per device from a GGUF header alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from model_helpers import real_model

import ovkit
from ovkit import preflight
from ovkit.cli import main
from ovkit.gguf import write_gguf
from ovkit.model.synthetic import synthetic
from ovkit.preflight import PreflightError, Stage, Verdict
from ovkit.simulate.profiles import IGPU_MAX_ALLOC

#: Llama-3.2-3B's shape (tied head, Q4_0): its KV cache is 114,688 bytes per cell
LLAMA_3B = {
    "n_embd": 3072, "n_layer": 28, "n_head": 24, "n_head_kv": 8, "n_ff": 8192, "n_vocab": 128256,
    "n_ctx_train": 131072, "tied_output": True, "weight_type": "q4_0",
}  # fmt: skip
LLAMA_13B = {
    "n_embd": 5120, "n_layer": 40, "n_head": 40, "n_head_kv": 40, "n_ff": 13824, "n_vocab": 32000,
    "weight_type": "q4_0",
}  # fmt: skip


@pytest.fixture(scope="module")
def llama3b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic("llama", tmp_path_factory.mktemp("pf") / "llama-3b.gguf", header_only=True, **LLAMA_3B)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic(
        "llama", tmp_path_factory.mktemp("pf") / "small.gguf", weight_type="q8_0", n_ctx_train=2048
    )


def cli(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- limits: the GPU's largest single allocation -------------------------------------------------


def test_laptop_gpu_kv_cache_above_the_cap_fails_at_context_creation(
    llama3b: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """#29087 from a header alone: at -c 65536 the KV cache is one 7,516,192,768-byte buffer."""
    gpu = ovkit.check(llama3b, 65536, simulate="laptop").device("GPU")
    assert gpu.verdict is Verdict.FAILS and gpu.stage is Stage.CONTEXT
    assert "7,516,192,768" in gpu.why and f"{IGPU_MAX_ALLOC:,}" in gpu.why
    assert gpu.largest_buffer == ("KV cache", 7_516_192_768) and gpu.max_alloc_bytes == IGPU_MAX_ALLOC
    assert "#29087" in gpu.issue and "#29124 (open)" in gpu.lifted_by
    code, out, _ = cli(str(llama3b), "-c", "65536", "--simulate", "laptop", capsys=capsys)
    assert code == 0
    line = next(ln for ln in out.splitlines() if ln.startswith("GPU"))
    assert "fails at context creation" in line and "7,516,192,768" in line and "4,294,959,104" in line
    assert "#29124 (open)" in line


def test_a_cache_that_fits_passes_and_the_verdict_flips_where_llama_cpp_pads(llama3b: Path) -> None:
    """llama.cpp pads the context to 256 cells: 37,376 cells fit under the cap, -c 37377 is
    allocated as 37,632 cells and does not (unpadded it would fit)."""
    assert 37377 * 114_688 < IGPU_MAX_ALLOC < 37632 * 114_688
    fits = ovkit.check(llama3b, 37376, simulate="laptop").device("GPU")
    assert fits.verdict is not Verdict.FAILS and fits.largest_buffer == ("KV cache", 37376 * 114_688)
    over = ovkit.check(llama3b, 37377, simulate="laptop").device("GPU")
    assert over.verdict is Verdict.FAILS and over.stage is Stage.CONTEXT
    assert over.largest_buffer == ("KV cache", 37632 * 114_688)


def test_with_pr_29124_the_kv_buffer_is_split_under_the_cap(llama3b: Path) -> None:
    gpu = ovkit.check(llama3b, 65536, simulate="laptop", backend="pr29124").device("GPU")
    assert gpu.verdict is not Verdict.FAILS
    assert gpu.largest_buffer[1] <= IGPU_MAX_ALLOC
    assert any("splits the KV" in n for n in gpu.notes)


# -- names --------------------------------------------------------------------------------------


def test_gpu_on_a_machine_of_numbered_gpus_falls_back_to_cpu(llama3b: Path) -> None:
    r = ovkit.check(llama3b, 4096, simulate="workstation", device="GPU")
    assert r.naming is not None and r.naming.fell_back and r.naming.device == "CPU"
    assert [d.device for d in r.devices] == ["CPU"]
    assert any("#29235" in line for line in r.naming.behaviour)


def test_gpu_dot_0_loses_the_gpu_paths_the_kv_cache_stays_on_the_host(llama3b: Path) -> None:
    numbered = ovkit.check(llama3b, 65536, simulate="workstation", device="GPU.0")
    assert numbered.naming is not None and not numbered.naming.fell_back
    assert any("KV cache stays in host memory" in line for line in numbered.naming.behaviour)
    gpu0 = numbered.device("GPU.0")
    kv = [p for p in gpu0.parts if p.name == "KV cache"]
    assert kv and kv[0].where == "host"
    # no single KV buffer on the device: the 7.5 GB cache is no allocation there (the cap does not bite)
    assert gpu0.largest_buffer[0] != "KV cache"
    exact = ovkit.check(llama3b, 65536, simulate="laptop", device="GPU").device("GPU")
    assert [p.where for p in exact.parts if p.name == "KV cache"] == ["device"]


@pytest.mark.parametrize(
    ("value", "expect"),
    [
        ("AUTO:GPU,CPU", "#22644"),
        ("HETERO:GPU,CPU", "#27927"),
        ("gpu", "case-sensitive"),
        ("GPX", "fallback to CPU"),
    ],
)
def test_names_the_backend_does_not_accept_fall_back_to_cpu_and_say_why(
    small: Path, value: str, expect: str
) -> None:
    r = ovkit.check(small, 512, simulate="laptop", device=value)
    assert r.naming is not None and r.naming.fell_back and r.naming.device == "CPU"
    said = " ".join(r.naming.behaviour) + " " + (r.naming.hint or "")
    assert expect in said


# -- the NPU's static shapes ------------------------------------------------------------------


def test_npu_static_shapes_and_the_training_context_named_as_the_cause(llama3b: Path) -> None:
    unset = ovkit.check(llama3b, simulate="laptop", device="NPU")
    assert unset.n_ctx == 131072 and unset.n_ctx_requested is None
    assert any("-c was not given" in n for n in unset.notes)
    text = " ".join(unset.device("NPU").notes)
    assert "256 tokens" in text and "131,072 cells" in text and "#29288" in text
    explicit = ovkit.check(
        llama3b, 4096, simulate="laptop", device="NPU", env={"GGML_OPENVINO_PREFILL_CHUNK_SIZE": "128"}
    )
    text = " ".join(explicit.device("NPU").notes)
    assert "128 tokens" in text and "4,096 cells" in text and "#29288" not in text
    # where the unset context makes a device fail, the verdict names it as the likely cause
    gpu = ovkit.check(llama3b, simulate="laptop", device="GPU").device("GPU")
    assert gpu.stage is Stage.CONTEXT and "the training context 131,072 is the likely cause" in gpu.why


# -- runs with fallback -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def q5_0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic(
        "llama", tmp_path_factory.mktemp("pf") / "q5_0.gguf", weight_type="q5_0", header_only=True
    )


def test_nodes_left_to_ggml_cpu_run_with_enable_fallback_and_are_named(q5_0: Path) -> None:
    """supports_op's type gate refuses Q5_0: every MUL_MAT on a Q5_0 weight goes to ggml's CPU."""
    r = ovkit.check(q5_0, 512, device="CPU", env={"GGML_OPENVINO_ENABLE_FALLBACK": "1"})
    cpu = r.devices[0]
    assert cpu.verdict is Verdict.FALLBACK
    assert [f.op for f in cpu.fallbacks] == ["MUL_MAT"] and cpu.fallbacks[0].nodes > 0
    assert "src0 type q5_0" in cpu.fallbacks[0].reason
    assert cpu.summary().startswith(f"runs with {cpu.fallbacks[0].nodes} nodes left to ggml's CPU (MUL_MAT)")


def test_a_split_graph_fails_at_the_first_decode_without_enable_fallback(q5_0: Path) -> None:
    """Measured on the backend this project builds: the split graph's inputs are bound as if whole."""
    cpu = ovkit.check(q5_0, 512, device="CPU").devices[0]
    assert cpu.verdict is Verdict.FAILS and cpu.stage is Stage.DECODE
    assert "left to ggml's CPU" in cpu.why and "Can't set the input tensor" in cpu.why
    assert "GGML_OPENVINO_ENABLE_FALLBACK=1" in cpu.lifted_by


def test_gemma_3_270m_is_predicted_to_fail_as_it_does() -> None:
    """Gemma-3-270M Q4_K_M stores Q5_0 projections: on the backend this project builds it fails at
    the first decode (llama_decode -3, measured), and runs with GGML_OPENVINO_ENABLE_FALLBACK=1."""
    path = real_model("gemma3-270m")
    cpu = ovkit.check(path, 4096, device="CPU").devices[0]
    assert cpu.verdict is Verdict.FAILS and cpu.stage is Stage.DECODE and "q5_0" in cpu.why
    fixed = ovkit.check(path, 4096, device="CPU", env={"GGML_OPENVINO_ENABLE_FALLBACK": "1"}).devices[0]
    assert fixed.verdict is Verdict.FALLBACK


def test_flash_attention_off_fails_at_the_first_decode_on_this_build(small: Path) -> None:
    cpu = ovkit.check(small, 512, device="CPU", flash_attn=False).devices[0]
    assert cpu.verdict is Verdict.FAILS and cpu.stage is Stage.DECODE and "scatter_update" in cpu.why
    assert ovkit.check(small, 512, device="CPU").devices[0].verdict is Verdict.RUNS


# -- known aborts -------------------------------------------------------------------------------


def write_header(path: Path, arch: str, **meta: Any) -> Path:
    tensors = {"token_embd.weight": np.zeros((512, 64), np.float32)}
    return write_gguf(path, tensors, arch=arch, metadata={f"{arch}.context_length": 4096, **meta})


def test_a_recurrent_architecture_is_predicted_to_abort_before_26952(tmp_path: Path) -> None:
    path = write_header(tmp_path / "qwen35.gguf", "qwen35")
    r = ovkit.check(path, 4096, simulate="laptop", backend="pr25795")
    for d in r.devices:
        assert d.verdict is Verdict.FAILS and d.stage is Stage.CONTEXT
        assert "cannot run the operation (CPY)" in d.why and "#20562" in d.issue
    assert "#26952" in r.device("CPU").lifted_by and "#27843" in r.device("NPU").lifted_by
    # after the fix ovkit has no graph to size it with: a one-line error, not a guess
    with pytest.raises(PreflightError, match="qwen35.*not one ovkit can size"):
        ovkit.check(path, 4096, simulate="laptop")


# -- memory ---------------------------------------------------------------------------------------


def test_kv_cache_as_llama_cpp_sizes_it(llama3b: Path) -> None:
    r = ovkit.check(llama3b, 4000, device="CPU")
    assert r.n_ctx == 4096
    kv = [p for p in r.devices[0].parts if p.name == "KV cache"]
    assert [p.bytes for p in kv] == [448 * 2**20]  # llama.cpp logs "KV buffer size = 448.00 MiB"


def test_host_memory_beyond_what_is_available_fails_at_the_stage_it_happens(llama3b: Path) -> None:
    cpu = ovkit.check(llama3b, 131072 * 2, simulate="laptop").device("CPU")
    assert cpu.verdict is Verdict.FAILS and cpu.stage is Stage.CONTEXT  # the 28 GiB KV cache
    assert "of host RAM, 24.0 GiB available" in cpu.why and "#22712" in cpu.issue
    runs = ovkit.check(llama3b, 4096, simulate="laptop").device("CPU")
    assert runs.verdict is Verdict.RUNS and runs.host_peak_bytes < 24 * 2**30


def resident_bytes(path: Path) -> int:
    """Bytes of ``path`` in the page cache (``mincore``): what any process read of it."""
    import ctypes
    import mmap

    size = path.stat().st_size
    libc = ctypes.CDLL(None, use_errno=True)
    with path.open("rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as m:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * pages)()
        buf = ctypes.c_char.from_buffer(m)
        try:
            assert libc.mincore(ctypes.c_void_p(ctypes.addressof(buf)), ctypes.c_size_t(size), vec) == 0
        finally:
            del buf
        return int(np.count_nonzero(np.frombuffer(vec, np.uint8) & 1)) * mmap.PAGESIZE


def test_a_13b_file_is_checked_from_its_header_without_reading_a_weight(tmp_path: Path) -> None:
    """The 13 B-shaped file claims 7 GB of tensor data (a sparse file): a fresh process checks it
    without bringing more than its header into memory, and stays under 200 MiB."""
    path = synthetic("llama", tmp_path / "13b.gguf", header_only=True, **LLAMA_13B)  # type: ignore[arg-type]
    assert path.stat().st_size > 7 * 10**9
    header = resident_bytes(path)
    assert header < 2 * 2**20  # only the header was written
    code = (
        "import sys, ovkit\n"
        "r = ovkit.check(sys.argv[1], 4096, device='CPU')\n"
        # VmHWM: this process image's peak (ru_maxrss keeps the forking parent's across exec)
        "hwm = next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:'))\n"
        "print(r.devices[0].verdict, hwm * 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    verdict, peak = out.stdout.split()
    assert verdict in {v.value for v in Verdict}
    assert resident_bytes(path) - header < 1 * 2**20, "the check read tensor data"
    assert int(peak) < 200 * 2**20


def test_the_drawing_shows_each_part_against_free_memory_and_the_cap(llama3b: Path) -> None:
    r = ovkit.check(llama3b, 65536, simulate="laptop")
    frame = r.memory_frame()
    gpu = frame[frame["device"] == "GPU (SIMULATED)"]
    assert set(gpu["where"]) == {"host", "device"}
    assert gpu.loc[gpu["part"] == "KV cache", "bytes"].tolist() == [7_516_192_768]
    assert set(gpu["max_alloc_bytes"]) == {IGPU_MAX_ALLOC}
    fig = r.plot()
    ax = fig.axes[0]
    assert any(t.get_text().startswith("GPU (SIMULATED) device") for t in ax.get_yticklabels())
    assert "GPU_DEVICE_MAX_ALLOC_MEM_SIZE" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_json_carries_every_verdict(llama3b: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(str(llama3b), "-c", "65536", "--simulate", "laptop", "--json", capsys=capsys)
    data = json.loads(out)
    assert code == 0 and data["n_ctx"] == 65536
    by = {d["device"]: d for d in data["devices"]}
    assert by["GPU"]["verdict"] == "fails" and by["GPU"]["stage"] == "context creation"
    assert by["GPU"]["largest_buffer"] == ["KV cache", 7_516_192_768]


# -- bad input ----------------------------------------------------------------------------------


def test_bad_input_gets_a_one_line_error(
    tmp_path: Path, small: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(small.read_bytes()[:200])
    unknown = write_header(tmp_path / "unknown.gguf", "frobnicator")
    cases = [
        ((str(truncated),), "truncated or corrupt"),
        ((str(unknown),), "architecture 'frobnicator' is not one ovkit can size"),
        ((str(small), "-c", "-5"), "-c -5: expected 0"),
        ((str(small), "-c", str(2**33)), "uint32"),
        ((str(small), "--backend", "b9999"), "backend 'b9999' is not a known version"),
        ((str(small), "--simulate", "nope"), "unknown simulation profile 'nope'"),
    ]
    for argv, expect in cases:
        code, out, err = cli(*argv, capsys=capsys)
        assert code == 2 and out == "", argv
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ovkit: error:") and expect in lines[0], (argv, err)


def test_ovkit_check_is_exported() -> None:
    assert ovkit.check is preflight.check


def test_the_dashboard_fit_view_checks_a_file(llama3b: Path, tmp_path: Path) -> None:
    from ovkit.simulate import SimulatedCore

    d = ovkit.dashboard(core=SimulatedCore("laptop"), auto_refresh=False, op_explorer=False)
    try:
        assert d.accordion is not None and d.accordion.get_title(0).startswith("Will it run here?")
        assert str(d.fit) == "ovkit check: no file checked yet" and "no file" in d.fit._repr_html_()
        d.fit.path.value, d.fit.n_ctx.value = str(llama3b), 65536
        result = d.fit.run()
        assert result.device("GPU").stage is Stage.CONTEXT
        assert "7,516,192,768" in d.fit.out.value and "<img" in d.fit.out.value
        assert str(d.fit).startswith("ovkit check llama") and d.fit._repr_html_() == d.fit.out.value
        d.fit.path.value = str(tmp_path / "missing.gguf")
        assert d.fit.run() is None and "no such file" in d.fit.out.value
    finally:
        d.close()


def test_a_header_only_file_has_the_full_files_tensor_table(tmp_path: Path) -> None:
    kw: dict[str, Any] = {"weight_type": "q4_0", "n_embd": 128, "n_ff": 256, "n_vocab": 1024}
    full = ovkit.read_gguf(synthetic("llama", tmp_path / "full.gguf", random_blocks=True, **kw))
    header = ovkit.read_gguf(synthetic("llama", tmp_path / "header.gguf", header_only=True, **kw))
    assert header.tensors == full.tensors and header.file_size == full.file_size
    assert (tmp_path / "header.gguf").stat().st_blocks * 512 < full.file_size // 4  # a hole


def test_a_weight_the_npu_cannot_requantize_fails_at_load(tmp_path: Path) -> None:
    """SmolLM2's width, 576, is not a whole number of the NPU's 4-bit groups of 128."""
    path = synthetic(
        "llama", tmp_path / "w576.gguf", n_embd=576, n_head=9, n_head_kv=3, n_ff=1536, weight_type="q4_0",
        header_only=True,
    )  # fmt: skip
    r = ovkit.check(path, 2048, simulate="laptop")
    npu = r.device("NPU")
    assert npu.verdict is Verdict.FAILS and npu.stage is Stage.LOAD and "multiple of 128" in npu.why
    assert r.device("CPU").verdict is Verdict.RUNS
