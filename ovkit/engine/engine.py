"""The engine: a bounded LRU of compiled graphs per Core, its statistics, the process-wide engines,
and the graph entry points through them (``compute_graph``, ``Graph.compute``'s device path, and
``graph_session``)."""

from __future__ import annotations

import itertools
import logging
import operator
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
from ovkit.dtypes import NUMPY_DTYPE
from ovkit.escape import html_text
from ovkit.ir import GraphIR, Tensor
from ovkit.runtime import Core, get_core, is_simulated

if TYPE_CHECKING:
    import pandas as pd
from ovkit.engine.blob_cache import BlobCache, BlobEntry
from ovkit.engine.errors import EngineError, InputError, ProfilingOffError
from ovkit.engine.keys import CacheKey, model_structure_key
from ovkit.engine.ov_model import (
    ModelFactory,
    apply_dynamic,
    make_stateful,
    model_from,
    share_constants,
    state_specs,
)
from ovkit.engine.plan import (
    MAX_PLANS_PER_GRAPH,
    PLAN_TAG,
    GraphPlan,
    GraphSession,
    config_key,
    plan_run_config,
)
from ovkit.engine.run_config import (
    DEFAULT_RUN_CONFIG,
    EffectiveConfig,
    RunConfig,
    compile_properties,
    run_config_from,
)
from ovkit.engine.runner import CompiledGraph, Runner, Session

logger = logging.getLogger("ovkit")

ENV_CACHE_SIZE = "OVKIT_ENGINE_CACHE_SIZE"
DEFAULT_CACHE_SIZE = 64
# The variables the engine depends on: when one changes, the configuration is read again.  Every
# variable of the backend's table, so that none the engine (or a hook it calls, such as the weight
# release on a cache hit) reads can be missed when the table grows, and ovkit's own cache size.
ENGINE_ENV: tuple[str, ...] = (*(v.env_name for v in ENV_VARS), ENV_CACHE_SIZE)


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
        return f"<code>{html_text(self)}</code>"

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
# The engine.
# ---------------------------------------------------------------------------------------------
_ENGINE_SERIALS = itertools.count()
_ENV_DATA: dict[Any, Any] | None = getattr(os.environ, "_data", None)
_ENV_KEYS: tuple[Any, ...] = (
    tuple(os.environ.encodekey(n) for n in ENGINE_ENV) if _ENV_DATA is not None else ENGINE_ENV
)


# Up to this many variables in the whole environment, the engine keeps a copy of it and compares
# that first (one C-level dict comparison, about a third of the cost per entry of the lookups of
# its own variables); a larger environment is not copied.
ENV_COPY_MAX = 3 * len(ENGINE_ENV)


