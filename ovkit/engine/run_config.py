"""Run configuration: compile hints as validated data, the properties they become, and the
effective values read back from a compiled model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ovkit.config import OvkitConfig
from ovkit.devices import DeviceClass
from ovkit.dtypes import OPENVINO_SHORT
from ovkit.runtime import exact_on_cpu

if TYPE_CHECKING:
    import pandas as pd

# -- Hints: the allowed values are data, validated before anything is compiled -----------------
PRECISIONS: tuple[str, ...] = ("f32", "f16", "bf16")
PERFORMANCE_HINTS: tuple[str, ...] = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
EXECUTION_MODES: tuple[str, ...] = ("ACCURACY", "PERFORMANCE")

# OpenVINO's names for the properties RunConfig sets, and for what is read back.
PROP_PRECISION = "INFERENCE_PRECISION_HINT"
PROP_PERFORMANCE = "PERFORMANCE_HINT"
PROP_EXECUTION = "EXECUTION_MODE_HINT"
PROP_PROFILING = "PERF_COUNT"
PROP_THREADS = "INFERENCE_NUM_THREADS"
PROP_CACHE_DIR = "CACHE_DIR"
PROP_NPUW_CACHE_DIR = "NPUW_CACHE_DIR"
PROP_CACHE_MODE = "CACHE_MODE"
CACHE_MODE_UPSTREAM = "OPTIMIZE_SIZE"
#: RunConfig's hints and the property each sets (``None`` or ``False``: not set).
PROPERTY_OF = {
    "inference_precision": PROP_PRECISION,
    "performance_hint": PROP_PERFORMANCE,
    "execution_mode": PROP_EXECUTION,
    "profiling": PROP_PROFILING,
    "num_threads": PROP_THREADS,
}


def _check_choice(what: str, value: str | None, allowed: tuple[str, ...]) -> None:
    if value is not None and value not in allowed:
        raise ValueError(f"{what}={value!r} is not valid (expected one of: {', '.join(allowed)})")


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Per-run compile hints; ``None`` leaves the device default.  Part of the cache key."""

    inference_precision: str | None = None  # "f32" | "f16" | "bf16"
    performance_hint: str | None = None  # "LATENCY" | "THROUGHPUT" | "CUMULATIVE_THROUGHPUT"
    execution_mode: str | None = None  # "ACCURACY" | "PERFORMANCE"
    profiling: bool = False  # OpenVINO PERF_COUNT: per-node timings
    num_threads: int | None = None  # INFERENCE_NUM_THREADS (1 avoids thread wake-ups on tiny graphs)
    extra: tuple[tuple[str, str], ...] = ()  # any other OpenVINO compile property, as text

    def __post_init__(self) -> None:
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads={self.num_threads} is not valid (expected >= 1, or None)")
        _check_choice("inference_precision", self.inference_precision, PRECISIONS)
        _check_choice("performance_hint", self.performance_hint, PERFORMANCE_HINTS)
        _check_choice("execution_mode", self.execution_mode, EXECUTION_MODES)

    def properties(self, dev_class: str | None = None) -> dict[str, Any]:
        """The OpenVINO compile properties this configuration asks for; for the CPU class an f32
        run's are made exact (``ovkit.runtime.exact_on_cpu``)."""
        asked = {prop: getattr(self, f) for f, prop in PROPERTY_OF.items()}
        props: dict[str, Any] = {k: v for k, v in asked.items() if v is not None and v is not False}
        props.update(dict(self.extra))
        if dev_class == DeviceClass.CPU:
            exact_on_cpu(props)
        return props


DEFAULT_RUN_CONFIG = RunConfig()
#: Graph.compute's default: exact f32 arithmetic, so results match ggml's CPU backend.
GRAPH_RUN_CONFIG = RunConfig(inference_precision="f32")
#: ... and for tiny graphs (every tensor < TINY_ELEMENTS elements) one inference thread: waking
#: a second worker costs more than the work (ggml's CPU backend likewise gains nothing there).
GRAPH_TINY_RUN_CONFIG = RunConfig(inference_precision="f32", num_threads=1)
TINY_ELEMENTS = 16384


def run_config_from(
    properties: Mapping[str, Any] | RunConfig | None, base: RunConfig = DEFAULT_RUN_CONFIG
) -> RunConfig:
    """A RunConfig from raw OpenVINO compile properties (``{"INFERENCE_PRECISION_HINT": "f32"}``)."""
    if properties is None:
        return base
    if isinstance(properties, RunConfig):
        return properties
    values: dict[str, Any] = {}
    extra: list[tuple[str, str]] = []
    field_of = {prop: f for f, prop in PROPERTY_OF.items()}
    for name, value in properties.items():
        key = str(name)
        if key == PROP_PROFILING:
            values["profiling"] = _as_bool(value)
        elif key == PROP_THREADS:
            values["num_threads"] = int(value)
        elif key in field_of:
            values[field_of[key]] = None if value is None else _as_text(value)
        else:
            extra.append((key, str(value)))
    return replace(base, **values, extra=tuple(sorted(extra)))


