"""Compile once, run many: the execution engine behind ``Graph.compute`` (docs/engine.md).

A bounded LRU of compiled models keyed by graph *structure*, each with one reusable infer request,
inputs bound zero-copy where they can be; this package re-exports its modules' public names.
"""

from __future__ import annotations

from ovkit.engine.cache import CacheStats
from ovkit.engine.engine import (
    Engine,
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
from ovkit.engine.runner import CompiledGraph, Runner

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
    "Runner",
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