def _env_snapshot(data: Mapping[Any, Any] | None = None) -> tuple[Any, ...]:
    """The engine's variables in ``data`` (default: the environment), cheaply: CPython's
    ``os.environ`` keeps its encoded data in ``_data``, which is read directly because this runs
    on every call."""
    if data is None:
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
        *,
        core: Core | None = None,
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
        self._env_seen: dict[Any, Any] | None = None  # the environment at the last check (a copy)
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
        self._blobs: BlobCache | None = None
        # Its Express in ``graph.derived``: a serial, never reused (an id is, once an engine is
        # gone), in a str (hashed once).
        self.express_tag = f"{EXPRESS_TAG}:{next(_ENGINE_SERIALS)}"

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
            data = _ENV_DATA
            if data is not None and data == self._env_seen:
                return  # the whole environment is as it was at the last check
            # The copy first, the engine's variables read from it: a change made meanwhile by
            # another thread differs from the copy and is seen by the next call.
            seen = dict(data) if data is not None and len(data) <= ENV_COPY_MAX else None
            snap = _env_snapshot(seen)
            if snap == self._snapshot:
                self._env_seen = seen
                return
            self._snapshot = snap
            self._config = read_config()
            self._env_seen = seen
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

            selection = resolve_device(self._fixed_env, log=False, core=self.core)
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

    def discard(self, graphs: Iterable[CompiledGraph]) -> None:
        """Drop these compiled graphs from the cache: their owner (e.g. a ``Model``) is gone, and
        the LRU would otherwise keep their memory until 64 newer graphs push them out."""
        keys = {g.key for g in graphs}
        with self._lock:
            for key in keys:
                if self._entries.pop(key, None) is not None:
                    self._generation += 1
            if self.last_runner is not None and self.last_runner.graph.key in keys:
                self.last_runner = None

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

    def _blob_cache(self) -> BlobCache | None:
        """``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR``'s blob cache (None: unset, or a simulated
        core, whose compiled models cannot be exported)."""
        path = self._config.compiled_model_cache_dir
        if not path or is_simulated(self.core):
            return None
        if self._blobs is None or str(self._blobs.directory) != path:
            self._blobs = BlobCache(path)
        return self._blobs

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
        blobs = self._blob_cache()
        fingerprint = blobs.fingerprint(key) if blobs is not None else None
        found = None
        if blobs is not None and fingerprint is not None:
            t0 = time.perf_counter()
            found = blobs.load(fingerprint, key.device, props, core=self.core)
        if found is not None:
            (compiled, entry), seconds = found, 0.0
            self._pending_times = {"Model cache import time": time.perf_counter() - t0}
        else:
            compiled, entry, seconds = self._compile_model(key, factory, props, states, dynamic)
            if blobs is not None and fingerprint is not None:
                blobs.store(compiled, fingerprint, entry)
        graph = CompiledGraph(
            key,
            compiled,
            core=self.core,
            run_config=run,
            states=states,
            stateful=key.stateful,
            variables=entry.variables,
            state_specs=entry.state_specs,
            compile_seconds=seconds,
        )
        if found is not None:  # an imported blob reports itself as loaded from a cache
            graph.effective = replace(graph.effective, loaded_from_cache=True)
        return graph

    def _compile_model(
        self,
        key: CacheKey,
        factory: ModelFactory,
        props: dict[str, Any],
        states: dict[str, str],
        dynamic: dict[str, tuple[int, ...]],
    ) -> tuple[Any, BlobEntry, float]:
        """Build the model, make its states variables when stateful, compile it: the compiled
        model, its state entry and the compile seconds."""
        t_conv = time.perf_counter()
        model = model_from(factory())
        share_constants(model)
        apply_dynamic(model, dynamic)
        specs = state_specs(model, states)
        variables = make_stateful(model, states) if key.stateful else {}
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
        return compiled, BlobEntry(variables, specs), seconds

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
        wide: Sequence[str] = (),
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
            PLAN_TAG,
            id(self),
            self._epoch,
            graph.version,
            len(graph.nodes),
            ids,
            device,
            config_key(config),
            tuple(sorted(wide)) if wide else (),  # () without a sort: this runs on every compute
        )
        plans = graph.derived
        plan: GraphPlan | None = plans.get(key)
        if plan is None:
            dev = device or self._device or self.selected_device()
            run = plan_run_config(config, graph, [*outs, *extra], dev)
            gqa = self._config.attention_manual_gqa(str(device_class(dev)))
            plan = GraphPlan(
                graph, outs, dev, run, extra_outputs=extra, names=names, wide=wide, manual_gqa=gqa
            )
            plan.require_supported()
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

    def express(
        self, plan: GraphPlan, outputs: Sequence[Tensor], device: str | None, config: RunConfig | None
    ) -> Express | None:
        """The steady-state path of a ``compute_graph`` call that just ran ``plan``, or None when
        its compiled model must go the general way on every call (see :class:`Express`)."""
        hot = plan.hot
        compiled = hot[1]() if hot is not None and hot[0] == self._generation else None
        cfg = self._config
        if (
            compiled is None
            or cfg.profiling
            or cfg.memory_optimize
            or cfg.release_weights_explicit
            or plan.extra_outputs
            or not compiled.runner.plain
        ):
            return None
        return Express(plan, outputs, device, config, compiled, self._generation)

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
# The steady-state path of ``compute_graph``.
# ---------------------------------------------------------------------------------------------
def _no_inputs(inputs: Mapping[str, Any]) -> tuple[Any, ...]:
    """The fed arrays of a graph without inputs."""
    return ()


EXPRESS_TAG = "ovkit.engine.express"  # with the engine's serial: its entry in ``graph.derived``


