"""Where every node of a model's prefill and decode graph runs, per device, and why.

The backend's support policy (``ovkit.ops.policy``) gives each node a verdict per device class: a
rejected node falls back to ggml's CPU (ovkit itself runs a graph whole).  The summary counts the
nodes and the share of FLOPs and weight bytes each device keeps; ``live`` (:func:`live_support`)
adds the installed real backend's own ``supports_op``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from ovkit import quant
from ovkit.model.program import GraphShape, decoder_program, step_inputs
from ovkit.report import FrameReport
from ovkit.runtime import Core

if TYPE_CHECKING:
    import pandas as pd

    from ovkit.model.runner import Model

#: ``live(shape, start)``: that graph's ggml nodes (``op``, ``name``, ``ne``, ``supported``), as
#: :func:`live_support` asks the installed backend.
LiveSupport = Callable[[GraphShape, int], Sequence[Mapping[str, Any]]]


def _key(op: str, ne: Sequence[int]) -> tuple[str, tuple[int, ...]]:
    dims = [int(x) for x in ne]
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return op.split(".")[-1], tuple(dims)


def pair_live(nodes: Sequence[Any], live_nodes: Sequence[Mapping[str, Any]]) -> list[bool | None]:
    """The live verdict of each ovkit node: ggml orders a graph depth-first, so nodes pair by
    (op, shape, name) for the nodes the program names, then by (op, shape) in order; None: no twin."""
    free: dict[tuple[str, tuple[int, ...]], list[Mapping[str, Any]]] = {}
    for n in live_nodes:
        free.setdefault(_key(n["op"], n["ne"]), []).append(n)
    out: dict[int, bool] = {}
    for named in (True, False):
        for i, t in enumerate(nodes):
            if bool(t.name) != named:
                continue
            cands = free.get(_key(t.op_key, t.ne), [])
            hit = next((c for c in cands if c["name"] == t.name), None) if named else None
            hit = hit or (cands[0] if cands else None)
            if hit is not None:
                cands.remove(hit)
                out[i] = bool(hit["supported"])
    return [out.get(i) for i in range(len(nodes))]


def node_flops(t: Any) -> int:
    """Floating-point operations of one node: 2·m·n·k for matrix products, elements otherwise."""
    a = t.srcs[0] if t.srcs else None
    if t.op == "MUL_MAT" and a is not None:
        return 2 * int(a.ne[0]) * int(np.prod(t.ne))
    if t.op == "FLASH_ATTN_EXT" and a is not None:
        k = t.srcs[1]
        return 4 * int(a.ne[0]) * int(k.ne[1]) * int(a.ne[1]) * int(a.ne[2]) * int(a.ne[3])
    if t.is_view or t.op in ("RESHAPE", "PERMUTE", "TRANSPOSE", "NONE"):
        return 0
    return int(np.prod(t.ne))


def _weights(t: Any, device_class: str) -> tuple[int, str]:
    """Bytes of the constant weights node ``t`` reads, as the device's policy stores them, and
    why the device cannot build one of them ("" if it can): the runner's own requant decision."""
    total, refused = 0, ""
    for s in t.srcs:
        if s is None or not s.is_leaf or s.value is None:
            continue
        w = s.value
        if isinstance(w, quant.QuantizedWeight):
            decision = quant.requant_decision(w.name, device_class, w.qtype, w.shape)
            total += decision.nbytes
            refused = refused or decision.refused
        else:
            total += int(np.asarray(w).nbytes)
    return total, refused


@dataclass(frozen=True, slots=True)
class Target:
    """A device the placement is asked for: its name, class and whether it is simulated."""

    name: str
    device_class: str
    simulated: bool

    @property
    def label(self) -> str:
        return f"{self.name} (SIMULATED)" if self.simulated else self.name


def targets(core: Core | None = None) -> list[Target]:
    """The devices of ``core`` (a real Core, a SimulatedCore, or None for the default)."""
    from ovkit.devices import list_devices

    return [Target(d.name, str(d.device_class), bool(d.simulated)) for d in list_devices(core=core)]


def node_table(
    model: Model, devices: Sequence[Target], *, n_prompt: int = 16, live: LiveSupport | None = None
) -> pd.DataFrame:
    """One row per (graph, node, device): op, name, shape, verdict, reason, FLOPs, weight bytes."""
    import pandas as pd

    from ovkit.model.header import op_nodes
    from ovkit.ops.policy import check_op

    rows = []
    for graph_name, shape, start in (
        ("prefill", model.shape(min(n_prompt, model.n_ubatch), 0), 0),
        ("decode", model.shape(1, n_prompt), n_prompt),
    ):
        g, out = model.build(shape)
        nodes = op_nodes(g, out)
        live_verdicts = pair_live(nodes, live(shape, start)) if live is not None else []
        for idx, t in enumerate(nodes):
            flops = node_flops(t)
            for d in devices:
                verdict = check_op(t, d.device_class)
                wbytes, refused = _weights(t, d.device_class)
                # a weight the device cannot build: upstream's supports_op takes the node, then
                # the model does not load; ovkit's Model refuses it with the same reason
                on_device = verdict.supported and not refused
                row = {
                    "graph": graph_name,
                    "index": idx,
                    "node": t.name or f"node_{t.id}",
                    "op": t.op_key,
                    "type": t.dtype,
                    "ne": list(t.ne),
                    "device": d.label,
                    "class": d.device_class,
                    "on_device": on_device,
                    "reason": "" if on_device else verdict.reason or refused,
                    "flops": flops,
                    "weight_bytes": wbytes,
                }
                if live is not None:
                    found = live_verdicts[idx]
                    row["live_supports_op"] = found
                    row["agree"] = found is not None and found == verdict.supported
                rows.append(row)
    return pd.DataFrame(rows)


