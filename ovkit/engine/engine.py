"""The engine: a bounded LRU of compiled graphs per Core, the process-wide engines, and the graph
entry points through them (``compute_graph``, ``graph_session``).  The configuration is read at
construction and by ``reload()`` only: no call watches ``os.environ``."""

from __future__ import annotations

import itertools
import logging
import os
import threading
import warnings
from collections.abc import Hashable, Iterable, Mapping, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit import weight_release
from ovkit.config import OvkitConfig, OvkitConfigWarning, read_config
from ovkit.devices import DeviceClass, device_class
from ovkit.ir import GraphIR, Tensor
from ovkit.runtime import Core, get_core, is_simulated

if TYPE_CHECKING:
    import pandas as pd
from ovkit.engine.blob_cache import BlobCache
from ovkit.engine.cache import CacheStats, CompiledCache
from ovkit.engine.compiler import COMPILE_TIME, compile_graph, log_profile
from ovkit.engine.errors import InputError, ProfilingOffError
from ovkit.engine.keys import CacheKey, model_structure_key
from ovkit.engine.ov_model import ModelFactory
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
    RunConfig,
    compile_properties,
    run_config_from,
)
from ovkit.engine.runner import CompiledGraph, Runner

logger = logging.getLogger("ovkit")

ENV_CACHE_SIZE = "OVKIT_ENGINE_CACHE_SIZE"
DEFAULT_CACHE_SIZE = 64
_PLAN_TAGS = itertools.count()  # one per engine and reload (an engine's id may be reused)


def cache_size(env: Mapping[str, str], default: int = DEFAULT_CACHE_SIZE) -> int:
    """The LRU size ``OVKIT_ENGINE_CACHE_SIZE`` sets; a value that is no integer >= 1 warns and
    gives ``default``."""
    raw = env.get(ENV_CACHE_SIZE, "")
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