class Express:
    """The last ``compute_graph`` call of a graph on one engine, made runnable again with the
    fewest checks: the same outputs (by identity), device and config object, an unedited graph
    and an engine whose cache and configuration did not change since (its generation).

    Anything else (and ``out=``, profiling, weight release on hits, a disabled cache, states, bf16
    outputs) takes the general path, which records a new one.  Fed arrays that are the very
    objects of the last call reuse their Parameter views; any other feed goes through the plan
    (same checks, same errors).  It lives on the graph (``graph.derived``) and holds the compiled
    model only weakly, like the plan it wraps."""

    __slots__ = (
        "config",
        "count",
        "device",
        "direct",
        "fed",
        "generation",
        "key",
        "nodes",
        "outputs",
        "pick",
        "plan",
        "runner",
        "version",
    )

    def __init__(
        self,
        plan: GraphPlan,
        outputs: Sequence[Tensor],
        device: str | None,
        config: RunConfig | None,
        compiled: CompiledGraph,
        generation: int,
    ) -> None:
        self.plan = plan
        self.outputs = tuple(outputs)
        self.device = device
        self.config = config
        self.version = plan.graph.version
        self.nodes = len(plan.graph.nodes)
        self.generation = generation
        self.key = compiled.key
        self.runner = weakref.ref(compiled.runner)
        names = plan.input_names
        self.count = len(names)
        # The fed arrays in input order, as one tuple: a getter of one name gives the bare value,
        # of that name twice a tuple like the others (``count`` is checked separately).
        self.pick: Callable[[Mapping[str, Any]], tuple[Any, ...]] = (
            operator.itemgetter(*names, *names[:1] * (len(names) == 1)) if names else _no_inputs
        )
        # (the arrays fed last, their Parameter views): one attribute, swapped whole by threads;
        # at first an object no fed value is
        self.fed: tuple[tuple[Any, ...], list[np.ndarray]] = ((object(),), [])
        # OpenVINO's copies are the results as they are when every output's static shape and
        # dtype are the ones plan.results gives (else plan.results reshapes, converts, or rounds
        # a bf16 tensor's values, whatever the port's type).
        self.direct = all(
            t.dtype != "bf16"
            and port.is_static
            and port.shape == tuple(t.shape)
            and port.dtype == np.dtype(NUMPY_DTYPE.get(t.dtype, np.float32))
            for port, t in zip(compiled.runner.returned, plan.outputs, strict=True)
        )

    def run(
        self,
        engine: Engine,
        graph: GraphIR,
        outputs: Sequence[Tensor],
        inputs: Mapping[str, Any],
        device: str | None,
        config: Any,
    ) -> list[np.ndarray] | None:
        """The outputs, or None when this call is not the recorded one (the caller then takes
        the general path).  ``engine`` is the one whose ``express_tag`` found it.  Counts the hit
        and refreshes the LRU before the fed arrays are checked, as the general path does."""
        data = _ENV_DATA
        if data is None or data != engine._env_seen:  # Engine._refresh's first test, inline
            engine._refresh()
        mine = self.outputs
        if (
            engine._generation != self.generation
            or graph.version != self.version
            or len(graph.nodes) != self.nodes
            or config is not self.config
            or device != self.device
            or len(outputs) != len(mine)
            or (outputs[0] is not mine[0] if len(mine) == 1 else not all(map(operator.is_, outputs, mine)))
        ):
            return None
        runner = self.runner()
        if runner is None:
            return None
        try:
            engine._entries.move_to_end(self.key)
        except KeyError:  # evicted by another thread meanwhile
            return None
        lock = engine._lock
        lock.acquire()
        engine._counters.hits += 1
        lock.release()
        engine.last_hit = True
        engine.last_runner = runner
        fed = self.fed
        try:
            values: tuple[Any, ...] | None = self.pick(inputs)
        except LookupError:  # a missing input: the plan names it
            values = None
        if values is not None and len(inputs) == self.count and all(map(operator.is_, values, fed[0])):
            views = fed[1]
        else:  # other arrays (or a bad feed: the plan raises the general path's error)
            views = self.plan.feed(inputs)
            if values is not None and self._zero_copy(values, views):
                self.fed = (values, views)
        raw = runner.infer_copies(views)
        return raw if self.direct else self.plan.results(raw)

    def _zero_copy(self, values: tuple[Any, ...], views: list[np.ndarray]) -> bool:
        """True when every view is the fed array itself, reshaped (the plan's fast path): only
        then may the next call with the same arrays reuse them.  A converted copy may not: an
        in-place edit of the caller's array must reach the next run."""
        return all(
            slot.last[0] is value and slot.last[1] is view
            for slot, value, view in zip(self.plan.slots, values, views, strict=False)
        )