def naive_run_config(first_op: str | None, base: RunConfig = DEFAULT_RUN_CONFIG) -> RunConfig:
    """Upstream's naive-path hint: PERFORMANCE when the first node is MUL_MAT, else ACCURACY."""
    if base.execution_mode is not None:
        return base
    return replace(base, execution_mode="PERFORMANCE" if first_op == "MUL_MAT" else "ACCURACY")


def compile_properties(run: RunConfig, dev_class: str, config: OvkitConfig) -> dict[str, Any]:
    """Everything passed to ``compile_model``: the run hints, ``GGML_OPENVINO_CACHE_DIR`` as
    OpenVINO's model cache (not beside the blob cache, as in the backend) and the NPU properties."""
    props = run.properties(dev_class)
    if config.cache_dir and not config.compiled_model_cache_dir:
        key = PROP_NPUW_CACHE_DIR if dev_class == DeviceClass.NPU else PROP_CACHE_DIR
        props[key] = config.cache_dir
        props[PROP_CACHE_MODE] = CACHE_MODE_UPSTREAM
    if dev_class == DeviceClass.NPU:  # NPU_COMPILE_CONFIG, then NPU_PROPERTIES, as the backend adds them
        props |= config.npu_compile_properties()
    return props


# -- Effective values, read back from the compiled model ---------------------------------------
def _as_text(value: Any) -> str:
    name = getattr(value, "name", None)  # enums (ExecutionMode.ACCURACY)
    if isinstance(name, str) and not hasattr(value, "get_type_name"):
        return name
    if hasattr(value, "get_type_name"):  # openvino.Type
        type_name = str(value.get_type_name())
        return OPENVINO_SHORT.get(type_name, type_name)
    text = str(value)
    return OPENVINO_SHORT.get(text, text)


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().upper() in ("YES", "TRUE", "1", "ON")
    return bool(value)


def _read(compiled: Any, name: str) -> Any:
    try:
        return compiled.get_property(name)
    except Exception:  # not supported by this plugin, or unconvertible (the property is not readable there)
        return None


@dataclass(frozen=True, slots=True)
class EffectiveConfig:
    """What the compiled model reports it really does (the CPU may answer f32 when f16 is asked)."""

    requested: RunConfig
    inference_precision: str | None
    performance_hint: str | None
    execution_mode: str | None
    profiling: bool
    loaded_from_cache: bool | None
    execution_devices: tuple[str, ...]
    num_threads: int | None = None
    simulated: bool = False

    @classmethod
    def read(cls, compiled: Any, requested: RunConfig, *, simulated: bool = False) -> EffectiveConfig:
        """Read every reported value from ``compiled`` (missing ones are None)."""
        prec = _read(compiled, PROP_PRECISION)
        perf = _read(compiled, PROP_PERFORMANCE)
        mode = _read(compiled, PROP_EXECUTION)
        prof = _read(compiled, PROP_PROFILING)
        cached = _read(compiled, "LOADED_FROM_CACHE")
        devices = _read(compiled, "EXECUTION_DEVICES")
        threads = _read(compiled, PROP_THREADS)
        return cls(
            requested=requested,
            inference_precision=None if prec is None else _as_text(prec),
            performance_hint=None if perf is None else _as_text(perf),
            execution_mode=None if mode is None else _as_text(mode),
            profiling=prof is not None and _as_bool(prof),
            loaded_from_cache=None if cached is None else _as_bool(cached),
            execution_devices=tuple(str(d) for d in devices) if devices else (),
            num_threads=int(threads) if isinstance(threads, int) else None,
            simulated=simulated,
        )

    def as_rows(self) -> list[dict[str, object]]:
        """Requested vs effective, one row per hint (for a table)."""
        out: list[dict[str, object]] = []
        for f, name in PROPERTY_OF.items():
            want = getattr(self.requested, f)
            want = "(device default)" if want is None else want
            out.append({"property": name, "requested": want, "effective": getattr(self, f)})
        out.append({"property": "LOADED_FROM_CACHE", "requested": "", "effective": self.loaded_from_cache})
        out.append(
            {"property": "EXECUTION_DEVICES", "requested": "", "effective": ", ".join(self.execution_devices)}
        )
        if self.simulated:
            out.append(
                {"property": "SIMULATED", "requested": "", "effective": "yes: compiled and run on the CPU"}
            )
        return out

    def table(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.as_rows())
