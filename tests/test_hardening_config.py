"""Hostile ``GGML_OPENVINO_*`` values never stop a command (issue 35, item 4).

Each value of the sweep below is set on each variable ``ovkit/config.py`` knows.  The in-process
tests take the whole sweep (every variable x every value): ``read_config`` and ``resolve_device``
give exactly one ``OvkitConfigWarning`` where the backend reads the value otherwise than it is
written and none where it reads it as written, and ``device_table()`` is unaffected.  Running every
combination as a subprocess would take too long, so the CLI tests (``ovkit list-devices``,
``ovkit config``, ``ovkit run-model`` on a tiny synthetic llama) run a representative sample:
every variable once and every value at least once, a few variables per process.

A NUL cannot reach a process's environment: ``os.environ`` and ``subprocess`` refuse it
(``ValueError: embedded null byte``) and ``execve`` ends each string at its first NUL, so a child
sees the text before it.  In-process the NUL values go through a mapping, where ovkit reads them
as C would (up to the NUL, with a warning); the subprocess and ``os.environ`` tests check the
refusal and then set the text before the NUL, which is what any C process would see.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import ovkit
from ovkit.config import ENV_VARS, ConfigError, EnvVar, Kind, OvkitConfigWarning, read_config

REPO = Path(__file__).resolve().parents[1]

SWEEP: dict[str, str] = {
    "space one": " 1",
    "1x": "1x",
    "minus one": "-1",
    "21 nines": "9" * 21,
    "yes": "yes",
    "NUL": "\0",
    "one NUL": "1\0",
    "100,000 characters": "1" * 100_000,
    "Arabic-Indic digits": "\u0661\u0662",  # '١٢': Python's int() reads 12, C's atoi 0
    "mathematical digits": "\U0001d7cf\U0001d7d0",  # '𝟏𝟐': int() reads 12, atoi 0
    "u umlaut": "\u00fc",
    "../etc": "../etc",
    "a space": " ",
    "plus one": "+1",
    "0x10": "0x10",
    "2147483648": "2147483648",
    "a non-UTF-8 byte": "\udcff",  # how os.environ holds the byte 0xff (beyond the issue's list)
}

# The values the backend reads exactly as written, by kind: these give no warning, every other
# value exactly one.  A number is as written only when clean; a directory or a tensor name is any
# text a file or tensor can be named (no white space around it, within the length limits).  "1" is
# what a process receives of "1" and a NUL.
NAMES = {
    "1x",
    "-1",
    "9" * 21,
    "yes",
    "\u0661\u0662",
    "\U0001d7cf\U0001d7d0",
    "\u00fc",
    "../etc",
    "+1",
    "0x10",
}
NAMES |= {"2147483648", "\udcff", "1"}
READ_AS_WRITTEN: dict[Kind, set[str]] = {
    Kind.TOGGLE: {"+1", "1"},
    Kind.TRISTATE: {"+1", "1"},
    Kind.INT: {"+1", "1"},
    Kind.PATH: NAMES,
    Kind.LIST: NAMES,
    Kind.STRING: {v for v in SWEEP.values() if "\0" not in v} | {"1"},
    Kind.PAIRS: set(),  # no value of the sweep is KEY=VALUE: every entry is skipped
    Kind.CHOICE: set(),  # none is one of REQUANT_KQUANT's words
}
COMBINATIONS = [(var, value) for var in ENV_VARS for value in SWEEP.values()]


def _ids(combination: tuple[EnvVar, str]) -> str:
    var, value = combination
    return f"{var.name}={next(k for k, v in SWEEP.items() if v == value)}"


def expected_warnings(var: EnvVar, value: str) -> int:
    return 0 if value in READ_AS_WRITTEN[var.kind] else 1


def c_visible(value: str) -> str:
    """What a C process sees of ``value`` in its environment: the text before the first NUL."""
    return value.partition("\0")[0]


def config_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, OvkitConfigWarning)]


def libc_atoi(text: str) -> int:
    libc = ctypes.CDLL(None)
    libc.atoi.argtypes, libc.atoi.restype = [ctypes.c_char_p], ctypes.c_int
    return int(libc.atoi(text.encode("utf-8", "surrogateescape")))


def test_the_sweep_covers_every_variable_and_kind() -> None:
    assert len(ENV_VARS) >= 33 and {v.kind for v in ENV_VARS} == set(READ_AS_WRITTEN)
    assert len(SWEEP) == 17 and len(COMBINATIONS) == len(ENV_VARS) * 17


@pytest.mark.parametrize("var", ENV_VARS, ids=lambda v: v.name)
def test_read_config_takes_every_value_with_one_warning_at_most(var: EnvVar) -> None:
    """Every value of the sweep on ``var``: no exception, one warning naming the variable and the
    value (escaped, cut) exactly where the backend reads it otherwise than written, and the same
    problem listed by strict checking."""
    for value in SWEEP.values():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cfg = read_config({var.env_name: value})
        warned = config_warnings(caught)
        assert len(warned) == expected_warnings(var, value), (var.name, value[:20], warned)
        assert [str(i) for i in cfg.issues] == warned and cfg.unknown == ()
        for message in warned:
            assert message.startswith(f"{var.env_name}=") and message.isprintable()
            assert len(message) < 600  # 100,000 characters are quoted as a few dozen
        if warned:
            with pytest.raises(ConfigError) as raised:
                read_config({var.env_name: value}, strict=True)
            assert raised.value.problems == tuple(warned)
        else:
            assert read_config({var.env_name: value}, strict=True) == cfg


@pytest.mark.parametrize(
    "var", [v for v in ENV_VARS if v.kind in (Kind.TOGGLE, Kind.TRISTATE, Kind.INT)], ids=lambda v: v.name
)
def test_numbers_read_as_this_machines_atoi_reads_them(var: EnvVar) -> None:
    """Python's int() takes '١٢', '𝟏𝟐', ' 1' and '+1' (and refuses 100,000 digits); the
    backend's atoi reads the leading ASCII integer, else 0: ovkit's value is libc's."""
    field = {"DEVICE": "device_requested", "RELEASE_WEIGHTS": "release_weights_explicit"}.get(
        var.name, var.name.lower()
    )
    for value in SWEEP.values():
        text = c_visible(value)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OvkitConfigWarning)
            got = getattr(read_config({var.env_name: value}), field)
        if not text:  # a NUL first: the backend sees the variable unset
            assert got == getattr(read_config({}, warn=False), field)
        elif var.kind is Kind.INT:
            n = libc_atoi(text)
            assert got == (n if n > 0 else 256), value[:20]
        else:
            n = libc_atoi(text)
            assert got is (n > 0 if var.kind is Kind.TRISTATE else n != 0), value[:20]


