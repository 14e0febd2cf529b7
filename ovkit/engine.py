"""Compile once, run many: the execution engine behind ``Graph.compute``.

Upstream keeps one compiled graph per process and clears it on every miss; ovkit
keeps a bounded LRU of compiled models keyed by graph *structure* (ops, shapes, types, params,
device, compile config).  Each cached model owns one reusable infer request; inputs are bound
zero-copy when they are C-contiguous with the right dtype, and every bound array and
``openvino.Tensor`` is referenced by the request's ``Runner`` for as long as the request may read
it (OpenVINO's request does *not* keep Python tensors alive: a use-after-free otherwise).
Outputs are copied out of the request (one copy, made by OpenVINO), as upstream's naive path does, so results never alias the next run; ``out=`` binds caller arrays as outputs instead
(zero-copy, as upstream binds ggml tensors).

Layers: ``Engine`` (LRU of ``CompiledGraph`` per Core; ``run``/``session``/``run_model`` for
``openvino.Model`` factories) → ``Runner``/``Session`` (one infer request: binding, state,
profiling) ← ``compute_graph``/``graph_session`` (``ovkit.graph.Graph`` plans: structure key,
policy check and Parameter order computed once per (graph, outputs, device, config)).

Environment (read as the backend reads it, re-read only when one of ``ENGINE_ENV`` changes):
``GGML_OPENVINO_CACHE_DIR`` → OpenVINO ``CACHE_DIR`` + ``CACHE_MODE=OPTIMIZE_SIZE``
(``NPUW_CACHE_DIR`` on the NPU class); ``GGML_OPENVINO_DISABLE_CACHE`` → compile on every call,
store nothing; ``GGML_OPENVINO_STATEFUL_EXECUTION`` → state inputs become OpenVINO variables
(ReadValue/Assign, via OpenVINO's MakeStateful, as upstream), forced off for the NPU class;
``GGML_OPENVINO_PROFILING`` → upstream's per-graph timing lines on the ``ovkit`` logger.
``OVKIT_ENGINE_CACHE_SIZE`` (ovkit's own) sets the LRU size (default 64).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit.config import ENV_VARS, OvkitConfig, OvkitConfigWarning, read_config
from ovkit.devices import DeviceClass, device_class
from ovkit.dtypes import NUMPY_DTYPE, OPENVINO_NUMPY, OPENVINO_SHORT
from ovkit.ir import GraphError, GraphIR, Tensor, from_model_output
from ovkit.runtime import get_core, is_simulated

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger("ovkit")

ENV_CACHE_SIZE = "OVKIT_ENGINE_CACHE_SIZE"
DEFAULT_CACHE_SIZE = 64
# The variables the engine depends on: when one changes, the configuration is read again.  Every
# variable of the backend's table, so that none the engine (or a hook it calls, such as the weight
# release on a cache hit) reads can be missed when the table grows, and ovkit's own cache size.
ENGINE_ENV: tuple[str, ...] = (*(v.env_name for v in ENV_VARS), ENV_CACHE_SIZE)


class EngineError(RuntimeError):
    """Compilation or inference failed in OpenVINO (the message names the device and graph)."""


class InputError(ValueError):
    """An input array that does not fit the compiled graph (names, shapes, dtypes)."""


class ProfilingOffError(RuntimeError):
    """Per-node timings were asked for but the compiled model reports ``PERF_COUNT`` off."""


# ---------------------------------------------------------------------------------------------
# Hints: the allowed values are data, validated before anything is compiled.
# ---------------------------------------------------------------------------------------------
PRECISIONS: dict[str, str] = {"f32": "f32", "f16": "f16", "bf16": "bf16"}
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


def _check_choice(what: str, value: str | None, allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    if value is not None and value not in allowed:
        raise ValueError(f"{what}={value!r} is not valid (expected one of: {', '.join(allowed)})")


_RUN_HASHES: dict[int, tuple[Any, int]] = {}


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Per-run compile hints; ``None`` leaves the device default.  Part of the cache key."""

    inference_precision: str | None = None  # "f32" | "f16" | "bf16"
    performance_hint: str | None = None  # "LATENCY" | "THROUGHPUT" | "CUMULATIVE_THROUGHPUT"
    execution_mode: str | None = None  # "ACCURACY" | "PERFORMANCE"
    profiling: bool = False  # OpenVINO PERF_COUNT: per-node timings
    num_threads: int | None = None  # INFERENCE_NUM_THREADS (1 avoids thread wake-ups on tiny graphs)
    extra: tuple[tuple[str, str], ...] = ()  # any other OpenVINO compile property, as text

    def __hash__(self) -> int:  # plans are looked up by config on every call: hash once
        h = _RUN_HASHES.get(id(self))
        if h is None or h[0] is not self:
            h = (
                self,
                hash(
                    (
                        self.inference_precision,
                        self.performance_hint,
                        self.execution_mode,
                        self.profiling,
                        self.num_threads,
                        self.extra,
                    )
                ),
            )
            if len(_RUN_HASHES) > 256:
                _RUN_HASHES.clear()
            _RUN_HASHES[id(self)] = h
        return h[1]

    def __post_init__(self) -> None:
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads={self.num_threads} is not valid (expected >= 1, or None)")
        _check_choice("inference_precision", self.inference_precision, PRECISIONS)
        _check_choice("performance_hint", self.performance_hint, PERFORMANCE_HINTS)
        _check_choice("execution_mode", self.execution_mode, EXECUTION_MODES)

    def properties(self) -> dict[str, Any]:
        """The OpenVINO compile properties this configuration asks for."""
        props: dict[str, Any] = {}
        if self.inference_precision is not None:
            props[PROP_PRECISION] = PRECISIONS[self.inference_precision]
        if self.performance_hint is not None:
            props[PROP_PERFORMANCE] = self.performance_hint
        if self.execution_mode is not None:
            props[PROP_EXECUTION] = self.execution_mode
        if self.profiling:
            props[PROP_PROFILING] = True
        if self.num_threads is not None:
            props[PROP_THREADS] = self.num_threads
        props.update(dict(self.extra))
        return props


DEFAULT_RUN_CONFIG = RunConfig()
#: Graph.compute's default: exact f32 arithmetic, so results match ggml's CPU backend.
GRAPH_RUN_CONFIG = RunConfig(inference_precision="f32")
#: ... and for tiny graphs (every tensor < TINY_ELEMENTS elements) one inference thread: waking
#: a second worker costs more than the work (ggml's CPU backend likewise gains nothing there).
GRAPH_TINY_RUN_CONFIG = RunConfig(inference_precision="f32", num_threads=1)
TINY_ELEMENTS = 16384

_FIELD_OF_PROPERTY = {
    PROP_PRECISION: "inference_precision",
    PROP_PERFORMANCE: "performance_hint",
    PROP_EXECUTION: "execution_mode",
}


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
    for name, value in properties.items():
        key = str(name)
        if key in _FIELD_OF_PROPERTY:
            values[_FIELD_OF_PROPERTY[key]] = None if value is None else _as_text(value)
        elif key == PROP_PROFILING:
            values["profiling"] = _as_bool(value)
        elif key == PROP_THREADS:
            values["num_threads"] = int(value)
        else:
            extra.append((key, str(value)))
    return replace(base, **values, extra=tuple(sorted(extra)))


def naive_run_config(first_op: str | None, base: RunConfig = DEFAULT_RUN_CONFIG) -> RunConfig:
    """Upstream's naive-path hint: PERFORMANCE when the first node is MUL_MAT, else ACCURACY."""
    if base.execution_mode is not None:
        return base
    return replace(base, execution_mode="PERFORMANCE" if first_op == "MUL_MAT" else "ACCURACY")


def compile_properties(run: RunConfig, dev_class: str, config: OvkitConfig) -> dict[str, Any]:
    """Everything passed to ``compile_model``: the run hints plus the upstream cache-dir mapping."""
    props = run.properties()
    if config.cache_dir:
        key = PROP_NPUW_CACHE_DIR if dev_class == DeviceClass.NPU else PROP_CACHE_DIR
        props[key] = config.cache_dir
        props[PROP_CACHE_MODE] = CACHE_MODE_UPSTREAM
    return props


