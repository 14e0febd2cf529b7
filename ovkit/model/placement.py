"""Where every node of a model's prefill and decode graph runs, per device, and why.

For each op node the backend's support policy (``ovkit.ops.policy``) gives a verdict per device
class; a rejected node is what the backend hands back to ggml's CPU backend ("falls back").  The
summary per device counts nodes on the device and falling back, and the share of FLOPs and of
weight bytes (after the device's requantization policy) the device keeps.  Devices come from a
real or a simulated Core (``SIMULATED`` in the device column).  ``live`` adds the installed
backend's own ``supports_op`` answer next to the policy's (a callable taking a node).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit import quant

if TYPE_CHECKING:
    import pandas as pd

    from ovkit.model.runner import Model

LiveSupport = Callable[[Any], bool]


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


def _weight_bytes(t: Any, device_class: str) -> int:
    """Bytes of the constant weights node ``t`` reads, as the device's policy stores them."""
    total = 0
    for s in t.srcs:
        if s is None or not s.is_leaf or s.value is None:
            continue
        w = s.value
        if isinstance(w, quant.QuantizedWeight):
            target = quant.requant_type(w.name, device_class, w.qtype)
            total += quant.requant_bytes(target, w.qtype, w.shape)
        else:
            total += int(np.asarray(w).nbytes)
    return total


@dataclass(frozen=True, slots=True)
class Target:
    """A device the placement is asked for: its name, class and whether it is simulated."""

    name: str
    device_class: str
    simulated: bool

    @property
    def label(self) -> str:
        return f"{self.name} (SIMULATED)" if self.simulated else self.name


def targets(core: Any = None) -> list[Target]:
    """The devices of ``core`` (a real Core, a SimulatedCore, or None for the default)."""
    from ovkit.devices import list_devices

    return [Target(d.name, str(d.device_class), bool(d.simulated)) for d in list_devices(core)]


def node_table(
    model: Model,
    devices: Sequence[Target],
    *,
    n_prompt: int = 16,
    live: LiveSupport | None = None,
) -> pd.DataFrame:
    """One row per (graph, node, device): op, name, shape, verdict, reason, FLOPs, weight bytes."""
    import pandas as pd

    from ovkit.ops.policy import check_op

    rows = []
    for graph_name, shape in (
        ("prefill", model.shape(min(n_prompt, model.n_ubatch), 0)),
        ("decode", model.shape(1, n_prompt)),
    ):
        g, out = model.build(shape)
        nodes = [t for t in g.topo(out.tensors()) if not t.is_leaf]
        live_verdicts = {t.id: live(t) for t in nodes} if live is not None else {}
        for idx, t in enumerate(nodes):
            flops = node_flops(t)
            for d in devices:
                verdict = check_op(t, d.device_class)
                row = {
                    "graph": graph_name,
                    "index": idx,
                    "node": t.name or f"node_{t.id}",
                    "op": t.op_key,
                    "type": t.dtype,
                    "ne": list(t.ne),
                    "device": d.label,
                    "class": d.device_class,
                    "on_device": verdict.supported,
                    "reason": "" if verdict.supported else verdict.reason,
                    "flops": flops,
                    "weight_bytes": _weight_bytes(t, d.device_class),
                }
                if live is not None:
                    row["live_supports_op"] = live_verdicts[t.id]
                rows.append(row)
    return pd.DataFrame(rows)


def summary(nodes: pd.DataFrame) -> pd.DataFrame:
    """Per graph and device: nodes on the device / falling back, shares of FLOPs and weight bytes."""
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
            }
        )
    return pd.DataFrame(rows)


def fallbacks(nodes: pd.DataFrame) -> pd.DataFrame:
    """Only the rejected nodes, with the policy's reason: "what falls back to CPU"."""
    cols = ["graph", "device", "index", "node", "op", "type", "ne", "reason"]
    return nodes.loc[~nodes["on_device"], cols].reset_index(drop=True)