def test_directory_values_are_used_or_left_out_as_the_backend_does(tmp_path: Path) -> None:
    """A directory that can be made is used as written (relative to the working directory); one
    that cannot (too long, a file in its way) is left out with the backend's consequence named."""
    a_file = tmp_path / "f"
    a_file.write_text("")
    for var in (v for v in ENV_VARS if v.kind is Kind.PATH):
        field = var.name.lower()
        for value, used in [
            ("../etc", True),
            (" 1", True),
            ("1" * 100_000, False),
            (str(a_file / "x"), False),
        ]:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = getattr(read_config({var.env_name: value}), field)
            assert got == (value if used else None)
            if not used:
                assert config_warnings(caught)[0].endswith(var.unusable)
    assert os.listdir(tmp_path) == ["f"]  # reading the configuration creates nothing


def test_the_environment_cannot_carry_a_nul() -> None:
    """What the NUL values of the sweep become on their way to a process (see the docstring)."""
    for value in ("\0", "1\0"):
        with pytest.raises(ValueError, match="embedded null byte"):
            os.environ["GGML_OPENVINO_PROFILING"] = value
        with pytest.raises(ValueError, match="embedded null byte"):
            subprocess.run(["true"], env={"GGML_OPENVINO_PROFILING": value}, check=False)
    assert "GGML_OPENVINO_PROFILING" not in os.environ


def test_device_table_and_selection_over_the_whole_sweep(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every variable x value in ``os.environ``: ``ovkit.device_table()`` shows the same devices
    (it reads no ``GGML_OPENVINO_*`` variable, so it warns about none) and ``resolve_device``
    selects with one warning where ``read_config`` has one; a stray ``GGML_OPENVINO_DEVICE``
    falls back to CPU with upstream's one warning line instead, quoted and cut when it is long."""
    stable = ["layout", "ov_id", "device_class", "description", "total_bytes", "memory_rule"]
    clean = ovkit.device_table(raw=True)[stable]  # the rest is live memory, read anew each time
    for var, value in COMBINATIONS:
        text = c_visible(value)
        monkeypatch.setenv(var.env_name, text)
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO, logger="ovkit"):
            warnings.simplefilter("always")
            caplog.clear()
            assert ovkit.device_table(raw=True)[stable].equals(clean)
            ovkit.device_table()  # the styled table too
            assert config_warnings(caught) == []
            selection = ovkit.resolve_device()
        fallback = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        label = (var.name, value[:20])
        assert selection.device == "CPU", label
        if var.name == "DEVICE":
            assert len(fallback) == (1 if text else 0) and config_warnings(caught) == [], label
            assert all(len(line) < 300 for line in fallback)
        else:
            assert fallback == [], label
            expected = expected_warnings(var, text) if text else 0
            assert len(config_warnings(caught)) == expected, label
        monkeypatch.delenv(var.env_name)


def test_list_devices_and_config_read_the_configuration_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """One reading per command (and so one warning per variable), not one per use."""
    import ovkit.config
    import ovkit.selection
    from ovkit.cli import main

    calls = []

    def counting(*args: object, **kw: object) -> ovkit.config.OvkitConfig:
        calls.append(1)
        return read_config(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ovkit.selection, "read_config", counting)
    monkeypatch.setattr(ovkit.config, "read_config", counting)
    monkeypatch.setenv("GGML_OPENVINO_PROFILING", "yes")
    for command in (["list-devices"], ["config"], ["config", "--json"]):
        calls.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OvkitConfigWarning)
            assert main(command) == 0
        assert len(calls) == 1, command


