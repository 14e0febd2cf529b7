from __future__ import annotations

import json
import logging
import warnings

import pytest

from ovkit.config import ENV_VARS, MODELLED_BY, ConfigError, OvkitConfigWarning, atoi, read_config


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
    assert cfg.effective("GPU")["MANUAL_GQA_ATTN"] is (True if expected is None else expected)
    assert cfg.effective("CPU")["MANUAL_GQA_ATTN"] is (False if expected is None else expected)


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
    cfg, warned = parse(DEVICE="GPU.1", CACHE_DIR="/tmp/c", DEBUG_NODE="a,b,c,")
    assert cfg.device == "GPU.1" and cfg.cache_dir == "/tmp/c" and cfg.debug_node == ("a", "b", "c")
    assert warned == []


def test_debug_node_names_are_split_as_getline_splits_them() -> None:
    """The backend looks each piece up as written (nothing trimmed): ' b' and '' match no tensor."""
    cfg, warned = parse(DEBUG_NODE="a, b,,c")
    assert cfg.debug_node == ("a", "c")
    assert warned == [
        "GGML_OPENVINO_DEBUG_NODE='a, b,,c' has the names ' b', '', which no ggml tensor has (names are "
        "1 to 63 bytes, no white space around them): the backend skips them, and so does ovkit"
    ]


def test_config_is_immutable_and_tabulates_every_variable() -> None:
    cfg, _ = parse(PROFILING="1")
    with pytest.raises(AttributeError):
        cfg.profiling = False  # type: ignore[misc]
    rows = cfg.as_rows()
    assert [r["variable"] for r in rows] == [v.env_name for v in ENV_VARS]
    assert next(r for r in rows if r["variable"] == "GGML_OPENVINO_PROFILING")["value"] is True


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


# -- every variable of the newest list (issue 19) --------------------------------------------------
# ``env_var_names[]`` of Intel's fork's ggml-openvino-extra.cpp, in its order, plus NPU_PROPERTIES
NEWEST = [
    "DEVICE",
    "CACHE_DIR",
    "SPILL_DIR",
    "DEBUG_NODE",
    "COMPILED_MODEL_CACHE_DIR",
    "COMPILED_MODEL_CACHE_ONLY",
    "NPU_COMPILE_CONFIG",
    "NPU_PROPERTIES",
    "PREFILL_CHUNK_SIZE",
    "STATEFUL_EXECUTION",
    "PROFILING",
    "DUMP_CGRAPH",
    "DUMP_IR",
    "DEBUG_INPUT",
    "DEBUG_OUTPUT",
    "FORCE_STATIC",
    "PRINT_CGRAPH_TENSOR_ADDRESS",
    "ENABLE_CACHE",
    "DISABLE_CACHE",
    "DISABLE_KV_SLICE",
    "ENABLE_FALLBACK",
    "MANUAL_GQA_ATTN",
    "MOE_OP",
    "MEMORY_OPTIMIZE",
    "RELEASE_WEIGHTS",
    "REDUCE_COMPILE_MEM",
    "LOG_UNSUPPORTED_OPS",
    "LOG_SWA_LAYERS",
    "NATIVE_SOFTPLUS",
    "DISABLE_REMOTE_OUTPUTS",
    "REQUANT_KQUANT",
    "DISABLE_KV_STATE_RELAYOUT",
    "FULL_GRAPH_KEY",
]
EVERY = {
    "DEVICE": "GPU.1",
    "CACHE_DIR": "/tmp/ov-cache",
    "SPILL_DIR": "/tmp",
    "DEBUG_NODE": "attn_out-0,ffn_out-0",
    "COMPILED_MODEL_CACHE_DIR": "/tmp/ov-blobs",
    "COMPILED_MODEL_CACHE_ONLY": "1",
    "NPU_COMPILE_CONFIG": "optimization-level=2",
    "NPU_PROPERTIES": "NPU_TURBO=YES,NPU_COMPILATION_MODE_PARAMS=optimization-level=1",
    "PREFILL_CHUNK_SIZE": "512",
    "REQUANT_KQUANT": "q4_asym64_all",
    "MANUAL_GQA_ATTN": "0",
    "MOE_OP": "0",
    "PROFILING": "2",
} | {n: "1" for n in NEWEST if n not in ("DEVICE", "CACHE_DIR", "SPILL_DIR", "DEBUG_NODE", "COMPILED_MODEL_CACHE_DIR",
     "NPU_COMPILE_CONFIG", "NPU_PROPERTIES", "PREFILL_CHUNK_SIZE", "REQUANT_KQUANT", "MANUAL_GQA_ATTN", "MOE_OP", "PROFILING")}  # fmt: skip


