"""Every ``GGML_OPENVINO_*`` environment variable, parsed once with the C backend's rules.

The backend reads integers with C ``atoi`` (leading integer, else 0) and tests toggles as
``!= 0``; an empty string counts as unset.  Out-of-range numbers read as glibc's ``atoi`` reads
them on 64-bit Linux: ``(int) strtol(s, NULL, 10)``, so the value saturates at the ``long`` range
and then keeps its low 32 bits (``999999999999999999999`` is -1, ``2147483648`` is -2**31).  ovkit accepts every value exactly as C would read it,
and warns (``OvkitConfigWarning``) whenever the raw text is not what a person meant to write:
``"yes"`` (read as 0, so *off*), ``"1x"`` (read as 1), ``"-1"`` (read as on, although the docs say
negative values disable), as the backend reads them.
"""

from __future__ import annotations

import enum
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

PREFIX = "GGML_OPENVINO_"
DEFAULT_PREFILL_CHUNK_SIZE = 256


class OvkitConfigWarning(UserWarning):
    """A ``GGML_OPENVINO_*`` value that C reads silently, but probably not as intended."""


class Kind(enum.Enum):
    """How the backend parses a variable."""

    STRING = "string"
    TOGGLE = "toggle"  # atoi(value) != 0
    TRISTATE = "tristate"  # unset -> None, else atoi(value) > 0
    INT = "int"  # atoi(value)
    LIST = "list"  # comma-separated names


@dataclass(frozen=True, slots=True)
class EnvVar:
    """One variable the backend reads: its name (without prefix), kind, default and meaning."""

    name: str
    kind: Kind
    meaning: str
    read_upstream: bool = True

    @property
    def env_name(self) -> str:
        return PREFIX + self.name


# The backend's variables, in the order upstream documents them.
ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar("DEVICE", Kind.STRING, "OpenVINO device to run on (exact id; unset or empty = CPU)"),
    EnvVar("CACHE_DIR", Kind.STRING, "OpenVINO CACHE_DIR for compiled models (NPUW_CACHE_DIR on NPU)"),
    EnvVar("COMPILED_MODEL_CACHE_DIR", Kind.STRING, "frontend blob cache directory"),
    EnvVar("PREFILL_CHUNK_SIZE", Kind.INT, "NPU static prefill chunk length (<= 0 means 256)"),
    EnvVar("STATEFUL_EXECUTION", Kind.TOGGLE, "stateful KV cache (ReadValue/Assign); off on NPU"),
    EnvVar("DISABLE_CACHE", Kind.TOGGLE, "turn off the in-process compiled-graph cache"),
    EnvVar("DISABLE_KV_SLICE", Kind.TOGGLE, "turn off slicing of KV inputs to attention_size"),
    EnvVar("MANUAL_GQA_ATTN", Kind.TRISTATE, "MatMul/Softmax GQA attention (unset: on for GPU)"),
    EnvVar("ENABLE_FALLBACK", Kind.TOGGLE, "split-graph detection"),
    EnvVar("MEMORY_OPTIMIZE", Kind.TOGGLE, "umbrella: REDUCE_COMPILE_MEM, and RELEASE_WEIGHTS on GPU"),
    EnvVar("REDUCE_COMPILE_MEM", Kind.TOGGLE, "stream requantization (inherits MEMORY_OPTIMIZE)"),
    EnvVar("RELEASE_WEIGHTS", Kind.TOGGLE, "release host weight pages after the first cache hit"),
    EnvVar("PROFILING", Kind.TOGGLE, "print per-graph timings"),
    EnvVar("DUMP_CGRAPH", Kind.TOGGLE, "write cgraph_ov.txt on every compute"),
    EnvVar("DUMP_IR", Kind.TOGGLE, "serialize the OpenVINO IR of each compiled graph"),
    EnvVar("DEBUG_INPUT", Kind.TOGGLE, "print every input"),
    EnvVar("DEBUG_OUTPUT", Kind.TOGGLE, "print first/min/max/mean of every output"),
    EnvVar("DEBUG_NODE", Kind.LIST, "comma-separated tensor names added as extra outputs"),
    EnvVar("PRINT_CGRAPH_TENSOR_ADDRESS", Kind.TOGGLE, "print the tensor address map once"),
    EnvVar("ENABLE_CACHE", Kind.TOGGLE, "listed upstream but read nowhere (dead)", False),
)

_CLEAN_INT = re.compile(r"[+-]?[0-9]+")
_ATOI = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")


LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1  # C long on LP64 (x86_64 Linux)
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def _leading_integer(text: str) -> int:
    """The integer ``strtol`` would parse with unlimited range: white space, sign, digits, else 0."""
    m = _ATOI.match(text)
    return int(m.group(1)) if m else 0


def _as_c_int(n: int) -> int:
    """``(int) strtol``: saturate to the long range, then keep the low 32 bits (two's complement)."""
    n = min(max(n, LONG_MIN), LONG_MAX)
    return (n + 2**31) % 2**32 - 2**31


def atoi(text: str) -> int:
    """glibc ``atoi`` (= ``(int) strtol(text, NULL, 10)``): leading integer, else 0, wrapped to int."""
    return _as_c_int(_leading_integer(text))


