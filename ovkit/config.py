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

import difflib
import enum
import os
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

PREFIX = "GGML_OPENVINO_"
DEFAULT_PREFILL_CHUNK_SIZE = 256


class OvkitConfigWarning(UserWarning):
    """A ``GGML_OPENVINO_*`` value that C reads silently, but probably not as intended."""


class Kind(enum.Enum):
    """How the backend parses a variable."""

    STRING = "string"
    PATH = "directory"  # a directory the backend creates or writes into
    TOGGLE = "toggle"  # atoi(value) != 0
    TRISTATE = "tristate"  # unset -> None, else atoi(value) > 0
    INT = "int"  # atoi(value)
    LIST = "list"  # comma-separated names
    PAIRS = "KEY=VALUE list"  # comma-separated KEY=VALUE pairs
    CHOICE = "choice"  # one of a fixed set of words (strcmp)


# Where ovkit models a variable; a variable with no entry here is reported only.
MODELLED_BY: dict[str, str] = {
    "DEVICE": "ovkit.selection: the selected device, by the layout's rule",
    "CACHE_DIR": "ovkit.engine: OpenVINO CACHE_DIR (NPUW_CACHE_DIR on NPU) in the compile properties",
    "PREFILL_CHUNK_SIZE": "ovkit.model: NPU prefill chunks",
    "STATEFUL_EXECUTION": "ovkit.engine: stateful KV cache (off on the NPU class)",
    "DISABLE_CACHE": "ovkit.engine: compile on every call",
    "MEMORY_OPTIMIZE": "ovkit.engine, ovkit.weight_release: turns on REDUCE_COMPILE_MEM and, on GPU, RELEASE_WEIGHTS",
    "RELEASE_WEIGHTS": "ovkit.weight_release: host weight pages released after the first cache hit",
    "PROFILING": "ovkit.engine: per-graph timings",
    "COMPILED_MODEL_CACHE_DIR": "ovkit.engine.blob_cache: compiled models exported there, keyed by the "
    "graph's digest, and imported by the next process without translation or compile (CACHE_DIR is "
    "then not used; a run report's loaded_from_cache shows a cached run)",
    "NPU_COMPILE_CONFIG": "ovkit.engine: NPU_COMPILATION_MODE_PARAMS in the NPU class's compile properties",
    "NPU_PROPERTIES": "ovkit.engine: passed to the NPU class's compile, after everything else",
    "LOG_UNSUPPORTED_OPS": "ovkit.selection.Backend.supports_op: each rejection logged as the backend logs it",
    "DISABLE_KV_SLICE": "ovkit.model: the host KV cache fed whole (n_ctx rows, sliced in the graph), "
    "not as its n_kv-row view",
    "MANUAL_GQA_ATTN": "ovkit.ops.translate: FLASH_ATTN_EXT as the backend's 5-D MatMul/Softmax (on; "
    "unset on GPU) or SDPA (0); unset off GPU, ovkit's grouped MatMul/Softmax form",
    "REQUANT_KQUANT": "ovkit.quant.requant_decision: each choice's target (Q4_0_128, Q4_0_64, Q4_1_64, "
    "native) for the runner, placement and footprint alike",
}


@dataclass(frozen=True, slots=True)
class EnvVar:
    """One variable the backend reads: its name (without prefix), kind, default and what it changes."""

    name: str
    kind: Kind
    meaning: str
    default: str = "unset"
    choices: tuple[str, ...] = ()
    read_upstream: bool = True

    @property
    def env_name(self) -> str:
        return PREFIX + self.name

    @property
    def modelled(self) -> str:
        """Where ovkit models it, or ``""`` when ovkit only parses and reports it."""
        return MODELLED_BY.get(self.name, "")


def _flag(name: str, meaning: str, default: str = "0 (off)") -> EnvVar:
    return EnvVar(name, Kind.TOGGLE, meaning, default)


class FromEnv(enum.Enum):
    """Marks an argument that defaults to the environment, read on every call as the backend does."""

    FROM_ENV = "from the environment"


FROM_ENV = FromEnv.FROM_ENV


def requant_kquant_env(env: Mapping[str, str] | None = None) -> str | None:
    """GGML_OPENVINO_REQUANT_KQUANT as the backend reads it for every weight (``strcmp`` against
    its words): the raw text, None when unset or empty.  A word it does not know matches none of
    its rules, so it acts as unset (``ovkit config`` reports it as an error)."""
    return (os.environ if env is None else env).get(PREFIX + "REQUANT_KQUANT") or None


REQUANT_KQUANT_CHOICES = ("q4_sym128", "q4_sym128_all", "q4_asym64", "q4_asym64_all", "native")