def test_the_table_holds_every_variable_of_the_newest_list_in_its_order() -> None:
    assert [v.name for v in ENV_VARS] == NEWEST
    assert set(MODELLED_BY) <= set(NEWEST)  # no stale "modelled" entry
    rows = read_config({}).as_rows()
    assert all(r["type"] and r["default"] and r["changes"] for r in rows)
    status = {r["variable"].removeprefix("GGML_OPENVINO_"): r["ovkit"] for r in rows}
    assert str(status["NPU_PROPERTIES"]).startswith("modelled: ovkit.engine")
    assert str(status["LOG_UNSUPPORTED_OPS"]).startswith("modelled: ovkit.selection")
    assert str(status["REQUANT_KQUANT"]).startswith("modelled: ovkit.quant.requant_decision")
    assert str(status["MANUAL_GQA_ATTN"]).startswith("modelled: ovkit.ops.translate")
    assert str(status["DISABLE_KV_SLICE"]).startswith("modelled: ovkit.model")
    assert status["FORCE_STATIC"] == "reported only"  # parsed and shown, not modelled


def test_every_variable_set_parses_to_its_value() -> None:
    cfg, warned = parse(**EVERY)
    assert warned == []
    assert (cfg.device, cfg.spill_dir, cfg.debug_node) == ("GPU.1", "/tmp", ("attn_out-0", "ffn_out-0"))
    assert cfg.npu_properties == (
        ("NPU_TURBO", "YES"),
        ("NPU_COMPILATION_MODE_PARAMS", "optimization-level=1"),
    )
    assert cfg.requant_kquant == "q4_asym64_all" and cfg.prefill_chunk_size == 512
    assert cfg.moe_op is False and cfg.manual_gqa_attn is False and cfg.profiling is True
    for flag in ("compiled_model_cache_only", "force_static", "log_unsupported_ops", "log_swa_layers",
                 "native_softplus", "disable_remote_outputs", "disable_kv_state_relayout", "full_graph_key"):  # fmt: skip
        assert getattr(cfg, flag) is True, flag
    # NPU_PROPERTIES comes last, so its NPU_COMPILATION_MODE_PARAMS overrides NPU_COMPILE_CONFIG's
    assert cfg.npu_compile_properties() == {
        "NPU_COMPILATION_MODE_PARAMS": "optimization-level=1",
        "NPU_TURBO": "YES",
    }
    assert parse()[0].moe_op is True  # on unless set to 0 (the backend's default 1)