def _range_note(text: str) -> str:
    """Why an out-of-range number reads as it does ('' when it fits a C int)."""
    n = _leading_integer(text)
    if INT_MIN <= n <= INT_MAX:
        return ""
    clamped = min(max(n, LONG_MIN), LONG_MAX)
    how = f"strtol saturates it to {clamped}, then " if clamped != n else ""
    return f"outside C int range: {how}atoi keeps its low 32 bits"


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """A value accepted as C reads it, with the interpretation spelled out."""

    variable: str
    raw: str
    interpretation: str

    def __str__(self) -> str:
        return f"{self.variable}={self.raw!r} is read as {self.interpretation}"


@dataclass(frozen=True, slots=True)
class OvkitConfig:
    """The parsed ``GGML_OPENVINO_*`` environment (one immutable snapshot)."""

    device: str = "CPU"
    device_requested: str | None = None
    cache_dir: str | None = None
    compiled_model_cache_dir: str | None = None
    prefill_chunk_size: int = DEFAULT_PREFILL_CHUNK_SIZE
    stateful_execution: bool = False
    disable_cache: bool = False
    disable_kv_slice: bool = False
    manual_gqa_attn: bool | None = None
    enable_fallback: bool = False
    memory_optimize: bool = False
    reduce_compile_mem: bool = False
    release_weights_explicit: bool | None = None
    profiling: bool = False
    dump_cgraph: bool = False
    dump_ir: bool = False
    debug_input: bool = False
    debug_output: bool = False
    debug_node: tuple[str, ...] = ()
    print_cgraph_tensor_address: bool = False
    enable_cache: bool = False
    raw: Mapping[str, str] = field(default_factory=dict)
    issues: tuple[ConfigIssue, ...] = ()

    def release_weights(self, device_class: str) -> bool:
        """RELEASE_WEIGHTS as set, else MEMORY_OPTIMIZE on the GPU class (upstream: device ``GPU``)."""
        if self.release_weights_explicit is not None:
            return self.release_weights_explicit
        return self.memory_optimize and device_class == "GPU"

    def stateful(self, device_class: str) -> bool:
        """Stateful execution is forced off for the NPU class, as upstream does."""
        return self.stateful_execution and device_class != "NPU"

    def manual_gqa(self, device_class: str) -> bool:
        """MANUAL_GQA_ATTN when set, else on for the GPU class."""
        return self.manual_gqa_attn if self.manual_gqa_attn is not None else device_class == "GPU"

    def as_rows(self) -> list[dict[str, object]]:
        """One row per variable (name, raw value, parsed value, meaning) for display as a table."""
        parsed = {f.name: getattr(self, f.name) for f in fields(self)}
        rows: list[dict[str, object]] = []
        for var in ENV_VARS:
            key = _FIELD_FOR[var.name]
            rows.append(
                {
                    "variable": var.env_name,
                    "raw": self.raw.get(var.env_name),
                    "value": parsed[key],
                    "meaning": var.meaning,
                }
            )
        return rows


_FIELD_FOR = {v.name: v.name.lower() for v in ENV_VARS} | {
    "DEVICE": "device_requested",
    "RELEASE_WEIGHTS": "release_weights_explicit",
}


def _toggle(var: EnvVar, raw: str, issues: list[ConfigIssue]) -> bool:
    value = atoi(raw)
    on = value > 0 if var.kind is Kind.TRISTATE else value != 0
    state = "on" if on else "off"
    if note := _range_note(raw):
        issues.append(ConfigIssue(var.env_name, raw, f"{value} ({state}): {note}"))
    elif not _CLEAN_INT.fullmatch(raw):
        issues.append(ConfigIssue(var.env_name, raw, f"{value} ({state}): not a clean integer"))
    elif value < 0:
        why = "negative values disable" if var.kind is Kind.TRISTATE else "atoi != 0 enables"
        issues.append(ConfigIssue(var.env_name, raw, f"{value} ({state}): {why}"))
    return on


def read_config(env: Mapping[str, str] | None = None, *, warn: bool = True) -> OvkitConfig:
    """Parse every ``GGML_OPENVINO_*`` variable from ``env`` (default ``os.environ``)."""
    source = os.environ if env is None else env
    raw = {v.env_name: source[v.env_name] for v in ENV_VARS if source.get(v.env_name, "") != ""}
    issues: list[ConfigIssue] = []
    values: dict[str, object] = {}
    for var in ENV_VARS:
        text = raw.get(var.env_name)
        if text is None:
            continue
        key = _FIELD_FOR[var.name]
        if var.kind is Kind.STRING:
            values[key] = text
        elif var.kind is Kind.LIST:
            values[key] = tuple(n.strip() for n in text.split(",") if n.strip())
        elif var.kind is Kind.INT:
            n = atoi(text)
            note = _range_note(text)
            if n <= 0:
                why = f" ({note})" if note else ""
                issues.append(ConfigIssue(var.env_name, text, f"{n}{why}, so the default 256"))
                n = DEFAULT_PREFILL_CHUNK_SIZE
            elif note:
                issues.append(ConfigIssue(var.env_name, text, f"{n}: {note}"))
            elif not _CLEAN_INT.fullmatch(text):
                issues.append(ConfigIssue(var.env_name, text, f"{n}: not a clean integer"))
            values[key] = n
        else:
            values[key] = _toggle(var, text, issues)
    if "device_requested" in values:
        values["device"] = values["device_requested"]
    if "reduce_compile_mem" not in values:
        values["reduce_compile_mem"] = values.get("memory_optimize", False)
    config = OvkitConfig(raw=raw, issues=tuple(issues), **values)  # type: ignore[arg-type]
    if warn:
        for issue in issues:
            warnings.warn(str(issue), OvkitConfigWarning, stacklevel=2)
    return config
