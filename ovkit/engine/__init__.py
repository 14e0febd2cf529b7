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
    Engine,
    RunReport,
    compute_graph,
    get_engine,
    graph_session,
    logger,
    reload_engines,
    run_model,
)
from ovkit.engine.errors import EngineError, InputError, ProfilingOffError
from ovkit.engine.keys import CacheKey, model_structure_key
from ovkit.engine.plan import GraphPlan, GraphSession
from ovkit.engine.run_config import (
    DEFAULT_RUN_CONFIG,
    GRAPH_RUN_CONFIG,
    TINY_ELEMENTS,
    EffectiveConfig,
    RunConfig,
    compile_properties,
    naive_run_config,
    run_config_from,
)
from ovkit.engine.runner import CompiledGraph, Runner, Session

__all__ = [
    "CacheKey",
    "CacheStats",
    "CompiledGraph",
    "DEFAULT_RUN_CONFIG",
    "EffectiveConfig",
    "Engine",
    "EngineError",
    "GRAPH_RUN_CONFIG",
    "GraphPlan",
    "GraphSession",
    "InputError",
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
    "logger",
    "model_structure_key",
    "naive_run_config",
    "reload_engines",
    "run_config_from",
    "run_model",
]
