"""Every ``GGML_OPENVINO_*`` environment variable, parsed once with the C backend's rules (``atoi``,
toggles ``!= 0``, empty is unset).  ovkit does with each value what the backend does and warns when
that is not what the text says (``"yes"`` read as 0); ``strict=True`` raises instead."""

from __future__ import annotations

import difflib
import enum
import os
import re
import stat
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ovkit.errors import OvkitError

PREFIX = "GGML_OPENVINO_"
DEFAULT_PREFILL_CHUNK_SIZE = 256


class OvkitConfigWarning(UserWarning):
    """A ``GGML_OPENVINO_*`` value the backend reads otherwise than it is written (and ovkit with
    it), or a ``GGML_OPENVINO_*`` name the backend does not read."""


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
    "then not used; a run report's loaded_from_cache shows a cached run); ovkit.model.lean: the "
    "lean model likewise, keyed by the GGUF file and its settings",
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
    unusable: str = ""  #: a directory variable: what the backend does when it cannot use the path

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
    its rules, so it acts as unset (``read_config`` warns)."""
    return (os.environ if env is None else env).get(PREFIX + "REQUANT_KQUANT") or None


REQUANT_KQUANT_CHOICES = ("q4_sym128", "q4_sym128_all", "q4_asym64", "q4_asym64_all", "native")

# The newest list the backend reads (``env_var_names[]`` in Intel's fork's
# ggml-openvino-extra.cpp, plus NPU_PROPERTIES), in that file's order.  ovkit's original nine
# and the rest of llama.cpp master's list are all in it.
ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar("DEVICE", Kind.STRING, "OpenVINO device to run on (exact id)", "CPU"),
    EnvVar(
        "CACHE_DIR",
        Kind.PATH,
        "OpenVINO CACHE_DIR for compiled models (NPUW_CACHE_DIR on NPU)",
        unusable="OpenVINO cannot cache there (its compile fails, or caches nothing, where the "
        "directory cannot be made); ovkit compiles without it",
    ),
    EnvVar(
        "SPILL_DIR",
        Kind.PATH,
        "back the weight buffers with an unlinked file there (Linux)",
        unusable="the backend's mkstemp there fails, so its weight buffers fail to allocate; ovkit "
        "keeps its weight file in the temp directory",
    ),
    EnvVar("DEBUG_NODE", Kind.LIST, "comma-separated tensor names added as extra outputs"),
    EnvVar(
        "COMPILED_MODEL_CACHE_DIR",
        Kind.PATH,
        "the backend's own blob cache of compiled models",
        unusable="the backend cannot create it and disables its model cache, and so does ovkit",
    ),
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
    _flag("ENABLE_CACHE", "listed upstream but read nowhere (dead)"),
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

# C's atoi: the "C" locale's white space, a sign, ASCII digits only.  Python's int() would also
# take "١٢" (Arabic-Indic) or "𝟏𝟐" (mathematical digits), "1_0" and Unicode spaces; atoi reads 0.
_CLEAN_INT = re.compile(r"[+-]?[0-9]+")
_ATOI = re.compile(r"[ \t\n\v\f\r]*([+-]?)0*([0-9]+)")

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1  # C long on LP64 (x86_64 Linux)
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
NAME_MAX, PATH_MAX = 255, 4096  # Linux: bytes in one path component, in a whole path
GGML_MAX_NAME = 64  # bytes in a ggml tensor name, with its terminating NUL
SHOWN_CHARS = 120  # how much of a value a message quotes


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` quoted for a message: non-printable characters escaped (``repr``); past ``limit``
    characters only its start and end (a path's file name stays), with its full length said, so a
    stray value cannot flood or garble a terminal."""
    if len(text) <= limit:
        return repr(text)
    tail = limit // 3
    return f"{text[: limit - tail]!r}...{text[-tail:]!r} ({len(text):,} characters)"