def test_npu_variables_reach_the_npu_class_compile_only() -> None:
    from ovkit.engine.run_config import DEFAULT_RUN_CONFIG, compile_properties

    cfg, _ = parse(NPU_COMPILE_CONFIG="optimization-level=2", NPU_PROPERTIES="NPUW_DQ=NO")
    npu = compile_properties(DEFAULT_RUN_CONFIG, "NPU", cfg)
    assert npu["NPU_COMPILATION_MODE_PARAMS"] == "optimization-level=2" and npu["NPUW_DQ"] == "NO"
    cpu = compile_properties(DEFAULT_RUN_CONFIG, "CPU", cfg)
    assert "NPU_COMPILATION_MODE_PARAMS" not in cpu and "NPUW_DQ" not in cpu


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("GGML_OPENVINO_DEVCE", "; did you mean GGML_OPENVINO_DEVICE?"),
        ("GGML_OPENVINO_STATEFULL_EXECUTION", "; did you mean GGML_OPENVINO_STATEFUL_EXECUTION?"),
        ("GGML_OPENVINO_NPU_PROPERTY", "; did you mean GGML_OPENVINO_NPU_PROPERTIES?"),
        ("GGML_OPENVINO_WHATEVER", " (ovkit config lists the ones it reads)"),
    ],
)
def test_unknown_names_warn_with_the_closest_known_one(name: str, suggestion: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = read_config({name: "1"})
    assert [str(w.message) for w in caught] == [f"{name} is not a variable the backend reads{suggestion}"]
    assert cfg.unknown == (f"{name} is not a variable the backend reads{suggestion}",)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "REQUANT_KQUANT",
            "q4_sym129",
            "GGML_OPENVINO_REQUANT_KQUANT='q4_sym129' is not one of q4_sym128, q4_sym128_all, q4_asym64, "
            "q4_asym64_all, native: the backend matches none of its words and acts as if it were unset, "
            "and so does ovkit; did you mean 'q4_sym128'?",
        ),
        (
            "NPU_PROPERTIES",
            "NPU_TURBO=YES,NPUW_DQ",
            "GGML_OPENVINO_NPU_PROPERTIES='NPU_TURBO=YES,NPUW_DQ' has entry 'NPUW_DQ' not KEY=VALUE: the "
            "backend skips it, and so does ovkit",
        ),
        (
            "NPU_PROPERTIES",
            "=YES",
            "GGML_OPENVINO_NPU_PROPERTIES='=YES' has entry '=YES' not KEY=VALUE: the backend skips it, and "
            "so does ovkit",
        ),
    ],
)
def test_unusable_values_warn_and_are_taken_as_the_backend_takes_them(
    name: str, value: str, message: str
) -> None:
    cfg, warned = parse(**{name: value})
    assert warned == [message]
    assert cfg.requant_kquant is None  # an unknown word acts as unset
    assert cfg.npu_properties == ((("NPU_TURBO", "YES"),) if value.startswith("NPU_TURBO") else ())
    with pytest.raises(ConfigError) as raised:
        read_config({f"GGML_OPENVINO_{name}": value}, strict=True)
    assert str(raised.value) == message and raised.value.problems == (message,)


def test_a_directory_variable_naming_a_file_is_not_used(tmp_path) -> None:
    f = tmp_path / "blob"
    f.write_text("")
    cfg, warned = parse(SPILL_DIR=str(f), COMPILED_MODEL_CACHE_DIR=str(f / "sub"))
    assert cfg.spill_dir is None and cfg.compiled_model_cache_dir is None
    assert warned == [
        f"GGML_OPENVINO_SPILL_DIR={str(f)!r} is not a directory (it names a file): the backend's mkstemp "
        "there fails, so its weight buffers fail to allocate; ovkit keeps its weight file in the temp "
        "directory",
        f"GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR={str(f / 'sub')!r} has a file where a parent directory "
        "should be: the backend cannot create it and disables its model cache, and so does ovkit",
    ]
    new, warned = parse(COMPILED_MODEL_CACHE_DIR=str(tmp_path / "new" / "dir"))
    assert new.compiled_model_cache_dir == str(tmp_path / "new" / "dir") and warned == []
    assert not (tmp_path / "new").exists()  # reading looks, it never creates