# The newest list the backend reads (``env_var_names[]`` in Intel's fork's
# ggml-openvino-extra.cpp, plus NPU_PROPERTIES), in that file's order.  ovkit's original nine
# and the rest of llama.cpp master's list are all in it.
ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar("DEVICE", Kind.STRING, "OpenVINO device to run on (exact id)", "CPU"),
    EnvVar("CACHE_DIR", Kind.STRING, "OpenVINO CACHE_DIR for compiled models (NPUW_CACHE_DIR on NPU)"),
    EnvVar("SPILL_DIR", Kind.PATH, "back the weight buffers with an unlinked file there (Linux)"),
    EnvVar("DEBUG_NODE", Kind.LIST, "comma-separated tensor names added as extra outputs"),
    EnvVar("COMPILED_MODEL_CACHE_DIR", Kind.PATH, "the backend's own blob cache of compiled models"),
    _flag(
        "COMPILED_MODEL_CACHE_ONLY",
        "weight buffers as untouched virtual memory: run from the blob cache only",
    ),
    EnvVar("NPU_COMPILE_CONFIG", Kind.STRING, "NPU: NPU_COMPILATION_MODE_PARAMS in the compile config"),
    EnvVar("NPU_PROPERTIES", Kind.PAIRS, "NPU: KEY=VALUE,... added to the compile config last (overriding)"),
    EnvVar("PREFILL_CHUNK_SIZE", Kind.INT, "NPU static prefill chunk length (<= 0 means 256)", "256"),
    _flag("STATEFUL_EXECUTION", "stateful KV cache (ReadValue/Assign); off on NPU"),
    _flag("PROFILING", "print per-graph timings; >= 2 also OpenVINO and OpenCL queue profiling"),
    _flag("DUMP_CGRAPH", "write cgraph_ov.txt on every compute"),
    _flag("DUMP_IR", "serialize the OpenVINO IR of each compiled graph"),
    _flag("DEBUG_INPUT", "print every input"),
    _flag("DEBUG_OUTPUT", "print first/min/max/mean of every output"),
    _flag("FORCE_STATIC", "take the static (NPU-shape) compute path on any device"),
    _flag("PRINT_CGRAPH_TENSOR_ADDRESS", "print the tensor address map once"),
    EnvVar(
        "ENABLE_CACHE", Kind.TOGGLE, "listed upstream but read nowhere (dead)", "0 (off)", read_upstream=False
    ),
    _flag("DISABLE_CACHE", "turn off the in-process compiled-graph cache"),
    _flag("DISABLE_KV_SLICE", "turn off slicing of KV inputs to attention_size"),
    _flag("ENABLE_FALLBACK", "split-graph detection"),
    EnvVar(
        "MANUAL_GQA_ATTN", Kind.TRISTATE, "MatMul/Softmax GQA attention instead of SDPA", "unset: on for GPU"
    ),
    _flag("MOE_OP", "GPU: fuse MoE routers and experts (MOECompressed); 0 keeps GatherMatmul", "1 (on, GPU)"),
    _flag("MEMORY_OPTIMIZE", "umbrella: REDUCE_COMPILE_MEM, and RELEASE_WEIGHTS on GPU"),
    _flag(
        "RELEASE_WEIGHTS",
        "GPU: release host weight pages after the first cache hit",
        "MEMORY_OPTIMIZE on GPU",
    ),
    _flag("REDUCE_COMPILE_MEM", "stream requantization in 256-row chunks", "MEMORY_OPTIMIZE"),
    _flag("LOG_UNSUPPORTED_OPS", "log every op supports_op rejects, with the reason"),
    _flag("LOG_SWA_LAYERS", "log which layers use sliding-window attention"),
    _flag("NATIVE_SOFTPLUS", "translate SOFTPLUS with OpenVINO's SoftPlus op"),
    _flag("DISABLE_REMOTE_OUTPUTS", "GPU: outputs in host memory, not remote tensors"),
    EnvVar(
        "REQUANT_KQUANT",
        Kind.CHOICE,
        "requantize K-quants to 4 bits (q4_<sym|asym><group>[_all]) or keep them (native)",
        "unset: Q5_K/Q6_K -> Q8_0_C (GPU: 3-D Q5_1/Q8_0 experts -> Q4_0_64)",
        REQUANT_KQUANT_CHOICES,
    ),
    _flag("DISABLE_KV_STATE_RELAYOUT", "stateful: keep the KV state in ggml's layout"),
    _flag("FULL_GRAPH_KEY", "the precise O(n_nodes) graph cache key (op tests need it)"),
)
ENV_BY_NAME: dict[str, EnvVar] = {v.env_name: v for v in ENV_VARS}

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