def ggml_graph_program(
    path: str | os.PathLike[str], shape: Mapping[str, Any], start: int
) -> tuple[Callable[[Any, Mapping[str, Any]], Any], dict[str, Any]]:
    """The model's program for ``shape`` and ggml inputs for it: the GGUF's weights as stored
    (quantized blocks stay blocks), zeroed KV caches, and causal inputs for tokens at ``start..``."""
    from ovkit import oracle
    from ovkit.gguf import read_gguf
    from ovkit.model.limits import model_hparams

    gguf = read_gguf(path)
    hp = model_hparams(gguf)
    gs = GraphShape(**shape)
    inputs: dict[str, Any] = {}
    for name, info in gguf.tensors.items():
        if not info.supported:  # a type ovkit repacks to run (Q5_0): the backend sees it as stored
            inputs[name] = oracle.QuantArray(info.type, info.shape, bytes(gguf.raw(name)))
            continue
        w = gguf.constant(name)
        inputs[name] = (
            oracle.QuantArray(w.qtype, w.shape, w.raw) if isinstance(w, quant.QuantizedWeight) else w
        )
    inputs.update(step_inputs(hp, gs, np.zeros(gs.n_tokens, np.int32), start))
    program = decoder_program(hp, gs)
    return (lambda b, leaves: program(b, leaves).tensors()), inputs


def live_support(path: str | os.PathLike[str]) -> LiveSupport:
    """The installed real backend's ``supports_op`` per node of the model's graphs, asked in
    ovkit.upstream's isolated child (the graph is built there with ggml's builder)."""
    from ovkit.upstream import UpstreamCallError
    from ovkit.upstream.isolate import call_once

    def live(shape: GraphShape, start: int) -> list[dict[str, Any]]:
        out = call_once(
            {"cmd": "model_graph", "path": os.fspath(path), "shape": asdict(shape), "start": start}
        )
        if not out.ok:
            raise UpstreamCallError(f"supports_op on the model graph: {out.status} {out.detail}")
        return list(out.reply["nodes"])

    return live


SUMMARY_KINDS = {
    "nodes": "count",
    "on_device": "count",
    "fall_back": "count",
    "flops_on_device": "share",
    "weight_bytes_on_device": "share",
    "ovkit_runs": "bool",
}


@overload
def summary(nodes: pd.DataFrame, *, raw: Literal[False] = False) -> FrameReport: ...
@overload
def summary(nodes: pd.DataFrame, *, raw: Literal[True]) -> pd.DataFrame: ...
def summary(nodes: pd.DataFrame, *, raw: bool = False) -> FrameReport | pd.DataFrame:
    """Per graph and device: nodes on the device / falling back, shares of FLOPs and weight bytes,
    and ``ovkit_runs`` (False when a node falls back); ``raw=True``: the DataFrame of fractions."""
    import pandas as pd

    rows = []
    for (graph_name, device), grp in nodes.groupby(["graph", "device"], sort=False):
        on = grp[grp["on_device"]]
        flops, wbytes = grp["flops"].sum(), grp["weight_bytes"].sum()
        rows.append(
            {
                "graph": graph_name,
                "device": device,
                "nodes": len(grp),
                "on_device": len(on),
                "fall_back": len(grp) - len(on),
                "flops_on_device": on["flops"].sum() / flops if flops else 1.0,
                "weight_bytes_on_device": on["weight_bytes"].sum() / wbytes if wbytes else 1.0,
                "rejected_ops": ", ".join(sorted(set(grp.loc[~grp["on_device"], "op"]))),
                # the real backend splits the graph there; ovkit cannot run a node on ggml's CPU
                "ovkit_runs": len(on) == len(grp),
            }
        )
    frame = pd.DataFrame(rows)
    if raw:
        return frame
    return FrameReport(
        "placement per graph and device",
        frame,
        SUMMARY_KINDS,
        {c: c.replace("_", " ") for c in frame.columns},
        notes=(
            "ovkit runs: no — a node falls back (ovkit runs a graph whole on one device) or the "
            "device cannot build one of its weights; fallbacks() gives each reason",
        )
        if not frame.empty and not frame["ovkit_runs"].all()
        else (),
    )


@overload
def fallbacks(nodes: pd.DataFrame, *, raw: Literal[False] = False) -> FrameReport: ...
@overload
def fallbacks(nodes: pd.DataFrame, *, raw: Literal[True]) -> pd.DataFrame: ...
def fallbacks(nodes: pd.DataFrame, *, raw: bool = False) -> FrameReport | pd.DataFrame:
    """Only the rejected nodes, with the policy's reason: what falls back to ggml's CPU under the
    real backend (``raw=True``: the DataFrame)."""
    cols = ["graph", "device", "index", "node", "op", "type", "ne", "reason"]
    frame = nodes.loc[~nodes["on_device"], cols].reset_index(drop=True)
    if raw:
        return frame
    checked = ", ".join(dict.fromkeys(nodes["device"])) or "no device"
    return FrameReport(
        f"nodes that fall back to ggml's CPU backend ({len(frame):,})",
        frame,
        {"index": "count"},
        empty=f"none: every node of every graph runs on its device ({checked})",
    )