# ---------------------------------------------------------------------------------------------
# Effective values, read back from the compiled model.
# ---------------------------------------------------------------------------------------------
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
    num_streams: int | None
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
        streams = _read(compiled, "NUM_STREAMS")
        threads = _read(compiled, PROP_THREADS)
        return cls(
            requested=requested,
            inference_precision=None if prec is None else _as_text(prec),
            performance_hint=None if perf is None else _as_text(perf),
            execution_mode=None if mode is None else _as_text(mode),
            profiling=prof is not None and _as_bool(prof),
            loaded_from_cache=None if cached is None else _as_bool(cached),
            execution_devices=tuple(str(d) for d in devices) if devices else (),
            num_streams=int(streams) if isinstance(streams, int) else None,
            num_threads=int(threads) if isinstance(threads, int) else None,
            simulated=simulated,
        )

    def as_rows(self) -> list[dict[str, object]]:
        """Requested vs effective, one row per hint (for a table)."""
        req = self.requested
        rows: list[tuple[str, object, object]] = [
            (PROP_PRECISION, req.inference_precision, self.inference_precision),
            (PROP_PERFORMANCE, req.performance_hint, self.performance_hint),
            (PROP_EXECUTION, req.execution_mode, self.execution_mode),
            (PROP_PROFILING, req.profiling, self.profiling),
            (PROP_THREADS, req.num_threads, self.num_threads),
        ]
        out = [
            {"property": name, "requested": "(device default)" if want is None else want, "effective": got}
            for name, want, got in rows
        ]
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


# ---------------------------------------------------------------------------------------------
# Ports and structure keys.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PortSpec:
    """One input or output of a compiled model: name, OpenVINO type, shape (-1 = dynamic)."""

    name: str
    index: int
    ov_type: str
    shape: tuple[int, ...]

    @property
    def dtype(self) -> np.dtype[Any]:
        return OPENVINO_NUMPY.get(self.ov_type, np.dtype(np.float32))

    @property
    def is_static(self) -> bool:
        return all(d >= 0 for d in self.shape)

    def accepts(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.shape) and all(
            w < 0 or w == g for w, g in zip(self.shape, shape, strict=True)
        )


def _dims(partial_shape: Any) -> tuple[int, ...]:
    if partial_shape.rank.is_dynamic:
        raise EngineError(f"inputs of dynamic rank are not supported (got {partial_shape})")
    return tuple(d.get_length() if d.is_static else -1 for d in partial_shape)


def _port_name(port: Any, fallback: str) -> str:
    names = port.get_names()
    if names:
        return str(sorted(names)[0]) if len(names) > 1 else str(next(iter(names)))
    try:
        return str(port.get_node().get_friendly_name())
    except Exception:
        return fallback


def _ports(ports: Sequence[Any], prefix: str) -> tuple[PortSpec, ...]:
    specs = []
    for i, port in enumerate(ports):
        if prefix == "input":
            name = str(port.get_node().get_friendly_name())
        else:
            name = _port_name(port, f"{prefix}{i}")
        specs.append(PortSpec(name, i, port.get_element_type().to_string(), _dims(port.get_partial_shape())))
    return tuple(specs)


def model_structure_key(model: Any) -> str:
    """A digest of an ``openvino.Model``'s structure: op types, wiring, types, shapes, attributes,
    constant bytes, Parameter and Result names.  Generated friendly names are ignored."""
    h = hashlib.sha256()
    index: dict[str, int] = {}  # friendly name -> position (wrappers are fresh objects per call)
    for i, op in enumerate(model.get_ordered_ops()):
        index[op.get_friendly_name()] = i
        kind = op.get_type_name()
        h.update(f"|{i}:{kind}:{op.get_type_info().version_id}".encode())
        for inp in op.inputs():
            src = inp.get_source_output()
            h.update(f"<{index.get(src.get_node().get_friendly_name(), -1)}.{src.get_index()}".encode())
        for out in op.outputs():
            h.update(f">{out.get_element_type().to_string()}{out.get_partial_shape()}".encode())
        try:
            attrs = op.get_attributes()
        except Exception:
            attrs = {}
        h.update(repr(sorted((k, repr(v)) for k, v in attrs.items())).encode())
        if kind == "Parameter":
            h.update(op.get_friendly_name().encode())
        elif kind == "Result":
            h.update(repr(sorted(op.output(0).get_names())).encode())
        elif kind == "Constant":
            h.update(np.ascontiguousarray(op.get_data()).tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Statistics.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CacheStats:
    """The compiled-graph cache counters (``compile_seconds`` sums every compile, cached or not)."""

    hits: int
    misses: int
    evictions: int
    compiles: int
    compile_seconds: float
    size: int
    maxsize: int
    enabled: bool

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def __str__(self) -> str:
        entries = f"entries {self.size} of {self.maxsize}" if self.enabled else "disabled"
        return (
            f"compiled-graph cache: hits {self.hits}, misses {self.misses} ({self.hit_rate:.0%} hit rate), "
            f"evictions {self.evictions}, compiles {self.compiles} in {self.compile_seconds * 1e3:,.1f} ms, "
            f"{entries}"
        )

    def _repr_html_(self) -> str:
        return f"<code>{self}</code>"

    def as_dict(self) -> dict[str, object]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "compiles": self.compiles,
            "compile_seconds": round(self.compile_seconds, 6),
            "size": self.size,
            "maxsize": self.maxsize,
            "enabled": self.enabled,
            "hit_rate": round(self.hit_rate, 4),
        }


@dataclass(slots=True)
class _Counters:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    compiles: int = 0
    compile_seconds: float = 0.0


# ---------------------------------------------------------------------------------------------
# Compiled graphs and their requests.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CacheKey:
    """Everything that makes two compiled models different."""

    structure: Hashable
    device: str
    core_id: int
    properties: tuple[tuple[str, str], ...]
    stateful: bool
    states: tuple[tuple[str, str], ...]
    dynamic: tuple[tuple[str, tuple[int, ...]], ...]
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        fields_ = (
            self.structure,
            self.device,
            self.core_id,
            self.properties,
            self.stateful,
            self.states,
            self.dynamic,
        )
        object.__setattr__(self, "_hash", hash(fields_))

    def __hash__(self) -> int:  # computed once: the key is looked up on every run
        return self._hash


class CompiledGraph:
    """One compiled model: its ports, effective configuration, compile time and shared request."""

    def __init__(
        self,
        key: CacheKey,
        compiled: Any,
        core: Any,
        *,
        run_config: RunConfig,
        states: Mapping[str, str],
        stateful: bool,
        variables: Mapping[str, str],
        state_specs: Mapping[str, PortSpec],
        compile_seconds: float,
    ) -> None:
        self.key = key
        self.device = key.device
        self.compiled = compiled
        self.core = core  # kept alive: the compiled model belongs to it
        self.run_config = run_config
        self.states = dict(states)  # state input name -> output name
        self.stateful = stateful
        self.variables = dict(variables)  # state input name -> OpenVINO variable id (stateful)
        self.state_specs = dict(state_specs)
        self.compile_seconds = compile_seconds
        self.effective = EffectiveConfig.read(compiled, run_config, simulated=is_simulated(core))
        self.inputs = _ports(compiled.inputs, "input")
        self.outputs = _ports(compiled.outputs, "output")
        self.runs = 0
        self.lock = threading.Lock()
        self._runner: Runner | None = None

    def __repr__(self) -> str:
        return (
            f"CompiledGraph(device={self.device!r}, inputs={[p.name for p in self.inputs]}, "
            f"outputs={[p.name for p in self.outputs]}, stateful={self.stateful})"
        )

    @property
    def runner(self) -> Runner:
        """The shared request (stateless callers); sessions make their own with ``new_runner``."""
        if self._runner is None:
            self._runner = Runner(self)
        return self._runner

    def new_runner(self) -> Runner:
        """A fresh infer request with its own state."""
        return Runner(self)


def _bf16_tensor(array: np.ndarray) -> Any:
    """An ``openvino.Tensor`` of type bf16 holding ``array`` rounded to nearest even."""
    import openvino as ov

    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    tensor = ov.Tensor(ov.Type.bf16, ov.Shape(list(array.shape)))
    tensor.data.view(np.uint16)[...] = rounded
    return tensor


