"""Compile once, run many: the execution engine behind ``Graph.compute`` (docs/engine.md).

Upstream keeps one compiled graph per process and clears it on every miss; ovkit keeps a bounded
LRU of compiled models keyed by graph *structure*, each with one reusable infer request.  Inputs
are bound zero-copy when they are C-contiguous with the right dtype and kept alive by the
request's ``Runner`` (OpenVINO's request does not keep Python tensors alive); outputs are copied
out once by OpenVINO, or written into caller arrays with ``out=``.

The configuration (``GGML_OPENVINO_*`` as the backend reads it, ``OVKIT_ENGINE_CACHE_SIZE``, the
selected device) is read when an engine is made; ``Engine.reload()`` / ``reload_engines()`` read
it again after ``os.environ`` changes.

Modules: ``engine`` (the ``Engine``, the process-wide engines, ``compute_graph``,
``graph_session``), ``cache`` (the LRU and its counters), ``compiler`` (a miss: blob cache or
compile), ``plan`` (graph plans and sessions), ``runner`` (compiled graphs and their requests),
``ov_model`` (ports, dynamic dims, states), ``keys``, ``blob_cache``, ``run_config``, ``errors``;
this package re-exports their public names.
"""

from __future__ import annotations

from ovkit.engine.cache import CacheStats
from ovkit.engine.engine import (
    DEFAULT_CACHE_SIZE,
    ENV_CACHE_SIZE,
    Engine,
    RunReport,
    compute_graph,
    get_engine,
    graph_session,
    logger,
    reload_engines,
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
    "reload_engines",
    "run_config_from",
    "run_model",
]