class ConfigError(ValueError):
    """``GGML_OPENVINO_*`` values the backend cannot use as meant; the message names each one."""


@dataclass(frozen=True, slots=True)
class OvkitConfig:
    """The parsed ``GGML_OPENVINO_*`` environment (one immutable snapshot)."""

    device: str = "CPU"
    device_requested: str | None = None
    cache_dir: str | None = None
    spill_dir: str | None = None
    debug_node: tuple[str, ...] = ()
    compiled_model_cache_dir: str | None = None
    compiled_model_cache_only: bool = False
    npu_compile_config: str | None = None
    npu_properties: tuple[tuple[str, str], ...] = ()
    prefill_chunk_size: int = DEFAULT_PREFILL_CHUNK_SIZE
    stateful_execution: bool = False
    profiling: bool = False
    dump_cgraph: bool = False
    dump_ir: bool = False
    debug_input: bool = False
    debug_output: bool = False
    force_static: bool = False
    print_cgraph_tensor_address: bool = False
    enable_cache: bool = False
    disable_cache: bool = False
    disable_kv_slice: bool = False
    enable_fallback: bool = False
    manual_gqa_attn: bool | None = None
    moe_op: bool = True
    memory_optimize: bool = False
    release_weights_explicit: bool | None = None
    reduce_compile_mem: bool = False
    log_unsupported_ops: bool = False
    log_swa_layers: bool = False
    native_softplus: bool = False
    disable_remote_outputs: bool = False
    requant_kquant: str | None = None
    disable_kv_state_relayout: bool = False
    full_graph_key: bool = False
    raw: Mapping[str, str] = field(default_factory=dict)
    issues: tuple[ConfigIssue, ...] = ()
    errors: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()  #: set GGML_OPENVINO_* names the backend does not read

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

    def attention_manual_gqa(self, device_class: str) -> bool | None:
        """MANUAL_GQA_ATTN as ovkit's FLASH_ATTN_EXT translation takes it: when set, its value (on:
        the backend's manual form; off: SDPA); unset, on for the GPU class and None elsewhere
        (ovkit's own grouped MatMul/Softmax form, where the backend takes SDPA)."""
        if self.manual_gqa_attn is not None:
            return self.manual_gqa_attn
        return True if device_class == "GPU" else None

    def effective(self, device_class: str) -> dict[str, bool]:
        """The class-dependent switches as the backend resolves them on ``device_class``."""
        return {
            "STATEFUL_EXECUTION": self.stateful(device_class),
            "MANUAL_GQA_ATTN": self.manual_gqa(device_class),
            "RELEASE_WEIGHTS": self.release_weights(device_class),
            "REDUCE_COMPILE_MEM": self.reduce_compile_mem,
            "MOE_OP": self.moe_op and device_class == "GPU",
        }

    @property
    def profiling_level(self) -> int:
        """PROFILING as the number the backend compares: >= 2 adds OpenVINO and queue profiling."""
        return atoi(self.raw.get(PREFIX + "PROFILING", "0"))

    def npu_compile_properties(self) -> dict[str, str]:
        """What NPU_COMPILE_CONFIG and NPU_PROPERTIES add to the NPU class's compile config, in the
        backend's order (NPU_PROPERTIES last, so its keys override)."""
        props = {"NPU_COMPILATION_MODE_PARAMS": self.npu_compile_config} if self.npu_compile_config else {}
        return props | dict(self.npu_properties)

    def as_rows(self) -> list[dict[str, object]]:
        """One row per variable: name, type, default, raw and parsed value, what it changes, and
        whether ovkit models it or only reports it."""
        rows: list[dict[str, object]] = []
        for var in ENV_VARS:
            value = getattr(self, _FIELD_FOR[var.name])
            rows.append(
                {
                    "variable": var.env_name,
                    "type": var.kind.value + (f" ({'|'.join(var.choices)})" if var.choices else ""),
                    "default": var.default,
                    "raw": self.raw.get(var.env_name),
                    "value": value,
                    "changes": var.meaning,
                    "ovkit": f"modelled: {var.modelled}" if var.modelled else "reported only",
                }
            )
        return rows


_FIELD_FOR = {v.name: v.name.lower() for v in ENV_VARS} | {
    "DEVICE": "device_requested",
    "RELEASE_WEIGHTS": "release_weights_explicit",
}


def _toggle(var: EnvVar, raw: str, issues: list[ConfigIssue], errors: list[str]) -> bool:
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