def _tensor_to_numpy(tensor: Any, ov_type: str) -> np.ndarray:
    """A copy of an output tensor; bf16 widens to float32."""
    if ov_type == "bf16":
        bits = np.asarray(tensor.data).view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(tuple(tensor.shape))
    return np.array(tensor.data, copy=True)


class Runner:
    """One infer request with its bound inputs kept alive, and (optionally) state."""

    def __init__(self, graph: CompiledGraph) -> None:
        self.graph = graph
        self.request = graph.compiled.create_infer_request()
        n = len(graph.inputs)
        self._by_name = {p.name: p for p in graph.inputs}
        self._bound: list[Any] = [None] * n  # the caller's object last bound at each input
        self._keep: list[Any] = [None] * n  # (array, ov.Tensor) the request reads: keep alive
        self._state_keep: dict[str, Any] = {}
        self._out_keep: dict[int, tuple[np.ndarray, Any]] = {}  # caller arrays bound as outputs
        self._own_out: dict[int, Any] = {}  # the request's own output tensors, to restore
        out_names = set(graph.states.values())
        self._returned = [p for p in graph.outputs if p.name not in out_names]
        self._state_out = {p.name: p for p in graph.outputs if p.name in out_names}
        self._host_state: dict[str, np.ndarray] = {}
        self._state_in = {out: inp for inp, out in graph.states.items()}
        # Inputs the caller feeds (state inputs are fed by the runner when not stateful).
        self._free = [p for p in graph.inputs if graph.stateful or p.name not in graph.states]
        self._direct = not any(p.ov_type == "bf16" for p in graph.outputs)
        from openvino._pyopenvino import InferRequest as _BaseRequest

        self._infer = _BaseRequest.infer
        if graph.states and not graph.stateful:
            self.reset_state()
        self.runs = 0
        self.last_infer_seconds = 0.0

    # -- binding --------------------------------------------------------------------------
    def _bind(self, port: PortSpec, value: Any) -> None:
        import openvino as ov

        i = port.index
        if value is self._bound[i]:
            return  # the same array object: the request already reads its memory
        array = np.asarray(value)
        if not port.accepts(array.shape):
            want = "[" + ", ".join("?" if d < 0 else str(d) for d in port.shape) + "]"
            raise InputError(
                f"input {port.name!r}: shape {list(array.shape)} does not fit the compiled shape {want}"
            )
        if port.ov_type == "bf16":
            tensor = _bf16_tensor(array)
            self.request.set_input_tensor(i, tensor)
            self._keep[i] = (tensor,)
            self._bound[i] = None  # a converted copy: rebind every call
            return
        want_dtype = port.dtype
        if array.dtype != want_dtype and not np.can_cast(array.dtype, want_dtype, "same_kind"):
            raise InputError(
                f"input {port.name!r}: dtype {array.dtype} cannot be converted to {want_dtype} "
                f"({port.ov_type}) without losing its kind"
            )
        bound = np.ascontiguousarray(array, dtype=want_dtype)
        if not bound.flags.writeable:  # OpenVINO shares only writable memory: read-only arrays
            bound = bound.copy()  # (np.load mmap_mode="r", np.frombuffer(bytes)) are copied
        tensor = ov.Tensor(bound, shared_memory=True)
        self.request.set_input_tensor(i, tensor)
        # Keep both alive for as long as the request may read them (the request holds no reference).
        self._keep[i] = (bound, tensor)
        # Zero-copy only when no conversion happened; otherwise the next call must copy again.
        self._bound[i] = value if bound is value else None

    def bind(self, inputs: Mapping[str, Any] | Sequence[Any]) -> None:
        """Bind inputs by name (a mapping) or in input order (a sequence)."""
        ports = self.graph.inputs
        if type(inputs) is not list and isinstance(inputs, Mapping):
            missing = [p.name for p in ports if p.name not in inputs and p.name not in self._host_state]
            if missing:
                raise InputError(f"missing input(s) {missing}; the graph expects {[p.name for p in ports]}")
            unknown = [k for k in inputs if k not in self._by_name]
            if unknown:
                raise InputError(f"unknown input(s) {unknown}; the graph expects {[p.name for p in ports]}")
            for port in ports:
                value = inputs.get(port.name)
                if value is None:
                    value = self._host_state[port.name]
                self._bind(port, value)
        else:
            free = self._free
            if len(inputs) != len(free):
                raise InputError(f"expected {len(free)} inputs ({[p.name for p in free]}), got {len(inputs)}")
            bound = self._bound
            for port, value in zip(free, inputs, strict=True):
                if value is not bound[port.index]:  # same object: already bound (zero-copy)
                    self._bind(port, value)
            for name, value in self._host_state.items():
                self._bind(self._by_name[name], value)

    # -- running --------------------------------------------------------------------------
    def run(
        self,
        inputs: Mapping[str, Any] | Sequence[Any],
        *,
        copy: bool = True,
        out: Sequence[np.ndarray] | None = None,
    ) -> list[np.ndarray]:
        """Bind, infer, and return the outputs: copies; live views valid until the next run with
        ``copy=False``; or, with ``out=``, the caller's own arrays, which OpenVINO writes into
        directly (zero-copy output binding, as upstream binds ggml tensors)."""
        with self.graph.lock:
            self.bind(inputs)
            if out is not None:
                self._bind_outputs(out)
            elif self._out_keep:
                self._restore_outputs()
            t0 = time.perf_counter()
            direct = copy and self._direct and out is None
            try:
                # OpenVINO's own infer(): with share_outputs=False it returns fresh copies of
                # every output (one copy, made in C++), in output order.
                result = self._infer(self.request, {}, not direct, True)
            except RuntimeError as exc:
                raise EngineError(f"inference failed on {self.graph.device}: {exc}") from exc
            self.last_infer_seconds = time.perf_counter() - t0
            self.runs += 1
            self.graph.runs += 1
            if out is not None:
                if self._state_out:
                    self._capture_host_state()
                return list(out)
            if not direct:  # live views (copy=False), or bf16 outputs to widen
                req = self.request
                if self._state_out:
                    self._capture_host_state()
                if copy:
                    return [
                        _tensor_to_numpy(req.get_output_tensor(p.index), p.ov_type) for p in self._returned
                    ]
                return [req.get_output_tensor(p.index).data for p in self._returned]
            values = list(result.values())
            for name, port in self._state_out.items():
                self._host_state[self._state_in[name]] = values[port.index]
            return [values[p.index] for p in self._returned]

    __call__ = run

    def _bind_outputs(self, out: Sequence[np.ndarray]) -> None:
        import openvino as ov

        ports = self._returned
        if len(out) != len(ports):
            raise InputError(f"out: expected {len(ports)} arrays ({[p.name for p in ports]}), got {len(out)}")
        for port, arr in zip(ports, out, strict=True):
            if self._out_keep.get(port.index, (None,))[0] is arr:
                continue  # already bound
            want = "[" + ", ".join("?" if d < 0 else str(d) for d in port.shape) + "]"
            if (
                not isinstance(arr, np.ndarray)
                or port.ov_type == "bf16"
                or not port.is_static
                or arr.dtype != port.dtype
                or arr.shape != port.shape
                or not arr.flags.c_contiguous
                or not arr.flags.writeable
            ):
                got = f"{getattr(arr, 'dtype', type(arr).__name__)} {list(getattr(arr, 'shape', []))}"
                raise InputError(
                    f"out for output {port.name!r}: expected a writeable C-contiguous {port.dtype} array "
                    f"of shape {want} (static shapes, not bf16), got {got}"
                )
            if port.index not in self._own_out:
                self._own_out[port.index] = self.request.get_output_tensor(port.index)
            tensor = ov.Tensor(arr, shared_memory=True)
            self.request.set_output_tensor(port.index, tensor)
            self._out_keep[port.index] = (arr, tensor)  # alive while the request may write

    def _restore_outputs(self) -> None:
        """Give the request its own output memory back (the caller's arrays are not written again)."""
        for index, tensor in self._own_out.items():
            self.request.set_output_tensor(index, tensor)
        self._out_keep.clear()

    # -- state ----------------------------------------------------------------------------
    @property
    def state_names(self) -> list[str]:
        return list(self.graph.states)

    def _check_state(self, name: str) -> None:
        if name not in self.graph.states:
            raise KeyError(f"no state named {name!r}; this graph has {self.state_names or 'no states'}")

    def _variable(self, name: str) -> Any:
        var_id = self.graph.variables[name]
        for st in self.request.query_state():
            if st.name == var_id:
                return st
        raise EngineError(f"state variable {var_id!r} not found in the infer request")

    def _capture_host_state(self) -> None:
        by_out = {out: inp for inp, out in self.graph.states.items()}
        for out_name, port in self._state_out.items():
            value = _tensor_to_numpy(self.request.get_output_tensor(port.index), port.ov_type)
            self._host_state[by_out[out_name]] = value

    def state(self, name: str) -> np.ndarray:
        """A copy of the current value of state ``name`` (e.g. a KV cache)."""
        self._check_state(name)
        if not self.graph.stateful:
            return self._host_state[name].copy()
        st = self._variable(name)
        return _tensor_to_numpy(st.state, self.graph.state_specs[name].ov_type)

    def set_state(self, name: str, value: Any) -> None:
        """Replace state ``name`` (its shape must fit the declared one)."""
        import openvino as ov

        self._check_state(name)
        spec = self.graph.state_specs[name]
        array = np.asarray(value)
        if not spec.accepts(array.shape):
            raise InputError(f"state {name!r}: shape {list(array.shape)} does not fit {list(spec.shape)}")
        array = np.ascontiguousarray(array, dtype=spec.dtype)
        with self.graph.lock:
            if not self.graph.stateful:
                self._host_state[name] = array.copy()
                return
            tensor = _bf16_tensor(array) if spec.ov_type == "bf16" else ov.Tensor(array, shared_memory=True)
            self._variable(name).state = tensor
            self._state_keep[name] = (array, tensor)

    def reset_state(self, name: str | None = None) -> None:
        """Back to the initial value (zeros; dynamic dimensions of length 0), one or all states."""
        names = self.state_names if name is None else [name]
        for n in names:
            self._check_state(n)
        if not self.graph.stateful:
            for n in names:
                spec = self.graph.state_specs[n]
                self._host_state[n] = np.zeros(tuple(max(d, 0) for d in spec.shape), spec.dtype)
            return
        with self.graph.lock:
            if name is None:
                self.request.reset_state()
            else:
                self._variable(name).reset()
            for n in names:
                self._state_keep.pop(n, None)

    # -- profiling ------------------------------------------------------------------------
    @property
    def profiling(self) -> bool:
        """True only when the compiled model reports PERF_COUNT on."""
        return self.graph.effective.profiling

    def profile(self) -> pd.DataFrame:
        """Per-node timings of the last run (``ProfilingOffError`` when profiling was not on)."""
        import pandas as pd

        if not self.profiling:
            raise ProfilingOffError(
                "profiling was not on for this compiled model (PERF_COUNT reports off): "
                "run with RunConfig(profiling=True) to get per-node timings"
            )
        if self.runs == 0:
            raise ProfilingOffError("no run yet: per-node timings exist after the first run")
        rows = [
            {
                "node": p.node_name,
                "type": p.node_type,
                "exec_type": p.exec_type,
                "status": str(p.status).rsplit(".", 1)[-1],
                "real_time_us": p.real_time.total_seconds() * 1e6,
                "cpu_time_us": p.cpu_time.total_seconds() * 1e6,
            }
            for p in self.request.profiling_info
        ]
        return pd.DataFrame(
            rows, columns=["node", "type", "exec_type", "status", "real_time_us", "cpu_time_us"]
        )


