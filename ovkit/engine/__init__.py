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
profiling) ← ``compute_graph``/``graph_session`` (plans of an ``ovkit.ir.GraphIR``: structure
key, policy check and Parameter order computed once per (graph, outputs, device, config)).  The
engine sits below the graph builder: it reads the IR and calls the ops layer (policy, feeds,
translation); ``Graph.compute`` is a convenience that calls ``compute_graph``.

Environment (read as the backend reads it, re-read only when one of ``ENGINE_ENV`` changes):
``GGML_OPENVINO_CACHE_DIR`` → OpenVINO ``CACHE_DIR`` + ``CACHE_MODE=OPTIMIZE_SIZE``
(``NPUW_CACHE_DIR`` on the NPU class); ``GGML_OPENVINO_DISABLE_CACHE`` → compile on every call,
store nothing; ``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR`` → compiled models exported there and
imported by later processes without translation (:mod:`ovkit.engine.blob_cache`);
``GGML_OPENVINO_STATEFUL_EXECUTION`` → state inputs become OpenVINO variables
(ReadValue/Assign, via OpenVINO's MakeStateful, as upstream), forced off for the NPU class;
``GGML_OPENVINO_PROFILING`` → upstream's per-graph timing lines on the ``ovkit`` logger.
``OVKIT_ENGINE_CACHE_SIZE`` (ovkit's own) sets the LRU size (default 64).

Modules: ``run_config`` (hints, properties, effective values), ``keys`` (cache keys, structure
digests), ``model`` (ports; dynamic dims and the stateful transformation of the model to
compile), ``runner`` (compiled graphs and their requests), ``plan`` (graph plans and sessions),
``engine`` (the LRU engine, the process-wide engines, ``compute_graph`` and ``graph_session``),
``errors``; this package re-exports their public names.
"""

from __future__ import annotations

from ovkit.engine.engine import (
    DEFAULT_CACHE_SIZE,
    ENGINE_ENV,
    ENV_CACHE_SIZE,
    CacheStats,
    Engine,
    RunReport,
    compute_graph,
    get_engine,
    graph_session,
    logger,
    run_model,
)
from ovkit.engine.errors import (
    EngineError,
    InputError,
    ProfilingOffError,
)
from ovkit.engine.keys import CacheKey, graph_structure_key, model_structure_key
from ovkit.engine.ov_model import ModelFactory, PortSpec
from ovkit.engine.plan import (
    MAX_PLANS_PER_GRAPH,
    GraphPlan,
    GraphSession,
    InputSlot,
)
from ovkit.engine.run_config import (
    CACHE_MODE_UPSTREAM,
    DEFAULT_RUN_CONFIG,
    EXECUTION_MODES,
    GRAPH_RUN_CONFIG,
    GRAPH_TINY_RUN_CONFIG,
    PERFORMANCE_HINTS,
    PRECISIONS,
    PROP_CACHE_DIR,
    PROP_CACHE_MODE,
    PROP_EXECUTION,
    PROP_NPUW_CACHE_DIR,
    PROP_PERFORMANCE,
    PROP_PRECISION,
    PROP_PROFILING,
    PROP_THREADS,
    TINY_ELEMENTS,
    EffectiveConfig,
    RunConfig,
    compile_properties,
    naive_run_config,
    run_config_from,
)
from ovkit.engine.runner import CompiledGraph, Runner, Session

__all__ = [
    "CACHE_MODE_UPSTREAM",
    "CacheKey",
    "CacheStats",
    "CompiledGraph",
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_RUN_CONFIG",
    "ENGINE_ENV",
    "ENV_CACHE_SIZE",
    "EXECUTION_MODES",
    "EffectiveConfig",
    "Engine",
    "EngineError",
    "GRAPH_RUN_CONFIG",
    "GRAPH_TINY_RUN_CONFIG",
    "GraphPlan",
    "GraphSession",
    "InputError",
    "InputSlot",
    "MAX_PLANS_PER_GRAPH",
    "ModelFactory",
    "PERFORMANCE_HINTS",
    "PRECISIONS",
    "PROP_CACHE_DIR",
    "PROP_CACHE_MODE",
    "PROP_EXECUTION",
    "PROP_NPUW_CACHE_DIR",
    "PROP_PERFORMANCE",
    "PROP_PRECISION",
    "PROP_PROFILING",
    "PROP_THREADS",
    "PortSpec",
    "ProfilingOffError",
    "RunConfig",
    "RunReport",
    "Runner",
    "Session",
    "TINY_ELEMENTS",
    "compile_properties",
    "compute_graph",
    "get_engine",
    "graph_session",
    "graph_structure_key",
    "logger",
    "model_structure_key",
    "naive_run_config",
    "run_config_from",
    "run_model",
]
