"""ovkit's side of compare-model and the comparison: nodes matched by (name, occurrence) among
computed f32 nodes, compared flat in ggml's memory order; a failing backend's node rebuilt as a
single-op case."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ovkit.model.compare.llama_side import Capture, run_llama
from ovkit.model.compare.records import (
    AGAINST,
    DEFAULT_THRESHOLD,
    F32_RERUN,
    NAMED,
    VIEW_OPS,
    BackendFailure,
    CompareError,
    ModelComparison,
    NodeDiff,
)
from ovkit.runtime import Core

#: The log line of the real backend naming a node it could not translate.
_NAMED_IN_LOG = re.compile(r"(?:RESHAPE|node) (?:node )?'([^']+)'")
#: The log line of an OpenVINO exception naming the OpenVINO op that threw.
_OV_NODE = re.compile(r"Node (\S+) of type (\w+)")


def node_key(name: str, seen: dict[str, int]) -> tuple[str, int]:
    """(name, k): the k-th computed f32 node of that name in graph order (``seen`` counts); not
    keyed by op, which the CPU and OpenVINO builds of llama-cpp-python number differently."""
    k = seen.get(name, 0)
    seen[name] = k + 1
    return name, k


def run_ovkit(
    path: str | os.PathLike[str],
    tokens: Sequence[int],
    *,
    flash_attn: bool = True,
    n_ctx: int = 512,
    device: str | None = None,
    core: Core | None = None,
    precision: str = "exact",
    no_requant: bool = True,
) -> tuple[dict[tuple[str, int], tuple[tuple[int, ...], np.ndarray]], np.ndarray]:
    """ovkit's graph for ``tokens`` as one batch from an empty cache, every named f32 node an
    output: {(name, k): (ne, values in ggml order)} and the logits (``no_requant``: as stored)."""
    from ovkit.engine import compute_graph
    from ovkit.model.program import step_inputs
    from ovkit.model.runner import Model

    model = Model(
        path, device=device, core=core, n_ctx=n_ctx, flash_attn=flash_attn, precision=precision,
        no_requant=no_requant,
    )  # fmt: skip
    n = len(tokens)
    shape = model.shape(n, 0)
    g, out = model.build(shape)
    seen: dict[str, int] = {}
    named = []
    for t in g.topo([out.logits]):
        if t.is_leaf or t.op.value in VIEW_OPS or t.dtype != "f32" or not NAMED.fullmatch(t.name or ""):
            continue
        named.append((node_key(t.name, seen), t))
    feed = step_inputs(model.hp, shape, np.asarray(tokens), 0, cache_rows=model.cache_rows(shape))
    results = compute_graph(
        g, [out.logits, *(t for _, t in named)], feed, model.device, core=model.core,
        config=model.run_config(n),
    )  # fmt: skip
    values = {
        key: (tuple(t.ne), np.asarray(v, np.float32).ravel())
        for (key, t), v in zip(named, results[1:], strict=True)
    }
    return values, np.asarray(results[0], np.float32).ravel()


def backend_failure(side: str, cap: Capture) -> BackendFailure:
    """The node a failed run's log names, the node it feeds (the one that threw) and its case."""
    lines = [x.strip() for x in cap.log.splitlines() if x.strip()]
    named = next((m.group(1) for x in lines if "ggml-openvino" in x and (m := _NAMED_IN_LOG.search(x))), "")
    ov = next((f"{m.group(1)} ({m.group(2)})" for x in lines if (m := _OV_NODE.search(x))), "")
    by_name = {n["name"]: n for n in cap.nodes}
    consumer = next((n for n in cap.nodes if named and named in n["srcs"]), None)
    ov_type = ov.rsplit("(", 1)[-1].rstrip(")") if ov else ""
    found_by = "log"
    if consumer is None and ov_type in OV_TO_GGML:
        found_by = "exception"
        # the log names no node: the nodes the backend translates to the OpenVINO op that threw;
        # an index "pointing to a non-existing element" is most likely among the store with the
        # most indices (the transposed V cache stores every element as a row of its own)
        ops = OV_TO_GGML[ov_type]
        cands = [n for n in cap.nodes if n["op"] in ops]
        consumer = max(cands, key=lambda n: by_name.get(n["srcs"][0], {"ne": [0, 0]})["ne"][1], default=None)
        named = consumer["srcs"][0] if consumer else ""
    node = by_name.get(named, {"op": "?", "ne": [], "type": 0, "srcs": []})
    case_op, case_params = single_op_case(consumer, by_name) if consumer else ("", "")
    evidence = tuple(
        x for x in lines
        if "ggml-openvino" in x and named and f"'{named}'" in x or "Exception" in x or " of type " in x
        or "indices value" in x or "llama_decode" in x
    )  # fmt: skip
    return BackendFailure(
        side=side, code=cap.code, node=named, node_op=str(node["op"]),
        failing_node=consumer["name"] if consumer else named, failing_op=consumer["op"] if consumer else str(node["op"]),
        ov_node=ov, case_op=case_op, case_params=case_params, log=evidence[:12], found_by=found_by,
    )  # fmt: skip