# -- the command line, on a sample ------------------------------------------------------------


def _sample() -> list[list[tuple[EnvVar, str]]]:
    """Every variable once, the values in turn (so each value at least once), five variables per
    process; the NUL values as a process receives them (see the module docstring)."""
    values = itertools.cycle(SWEEP.values())
    pairs = [(var, next(values)) for var in ENV_VARS]
    return [pairs[i : i + 5] for i in range(0, len(pairs), 5)]


SAMPLE = _sample()


def test_the_sample_covers_each_variable_and_each_value() -> None:
    pairs = [p for batch in SAMPLE for p in batch]
    assert [v for v, _ in pairs] == list(ENV_VARS)
    assert {value for _, value in pairs} == set(SWEEP.values())


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ovkit.model.synthetic import synthetic

    return synthetic("llama", tmp_path_factory.mktemp("model") / "tiny.gguf", n_layer=1)


def _ovkit(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GGML_OPENVINO_")}
    base["PYTHONPATH"] = str(REPO) + os.pathsep + base.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "ovkit", *args],
        env=base | env,
        cwd=cwd,
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=300,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("batch", SAMPLE, ids=lambda b: ",".join(_ids(p) for p in b))
def test_commands_run_under_hostile_values(
    batch: list[tuple[EnvVar, str]], tiny_model: Path, tmp_path: Path
) -> None:
    """``list-devices``, ``config`` and ``run-model`` under five hostile values at once: each
    exits 0 without a traceback and prints one warning per variable the backend reads otherwise
    than written (none for the rest); a stray device falls back to CPU with upstream's line."""
    cwd = tmp_path / "a" / "b"  # directory values such as '../etc' are made in here
    cwd.mkdir(parents=True)
    env = {var.env_name: c_visible(value) for var, value in batch}
    runs = {
        "list-devices": _ovkit(["list-devices"], env, cwd),
        "config": _ovkit(["config"], env, cwd),
        "run-model": _ovkit(["run-model", str(tiny_model), "--tokens", "1 2", "-n", "2"], env, cwd),
    }
    for command, run in runs.items():
        label = (command, run.stderr[-2000:])
        assert run.returncode == 0 and "Traceback" not in run.stderr, label
        warned = [line for line in run.stderr.splitlines() if line.startswith("ovkit: warning: ")]
        for var, value in batch:
            text = c_visible(value)
            mine = [line for line in warned if line.startswith(f"ovkit: warning: {var.env_name}=")]
            assert len(mine) == (expected_warnings(var, text) if text else 0), (var.name, label)
            assert all(len(line) < 600 for line in mine)
        device = env.get("GGML_OPENVINO_DEVICE")
        fallback = [line for line in run.stderr.splitlines() if "is not available, fallback to CPU" in line]
        assert len(fallback) == (1 if device and command != "config" else 0), label
    assert "Available devices:\n  CPU: " in runs["list-devices"].stdout
    assert runs["run-model"].stdout.splitlines()[2].startswith("generated (2): ")
    table = {line.split()[0]: line for line in runs["config"].stdout.splitlines() if line.startswith("GGML_")}
    for var, value in batch:  # '!' before the status marks a value read otherwise than written
        text = c_visible(value)
        flagged = "!modelled" in table[var.env_name] or "!reported only" in table[var.env_name]
        assert flagged is bool(text and expected_warnings(var, text)), var.name


@pytest.mark.slow
def test_the_issues_values_under_every_command(tiny_model: Path, tmp_path: Path) -> None:
    """The issue's examples, together: each command that used to end in a ConfigError traceback
    (list-devices, test-ops -o ADD, run-model) runs with one warning per variable, and
    ``ovkit config --strict`` exits 1 listing all four."""
    a_file = tmp_path / "file"
    a_file.write_text("")
    env = {
        "GGML_OPENVINO_NPU_PROPERTIES": " 1",
        "GGML_OPENVINO_REQUANT_KQUANT": "yes",
        "GGML_OPENVINO_SPILL_DIR": str(a_file),
        "GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR": str(a_file),
    }
    commands = {
        "list-devices": ["list-devices"],
        "config": ["config"],
        "test-ops": ["test-ops", "-o", "ADD"],
        "run-model": ["run-model", str(tiny_model), "--tokens", "1 2", "-n", "2"],
    }
    for name, args in commands.items():
        run = _ovkit(args, env, tmp_path)
        assert run.returncode == 0 and "Traceback" not in run.stderr, (name, run.stderr[-2000:])
        warned = sorted(
            line.split("=")[0] for line in run.stderr.splitlines() if line.startswith("ovkit: warning:")
        )
        assert warned == sorted(f"ovkit: warning: {k}" for k in env), (name, run.stderr)
    strict = _ovkit(["config", "--strict"], env, tmp_path)
    assert strict.returncode == 1
    errors = [line for line in strict.stderr.splitlines() if line.startswith("ovkit: error: ")]
    assert sorted(line.split("=")[0] for line in errors) == sorted(f"ovkit: error: {k}" for k in env)
    assert "ovkit: warning" not in strict.stderr