# Sessions are runners with their own request (own state); the name reads better in user code.
Session = Runner


# ---------------------------------------------------------------------------------------------
# Building the model to compile: dynamic dims, stateful transformation.
# ---------------------------------------------------------------------------------------------
ModelFactory = Callable[[], Any]


def _model_from(factory_result: Any) -> Any:
    # Graph.to_model returns (model, input_names); plain factories return the model.
    return factory_result[0] if isinstance(factory_result, tuple) else factory_result


def _apply_dynamic(model: Any, dynamic: Mapping[str, tuple[int, ...]]) -> None:
    """Mark axes of the named inputs dynamic (-1) so one compiled model serves many lengths."""
    if not dynamic:
        return
    import openvino as ov

    params = {p.get_friendly_name(): p for p in model.get_parameters()}
    new_shapes = {}
    for name, axes in dynamic.items():
        if name not in params:
            raise InputError(f"dynamic: no input named {name!r} (inputs: {sorted(params)})")
        dims = list(_dims(params[name].get_partial_shape()))
        for axis in axes:
            if not -len(dims) <= axis < len(dims):
                raise InputError(f"dynamic: axis {axis} out of range for input {name!r} of rank {len(dims)}")
            dims[axis] = -1
        new_shapes[params[name].output(0)] = ov.PartialShape(dims)
    try:
        model.reshape(new_shapes)
    except RuntimeError as exc:
        raise EngineError(f"cannot make {dict(dynamic)} dynamic: {exc}".splitlines()[0]) from exc


def _state_specs(model: Any, states: Mapping[str, str]) -> dict[str, PortSpec]:
    params = {p.get_friendly_name(): p for p in model.get_parameters()}
    results = {_port_name(o, ""): o for o in model.outputs}
    specs = {}
    for inp, out in states.items():
        if inp not in params:
            raise InputError(f"state {inp!r}: no input of that name (inputs: {sorted(params)})")
        if out not in results:
            raise InputError(f"state {inp!r}: no output named {out!r} (outputs: {sorted(results)})")
        p = params[inp]
        specs[inp] = PortSpec(inp, -1, p.get_element_type().to_string(), _dims(p.get_partial_shape()))
    return specs


def _make_stateful(model: Any, states: Mapping[str, str]) -> dict[str, str]:
    """OpenVINO's MakeStateful, as upstream: each (input, output) pair becomes a variable."""
    from openvino._offline_transformations import apply_make_stateful_transformation

    before = {v.get_info().variable_id for v in model.get_variables()}
    apply_make_stateful_transformation(model, dict(states))
    after = [
        v.get_info().variable_id for v in model.get_variables() if v.get_info().variable_id not in before
    ]
    mapping: dict[str, str] = {}
    for inp, out in states.items():
        guess = inp + out  # MakeStateful names a variable <param><result>
        mapping[inp] = guess if guess in after else next(v for v in after if v.startswith(inp))
    return mapping


# ---------------------------------------------------------------------------------------------
# The engine.
# ---------------------------------------------------------------------------------------------
_ENV_DATA: dict[Any, Any] | None = getattr(os.environ, "_data", None)
_ENV_KEYS: tuple[Any, ...] = (
    tuple(os.environ.encodekey(n) for n in ENGINE_ENV) if _ENV_DATA is not None else ENGINE_ENV
)


def _env_snapshot() -> tuple[Any, ...]:
    """The engine's variables, cheaply: CPython's ``os.environ`` keeps its encoded data in ``_data``,
    which is read directly (a few hundred ns) because this runs on every call."""
    data = _ENV_DATA if _ENV_DATA is not None else os.environ
    return tuple(map(data.get, _ENV_KEYS))


def _cache_size_from_env(default: int) -> int:
    """The LRU size ``OVKIT_ENGINE_CACHE_SIZE`` sets; a value that is no integer >= 1 warns and
    gives ``default`` (the engine reads it whenever its variables change, so every bad value
    warns once and falls back the same way)."""
    raw = os.environ.get(ENV_CACHE_SIZE, "")
    if not raw:
        return default
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if size < 1:
        warnings.warn(
            f"{ENV_CACHE_SIZE}={raw!r} is not a cache size (expected an integer >= 1); using {default}",
            OvkitConfigWarning,
            stacklevel=2,
        )
        return default
    return size


def _check_cache_dir(config: OvkitConfig) -> None:
    """Warn when ``GGML_OPENVINO_CACHE_DIR`` names something that is not a directory (OpenVINO
    would silently cache nothing there)."""
    path = config.cache_dir
    if path and os.path.exists(path) and not os.path.isdir(path):
        warnings.warn(
            f"GGML_OPENVINO_CACHE_DIR={path!r} is not a directory (it names a file): compiled "
            "models are not cached on disk",
            OvkitConfigWarning,
            stacklevel=2,
        )


