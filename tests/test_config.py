from __future__ import annotations

import warnings

import pytest

from ovkit.config import ENV_VARS, OvkitConfigWarning, atoi, read_config


def parse(**env: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = read_config({f"GGML_OPENVINO_{k}": v for k, v in env.items()})
    return cfg, [str(w.message) for w in caught if issubclass(w.category, OvkitConfigWarning)]


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1), ("  42", 42), ("-3", -3), ("+7", 7), ("1x", 1), ("yes", 0), ("", 0), ("x1", 0), ("0x10", 0)],
)
def test_atoi_reads_like_c(text: str, value: int) -> None:
    assert atoi(text) == value


def test_defaults_when_nothing_is_set() -> None:
    cfg, warned = parse()
    assert cfg.device == "CPU" and cfg.device_requested is None
    assert cfg.prefill_chunk_size == 256
    assert not cfg.stateful_execution and cfg.manual_gqa_attn is None
    assert warned == []


def test_empty_string_means_unset() -> None:
    cfg, warned = parse(DEVICE="", STATEFUL_EXECUTION="", CACHE_DIR="")
    assert cfg.device == "CPU" and cfg.device_requested is None and cfg.cache_dir is None
    assert cfg.raw == {} and warned == []


@pytest.mark.parametrize(
    ("raw", "on", "warning"),
    [
        ("1", True, None),
        ("2", True, None),
        ("0", False, None),
        ("-1", True, "GGML_OPENVINO_PROFILING='-1' is read as -1 (on): atoi != 0 enables"),
        ("yes", False, "GGML_OPENVINO_PROFILING='yes' is read as 0 (off): not a clean integer"),
        ("1x", True, "GGML_OPENVINO_PROFILING='1x' is read as 1 (on): not a clean integer"),
        ("true", False, "GGML_OPENVINO_PROFILING='true' is read as 0 (off): not a clean integer"),
        (" 1", True, "GGML_OPENVINO_PROFILING=' 1' is read as 1 (on): not a clean integer"),
    ],
)
def test_toggles_read_as_atoi_not_zero_with_warnings(raw: str, on: bool, warning: str | None) -> None:
    cfg, warned = parse(PROFILING=raw)
    assert cfg.profiling is on
    assert warned == ([warning] if warning else [])
    assert [str(i) for i in cfg.issues] == warned


@pytest.mark.parametrize(
    ("raw", "expected"), [(None, None), ("1", True), ("0", False), ("-1", False), ("5", True)]
)
def test_manual_gqa_is_tristate_greater_than_zero(raw: str | None, expected: bool | None) -> None:
    cfg, _ = parse(**({} if raw is None else {"MANUAL_GQA_ATTN": raw}))
    assert cfg.manual_gqa_attn is expected
    assert cfg.manual_gqa("GPU") is (True if expected is None else expected)
    assert cfg.manual_gqa("CPU") is (False if expected is None else expected)


@pytest.mark.parametrize(
    ("raw", "size", "warns"),
    [("512", 512, False), ("0", 256, True), ("-5", 256, True), ("64k", 64, True), ("abc", 256, True)],
)
def test_prefill_chunk_size(raw: str, size: int, warns: bool) -> None:
    cfg, warned = parse(PREFILL_CHUNK_SIZE=raw)
    assert cfg.prefill_chunk_size == size
    assert bool(warned) is warns
    if warns:
        assert "GGML_OPENVINO_PREFILL_CHUNK_SIZE" in warned[0] and repr(raw) in warned[0]


def test_memory_optimize_implies_reduce_compile_mem_and_gpu_release() -> None:
    cfg, _ = parse(MEMORY_OPTIMIZE="1")
    assert cfg.reduce_compile_mem
    assert cfg.release_weights("GPU") and not cfg.release_weights("CPU") and not cfg.release_weights("NPU")


def test_explicit_settings_override_memory_optimize() -> None:
    cfg, _ = parse(MEMORY_OPTIMIZE="1", REDUCE_COMPILE_MEM="0", RELEASE_WEIGHTS="0")
    assert not cfg.reduce_compile_mem and not cfg.release_weights("GPU")
    cfg, _ = parse(RELEASE_WEIGHTS="1")
    assert cfg.release_weights("CPU")


def test_stateful_is_forced_off_on_npu() -> None:
    cfg, _ = parse(STATEFUL_EXECUTION="1")
    assert cfg.stateful("CPU") and cfg.stateful("GPU") and not cfg.stateful("NPU")


def test_strings_and_lists() -> None:
    cfg, _ = parse(DEVICE="GPU.1", CACHE_DIR="/tmp/c", DEBUG_NODE="a, b,,c")
    assert cfg.device == "GPU.1" and cfg.cache_dir == "/tmp/c" and cfg.debug_node == ("a", "b", "c")


def test_config_is_immutable_and_tabulates_every_variable() -> None:
    cfg, _ = parse(PROFILING="1")
    with pytest.raises(AttributeError):
        cfg.profiling = False  # type: ignore[misc]
    rows = cfg.as_rows()
    assert [r["variable"] for r in rows] == [v.env_name for v in ENV_VARS]
    assert next(r for r in rows if r["variable"] == "GGML_OPENVINO_PROFILING")["value"] is True
    assert len(ENV_VARS) == 20


def test_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_OPENVINO_DISABLE_CACHE", "1")
    assert read_config().disable_cache


OUT_OF_INT_RANGE = [
    "999999999999999999999",
    "-999999999999999999999",
    "2147483648",
    "-2147483649",
    "4294967297",
    "12345678901",
    "9223372036854775808",
    " +4294967551x",
]


@pytest.mark.parametrize("text", [*OUT_OF_INT_RANGE, "2147483647", "-2147483648", "7", "-0", "+-3", "\v5"])
def test_atoi_matches_this_machines_libc(text: str) -> None:
    import ctypes

    libc = ctypes.CDLL(None)
    libc.atoi.argtypes, libc.atoi.restype = [ctypes.c_char_p], ctypes.c_int
    assert atoi(text) == libc.atoi(text.encode())


def test_out_of_int_range_reads_as_glibc_with_a_warning() -> None:
    cfg, warned = parse(PREFILL_CHUNK_SIZE="999999999999999999999", MANUAL_GQA_ATTN="2147483648")
    assert cfg.prefill_chunk_size == 256  # atoi gives -1, so the default
    assert cfg.manual_gqa_attn is False  # atoi gives -2**31: off
    assert warned == [
        "GGML_OPENVINO_PREFILL_CHUNK_SIZE='999999999999999999999' is read as -1 (outside C int range: "
        "strtol saturates it to 9223372036854775807, then atoi keeps its low 32 bits), so the default 256",
        "GGML_OPENVINO_MANUAL_GQA_ATTN='2147483648' is read as -2147483648 (off): "
        "outside C int range: atoi keeps its low 32 bits",
    ]
    cfg, warned = parse(PREFILL_CHUNK_SIZE="4294967553")
    assert cfg.prefill_chunk_size == 257
    assert warned == [
        "GGML_OPENVINO_PREFILL_CHUNK_SIZE='4294967553' is read as 257: outside C int range: "
        "atoi keeps its low 32 bits"
    ]
