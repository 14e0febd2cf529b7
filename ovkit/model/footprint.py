"""Memory a model needs on each device: weights after the requant policy, KV cache, compute buffer.

* weights: every GGUF tensor as the device class's requantization policy stores it
  (``GGUFModel.weight_bytes``);
* KV cache: ``2 · n_layer · n_ctx · n_embd_kv`` f16 values (llama.cpp's default cache type);
* compute buffer: the peak of live intermediate tensors of the prefill graph in topological order
  (each non-view result allocated when computed, freed after its last consumer), as ggml's
  graph allocator reuses memory.

``fit`` compares the sum with each device's free memory (simulated devices say so), and says
whether the device can build every weight at all (``runs``, the same requant decision ``Model``
and placement use); it shows the figures by magnitude, ``.frame`` (or ``raw=True``) holds the bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, overload

from ovkit import quant
from ovkit.model.program import F16_BYTES
from ovkit.report import FrameReport
from ovkit.runtime import Core

if TYPE_CHECKING:
    import pandas as pd

    from ovkit.model.runner import Model


def kv_cache_bytes(model: Model, n_ctx: int | None = None) -> int:
    """Bytes of the K and V caches of every layer at ``n_ctx`` cells (f16)."""
    hp = model.hp
    return 2 * hp.n_layer * (n_ctx or model.n_ctx) * hp.n_embd_kv * F16_BYTES


def compute_buffer_bytes(model: Model, n_tokens: int | None = None) -> int:
    """Peak bytes of live intermediates of the graph for ``n_tokens`` (default: one ubatch)."""
    from ovkit.model.header import live_peak_bytes

    n = min(n_tokens or model.n_ubatch, model.n_ctx)
    return live_peak_bytes(*model.build(model.shape(n, 0)))


def refused_weights(model: Model, device_class: str) -> list[quant.RequantDecision]:
    """The model's weights ``device_class`` cannot build (``quant.requant_decision``: the rule
    ``Model`` raises by and placement marks nodes by)."""
    out = []
    for t in model.gguf.tensors.values():
        if t.type in quant.QUANT_SPECS:
            d = quant.requant_decision(t.name, device_class, t.type, t.shape, no_requant=model.no_requant)
            if not d.ok:
                out.append(d)
    return out


def _why_not(refused: list[quant.RequantDecision]) -> str:
    more = f" (and {len(refused) - 1} more weights)" if len(refused) > 1 else ""
    return refused[0].refused + more


FIT_KINDS = {
    c: "bytes"
    for c in (
        "weight_bytes",
        "kv_cache_bytes",
        "compute_bytes",
        "total_bytes",
        "free_bytes",
        "headroom_bytes",
    )
}
FIT_LABELS = {c: c.removesuffix("_bytes").replace("_", " ") for c in FIT_KINDS}


@overload
def fit(
    model: Model, n_ctx: int | None = None, *, core: Core | None = None, raw: Literal[False] = False
) -> FrameReport: ...
@overload
def fit(
    model: Model, n_ctx: int | None = None, *, core: Core | None = None, raw: Literal[True]
) -> pd.DataFrame: ...
def fit(
    model: Model, n_ctx: int | None = None, *, core: Core | None = None, raw: bool = False
) -> FrameReport | pd.DataFrame:
    """Per device: weights (after its policy), KV cache, compute buffer, total, free, fits; a
    :class:`~ovkit.report.FrameReport` (figures by magnitude, ``.frame`` in bytes) or with
    ``raw=True`` the DataFrame itself."""
    import pandas as pd

    from ovkit.devices import list_devices

    kv = kv_cache_bytes(model, n_ctx)
    compute = compute_buffer_bytes(model)
    rows = []
    for d in list_devices(core=core):
        cls = str(d.device_class)
        weights = model.gguf.weight_bytes(cls, no_requant=model.no_requant)
        refused = refused_weights(model, cls)
        # the free figure every live view shows (host RAM: MemAvailable; iGPU/NPU: at most that)
        free = d.live.free_bytes if d.live.free_bytes is not None else d.free_bytes
        total = weights + kv + compute
        rows.append(
            {
                "device": f"{d.name} (SIMULATED)" if d.simulated else d.name,
                "class": cls,
                "weight_bytes": weights,
                "kv_cache_bytes": kv,
                "compute_bytes": compute,
                "total_bytes": total,
                "free_bytes": free,
                "runs": not refused,
                "fits": not refused and total <= free,
                "headroom_bytes": free - total,
                "why_not": _why_not(refused) if refused else "",
            }
        )
    frame = pd.DataFrame(rows)
    if raw:
        return frame
    return FrameReport(
        f"{model.gguf.path.name} on each device: weights, KV cache, compute buffer vs free memory",
        frame,
        {**FIT_KINDS, "runs": "bool", "fits": "bool"},
        FIT_LABELS,
        hidden=("why_not",),
        notes=(
            f"weights as each device class's requantization policy stores them; KV cache f16 at "
            f"n_ctx {n_ctx or model.n_ctx:,}; compute buffer: peak of one ubatch's intermediates",
            "runs: the device can build every weight (the decision Model and placement use); "
            "fits: it runs and the total is within free memory",
            *(
                f"{dev} does not run it: {why}"
                for dev, why in zip(frame["device"], frame["why_not"], strict=True)
                if why
            ),
        ),
    )