#: The OpenVINO op an exception names -> the ggml ops the backend translates to it.
OV_TO_GGML: dict[str, tuple[str, ...]] = {"ScatterUpdate": ("SET_ROWS",), "ScatterNDUpdate": ("SET_ROWS",)}

#: ggml type ids -> test-backend-ops names, for the single-op cases.
_TYPE_NAMES = {0: "f32", 1: "f16", 26: "i32", 27: "i64", 30: "bf16"}


def single_op_case(node: Mapping[str, Any], by_name: Mapping[str, Mapping[str, Any]]) -> tuple[str, str]:
    """A failing node as a test-backend-ops case: its op and params with the node's own shapes
    and types (only SET_ROWS, the KV cache store, is built here)."""
    if node["op"] != "SET_ROWS":
        return node["op"], ""
    # ggml_set_rows(a, b, c) is a view of a with src[0] = b (the rows) and src[1] = c (their ids)
    src = by_name.get(node["srcs"][0], {}) if node["srcs"] else {}
    idx = by_name.get(node["srcs"][1], {}) if len(node["srcs"]) > 1 else {}
    ne = list(node["ne"])
    r = int(src.get("ne", [0, 1])[1])
    t_src = _TYPE_NAMES.get(int(src.get("type", 0)), "f32")
    t_dst = _TYPE_NAMES.get(int(node["type"]), "f16")
    t_idx = _TYPE_NAMES.get(int(idx.get("type", 27)), "i64")
    ne_s = ",".join(map(str, ne))
    return "SET_ROWS", f"type_src={t_src},type_dst={t_dst},type_idx={t_idx},ne=[{ne_s}],nr23=[1,1],r={r},v=0"


def llama_keyed(cap: Capture) -> dict[tuple[str, int], tuple[tuple[int, ...], str, np.ndarray]]:
    """The captured values by (name, op, k), with ne and the op as ggml describes it (``SWIGLU``)."""
    seen: dict[str, int] = {}
    out = {}
    for i, n in enumerate(cap.nodes):
        if n["op"] in VIEW_OPS or n["type"] != 0 or not NAMED.fullmatch(n["name"]):
            continue
        key = node_key(n["name"], seen)
        if i in cap.values:
            out[key] = (tuple(n["ne"]), str(n["op"]), cap.values[i])
    return out


