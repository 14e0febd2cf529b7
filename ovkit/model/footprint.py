"""Memory a model needs: the one place for its rules (``Model``, ``fit`` and the pre-flight use them).

* KV cache: ``2 · n_layer · n_ctx · n_embd_kv`` values (:func:`kv_bytes`), f16 as llama.cpp keeps it;
* the lean form's peak (:func:`predicted_peak`), which ``Model()`` checks before loading
  (:func:`check_fits`), and the positions whose cache fits the host (:func:`context_limit`);
* per device (:func:`fit`): weights after its requantization policy (``GGUFModel.weight_bytes``),
  the KV cache and the compute buffer (the peak of live intermediates of the prefill graph in
  topological order, as ggml's graph allocator reuses memory), against its free memory; ``runs``
  says whether the device can build every weight at all (the requant decision ``Model`` and
  placement use).  Shown by magnitude, ``.frame`` (or ``raw=True``) holds the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

from ovkit import quant
from ovkit.gguf import GGUFModel
from ovkit.memory import format_bytes, host_memory
from ovkit.model.arch import HParams, ModelError
from ovkit.model.lean import model_device_bytes
from ovkit.model.program import F16_BYTES, cache_names
from ovkit.report import FrameReport
from ovkit.runtime import Core

if TYPE_CHECKING:
    import pandas as pd


class SizedModel(Protocol):
    """What the per-device fit reads of an ``ovkit.model.Model`` (a Protocol: the memory rules sit
    below the runner, which uses them)."""

    @property
    def hp(self) -> HParams: ...
    @property
    def gguf(self) -> GGUFModel: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def n_ubatch(self) -> int: ...
    @property
    def no_requant(self) -> bool: ...
    def shape(self, n_tokens: int, n_past: int) -> Any: ...
    def build(self, shape: Any) -> Any: ...


#: The bytes of one cached value as the context limit counts it: f32, the graph form's host cache
#: on the CPU class (the other forms and devices hold f16: half).
KV_VALUE_BYTES = 4
#: What a process holds besides the weights and the cache, once a model ran (the Python
#: interpreter, OpenVINO's libraries, numpy and pandas): measured on SmolLM2 and the 1.1 B shape
#: (``benchmarks/bench_scale.py``), about 300 MiB; the peak adds the weights a second time.
BASE_BYTES = 400 << 20


def kv_bytes(hp: HParams, n_ctx: int, value_bytes: int = F16_BYTES) -> int:
    """The K and V caches of every layer at ``n_ctx`` cells of ``value_bytes`` each."""
    return len(cache_names(hp.n_layer)) * n_ctx * hp.n_embd_kv * value_bytes


def available_memory(core: Core | None = None) -> int:
    """The host's available memory in bytes (``MemAvailable``; ``core``: a simulated host's)."""
    return host_memory(core).available_bytes


#: Peak RSS of a lean load per byte of weights in their device form: the plugin's packed copy
#: (1x) and the mapped pages it reads from, given back every 50 ms (``lean.releasing``), of which
#: at most 0.39x were measured at once (1.1 B-13 B shapes; ``benchmarks/bench_scale.py`` prints
#: this prediction beside each measured peak).
PEAK_PER_WEIGHT_BYTE = 1.5


def predicted_peak(gguf: GGUFModel, hp: HParams, n_ctx: int) -> int:
    """Peak RSS of loading and running the lean form: the weights ``PEAK_PER_WEIGHT_BYTE`` times,
    the KV cache and the process."""
    return int(PEAK_PER_WEIGHT_BYTE * model_device_bytes(gguf)) + kv_bytes(hp, n_ctx) + BASE_BYTES


def check_fits(gguf: GGUFModel, hp: HParams, n_ctx: int) -> None:
    """Refuse up front a lean model whose load would not fit the host's available memory."""
    need, kv = predicted_peak(gguf, hp, n_ctx), kv_bytes(hp, n_ctx)
    have = available_memory()
    if have and need > have:
        raise ModelError(
            f"{gguf.path.name} needs about {format_bytes(need)} at its peak (weights "
            f"{format_bytes(need - kv - BASE_BYTES)}, KV cache at n_ctx={n_ctx:,} {format_bytes(kv)}), "
            f"but only {format_bytes(have)} is available: not loaded"
        )


@dataclass(frozen=True, slots=True)
class ContextLimit:
    """The most positions a model's context may hold on this machine, and what sets that."""

    positions: int
    reason: str  #: "the model's training context (llama.context_length)", or the memory it takes

    def describe(self) -> str:
        """``4,096, the model's training context (llama.context_length)``."""
        return f"{self.positions:,}, {self.reason}"


def context_limit(hp: HParams, *, core: Core | None = None) -> ContextLimit:
    """The smaller of the model's training context and the positions whose KV cache (at
    :data:`KV_VALUE_BYTES`) fits the host's available memory (``core``: a simulated host's)."""
    per = kv_bytes(hp, 1, KV_VALUE_BYTES)
    available = available_memory(core)
    by_memory = ContextLimit(
        available // per,
        f"the positions whose KV cache ({format_bytes(per)} each, at f32) fits the "
        f"{format_bytes(available)} of available memory",
    )
    if hp.n_ctx_train < 1 or by_memory.positions < hp.n_ctx_train:
        return by_memory
    return ContextLimit(hp.n_ctx_train, f"the model's training context ({hp.arch}.context_length)")


def refused_weights(model: SizedModel, device_class: str) -> list[quant.RequantDecision]:
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
    model: SizedModel, n_ctx: int | None = None, *, core: Core | None = None, raw: Literal[False] = False
) -> FrameReport: ...
@overload
def fit(
    model: SizedModel, n_ctx: int | None = None, *, core: Core | None = None, raw: Literal[True]
) -> pd.DataFrame: ...
def fit(
    model: SizedModel, n_ctx: int | None = None, *, core: Core | None = None, raw: bool = False
) -> FrameReport | pd.DataFrame:
    """Per device: weights (after its policy), KV cache, compute buffer, total, free, fits; a
    :class:`~ovkit.report.FrameReport` (figures by magnitude, ``.frame`` in bytes) or with
    ``raw=True`` the DataFrame itself."""
    import pandas as pd

    from ovkit.devices import list_devices
    from ovkit.model.header import live_peak_bytes

    kv = kv_bytes(model.hp, n_ctx or model.n_ctx)
    # the peak of live intermediates of one ubatch's graph
    compute = live_peak_bytes(*model.build(model.shape(min(model.n_ubatch, model.n_ctx), 0)))
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