class Engine:
    """A bounded LRU of compiled graphs on one Core (real or simulated); ``env``: the variables to
    read instead of ``os.environ`` (here and by ``reload()`` only)."""

    def __init__(
        self,
        *,
        core: Core | None = None,
        maxsize: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if maxsize is not None and maxsize < 1:
            raise ValueError(f"maxsize={maxsize} is not valid (expected >= 1)")
        self.core = get_core(core)
        self._env = env
        self._explicit_size = maxsize
        self._lock = threading.RLock()
        self._cache = CompiledCache(maxsize or DEFAULT_CACHE_SIZE)
        self._pending_times: dict[str, float] = {}  # conversion/compile times not yet logged
        self.last_runner: Runner | None = None
        self.reload()

    def __repr__(self) -> str:
        c = self._cache
        kind = "simulated" if is_simulated(self.core) else "OpenVINO"
        return (
            f"Engine({kind} core, {len(c.entries)}/{c.maxsize} compiled, hits={c.hits}, "
            f"misses={c.misses}, evictions={c.evictions}, compile={c.compile_seconds * 1e3:.1f} ms)"
        )

    # -- configuration ----------------------------------------------------------------------
    def reload(self) -> None:
        """Read ``GGML_OPENVINO_*`` and ``OVKIT_ENGINE_CACHE_SIZE`` again; compiled graphs stay cached
        (a changed configuration gives other keys), graph plans are made again."""
        source = dict(os.environ) if self._env is None else self._env
        config = read_config(source)
        size = self._explicit_size or cache_size(source)
        with self._lock:
            self._source = source
            self.config: OvkitConfig = config
            # GGML_OPENVINO_RELEASE_WEIGHTS (or MEMORY_OPTIMIZE): a cache hit may release weights
            self._release_on_hit = bool(config.memory_optimize or config.release_weights_explicit)
            self._device: str | None = None
            self._blobs: BlobCache | None = None
            self._cache.resize(size)
            # in every plan's key: the plans made before this reading are not reused
            self._plan_tag = f"{PLAN_TAG}:{next(_PLAN_TAGS)}"

    def selected_device(self) -> str:
        """The device ``GGML_OPENVINO_DEVICE`` selects on this engine's Core (once per reload)."""
        device = self._device
        if device is None:
            from ovkit.selection import fallback_message, resolve_device

            selection = resolve_device(self._source, log=False, core=self.core)
            if selection.fell_back:
                logger.warning(fallback_message(selection.requested or selection.device))
                if selection.hint:
                    logger.info("hint: %s", selection.hint)
            device = self._device = selection.device
        return device

    # -- the cache --------------------------------------------------------------------------
    def stats(self) -> CacheStats:
        """Hits, misses, evictions, compiles and compile time so far."""
        return self._cache.stats(enabled=not self.config.disable_cache)

    def clear(self) -> None:
        """Drop every compiled graph (counters are kept; see ``reset_stats``)."""
        with self._lock:
            self._cache.entries.clear()
            self.last_runner = None  # it would keep the last compiled model (and its memory) alive

    def discard(self, graphs: Iterable[CompiledGraph]) -> None:
        """Drop these compiled graphs from the cache (their owner, e.g. a ``Model``, is gone)."""
        keys = {g.key for g in graphs}
        with self._lock:
            self._cache.discard(keys)
            if self.last_runner is not None and self.last_runner.graph.key in keys:
                self.last_runner = None

    def reset_stats(self) -> None:
        with self._lock:
            self._cache.reset_counts()

    def entries(self) -> list[CompiledGraph]:
        """Cached graphs, least recently used first."""
        with self._lock:
            return list(self._cache.entries.values())

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
    ) -> CompiledGraph:
        """The compiled graph for ``structure`` on ``device``, cached or compiled now from
        ``factory()``.  ``states``: state input -> output holding its next value; ``stateful=None``
        follows ``GGML_OPENVINO_STATEFUL_EXECUTION`` (off on the NPU class)."""
        cfg = self.config
        dev = device or self.selected_device()
        run = run_config or DEFAULT_RUN_CONFIG
        dclass = device_class(dev)
        props = compile_properties(run, dclass, cfg)
        want_stateful = cfg.stateful_execution if stateful is None else stateful
        key = CacheKey(
            structure=structure,
            device=dev,
            core_id=id(self.core),
            properties=tuple(sorted((k, str(v)) for k, v in props.items())),
            stateful=bool(states) and want_stateful and dclass != DeviceClass.NPU,
            states=tuple(sorted((states or {}).items())),
        )
        with self._lock:
            if not cfg.disable_cache and (entry := self._cache.get(key)) is not None:
                if self._release_on_hit:
                    weight_release.on_cache_hit(dev, self.config)
                return entry
            self._cache.misses += 1
            weight_release.before_compile(dev)  # released host weights: upstream's error
            blobs = self._blob_cache()
            entry, self._pending_times = compile_graph(key, factory, run, props, blobs, core=self.core)
            if COMPILE_TIME in self._pending_times:
                self._cache.compiles += 1
                self._cache.compile_seconds += self._pending_times[COMPILE_TIME]
            if not cfg.disable_cache:
                self._cache.put(entry)
            return entry

    def _blob_cache(self) -> BlobCache | None:
        """``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR``'s blob cache (None: unset, or a simulated core)."""
        path = self.config.compiled_model_cache_dir
        if not path or is_simulated(self.core):
            return None
        if self._blobs is None:  # made on the first compile, not before: it makes the directory
            self._blobs = BlobCache(path)
        return self._blobs

    # -- running ----------------------------------------------------------------------------
    def run(
        self,
        structure: Hashable,
        factory: ModelFactory,
        inputs: Mapping[str, Any] | Sequence[Any],
        device: str | None = None,
        run_config: RunConfig | None = None,
    ) -> list[np.ndarray]:
        """Run ``structure`` (compiled on a miss) with ``inputs``; returns the outputs."""
        return self._run(self.compiled(structure, factory, device, run_config).runner, inputs)

    def _run(self, runner: Runner, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        """``runner`` once, the last runner; GGML_OPENVINO_PROFILING logs a miss's conversion and
        compile times, then the inference times."""
        self.last_runner = runner
        t0 = perf_counter()
        outputs = runner.run(inputs)
        if self.config.profiling:
            times = {
                **self._pending_times,
                "Graph inference time": perf_counter() - t0,
                "OV raw infer time": runner.last_infer_seconds,
            }
            self._pending_times = {}
            log_profile(times)
        return outputs

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
    ) -> Runner:
        """A request of its own state (e.g. one KV cache per conversation) on the cached compiled
        model; state inputs are not passed to ``run``."""
        return Runner(self.compiled(structure, factory, device, run_config, states=states, stateful=stateful))

    def run_model(
        self,
        model: Any,
        inputs: Mapping[str, Any] | Sequence[Any],
        device: str | None = None,
        run_config: RunConfig | None = None,
    ) -> list[np.ndarray]:
        """Run an ``openvino.Model`` (a clone is compiled), keyed by its structure digest."""
        return self.run(model_structure_key(model), model.clone, inputs, device, run_config)

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
        ``device``, made once and kept on the graph (``graph.derived``), keyed by the outputs'
        identities, the graph's size and edit version and this engine's reload."""
        outs = tuple(outputs)
        ids = id(outs[0]) if len(outs) == 1 and not extra else (tuple(map(id, outs)), tuple(map(id, extra)))
        key = (
            self._plan_tag,
            graph.version,
            len(graph.nodes),
            ids,
            device,
            config if config is None or type(config) is RunConfig else config_key(config),
            tuple(sorted(wide)) if wide else (),  # () without a sort: this runs on every compute
        )
        plans = graph.derived
        plan: GraphPlan | None = plans.get(key)
        if plan is None:
            dev = device or self.selected_device()
            run = plan_run_config(config, graph, [*outs, *extra], dev)
            gqa = self.config.attention_manual_gqa(str(device_class(dev)))
            plan = GraphPlan(
                graph, outs, dev, run, extra_outputs=extra, names=names, wide=wide, manual_gqa=gqa
            )
            plan.require_supported()
            if len(plans) >= MAX_PLANS_PER_GRAPH:
                plans.clear()
            plans[key] = plan
            self._cache.plans += 1
        return plan

    def compiled_for(self, plan: GraphPlan) -> CompiledGraph:
        """The compiled model of ``plan``: by its last cache key, else cached or compiled now."""
        if plan.cache_key is not None:
            with self._lock:
                compiled = self._cache.get(plan.cache_key)
            if compiled is not None:
                if self._release_on_hit:
                    weight_release.on_cache_hit(plan.device, self.config)
                return compiled
        compiled = self.compiled(plan.structure, plan.factory, plan.device, plan.run)
        # (with the cache off, plans made since the reload that turned it off never look there)
        plan.cache_key = None if self.config.disable_cache else compiled.key
        return compiled

    def run_plan(self, plan: GraphPlan, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        """Run ``plan`` once."""
        return plan.results(self._run(self.compiled_for(plan).runner, plan.feed(inputs)))


# -- process-wide engines (one per Core) --------------------------------------------------------
_ENGINES: dict[int, Engine] = {}
_DEFAULT_ENGINE: list[Engine] = []  # the engine of the process-wide Core, once made
_ENGINES_LOCK = threading.Lock()


def get_engine(core: Core | None = None) -> Engine:
    """The process-wide engine for ``core`` (default: the process-wide OpenVINO Core)."""
    if core is None and _DEFAULT_ENGINE:
        return _DEFAULT_ENGINE[0]
    real = get_core(core)
    engine = _ENGINES.get(id(real))
    if engine is None or (core is None and not _DEFAULT_ENGINE):
        with _ENGINES_LOCK:
            engine = _ENGINES.get(id(real))
            if engine is None:
                engine = _ENGINES[id(real)] = Engine(core=real)
            if core is None and not _DEFAULT_ENGINE:
                _DEFAULT_ENGINE.append(engine)
    return engine


def reload_engines() -> None:
    """``Engine.reload()`` of every process-wide engine: call it after changing ``os.environ``."""
    with _ENGINES_LOCK:
        engines = list(_ENGINES.values())
    for engine in engines:
        engine.reload()


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
) -> list[np.ndarray]:
    """``Graph.compute``'s device path through the plan of (outputs, device, config)."""
    engine = _DEFAULT_ENGINE[0] if core is None and _DEFAULT_ENGINE else get_engine(core)
    return engine.run_plan(engine.plan(graph, outputs, device, config), inputs)


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
    next value (``{"cache_k": g.set_rows(cache_k, k_new, pos)}``); ``stateful`` as in
    ``Engine.compiled``; ``wide``: f16 inputs fed as f32 arrays of f16 values."""
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