def compare_model(
    path: str | os.PathLike[str],
    tokens: Sequence[int],
    *,
    n_predict: int = 0,
    against: str = "llama.cpp",
    flash_attn: bool = True,
    n_ctx: int = 512,
    threshold: float = DEFAULT_THRESHOLD,
    device: str | None = None,
    core: Core | None = None,
    f32_rerun: bool | None = None,
    no_requant: bool = True,
) -> ModelComparison:
    """Run ``tokens`` (plus ``n_predict`` greedy tokens of llama.cpp CPU) as one batch on llama.cpp
    CPU and the ``against`` sides, node by node; ``f32_rerun``: the real backend again in f32 (by
    default only when it diverged in another precision)."""
    from ovkit.gguf import read_gguf
    from ovkit.model.arch import ModelError
    from ovkit.model.limits import check_count, check_n_ctx, model_hparams, token_ids
    from ovkit.oracle import nmse

    if against not in AGAINST:
        raise ModelError(f"against={against!r} is not one of {', '.join(AGAINST)}")
    if not (math.isfinite(threshold) and threshold > 0):
        raise ModelError(f"threshold={threshold} must be a finite NMSE > 0")
    n_predict = check_count("n_predict", n_predict)
    # the ids, the context and the batch checked against the model before llama.cpp runs
    hp = model_hparams(read_gguf(path))
    toks = token_ids(tokens, hp.n_vocab).tolist()
    if not toks:
        raise ModelError("compare_model: no tokens given")
    n_ctx = check_n_ctx(hp, n_ctx, core=core)
    if len(toks) + n_predict > n_ctx:
        raise ModelError(
            f"{len(toks)} tokens and n_predict={n_predict} make a batch of {len(toks) + n_predict}, "
            f"more than n_ctx={n_ctx}"
        )
    if n_predict:
        from ovkit.model.reference import run_reference

        ref = run_reference(path, toks, [], n_ctx=n_ctx, flash_attn=flash_attn)
        for _ in range(n_predict):  # greedy continuations, fed as part of the batch
            toks.append(int(ref.tokens[-1]))
            ref = run_reference(path, toks, [], n_ctx=n_ctx, flash_attn=flash_attn)
    base = run_llama(path, toks, flash_attn=flash_attn, n_ctx=n_ctx)
    if base.code != 0:
        raise CompareError(f"llama.cpp's CPU build failed on {path} (llama_decode {base.code})")
    ref_values = llama_keyed(base)
    sides = AGAINST[against]
    side_values: dict[str, dict[tuple[str, int], tuple[tuple[int, ...], np.ndarray]]] = {}
    failures: list[BackendFailure] = []
    precision: list[tuple[str, str]] = []
    logits_nmse: list[tuple[str, float]] = []
    logits: np.ndarray | None
    upstream_logits: np.ndarray | None = None
    for side in sides:
        if side == "ovkit":
            values, logits = run_ovkit(
                path,
                toks,
                flash_attn=flash_attn,
                n_ctx=n_ctx,
                device=device,
                core=core,
                no_requant=no_requant,
            )
            precision.append((side, "f32 (exact)" + ("" if no_requant else ", backend's requantization")))
        else:
            cap = run_llama(path, toks, upstream=True, flash_attn=flash_attn, n_ctx=n_ctx)
            precision.append((side, f"OpenVINO CPU default: {cap.precision}"))
            if cap.code != 0 and cap.logits is None:
                failures.append(backend_failure(side, cap))
                continue
            values = {k: (ne, v) for k, (ne, _, v) in llama_keyed(cap).items()}
            logits = cap.logits
        side_values[side] = values
        if side == "upstream":
            upstream_logits = logits
        if base.logits is not None and logits is not None and logits.size == base.logits.size:
            logits_nmse.append((side, float(nmse(logits, base.logits))))

    def comparison() -> ModelComparison:
        return ModelComparison(
            str(path), tuple(toks), flash_attn, tuple(side_values), node_diffs(ref_values, side_values),
            threshold, tuple(failures), tuple(precision), tuple(logits_nmse),
        )  # fmt: skip

    result = comparison()
    ran_in = dict(precision).get("upstream", "")
    diverged = "upstream" in side_values and result.first_divergent("upstream") is not None
    if f32_rerun or (f32_rerun is None and diverged and not ran_in.endswith("f32")):
        # the real backend's divergence may be its precision (bf16 on AMX CPUs): run it in f32
        cap = run_llama(path, toks, upstream=True, flash_attn=flash_attn, n_ctx=n_ctx, ov_precision="f32")
        if cap.logits is not None:
            side_values[F32_RERUN] = {k: (ne, v) for k, (ne, _, v) in llama_keyed(cap).items()}
            # the backend may not take the core's precision (on an AMD EPYC with avx512_bf16 it
            # computed the same logits bit for bit at f32, bf16 and its default): say so
            same = upstream_logits is not None and np.array_equal(cap.logits, upstream_logits)
            no_effect = ", no effect: its logits equal the default run's bit for bit" if same else ""
            precision.append((F32_RERUN, f"OpenVINO CPU set to {cap.precision}{no_effect}"))
            if base.logits is not None and cap.logits.size == base.logits.size:
                logits_nmse.append((F32_RERUN, float(nmse(cap.logits, base.logits))))
            result = comparison()
    return result


def node_diffs(
    ref_values: Mapping[tuple[str, int], tuple[tuple[int, ...], str, np.ndarray]],
    side_values: Mapping[str, Mapping[tuple[str, int], tuple[tuple[int, ...], np.ndarray]]],
) -> tuple[NodeDiff, ...]:
    """The nodes every side captured, in llama.cpp CPU's graph order, with each side's NMSE."""
    from ovkit.oracle import nmse

    rows = []
    for key, (ne, desc, ref) in ref_values.items():
        if not side_values or not all(key in vals for vals in side_values.values()):
            continue
        per = []
        for s, vals in side_values.items():
            v = vals[key][1]
            per.append((s, float(nmse(v, ref)) if v.size == ref.size else math.inf))
        rows.append(NodeDiff(key[0], desc, tuple(ne), tuple(per)))
    return tuple(rows)