# ---------------------------------------------------------------------------------------------
# Process-wide engines (one per Core).
# ---------------------------------------------------------------------------------------------
_ENGINES: dict[int, Engine] = {}
_DEFAULT_ENGINE: list[Engine] = []  # the engine of the process-wide Core, once made
_ENGINES_LOCK = threading.Lock()


def get_engine(core: Core | None = None) -> Engine:
    """The process-wide engine for ``core`` (default: the process-wide OpenVINO Core)."""
    if core is None and _DEFAULT_ENGINE:
        return _DEFAULT_ENGINE[0]
    real = get_core(core)
    engine = _ENGINES.get(id(real))
    if engine is None:
        with _ENGINES_LOCK:
            engine = _ENGINES.get(id(real))
            if engine is None:
                engine = Engine(core=real)
                _ENGINES[id(real)] = engine
    if core is None and not _DEFAULT_ENGINE:
        _DEFAULT_ENGINE.append(engine)
    return engine


def run_model(
    model: Any,
    inputs: Mapping[str, Any] | Sequence[Any],
    device: str | None = None,
    run_config: RunConfig | None = None,
    *,
    core: Core | None = None,
    config: Mapping[str, Any] | None = None,
) -> list[np.ndarray]:
    """Run an ``openvino.Model`` through the process-wide engine of ``core``; ``config`` takes raw
    OpenVINO compile properties instead of a RunConfig."""
    run = run_config if run_config is not None else run_config_from(config)
    return get_engine(core).run_model(model, inputs, device, run)


def compute_graph(
    graph: GraphIR,
    outputs: Sequence[Tensor],
    inputs: Mapping[str, Any],
    device: str | None = None,
    *,
    core: Core | None = None,
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
    engine = _DEFAULT_ENGINE[0] if core is None and _DEFAULT_ENGINE else get_engine(core)
    if out is not None:
        return engine.run_plan(engine.plan(graph, outputs, device, config), inputs, out=out)
    tag = engine.express_tag
    express: Express | None = graph.derived.get(tag)
    if express is not None:
        results = express.run(engine, graph, outputs, inputs, device, config)
        if results is not None:
            return results
    plan = engine.plan(graph, outputs, device, config)
    again = plan.hot is not None  # the plan ran before: a repeated call, worth recording
    results = engine.run_plan(plan, inputs)
    # (a graph computed once records nothing; a dict config may change between calls)
    if again and (config is None or isinstance(config, RunConfig)):
        made = engine.express(plan, outputs, device, config)
        if made is not None:
            graph.derived[tag] = made
    return results


def graph_session(
    graph: GraphIR,
    outputs: Tensor | Sequence[Tensor],
    states: Mapping[str, Any],
    device: str | None = None,
    *,
    core: Core | None = None,
    config: Mapping[str, Any] | RunConfig | None = None,
    stateful: bool | None = None,
    wide: Sequence[str] = (),
) -> GraphSession:
    """A stateful run of ``graph``: ``states`` maps a state input's name to the Tensor holding its
    next value (e.g. ``{"cache_k": g.set_rows(cache_k, k_new, pos)}``).  ``stateful=None``
    follows ``GGML_OPENVINO_STATEFUL_EXECUTION`` (forced off on the NPU class).  ``wide``: f16
    inputs fed as f32 arrays holding f16 values (read without a conversion, see ``GraphPlan``)."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    engine = get_engine(core)
    state_names = list(states)
    extra = [states[n] for n in state_names]
    names = [f"output{i}" for i in range(len(outs))]
    out_names = [f"state:{n}" for n in state_names]
    plan = engine.plan(graph, outs, device, config, extra=extra, names=names + out_names, wide=wide)
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