@dataclass(frozen=True, slots=True)
class RunReport:
    """One run, explained: outputs, hit or miss, times, effective config, per-node profile."""

    outputs: list[np.ndarray]
    cache_hit: bool
    compile_seconds: float
    infer_seconds: float
    effective: EffectiveConfig
    profile: pd.DataFrame | None = field(default=None, repr=False)


class Engine:
    """A bounded LRU of compiled graphs on one Core (real or simulated)."""

    def __init__(
        self,
        core: Any = None,
        *,
        maxsize: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.core = get_core(core)
        self._fixed_env = env
        self._explicit_size = maxsize
        if maxsize is not None and maxsize < 1:
            raise ValueError(f"maxsize={maxsize} is not valid (expected >= 1)")
        self._entries: OrderedDict[CacheKey, CompiledGraph] = OrderedDict()
        self._lock = threading.RLock()
        self._counters = _Counters()
        self._snapshot: tuple[Any, ...] | None = None
        self._fast: dict[tuple[Any, ...], CacheKey] = {}
        # Graph plans live on their graphs (``Engine.plan``); the epoch, bumped when the
        # configuration changes or the cache is cleared, retires the ones made before.
        self._epoch = 0
        self._plans_made = 0
        # run_model: id -> (weak reference to the model, input shapes, structure key); weak, so
        # that a model the caller drops is not kept alive with its constants.
        self._model_keys: dict[int, tuple[weakref.ref[Any], tuple[str, ...], str]] = {}
        # Bumped whenever a cached entry may disappear or the configuration changed: plans keep
        # (generation, compiled graph) and reuse it while the generation is unchanged.
        self._generation = 0
        self._config = OvkitConfig()
        self._device: str | None = None
        self._maxsize = maxsize or DEFAULT_CACHE_SIZE
        self._refresh()
        self.last_runner: Runner | None = None
        self.last_hit = False
        self._pending_times: dict[str, float] = {}  # conversion/compile times not yet logged

    def __repr__(self) -> str:
        c = self._counters
        kind = "simulated" if is_simulated(self.core) else "OpenVINO"
        return (
            f"Engine({kind} core, {len(self._entries)}/{self._maxsize} compiled, hits={c.hits}, "
            f"misses={c.misses}, evictions={c.evictions}, compile={c.compile_seconds * 1e3:.1f} ms)"
        )

    # -- configuration ----------------------------------------------------------------------
    def _refresh(self) -> None:
        """Re-read the configuration when one of the engine's variables changed."""
        if self._fixed_env is not None:
            if self._snapshot is not None:
                return
            self._snapshot = ()
            self._config = read_config(self._fixed_env)
        else:
            snap = _env_snapshot()
            if snap == self._snapshot:
                return
            self._snapshot = snap
            self._config = read_config()
        _check_cache_dir(self._config)
        self._device = None
        self._fast.clear()
        self._epoch += 1
        self._generation += 1
        if self._explicit_size is None:
            self.resize(
                _cache_size_from_env(DEFAULT_CACHE_SIZE) if self._fixed_env is None else DEFAULT_CACHE_SIZE
            )

    @property
    def config(self) -> OvkitConfig:
        self._refresh()
        return self._config

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @property
    def plans_made(self) -> int:
        """How many graph plans (policy check, structure key, input slots) this engine made."""
        return self._plans_made

    def resize(self, maxsize: int) -> None:
        """Change the LRU bound (evicting the least recently used entries if needed)."""
        if maxsize < 1:
            raise ValueError(f"maxsize={maxsize} is not valid (expected >= 1)")
        with self._lock:
            self._maxsize = maxsize
            self._evict()

    def selected_device(self) -> str:
        """The device ``GGML_OPENVINO_DEVICE`` selects on this engine's Core (resolved once per value)."""
        self._refresh()
        if self._device is None:
            from ovkit.selection import FALLBACK_WARNING, resolve_device

            selection = resolve_device(self.core, self._fixed_env, log=False)
            if selection.fell_back:  # once per value: the resolution is kept until it changes
                logger.warning(FALLBACK_WARNING.format(selection.requested or selection.device))
                if selection.hint:
                    logger.info("hint: %s", selection.hint)
            self._device = selection.device
        return self._device

    # -- the cache --------------------------------------------------------------------------
    def _evict(self) -> None:
        while len(self._entries) > self._maxsize:
            self._entries.popitem(last=False)
            self._counters.evictions += 1
            self._generation += 1

    def stats(self) -> CacheStats:
        """Hits, misses, evictions, compiles and compile time so far."""
        c = self._counters
        return CacheStats(
            c.hits,
            c.misses,
            c.evictions,
            c.compiles,
            c.compile_seconds,
            len(self._entries),
            self._maxsize,
            not self.config.disable_cache,
        )

    def clear(self) -> None:
        """Drop every compiled graph (counters are kept; see ``reset_stats``)."""
        with self._lock:
            self._entries.clear()
            self._epoch += 1
            self._generation += 1
            self.last_runner = None  # it would keep the last compiled model (and its memory) alive

    def reset_stats(self) -> None:
        with self._lock:
            self._counters = _Counters()

    def entries(self) -> list[CompiledGraph]:
        """Cached graphs, least recently used first."""
        with self._lock:
            return list(self._entries.values())

    def table(self) -> pd.DataFrame:
        """The cache as a table: one row per compiled graph."""
        import pandas as pd

        rows = [
            {
                "structure": str(e.key.structure)[:16],
                "device": e.device,
                "inputs": ", ".join(p.name for p in e.inputs),
                "outputs": ", ".join(p.name for p in e.outputs),
                "stateful": e.stateful,
                "precision": e.effective.inference_precision,
                "compile_ms": round(e.compile_seconds * 1e3, 3),
                "runs": e.runs,
            }
            for e in self.entries()
        ]
        return pd.DataFrame(rows)

    def compiled(
        self,
        structure: Hashable,
        factory: ModelFactory,
        device: str | None = None,
        run_config: RunConfig | None = None,
        *,
        states: Mapping[str, str] | None = None,
        stateful: bool | None = None,
        dynamic: Mapping[str, Iterable[int]] | None = None,
    ) -> CompiledGraph:
        """The compiled graph for ``structure`` on ``device``: from the cache, or compiled now.

        ``factory()`` builds the ``openvino.Model`` (called on a miss only).  ``states`` maps a
        state input name to the output holding its next value; ``stateful=None`` follows
        ``GGML_OPENVINO_STATEFUL_EXECUTION`` (always off on the NPU class).
        """
        self._refresh()
        return self._lookup(structure, factory, device, run_config, states, stateful, dynamic)

    def _lookup(
        self,
        structure: Hashable,
        factory: ModelFactory,
        device: str | None,
        run_config: RunConfig | None,
        states: Mapping[str, str] | None = None,
        stateful: bool | None = None,
        dynamic: Mapping[str, Iterable[int]] | None = None,
    ) -> CompiledGraph:
        cfg = self._config
        dev = device or self._device or self.selected_device()
        run = run_config or DEFAULT_RUN_CONFIG
        # Fast path: the same request as before maps straight to its key (no sorting/hashing work).
        fast = (
            structure,
            dev,
            run,
            stateful,
            tuple(states.items()) if states else (),
            tuple((n, tuple(a)) for n, a in dynamic.items()) if dynamic else (),
        )
        key = self._fast.get(fast)
        if key is None:
            key = self._make_key(structure, dev, run, cfg, states, stateful, dynamic)
            if len(self._fast) > 4096:
                self._fast.clear()
            self._fast[fast] = key
        with self._lock:
            if not cfg.disable_cache:
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries.move_to_end(key)
                    self._hit(dev)
                    return entry
            self._counters.misses += 1
            self.last_hit = False
            from ovkit import weight_release

            # Once host weights were released there is nothing left to compile
            # from; WeightsReleasedError carries upstream's message and is not wrapped.
            weight_release.before_compile(dev)
            props = compile_properties(run, device_class(dev), cfg)
            entry = self._compile(key, factory, run, props, dict(states or {}), dict(key.dynamic))
            if not cfg.disable_cache:
                self._entries[key] = entry
                self._evict()
            return entry

    def _hit(self, device: str) -> None:
        """Count a cache hit (under the lock: threads computing at once each count); with
        GGML_OPENVINO_RELEASE_WEIGHTS the first hit releases the host weights."""
        with self._lock:
            self._counters.hits += 1
        self.last_hit = True
        cfg = self._config
        if cfg.memory_optimize or cfg.release_weights_explicit:
            from ovkit import weight_release

            weight_release.on_cache_hit(device, cfg)

    def _make_key(
        self,
        structure: Hashable,
        dev: str,
        run: RunConfig,
        cfg: OvkitConfig,
        states: Mapping[str, str] | None,
        stateful: bool | None,
        dynamic: Mapping[str, Iterable[int]] | None,
    ) -> CacheKey:
        dclass = device_class(dev)
        want_stateful = cfg.stateful_execution if stateful is None else stateful
        props = compile_properties(run, dclass, cfg)
        return CacheKey(
            structure=structure,
            device=dev,
            core_id=id(self.core),
            properties=tuple(sorted((k, str(v)) for k, v in props.items())),
            stateful=bool(states) and want_stateful and dclass != DeviceClass.NPU,
            states=tuple(sorted((states or {}).items())),
            dynamic=tuple(
                sorted((n, tuple(sorted({int(a) for a in axes}))) for n, axes in (dynamic or {}).items())
            ),
        )

    def _compile(
        self,
        key: CacheKey,
        factory: ModelFactory,
        run: RunConfig,
        props: dict[str, Any],
        states: dict[str, str],
        dynamic: dict[str, tuple[int, ...]],
    ) -> CompiledGraph:
        t_conv = time.perf_counter()
        model = _model_from(factory())
        _apply_dynamic(model, dynamic)
        specs = _state_specs(model, states)
        variables = _make_stateful(model, states) if key.stateful else {}
        t0 = time.perf_counter()
        self._pending_times = {"Graph conversion time": t0 - t_conv}
        try:
            compiled = self.core.compile_model(model, key.device, props)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()
            raise EngineError(f"compile_model failed on {key.device}: {first[-1] if first else exc}") from exc
        seconds = time.perf_counter() - t0
        self._counters.compiles += 1
        self._counters.compile_seconds += seconds
        self._pending_times["Graph compile time"] = seconds
        return CompiledGraph(
            key,
            compiled,
            self.core,
            run_config=run,
            states=states,
            stateful=key.stateful,
            variables=variables,
            state_specs=specs,
            compile_seconds=seconds,
        )

    # -- running ----------------------------------------------------------------------------
    def run(
        self,
        structure: Hashable,
        factory: ModelFactory,
        inputs: Mapping[str, Any] | Sequence[Any],
        device: str | None = None,
        run_config: RunConfig | None = None,
        *,
        dynamic: Mapping[str, Iterable[int]] | None = None,
        copy: bool = True,
    ) -> list[np.ndarray]:
        """Run ``structure`` (compiled on a miss) with ``inputs``; returns the outputs."""
        graph = self.compiled(structure, factory, device, run_config, dynamic=dynamic)
        runner = graph.runner
        self.last_runner = runner
        t0 = time.perf_counter()
        outputs = runner.run(inputs, copy=copy)
        if self._config.profiling:
            self.log_profile(time.perf_counter() - t0, runner.last_infer_seconds)
        return outputs

    def log_profile(self, inference_seconds: float, raw_seconds: float) -> None:
        """Upstream's GGML_OPENVINO_PROFILING lines: conversion and compile time on a miss,
        then the graph inference time and OpenVINO's raw infer time."""
        lines = ["GGML OpenVINO Backend: "]
        times = {
            **self._pending_times,
            "Graph inference time": inference_seconds,
            "OV raw infer time": raw_seconds,
        }
        lines += [f"  - {name}: {seconds * 1e3:.3f} ms" for name, seconds in times.items()]
        self._pending_times = {}
        logger.info("\n".join(lines))

    def run_report(
        self,
        structure: Hashable,
        factory: ModelFactory,
        inputs: Mapping[str, Any] | Sequence[Any],
        device: str | None = None,
        run_config: RunConfig | None = None,
        *,
        dynamic: Mapping[str, Iterable[int]] | None = None,
    ) -> RunReport:
        """Like ``run``, with the cache outcome, times, effective config and per-node profile."""
        before = self._counters.compile_seconds
        outputs = self.run(structure, factory, inputs, device, run_config, dynamic=dynamic)
        runner = self.last_runner
        assert runner is not None
        return RunReport(
            outputs=outputs,
            cache_hit=self.last_hit,
            compile_seconds=self._counters.compile_seconds - before,
            infer_seconds=runner.last_infer_seconds,
            effective=runner.graph.effective,
            profile=runner.profile() if runner.profiling else None,
        )

    def last_profile(self) -> pd.DataFrame:
        """Per-node timings of the last ``run`` (``ProfilingOffError`` if profiling was off)."""
        if self.last_runner is None:
            raise ProfilingOffError("nothing has run on this engine yet")
        return self.last_runner.profile()

    def session(
        self,
        structure: Hashable,
        factory: ModelFactory,
        device: str | None = None,
        run_config: RunConfig | None = None,
        *,
        states: Mapping[str, str] | None = None,
        stateful: bool | None = None,
        dynamic: Mapping[str, Iterable[int]] | None = None,
    ) -> Session:
        """A request of its own (own state, e.g. one KV cache per conversation).

        The compiled model is shared through the cache; state inputs need not be passed to
        ``run`` (they are variables when stateful, else fed back by the session).
        """
        graph = self.compiled(
            structure, factory, device, run_config, states=states, stateful=stateful, dynamic=dynamic
        )
        return graph.new_runner()

    # -- convenience for plain openvino.Model objects --------------------------------------
    def run_model(
        self,
        model: Any,
        inputs: Mapping[str, Any] | Sequence[Any],
        device: str | None = None,
        run_config: RunConfig | None = None,
        **kw: Any,
    ) -> list[np.ndarray]:
        """Run an ``openvino.Model`` (keyed by ``model_structure_key``; a clone is compiled).

        The key is computed once per model object (and its input shapes), like upstream keys a
        graph by identity: constants are not re-hashed on every call, and a model whose host
        weights were released (GGML_OPENVINO_RELEASE_WEIGHTS) keeps hitting its compiled model."""
        shapes = tuple(str(p.get_partial_shape()) for p in model.inputs)
        cached = self._model_keys.get(id(model))
        if cached is None or cached[0]() is not model or cached[1] != shapes:
            if len(self._model_keys) >= 64:
                self._model_keys.clear()
            cached = (weakref.ref(model), shapes, model_structure_key(model))
            self._model_keys[id(model)] = cached
        return self.run(cached[2], model.clone, inputs, device, run_config, **kw)

    # -- graph plans ------------------------------------------------------------------------
    def plan(
        self,
        graph: GraphIR,
        outputs: Sequence[Tensor],
        device: str | None = None,
        config: Mapping[str, Any] | RunConfig | None = None,
        *,
        extra: Sequence[Tensor] = (),
        names: Sequence[str] | None = None,
    ) -> GraphPlan:
        """The plan of computing ``outputs`` (and state outputs ``extra``) of ``graph`` on
        ``device``: policy check, structure key and input slots, made once and reused.

        Plans live on the graph (``graph.derived``), never in the engine: a graph the caller drops
        takes its plans, constants and last inputs with it.  The key holds the output identities
        (the plan holds the outputs, so the ids stay valid), the graph's node count and edit
        version (an in-place edit such as ``soft_max_add_sinks`` makes a new plan), this engine
        and its configuration epoch (plans made before the configuration changed are not reused).
        """
        self._refresh()
        outs = tuple(outputs)
        ids = id(outs[0]) if len(outs) == 1 and not extra else (tuple(map(id, outs)), tuple(map(id, extra)))
        key = (
            _PLAN,
            id(self),
            self._epoch,
            graph.version,
            len(graph.nodes),
            ids,
            device,
            _config_key(config),
        )
        plans = graph.derived
        plan: GraphPlan | None = plans.get(key)
        if plan is None:
            dev = device or self._device or self.selected_device()
            run = _resolve_run(config, graph, [*outs, *extra], dev)
            plan = GraphPlan(graph, outs, dev, run, extra_outputs=extra, names=names)
            plan.check_support()
            if len(plans) >= MAX_PLANS_PER_GRAPH:
                plans.clear()
            plans[key] = plan
            self._plans_made += 1
        return plan

    def compiled_for(self, plan: GraphPlan) -> CompiledGraph:
        """The compiled model of ``plan``: the one it used last while nothing was evicted or
        reconfigured since (no key lookup), else from the cache or compiled now."""
        hot = plan.hot
        compiled = hot[1]() if hot is not None and hot[0] == self._generation else None
        if compiled is not None:  # still cached: refresh its LRU position and count the hit
            try:
                self._entries.move_to_end(compiled.key)
            except KeyError:  # evicted by another thread meanwhile: look it up properly
                compiled = None
        if compiled is not None:
            self._hit(plan.device)
            return compiled
        compiled = self._lookup(plan.structure, plan.factory, plan.device, plan.run)
        # A weak reference: a plan must not keep an evicted or cleared model (and its device
        # memory) alive.
        plan.hot = None if self._config.disable_cache else (self._generation, weakref.ref(compiled))
        return compiled

    def run_plan(
        self, plan: GraphPlan, inputs: Mapping[str, Any], *, out: Sequence[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """Run ``plan`` once: bind ``inputs``, infer, convert the outputs (``out``: write into
        these arrays instead, zero-copy)."""
        runner = self.compiled_for(plan).runner
        self.last_runner = runner
        if out is not None:
            return runner.run(plan.feed(inputs), out=out)
        if not self._config.profiling:
            return plan.results(runner.run(plan.feed(inputs)))
        t0 = time.perf_counter()
        outputs = plan.results(runner.run(plan.feed(inputs)))
        self.log_profile(time.perf_counter() - t0, runner.last_infer_seconds)
        return outputs


# ---------------------------------------------------------------------------------------------
# Process-wide engines (one per Core).
# ---------------------------------------------------------------------------------------------
_ENGINES: dict[int, Engine] = {}
_DEFAULT_ENGINE: list[Engine] = []  # the engine of the process-wide Core, once made
_ENGINES_LOCK = threading.Lock()


def get_engine(core: Any = None) -> Engine:
    """The process-wide engine for ``core`` (default: the process-wide OpenVINO Core)."""
    if core is None and _DEFAULT_ENGINE:
        return _DEFAULT_ENGINE[0]
    real = get_core(core)
    engine = _ENGINES.get(id(real))
    if engine is None:
        with _ENGINES_LOCK:
            engine = _ENGINES.get(id(real))
            if engine is None:
                engine = Engine(real)
                _ENGINES[id(real)] = engine
    if core is None and not _DEFAULT_ENGINE:
        _DEFAULT_ENGINE.append(engine)
    return engine


def run_model(
    model: Any,
    inputs: Mapping[str, Any] | Sequence[Any],
    device: str | None = None,
    core: Any = None,
    run_config: RunConfig | None = None,
    *,
    config: Mapping[str, Any] | None = None,
) -> list[np.ndarray]:
    """Run an ``openvino.Model`` through the process-wide engine of ``core``; ``config`` takes raw
    OpenVINO compile properties instead of a RunConfig."""
    run = run_config if run_config is not None else run_config_from(config)
    return get_engine(core).run_model(model, inputs, device, run)


# ---------------------------------------------------------------------------------------------
# ovkit.graph.Graph through the engine: a cached plan per (outputs, device, config).
# ---------------------------------------------------------------------------------------------
def _value_digest(value: Any) -> str:
    """Bytes of a constant (numpy array or quantized weight) for the structure key."""
    if value is None:
        return ""
    if isinstance(value, np.ndarray):
        return hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
    digest = getattr(value, "digest", None)  # quantized weights: blocks + type + shape + form
    if isinstance(digest, str):
        return digest
    for attr in ("raw", "blocks", "data"):
        raw = getattr(value, attr, None)
        if isinstance(raw, bytes | bytearray | memoryview):
            return hashlib.sha256(bytes(raw)).hexdigest() + ":" + str(getattr(value, "form", ""))
        if isinstance(raw, np.ndarray):
            return hashlib.sha256(np.ascontiguousarray(raw).tobytes()).hexdigest()
    return f"object:{id(value)}"  # unknown value type: equal only to itself


def graph_structure_key(graph: Any, outputs: Sequence[Any]) -> str:
    """A digest of what ``outputs`` compute: per node op, sub-op, ne, nb, dtype, view offset,
    params, wiring, input names and constant bytes (generated ids are not part of it)."""
    nodes = graph.topo(list(outputs))
    pos = {t.id: i for i, t in enumerate(nodes)}
    h = hashlib.sha256()
    for t in nodes:
        srcs = tuple(-1 if s is None else pos[s.id] for s in t.srcs)
        view = -1 if t.view_src is None else pos[t.view_src.id]
        params = sorted((k, repr(v)) for k, v in (t.params or {}).items())
        name = t.name if t.is_input else ""
        h.update(
            repr(
                (t.op, t.sub_op, t.ne, t.nb, t.dtype, t.view_offs, params, srcs, view, t.is_input, name)
            ).encode()
        )
        if t.value is not None:
            h.update(_value_digest(t.value).encode())
    h.update(repr([pos[o.id] for o in outputs]).encode())
    return h.hexdigest()


class _InputSlot:
    """One graph input: how a fed array becomes the model's 4-D Parameter value."""

    __slots__ = ("alt_shapes", "dtype", "gdtype", "last", "name", "param_shape", "shape")

    def __init__(self, leaf: Any) -> None:
        self.name: str = leaf.name
        self.gdtype: str = leaf.dtype
        self.dtype = np.dtype(NUMPY_DTYPE[leaf.dtype])
        self.shape: tuple[int, ...] = tuple(leaf.shape)
        self.param_shape: tuple[int, ...] = tuple(reversed(leaf.ne))
        # (caller's array, its Parameter view): one attribute, so threads swap it atomically
        self.last: tuple[Any, Any] = (None, None)
        # Other numpy shapes of the same ggml tensor (e.g. (1, 512) for ne [512, 1, 1, 1]),
        # learnt when Graph's own input checks accepted them.
        self.alt_shapes: set[tuple[int, ...]] = set()

    def convert(self, value: Any) -> np.ndarray | None:
        """The Parameter view of ``value`` (same memory when possible); None → slow path."""
        last = self.last
        if value is last[0]:
            view: np.ndarray = last[1]
            return view
        if (
            type(value) is not np.ndarray
            or value.dtype != self.dtype
            or (value.shape != self.shape and value.shape not in self.alt_shapes)
            or self.gdtype == "bf16"
            or not value.flags.c_contiguous
        ):
            return None
        view = value.reshape(self.param_shape)
        self.last = (value, view)
        return view


class GraphPlan:
    """What one ``Graph.compute`` signature needs on every call after the first."""

    def __init__(
        self,
        graph: Any,
        outputs: Sequence[Any],
        device: str,
        run: RunConfig,
        *,
        extra_outputs: Sequence[Any] = (),
        names: Sequence[str] | None = None,
    ) -> None:
        self.graph = graph
        self.outputs = tuple(outputs)  # strong refs: ids in the plan key stay valid
        self.extra_outputs = tuple(extra_outputs)
        self.every = [*self.outputs, *self.extra_outputs]  # what the model computes
        self.device = device
        self.run = run
        leaves = graph.inputs_of(self.every)
        self.slots = [_InputSlot(t) for t in leaves]
        self.input_names = [t.name for t in leaves]
        self.known = {t.name for t in graph.nodes if t.is_input}
        self.output_names = list(names) if names else [f"output{i}" for i in range(len(self.outputs))]
        # (engine generation, weak reference to the compiled graph)
        self.hot: tuple[int, weakref.ref[CompiledGraph]] | None = None
        self.structure = graph_structure_key(graph, self.every)
        self._out_specs = [
            (tuple(o.shape), None if o.dtype == "bf16" else np.dtype(NUMPY_DTYPE.get(o.dtype, np.float32)))
            for o in self.outputs
        ]

    def check_support(self) -> None:
        """Raise ``UnsupportedOpError`` for the first op the device's policy rejects."""
        self.graph.check_supported(self.every, self.device)

    def factory(self) -> Any:
        """Build the OpenVINO model (called on a compile miss only); outputs get stable names."""
        model, names = self.graph.to_model(self.every, self.input_names)
        if list(names) != self.input_names:
            raise EngineError(f"to_model returned Parameters {names}, expected {self.input_names}")
        for port, name in zip(model.outputs, self.output_names, strict=True):
            port.get_tensor().set_names({name})
        if self.extra_outputs:  # state outputs take their input's (4-D Parameter) shape
            import openvino.opset16 as ops

            params = {p.get_friendly_name(): p for p in model.get_parameters()}
            n = len(self.outputs)
            for port, name in zip(model.outputs[n:], self.output_names[n:], strict=True):
                target = params[name.split(":", 1)[1]].get_partial_shape()
                result = port.get_node()
                shaped = ops.reshape(result.input_value(0), np.array(_dims(target), np.int64), False)
                result.input(0).replace_source_output(shaped.output(0))
                result.output(0).get_tensor().set_names({name})
            model.validate_nodes_and_infer_types()
        return model

    def feed(self, inputs: Mapping[str, Any], skip: Iterable[str] = ()) -> list[np.ndarray]:
        """The Parameter values in order; any mismatch goes through Graph's own checks/errors."""
        out: list[np.ndarray] = []
        skipped = set(skip)
        try:
            for slot in self.slots:
                if slot.name in skipped:
                    continue
                view = slot.convert(inputs[slot.name])
                if view is None:
                    raise LookupError(slot.name)
                out.append(view)
        except LookupError:
            prepared = self.graph._prepare_inputs(
                self.every,
                {**{s.name: np.zeros(s.shape, s.dtype) for s in self.slots if s.name in skipped}, **inputs},
            )
            for s in self.slots:  # accepted: remember the spelling of each shape for the fast path
                if s.name in inputs and len(s.alt_shapes) < 8:
                    s.alt_shapes.add(tuple(np.shape(inputs[s.name])))
            return [prepared[s.name] for s in self.slots if s.name not in skipped]
        if len(inputs) > len(out):
            unknown = sorted(set(inputs) - self.known)
            if unknown:
                raise GraphError(
                    f"compute: unknown inputs {unknown}; this graph's inputs are {sorted(self.known)}"
                )
        return out

    def results(self, raw: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Model outputs in each output Tensor's numpy shape and dtype."""
        if len(raw) == 1:
            (shape, dtype), r = self._out_specs[0], raw[0]
            return [r.reshape(shape) if r.dtype == dtype else from_model_output(self.outputs[0], r)]
        return [
            r.reshape(shape) if r.dtype == dtype else from_model_output(o, r)
            for o, r, (shape, dtype) in zip(self.outputs, raw, self._out_specs, strict=False)
        ]


def _config_key(config: Mapping[str, Any] | RunConfig | None) -> Hashable:
    if config is None or isinstance(config, RunConfig):
        return config
    return tuple(sorted((str(k), str(v)) for k, v in config.items()))


def _resolve_run(
    config: Mapping[str, Any] | RunConfig | None, graph: Any, outs: Sequence[Any], device: str
) -> RunConfig:
    """The RunConfig of a plan: the caller's, else ovkit's default for the graph's size (the
    thread count is a CPU-plugin property: other device classes get the plain default)."""
    if isinstance(config, RunConfig):
        return config
    if config is not None:
        return run_config_from(config, GRAPH_RUN_CONFIG)
    dclass = device_class(device)
    if dclass == DeviceClass.NPU:
        return DEFAULT_RUN_CONFIG  # the NPU computes in f16 and may refuse an f32 hint: its default
    if dclass != DeviceClass.CPU:
        return GRAPH_RUN_CONFIG
    biggest = max((int(np.prod(t.ne)) for t in graph.topo(list(outs))), default=0)
    return GRAPH_TINY_RUN_CONFIG if biggest < TINY_ELEMENTS else GRAPH_RUN_CONFIG


_PLAN = "ovkit.engine.plan"  # the tag of the engine's entries in ``graph.derived``
MAX_PLANS_PER_GRAPH = 64  # output sets x devices x configs one graph keeps plans for


def compute_graph(
    graph: Any,
    outputs: Sequence[Any],
    inputs: Mapping[str, Any],
    device: str | None = None,
    *,
    core: Any = None,
    config: Mapping[str, Any] | RunConfig | None = None,
    out: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """``Graph.compute``'s device path: structure-keyed compile cache, reused request.

    ``out``: arrays (one per output, the output Tensor's numpy shape and dtype) that OpenVINO
    writes into directly instead of returning copies.

    The policy check, the structure key and the OpenVINO model are computed once per
    (outputs, device, config); every later call only binds, infers and converts the outputs.
    Plans are keyed by the outputs' identities, the graph's node count and its edit version, so
    an in-place edit after a compute (``set_name``, ``*_add_sinks``, ``*_set_prec``) is seen.
    """
    engine = get_engine(core)
    return engine.run_plan(engine.plan(graph, outputs, device, config), inputs, out=out)


class GraphSession:
    """A ``Graph`` with state: each state input is fed from the output that holds its next value
    (OpenVINO variables when stateful, host round-trip otherwise), e.g. a KV cache."""

    def __init__(self, plan: GraphPlan, runner: Runner, states: Mapping[str, str]) -> None:
        self.plan = plan
        self.runner = runner
        self.states = dict(states)

    @property
    def stateful(self) -> bool:
        return self.runner.graph.stateful

    @property
    def effective(self) -> EffectiveConfig:
        return self.runner.graph.effective

    def compute(self, inputs: Mapping[str, Any] | None = None) -> list[np.ndarray]:
        """Run once with the non-state inputs; states advance."""
        feed = self.plan.feed(inputs or {}, skip=self.states)
        return self.plan.results(self.runner.run(feed))

    def state(self, name: str) -> np.ndarray:
        """The current value of state ``name`` in the input's numpy shape."""
        slot = next(s for s in self.plan.slots if s.name == name) if name in self.states else None
        value = self.runner.state(name)
        return value.reshape(slot.shape) if slot is not None else value

    def set_state(self, name: str, value: Any) -> None:
        arr = np.asarray(value)
        slot = next((s for s in self.plan.slots if s.name == name), None)
        if slot is not None and arr.shape == slot.shape:
            arr = arr.reshape(slot.param_shape)
        self.runner.set_state(name, arr)

    def reset_state(self, name: str | None = None) -> None:
        self.runner.reset_state(name)

    def profile(self) -> pd.DataFrame:
        return self.runner.profile()


def graph_session(
    graph: Any,
    outputs: Any,
    states: Mapping[str, Any],
    device: str | None = None,
    *,
    core: Any = None,
    config: Mapping[str, Any] | RunConfig | None = None,
    stateful: bool | None = None,
) -> GraphSession:
    """A stateful run of ``graph``: ``states`` maps a state input's name to the Tensor holding its
    next value (e.g. ``{"cache_k": g.set_rows(cache_k, k_new, pos)}``).  ``stateful=None``
    follows ``GGML_OPENVINO_STATEFUL_EXECUTION`` (forced off on the NPU class)."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    engine = get_engine(core)
    state_names = list(states)
    extra = [states[n] for n in state_names]
    names = [f"output{i}" for i in range(len(outs))]
    out_names = [f"state:{n}" for n in state_names]
    plan = engine.plan(graph, outs, device, config, extra=extra, names=names + out_names)
    missing = [n for n in state_names if n not in plan.input_names]
    if missing:
        raise InputError(
            f"states {missing} are not inputs the outputs depend on (inputs: {plan.input_names})"
        )
    for name, nxt in zip(state_names, extra, strict=True):
        slot = next(s for s in plan.slots if s.name == name)
        if tuple(nxt.shape) != slot.shape or nxt.dtype != slot.gdtype:
            raise InputError(
                f"state {name!r}: its next value has shape {tuple(nxt.shape)} {nxt.dtype}, "
                f"expected the input's {slot.shape} {slot.gdtype}"
            )
    mapping = dict(zip(state_names, out_names, strict=True))
    runner = engine.session(
        plan.structure, plan.factory, plan.device, plan.run, states=mapping, stateful=stateful
    )
    return GraphSession(plan, runner, mapping)