def readable(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` as is when it is short and printable, else :func:`shown`'s quoted form."""
    return text if len(text) <= limit and text.isprintable() else shown(text, limit)


def _leading_integer(text: str) -> int:
    """The integer ``strtol`` would parse with unlimited range: white space, sign, digits, else 0.
    Past 20 digits the exact number no longer matters (it saturates), and int() of more than
    4,300 digits would raise."""
    m = _ATOI.match(text)
    if not m:
        return 0
    sign, digits = m.groups()
    magnitude = int(digits) if len(digits) <= 20 else 10**20
    return -magnitude if sign == "-" else magnitude


def atoi(text: str) -> int:
    """glibc ``atoi`` (= ``(int) strtol(text, NULL, 10)``): leading integer, else 0, saturated to
    the long range, then its low 32 bits (two's complement)."""
    n = min(max(_leading_integer(text), LONG_MIN), LONG_MAX)
    return (n + 2**31) % 2**32 - 2**31


def _range_note(text: str) -> str:
    """Why an out-of-range number reads as it does ('' when it fits a C int)."""
    n = _leading_integer(text)
    if INT_MIN <= n <= INT_MAX:
        return ""
    clamped = min(max(n, LONG_MIN), LONG_MAX)
    how = f"strtol saturates it to {clamped}, then " if clamped != n else ""
    return f"outside C int range: {how}atoi keeps its low 32 bits"


def _number_note(text: str) -> str:
    """Why ``text`` reads otherwise than written as an integer ('' when it is a clean C int)."""
    return _range_note(text) or ("" if _CLEAN_INT.fullmatch(text) else "not a clean integer")


def directory_problem(path: str) -> str | None:
    """Why ``path`` cannot be (or be made) a directory, or None when it can; it only looks
    (``stat``), never creates.  Relative paths count from the working directory, as in C."""
    try:
        encoded = os.fsencode(path)
    except UnicodeEncodeError:
        return "cannot be encoded as a file name"
    if len(encoded) >= PATH_MAX:
        return f"is longer than the {PATH_MAX - 1}-byte path limit"
    if any(len(part) > NAME_MAX for part in encoded.split(b"/")):
        return f"has a name longer than the {NAME_MAX}-byte limit"
    probe = encoded
    while True:  # the path itself, else its nearest existing parent, must be a directory
        try:
            mode = os.stat(probe).st_mode
        except FileNotFoundError:
            parent = os.path.dirname(probe.rstrip(b"/"))
            if not parent or parent == probe:
                return None  # nothing of it exists yet: created under the working directory
            probe = parent
            continue
        except NotADirectoryError:
            return "has a file where a parent directory should be"
        except OSError as exc:
            return f"cannot be reached ({exc.strerror})"
        if stat.S_ISDIR(mode):
            return None
        what = "a file" if stat.S_ISREG(mode) else "a special file"
        if probe == encoded:
            return f"is not a directory (it names {what})"
        return f"cannot be created: {shown(os.fsdecode(probe))} is {what}"


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """A value the backend reads otherwise than it is written: ``interpretation`` says what it
    does with it (``is read as 0 (off): ...``, ``... is skipped``), and ovkit does the same."""

    variable: str
    raw: str
    interpretation: str

    def __str__(self) -> str:
        return f"{self.variable}={shown(self.raw)} {self.interpretation}"


class ConfigError(OvkitError, ValueError):
    """Strict checking: every ``GGML_OPENVINO_*`` problem at once (``problems``, also the message)."""

    def __init__(self, *problems: str) -> None:
        self.problems = problems
        super().__init__("; ".join(self.problems))


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
    issues: tuple[ConfigIssue, ...] = ()  #: at most one per variable
    unknown: tuple[str, ...] = ()  #: set GGML_OPENVINO_* names the backend does not read

    @property
    def problems(self) -> tuple[str, ...]:
        """Every warning of this reading, in order: values read otherwise than written, then
        unknown names (what strict checking refuses)."""
        return (*map(str, self.issues), *self.unknown)

    def release_weights(self, device_class: str) -> bool:
        """RELEASE_WEIGHTS as set, else MEMORY_OPTIMIZE on the GPU class (upstream: device ``GPU``)."""
        if self.release_weights_explicit is not None:
            return self.release_weights_explicit
        return self.memory_optimize and device_class == "GPU"

    def stateful(self, device_class: str) -> bool:
        """Stateful execution is forced off for the NPU class, as upstream does."""
        return self.stateful_execution and device_class != "NPU"

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
            "MANUAL_GQA_ATTN": bool(self.attention_manual_gqa(device_class)),
            "RELEASE_WEIGHTS": self.release_weights(device_class),
            "REDUCE_COMPILE_MEM": self.reduce_compile_mem,
            "MOE_OP": self.moe_op and device_class == "GPU",
        }

    def npu_compile_properties(self) -> dict[str, str]:
        """What NPU_COMPILE_CONFIG and NPU_PROPERTIES add to the NPU class's compile config, in the
        backend's order (NPU_PROPERTIES last, so its keys override)."""
        props = {"NPU_COMPILATION_MODE_PARAMS": self.npu_compile_config} if self.npu_compile_config else {}
        return props | dict(self.npu_properties)

    def as_rows(self) -> list[dict[str, object]]:
        """One row per variable: name, type, default, raw and parsed value, its problem, what it
        changes, and whether ovkit models it."""
        problem = {issue.variable: str(issue) for issue in self.issues}
        return [
            {
                "variable": var.env_name,
                "type": var.kind.value + (f" ({'|'.join(var.choices)})" if var.choices else ""),
                "default": var.default,
                "raw": self.raw.get(var.env_name),
                "value": getattr(self, _FIELD_FOR[var.name]),
                "problem": problem.get(var.env_name),
                "changes": var.meaning,
                "ovkit": f"modelled: {var.modelled}" if var.modelled else "reported only",
            }
            for var in ENV_VARS
        ]


_FIELD_FOR = {v.name: v.name.lower() for v in ENV_VARS} | {
    "DEVICE": "device_requested",
    "RELEASE_WEIGHTS": "release_weights_explicit",
}


# A parser returns the value as the backend uses it and, when that is not what the text says,
# how it reads the text (the predicate of a ConfigIssue), else None.
_Parsed = tuple[object, str | None]


def _toggle(var: EnvVar, text: str) -> _Parsed:
    value = atoi(text)
    on = value > 0 if var.kind is Kind.TRISTATE else value != 0
    note = _number_note(text)
    if not note and value < 0:
        note = "negative values disable" if var.kind is Kind.TRISTATE else "atoi != 0 enables"
    return on, f"is read as {value} ({'on' if on else 'off'}): {note}" if note else None


def _int(var: EnvVar, text: str) -> _Parsed:
    n = atoi(text)
    if n <= 0:
        why = f" ({note})" if (note := _range_note(text)) else ""
        return DEFAULT_PREFILL_CHUNK_SIZE, f"is read as {n}{why}, so the default {DEFAULT_PREFILL_CHUNK_SIZE}"
    note = _number_note(text)
    return n, f"is read as {n}: {note}" if note else None


def _path(var: EnvVar, text: str) -> _Parsed:
    """A directory: one that cannot be is not used (``var.unusable`` says what the backend does
    instead); white space around it is kept, as C keeps it, with a warning."""
    if problem := directory_problem(text):
        return None, f"{problem}: {var.unusable}"
    if text != text.strip():
        return text, "is used as written, white space and all (a directory of that name)"
    return text, None


def _listed(bad: list[str], one: tuple[str, str], many: tuple[str, str]) -> tuple[str, tuple[str, str]]:
    """The first three skipped items quoted (and how many more), and the words naming one or many."""
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    return ", ".join(shown(x, 20) for x in bad[:3]) + more, one if len(bad) == 1 else many


def _list(var: EnvVar, text: str) -> _Parsed:
    """DEBUG_NODE: split at commas as ``std::getline`` splits (nothing trimmed); a name no ggml
    tensor can have (empty, white space around it, too long) is skipped, as the backend skips a
    name it does not find."""
    names = text.split(",")
    if names[-1] == "":
        names.pop()  # getline yields no empty last piece after a trailing comma
    bad = [n for n in names if not n or n != n.strip() or len(n.encode(errors="replace")) >= GGML_MAX_NAME]
    kept = tuple(n for n in names if n not in bad)
    if not bad:
        return kept, None
    what, some = _listed(bad, ("name", "it"), ("names", "them"))
    return kept, (
        f"has the {some[0]} {what}, which no ggml tensor has (names are 1 to {GGML_MAX_NAME - 1} bytes, "
        f"no white space around them): the backend skips {some[1]}, and so does ovkit"
    )


def _pairs(var: EnvVar, text: str) -> _Parsed:
    """``KEY=VALUE,...``; the backend skips an entry without ``=`` or with an empty key."""
    pairs, bad = [], []
    for entry in text.split(","):
        key, eq, value = entry.partition("=")
        if eq and key:
            pairs.append((key, value))
        else:
            bad.append(entry)
    if not bad:
        return tuple(pairs), None
    what, some = _listed(bad, ("entry", "it"), ("entries", "them"))
    return tuple(pairs), f"has {some[0]} {what} not KEY=VALUE: the backend skips {some[1]}, and so does ovkit"


def _choice(var: EnvVar, text: str) -> _Parsed:
    if text in var.choices:
        return text, None
    close = difflib.get_close_matches(text[:100], var.choices, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return None, (
        f"is not one of {', '.join(var.choices)}: the backend matches none of its words and acts as "
        f"if it were unset, and so does ovkit{hint}"
    )


PARSERS: dict[Kind, Callable[[EnvVar, str], _Parsed]] = {
    Kind.STRING: lambda _var, text: (text, None),
    Kind.PATH: _path,
    Kind.LIST: _list,
    Kind.PAIRS: _pairs,
    Kind.CHOICE: _choice,
    Kind.INT: _int,
    Kind.TOGGLE: _toggle,
    Kind.TRISTATE: _toggle,
}


def _parse(var: EnvVar, given: str) -> tuple[bool, object, str | None]:
    """``(set, value, note)`` of one value, read as C reads it: a C string ends at its first NUL
    (``os.environ`` cannot hold one, a mapping passed in can), and an empty one is unset."""
    text, nul, _ = given.partition("\0")
    if not text:
        return False, None, "is read as unset: a C string ends at its NUL byte, leaving it empty"
    value, note = PARSERS[var.kind](var, text)
    if nul:
        cut = f"a C string ends at its NUL byte, so the backend sees {shown(text)}"
        note = f"{note}; {cut}" if note else f"is read as {shown(text)}: {cut}"
    return True, value, note


def unknown_names(env: Mapping[str, str]) -> list[str]:
    """Each set ``GGML_OPENVINO_*`` name the backend does not read, with the closest known one."""
    notes = []
    for name in sorted(n for n in env if n.startswith(PREFIX) and n not in ENV_BY_NAME):
        # compared without the shared prefix, which would make every name look alike
        close = difflib.get_close_matches(name.removeprefix(PREFIX)[:100], [v.name for v in ENV_VARS], n=1)
        hint = f"; did you mean {PREFIX}{close[0]}?" if close else " (ovkit config lists the ones it reads)"
        notes.append(f"{readable(name)} is not a variable the backend reads{hint}")
    return notes


def read_config(
    env: Mapping[str, str] | None = None, *, warn: bool = True, strict: bool = False
) -> OvkitConfig:
    """Parse every ``GGML_OPENVINO_*`` variable from ``env`` (default ``os.environ``): one
    ``OvkitConfigWarning`` per problem, or with ``strict=True`` one ``ConfigError`` listing all."""
    source = os.environ if env is None else env
    raw = {v.env_name: source[v.env_name] for v in ENV_VARS if source.get(v.env_name, "") != ""}
    issues: list[ConfigIssue] = []
    values: dict[str, object] = {}
    for var in ENV_VARS:
        if (given := raw.get(var.env_name)) is None:
            continue
        is_set, value, note = _parse(var, given)
        if is_set:
            values[_FIELD_FOR[var.name]] = value
        if note:
            issues.append(ConfigIssue(var.env_name, given, note))
    if "device_requested" in values:
        values["device"] = values["device_requested"]
    if "reduce_compile_mem" not in values:
        values["reduce_compile_mem"] = values.get("memory_optimize", False)
    config = OvkitConfig(
        raw=raw,
        issues=tuple(issues),
        unknown=tuple(unknown_names(source)),
        **values,  # type: ignore[arg-type]
    )
    if strict and config.problems:
        raise ConfigError(*config.problems)
    if warn:
        for problem in config.problems:
            # Issued from this one line, so Python's default filter shows each message once per
            # process, however many times a command reads the configuration.
            warnings.warn(problem, OvkitConfigWarning, stacklevel=1)
    return config