def test_log_unsupported_ops_prints_each_rejection_as_the_backend_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from ovkit.ir import OpInfo
    from ovkit.selection import Backend, resolve_device
    from ovkit.simulate import SimulatedCore

    op = OpInfo("LOG", "f32", (4, 1, 1, 1), name="logits")
    core = SimulatedCore("laptop")
    quiet = Backend(resolve_device({}, log=False, core=core), core=core)
    loud = Backend(
        resolve_device({"GGML_OPENVINO_LOG_UNSUPPORTED_OPS": "1"}, log=False, core=core), core=core
    )
    with caplog.at_level(logging.INFO, logger="ovkit"):
        assert not quiet.supports_op("CPU", op)
        assert caplog.messages == []
        decision = loud.supports_op("CPU", op)
        assert not loud.supports_op("GPU", op)
    assert caplog.messages == [
        f"OpenVINO op unsupported: op 'logits' (LOG), type f32: {decision.reason}",
        "OpenVINO op unsupported: op 'logits' (LOG), type f32: device GPU is not the selected device CPU",
    ]
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 2


def _ovkit_config(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: dict[str, str]):
    from ovkit.cli import main

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code = main(["config"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_ovkit_config_with_every_variable_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _ovkit_config(monkeypatch, capsys, {f"GGML_OPENVINO_{k}": v for k, v in EVERY.items()})
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["variable", "type", "value", "ovkit:", "what", "it", "changes"]
    body = {line.split()[0].removeprefix("GGML_OPENVINO_"): line for line in lines[1 : 1 + len(NEWEST)]}
    assert list(body) == NEWEST
    assert (
        "'q4_asym64_all' -> q4_asym64_all" in body["REQUANT_KQUANT"]
        and "modelled: requantize K-quants" in body["REQUANT_KQUANT"]
    )
    assert "'0' -> False" in body["MOE_OP"] and "'GPU.1' -> GPU.1" in body["DEVICE"]
    assert "modelled: NPU: KEY=VALUE" in body["NPU_PROPERTIES"]
    assert "'1' -> True" in body["DISABLE_KV_SLICE"] and "modelled: turn off" in body["DISABLE_KV_SLICE"]
    assert (
        "'0' -> False" in body["MANUAL_GQA_ATTN"]
        and "modelled: MatMul/Softmax GQA" in body["MANUAL_GQA_ATTN"]
    )
    assert lines[-4:-1] == [  # MANUAL_GQA_ATTN=0, MOE_OP=0, MEMORY_OPTIMIZE=1, RELEASE_WEIGHTS=1
        "on the CPU class: STATEFUL_EXECUTION=on, MANUAL_GQA_ATTN=off, RELEASE_WEIGHTS=on, REDUCE_COMPILE_MEM=on, MOE_OP=off",
        "on the GPU class: STATEFUL_EXECUTION=on, MANUAL_GQA_ATTN=off, RELEASE_WEIGHTS=on, REDUCE_COMPILE_MEM=on, MOE_OP=off",
        "on the NPU class: STATEFUL_EXECUTION=off, MANUAL_GQA_ATTN=off, RELEASE_WEIGHTS=on, REDUCE_COMPILE_MEM=on, MOE_OP=off",
    ]
    assert lines[-1] == (
        "NPU compile properties from the environment: "
        "{'NPU_COMPILATION_MODE_PARAMS': 'optimization-level=1', 'NPU_TURBO': 'YES'}"
    )


def test_ovkit_config_with_a_typo_and_bad_values(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {
        "GGML_OPENVINO_DEVCE": "GPU",
        "GGML_OPENVINO_REQUANT_KQUANT": "q4",
        "GGML_OPENVINO_PROFILING": "yes",
    }
    problems = [
        "GGML_OPENVINO_PROFILING='yes' is read as 0 (off): not a clean integer",
        "GGML_OPENVINO_REQUANT_KQUANT='q4' is not one of q4_sym128, q4_sym128_all, q4_asym64, "
        "q4_asym64_all, native: the backend matches none of its words and acts as if it were unset, "
        "and so does ovkit",
        "GGML_OPENVINO_DEVCE is not a variable the backend reads; did you mean GGML_OPENVINO_DEVICE?",
    ]
    code, out, err = _ovkit_config(monkeypatch, capsys, env)
    assert code == 0
    assert err.splitlines() == [f"ovkit: warning: {p}" for p in problems]
    assert "GGML_OPENVINO_DEVICE" in out and "(default CPU)" in out  # the table is still printed
    assert "on the GPU class: STATEFUL_EXECUTION=off, MANUAL_GQA_ATTN=on, RELEASE_WEIGHTS=off" in out
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert (
        "'yes' -> False" in rows["GGML_OPENVINO_PROFILING"]
        and "'q4' -> None" in rows["GGML_OPENVINO_REQUANT_KQUANT"]
    )
    assert "!" in rows["GGML_OPENVINO_PROFILING"] and "!" not in rows["GGML_OPENVINO_DEVICE"]
    from ovkit.cli import main

    assert main(["config", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["problems"] == problems and len(payload["variables"]) == len(NEWEST)
    assert main(["config", "--strict"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"ovkit: error: {p}" for p in problems]


def test_compiled_model_cache_dir_imports_blobs_without_building(tmp_path) -> None:
    """The first engine compiles and exports the blob and manifest; a new engine imports it
    without calling the model factory (no translation), as the backend's blob cache does."""
    import numpy as np
    from openvino import Model
    from openvino import opset13 as ops

    from ovkit.engine import Engine
    from ovkit.engine.keys import model_structure_key
    from ovkit.engine.run_config import DEFAULT_RUN_CONFIG, compile_properties

    blobs = tmp_path / "blobs"
    env = {"GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR": str(blobs)}
    # as in the backend, OpenVINO's own cache dir is off while the blob cache is on
    both = read_config(env | {"GGML_OPENVINO_CACHE_DIR": str(tmp_path)})
    assert "CACHE_DIR" not in compile_properties(DEFAULT_RUN_CONFIG, "CPU", both)

    built = []

    def model() -> Model:
        built.append(1)
        a = ops.parameter([16, 16], np.float32, name="a")
        y = ops.multiply(a, a)
        y.output(0).get_tensor().set_names({"y"})
        return Model([y], [a], "square16")

    digest = model_structure_key(model())
    x = np.full((16, 16), 3, np.float32)
    assert Engine(env=env).compiled(digest, model).effective.loaded_from_cache is False
    assert sorted(p.suffix for p in blobs.iterdir()) == [".blob", ".manifest"]
    built.clear()
    again = Engine(env=env)
    assert again.compiled(digest, model).effective.loaded_from_cache is True and built == []
    assert (again.run(digest, model, [x])[0] == 9).all()
    # a structure that is a bare name is not content-addressed: never exported under it
    Engine(env=env).run("square16", model, [x])
    assert len(list(blobs.iterdir())) == 2


def test_compiled_model_cache_dir_survives_a_broken_blob(tmp_path, caplog) -> None:
    """A blob that cannot be imported is reported and compiled again, never half-used."""
    import numpy as np
    from openvino import Model
    from openvino import opset13 as ops

    from ovkit.engine import Engine
    from ovkit.engine.keys import model_structure_key

    def model() -> Model:
        a = ops.parameter([4], np.float32, name="a")
        return Model([ops.add(a, a)], [a], "double")

    env = {"GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR": str(tmp_path)}
    digest = model_structure_key(model())
    Engine(env=env).run(digest, model, [np.ones(4, np.float32)])
    (blob,) = tmp_path.glob("*.blob")
    blob.write_bytes(b"not a blob")
    with caplog.at_level("WARNING", logger="ovkit"):
        again = Engine(env=env)
        out = again.run(digest, model, [np.ones(4, np.float32)])
    assert "model cache import failed" in caplog.text
    assert again.compiled(digest, model).effective.loaded_from_cache is False and (out[0] == 2).all()