def _int(var: EnvVar, text: str, issues: list[ConfigIssue], errors: list[str]) -> int:
    n = atoi(text)
    note = _range_note(text)
    if n <= 0:
        why = f" ({note})" if note else ""
        issues.append(ConfigIssue(var.env_name, text, f"{n}{why}, so the default 256"))
        return DEFAULT_PREFILL_CHUNK_SIZE
    if note:
        issues.append(ConfigIssue(var.env_name, text, f"{n}: {note}"))
    elif not _CLEAN_INT.fullmatch(text):
        issues.append(ConfigIssue(var.env_name, text, f"{n}: not a clean integer"))
    return n


def _path(var: EnvVar, text: str, issues: list[ConfigIssue], errors: list[str]) -> str:
    if os.path.exists(text) and not os.path.isdir(text):
        errors.append(f"{var.env_name}={text!r} names a file, not a directory")
    return text


def _pairs(
    var: EnvVar, text: str, issues: list[ConfigIssue], errors: list[str]
) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE,...``; the backend skips an entry without ``=`` or with an empty key: an error here."""
    pairs = []
    for entry in text.split(","):
        key, eq, value = entry.partition("=")
        if not eq or not key:
            errors.append(
                f"{var.env_name}={text!r}: entry {entry!r} is not KEY=VALUE (the backend would skip it)"
            )
            continue
        pairs.append((key, value))
    return tuple(pairs)


def _choice(var: EnvVar, text: str, issues: list[ConfigIssue], errors: list[str]) -> str:
    if text not in var.choices:
        close = difflib.get_close_matches(text, var.choices, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        errors.append(
            f"{var.env_name}={text!r} is not one of {', '.join(var.choices)} (the backend would "
            f"silently keep its default: {var.default}){hint}"
        )
    return text


_Parser = Callable[[EnvVar, str, list[ConfigIssue], list[str]], object]
# How each kind's text becomes a value; issues are read-as-C notes (warnings), errors are not usable.
PARSERS: dict[Kind, _Parser] = {
    Kind.STRING: lambda _var, text, _i, _e: text,
    Kind.PATH: _path,
    Kind.LIST: lambda _var, text, _i, _e: tuple(n.strip() for n in text.split(",") if n.strip()),
    Kind.PAIRS: _pairs,
    Kind.CHOICE: _choice,
    Kind.INT: _int,
    Kind.TOGGLE: _toggle,
    Kind.TRISTATE: _toggle,
}


def unknown_names(env: Mapping[str, str]) -> list[str]:
    """Each set ``GGML_OPENVINO_*`` name the backend does not read, with the closest known one."""
    notes = []
    for name in sorted(n for n in env if n.startswith(PREFIX) and n not in ENV_BY_NAME):
        # compared without the shared prefix, which would make every name look alike
        close = difflib.get_close_matches(name.removeprefix(PREFIX), [v.name for v in ENV_VARS], n=1)
        hint = f"; did you mean {PREFIX}{close[0]}?" if close else " (ovkit config lists the ones it reads)"
        notes.append(f"{name} is not a variable the backend reads{hint}")
    return notes


def read_config(
    env: Mapping[str, str] | None = None, *, warn: bool = True, strict: bool = True
) -> OvkitConfig:
    """Parse every ``GGML_OPENVINO_*`` variable from ``env`` (default ``os.environ``).

    Values C reads differently than meant warn (``OvkitConfigWarning``), as do unknown
    ``GGML_OPENVINO_*`` names (with the closest known one); values the backend cannot use (a
    REQUANT_KQUANT that is not one of its words, an NPU_PROPERTIES entry that is not KEY=VALUE,
    a directory variable naming a file) raise ``ConfigError``, or with ``strict=False`` are kept
    in ``errors``."""
    source = os.environ if env is None else env
    raw = {v.env_name: source[v.env_name] for v in ENV_VARS if source.get(v.env_name, "") != ""}
    issues: list[ConfigIssue] = []
    errors: list[str] = []
    values: dict[str, object] = {}
    for var in ENV_VARS:
        text = raw.get(var.env_name)
        if text is not None:
            values[_FIELD_FOR[var.name]] = PARSERS[var.kind](var, text, issues, errors)
    if "device_requested" in values:
        values["device"] = values["device_requested"]
    if "reduce_compile_mem" not in values:
        values["reduce_compile_mem"] = values.get("memory_optimize", False)
    unknown = unknown_names(source)
    config = OvkitConfig(
        raw=raw,
        issues=tuple(issues),
        errors=tuple(errors),
        unknown=tuple(unknown),
        **values,  # type: ignore[arg-type]
    )
    if warn:
        for note in [*map(str, issues), *unknown]:
            warnings.warn(note, OvkitConfigWarning, stacklevel=2)
    if strict and errors:
        raise ConfigError("; ".join(errors))
    return config
