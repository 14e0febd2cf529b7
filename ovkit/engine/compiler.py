"""A cache miss: the compiled graph of a key, imported from the blob cache or built and compiled."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, replace
from time import perf_counter
from typing import Any

from ovkit.engine.blob_cache import BlobCache, engine_key
from ovkit.engine.errors import EngineError
from ovkit.engine.keys import CacheKey
from ovkit.engine.ov_model import (
    ModelFactory,
    PortSpec,
    make_stateful,
    share_constants,
    state_specs,
)
from ovkit.engine.run_config import RunConfig
from ovkit.engine.runner import CompiledGraph
from ovkit.runtime import Core

logger = logging.getLogger("ovkit")

COMPILE_TIME = "Graph compile time"  # upstream's profiling line of a compile


def compile_graph(
    key: CacheKey,
    factory: ModelFactory,
    run: RunConfig,
    props: Mapping[str, Any],
    blobs: BlobCache | None,
    *,
    core: Core,
) -> tuple[CompiledGraph, dict[str, float]]:
    """The compiled graph of ``key`` and the times upstream's profiling logs: imported from
    ``blobs`` when it holds it, else built by ``factory``, compiled and stored there."""
    states = dict(key.states)
    entry_key = engine_key(key) if blobs is not None else None
    t0 = perf_counter()
    found = None
    if blobs is not None and entry_key is not None:
        found = blobs.load(entry_key, key.device, dict(props), core=core)
    if found is not None:
        compiled, blob = found.compiled, found.blob
        variables = found.extra["variables"]
        specs = {
            k: PortSpec(**{**v, "shape": tuple(v["shape"])}) for k, v in found.extra["state_specs"].items()
        }
        times = {"Model cache import time": perf_counter() - t0}
    else:
        model = factory()
        share_constants(model)
        specs = state_specs(model, states)
        variables = make_stateful(model, states) if key.stateful else {}
        t1 = perf_counter()
        try:
            compiled = core.compile_model(model, key.device, dict(props))
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()
            raise EngineError(f"compile_model failed on {key.device}: {first[-1] if first else exc}") from exc
        times = {"Graph conversion time": t1 - t0, COMPILE_TIME: perf_counter() - t1}
        blob = None
        if blobs is not None and entry_key is not None:
            extra = {"variables": variables, "state_specs": {k: asdict(v) for k, v in specs.items()}}
            blobs.store(compiled, entry_key, extra)
    graph = CompiledGraph(
        key,
        compiled,
        core=core,
        run_config=run,
        states=states,
        stateful=key.stateful,
        variables=variables,
        state_specs=specs,
        compile_seconds=times.get(COMPILE_TIME, 0.0),
        blob=blob,
    )
    if found is not None:  # an imported blob reports itself as loaded from a cache
        graph.effective = replace(graph.effective, loaded_from_cache=True)
    return graph, times


def log_profile(times: Mapping[str, float]) -> None:
    """Upstream's ``GGML_OPENVINO_PROFILING`` block: one line per time, in milliseconds."""
    lines = ["GGML OpenVINO Backend: "]
    lines += [f"  - {name}: {seconds * 1e3:.3f} ms" for name, seconds in times.items()]
    logger.info("\n".join(lines))
