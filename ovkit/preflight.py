"""Will it run here, and what will it take?  A pre-flight of a GGUF file on every device from its
header alone, as llama.cpp's OpenVINO backend would run it: **runs**, **runs with fallback** or
**fails** (when, why, the issue, what lifts it), from memory stage by stage, the GPU's max
allocation, weights it cannot requantize and the known aborts (docs/preflight.md)."""

from __future__ import annotations

import enum
import json
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ovkit import layouts, quant
from ovkit.config import OvkitConfig, read_config
from ovkit.devices import device_class, is_virtual, list_devices
from ovkit.gguf import GGUFError, GGUFModel, read_gguf
from ovkit.memory import MIB, format_bytes, host_memory, read_property, shares_host_ram
from ovkit.model.arch import ARCHS, HParams, ModelError
from ovkit.model.program import F16_BYTES, GraphShape
from ovkit.preflight_known import (
    BACKENDS,
    DEFAULT_BACKEND,
    KNOWN_ABORTS,
    SPLITS_KV_BUFFER,
    STAGES,
    BackendVersion,
    KnownAbort,
    Stage,
)
from ovkit.report import Report, Reported
from ovkit.runtime import Core, get_core
from ovkit.selection import ENV_DEVICE, resolve_device
from ovkit.simulate import SimulatedCore, UnknownProfileError
from ovkit.usage import SIMULATED_NOTICE, UsageError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

KV_CELL_PAD = 256  #: llama_context pads n_ctx (and n_ctx_seq) to a multiple of 256 cells
MAX_N_CTX = 2**32 - KV_CELL_PAD  #: llama.cpp holds the padded n_ctx in a uint32
DEFAULT_N_UBATCH = 512  #: llama.cpp's default micro-batch
MAX_ALLOC_PROPERTY = "GPU_DEVICE_MAX_ALLOC_MEM_SIZE"
LONG_CONTEXT = 8192  #: above this, a context left unset is named as the likely cause of a failure
HOST, DEVICE = "host", "device"


class PreflightError(UsageError, ValueError):
    """A file or setting the pre-flight cannot answer for (one line naming the value and what was
    expected; ``ovkit check`` prints it and exits 2)."""


class Verdict(enum.StrEnum):
    RUNS = "runs"
    FALLBACK = "runs with fallback"
    FAILS = "fails"


# ----------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True, slots=True)
class Part:
    """One allocation: where it lives, the stage it is made at, and whether it is freed before the
    next stage (``transient``)."""

    name: str
    where: str  #: HOST or DEVICE
    stage: Stage
    bytes: int
    transient: bool = False
    note: str = ""

    def alive(self, stage: Stage) -> bool:
        i, j = STAGES.index(self.stage), STAGES.index(stage)
        return i == j or (i < j and not self.transient)


def bytes_at(parts: Sequence[Part], where: str, stage: Stage) -> int:
    """What the parts in ``where`` (HOST or DEVICE) hold at ``stage``."""
    return sum(p.bytes for p in parts if p.where == where and p.alive(stage))


@dataclass(frozen=True, slots=True)
class Fallback:
    """Nodes of one op the backend leaves to ggml's CPU, with the policy's reason."""

    op: str
    nodes: int
    reason: str


@dataclass(frozen=True, slots=True)
class Naming:
    """What the backend does with a ``GGML_OPENVINO_DEVICE`` value."""

    requested: str | None
    device: str  #: what the backend resolves it to
    fell_back: bool
    behaviour: tuple[str, ...]  #: the backend's actual behaviour, one sentence each
    hint: str | None = None


@dataclass(frozen=True, slots=True, repr=False)
class DeviceCheck(Reported):
    """One device's verdict and what it will take (bytes; ``None`` = unknown)."""

    device: str
    device_class: str
    simulated: bool
    verdict: Verdict
    stage: Stage | None  #: when it fails (None: it runs)
    why: str
    issue: str  #: the upstream issues the failure matches ("" when none)
    lifted_by: str  #: the change or setting that lifts it ("" when none is known)
    parts: tuple[Part, ...]
    host_peak_bytes: int
    device_bytes: int
    host_free_bytes: int | None
    device_free_bytes: int | None
    largest_buffer: tuple[str, int]  #: the largest single allocation on the device
    max_alloc_bytes: int | None  #: GPU_DEVICE_MAX_ALLOC_MEM_SIZE (GPU class only)
    fallbacks: tuple[Fallback, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.device} (SIMULATED)" if self.simulated else self.device

    def summary(self) -> str:
        """The verdict in one line."""
        if self.verdict is Verdict.FAILS:
            text = f"fails at {self.stage}: {self.why}"
            if self.issue:
                text += f" (matches {self.issue})"
            return text + (f"; lifted by {self.lifted_by}" if self.lifted_by else "")
        if self.verdict is Verdict.FALLBACK:
            n = sum(f.nodes for f in self.fallbacks)
            ops = ", ".join(sorted({f.op for f in self.fallbacks}))
            return f"runs with {n} node{'s' if n != 1 else ''} left to ggml's CPU ({ops})"
        return "runs"

    def report(self) -> Report:
        rows = [("verdict", self.summary())]
        for p in self.parts:
            freed = " (freed after)" if p.transient else ""
            rows.append((f"{p.where}: {p.name}", f"{format_bytes(p.bytes)} from {p.stage}{freed}"))
        rows.append(("host RAM at the peak", f"{format_bytes(self.host_peak_bytes)}, {format_bytes(self.host_free_bytes)} available"))  # fmt: skip
        if self.device_class != "CPU":
            rows.append(("device memory", f"{format_bytes(self.device_bytes)}, {format_bytes(self.device_free_bytes)} free"))  # fmt: skip
        name, size = self.largest_buffer
        cap = f" (cap {self.max_alloc_bytes:,})" if self.max_alloc_bytes else ""
        rows.append(("largest buffer", f"{name}: {size:,} bytes{cap}"))
        rows += [("left to ggml's CPU", f"{f.nodes} {f.op}: {f.reason}") for f in self.fallbacks]
        return Report(f"{self.label}: {self.verdict}", ("", ""), tuple(rows), self.notes)


PART_COLOURS: dict[str, Any] = {
    "runtime": "#9e9e9e",
    "file pages": "#cfd8dc",
    "input embeddings (mapped)": "#b0bec5",
    "requantization scratch": "#ef9a9a",
    "weight buffer": "#1976d2",
    "KV cache staging": "#ffcc80",
    "KV cache": "#f57c00",
    "KV cache (sliding window)": "#ffa726",
    "compute buffers": "#388e3c",
    "compiled model": "#7b1fa2",
    "activations": "#81c784",
}


#: the drawing's marks on each bar: free memory, the largest single buffer, the cap on one allocation
MARKS: tuple[dict[str, Any], ...] = (
    {"color": "black", "lw": 2, "label": "free"},
    {"color": "red", "ls": "--", "lw": 1, "label": "largest buffer"},
    {"color": "red", "lw": 1.5, "label": MAX_ALLOC_PROPERTY},
)
REPORT_COLUMNS = ("device", "verdict", "host peak", "host free", "device mem", "device free", "largest buffer", "why")  # fmt: skip


@dataclass(frozen=True, slots=True, repr=False)
class Preflight(Reported):
    """Every device's verdict for one file at one context."""

    path: Path
    arch: str
    file_bytes: int
    n_ctx_requested: int | None  #: the -c given (None or 0: llama.cpp's default, the training length)
    n_ctx: int  #: the cells llama.cpp allocates (padded)
    n_ctx_train: int
    n_ubatch: int
    n_prompt: int  #: the first decode's tokens the memory figures assume
    flash_attn: bool
    backend: BackendVersion
    devices: tuple[DeviceCheck, ...]
    naming: Naming | None
    ovkit_model_bytes: int | None  #: ovkit's own ``Model`` at its peak (host RAM), beside the backend's
    simulated: str | None = None
    notes: tuple[str, ...] = ()

    def device(self, name: str) -> DeviceCheck:
        found = {d.device: d for d in self.devices}
        if name not in found:
            raise KeyError(f"no verdict for device {name!r} (checked: {', '.join(found)})")
        return found[name]

    def report(self) -> Report:
        rows = []
        for d in self.devices:
            name, size = d.largest_buffer
            cap = f" / cap {format_bytes(d.max_alloc_bytes)}" if d.max_alloc_bytes else ""
            host = [format_bytes(n) for n in (d.host_peak_bytes, d.host_free_bytes)]
            own = d.device_class != "CPU"
            dev = [format_bytes(n) if own else "–" for n in (d.device_bytes, d.device_free_bytes)]
            why = "" if d.verdict is Verdict.RUNS else d.summary()
            rows.append((d.label, str(d.verdict), *host, *dev, f"{format_bytes(size)} ({name}){cap}", why))
        ctx = (
            f"-c {self.n_ctx_requested:,}"
            if self.n_ctx_requested
            else f"-c unset (llama.cpp's default: the training context {self.n_ctx_train:,})"
        )
        sim = f", SIMULATED device set {self.simulated!r}" if self.simulated else ""
        title = (
            f"ovkit check {self.path.name} ({self.arch}, {format_bytes(self.file_bytes)}), {ctx}: "
            f"{self.n_ctx:,} cells; backend {self.backend}{sim}"
        )
        notes = list(self.notes)
        if self.naming is not None:
            notes += [f"{ENV_DEVICE}={self.naming.requested!r}: {line}" for line in self.naming.behaviour]
            if self.naming.hint:
                notes.append(f"hint: {self.naming.hint}")
        for d in self.devices:
            notes += [f"{d.device}: {n}" for n in d.notes]
        notes.append(
            f"host peak: loading, the context, and a first decode of {self.n_prompt} tokens "
            "(the model measured on the real backend on a CPU; GPU and NPU parts placed by its rules)"
        )
        if self.ovkit_model_bytes is not None:
            notes.append(
                f"ovkit's own Model (its lean form on the CPU, not the backend) would take about "
                f"{format_bytes(self.ovkit_model_bytes)} of host RAM at its peak (ovkit.model.footprint.predicted_peak)"
            )
        return Report(title, REPORT_COLUMNS, tuple(rows), tuple(notes))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, stages and verdicts as their names, bytes as integers."""
        out: dict[str, Any] = json.loads(json.dumps(asdict(self), default=str))  # the enums are str
        for d, src in zip(out["devices"], self.devices, strict=True):
            d["summary"] = src.summary()
        return out

    def memory_frame(self) -> pd.DataFrame:
        """One row per device, memory (host, device) and part: the bytes it holds at that memory's
        peak, the memory's free figure, the device's largest single buffer and its cap."""
        import pandas as pd

        rows = []
        for d in self.devices:
            peak = max(STAGES, key=lambda s: bytes_at(d.parts, HOST, s))
            for p in d.parts:
                if p.where == HOST or d.device_class != "CPU":
                    free = d.host_free_bytes if p.where == HOST else d.device_free_bytes
                    held = p.bytes if p.where == DEVICE or p.alive(peak) else 0
                    rows.append((d.label, p.where, p.name, str(p.stage), held, free, d.largest_buffer[1],
                                 d.max_alloc_bytes, str(d.verdict)))  # fmt: skip
        columns = [
            "device",
            "where",
            "part",
            "stage",
            "bytes",
            "free_bytes",
            "largest_buffer_bytes",
            "max_alloc_bytes",
        ]
        return pd.DataFrame(rows, columns=[*columns, "verdict"])

    def plot(self, ax: Any = None) -> Figure:
        """One bar per device and memory (host RAM at its peak; device memory apart), stacked by part,
        against that memory's free figure (black), with the device's largest single buffer (red,
        dashed) and ``GPU_DEVICE_MAX_ALLOC_MEM_SIZE`` (red)."""
        import pandas as pd
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D

        gib = 2**30
        frame = self.memory_frame()
        frame["bar"] = frame["device"] + " " + frame["where"] + "\n" + frame["verdict"]
        stacked = frame.pivot_table("bytes", "bar", "part", "sum", sort=False) / gib
        stacked = stacked.reindex(columns=[p for p in PART_COLOURS if p in stacked]).fillna(0)
        if ax is None:
            ax = Figure(figsize=(8, 1.2 + 0.5 * len(stacked))).add_subplot()
        stacked.plot.barh(stacked=True, ax=ax, color=PART_COLOURS, edgecolor="white", width=0.8)
        handles = ax.get_legend_handles_labels()[0] + [Line2D([], [], **style) for style in MARKS]
        with_device = set(frame.loc[frame["where"] == DEVICE, "device"])
        for y, row in enumerate(frame.groupby("bar", sort=False).first().itertuples()):
            xs: list[Any] = [row.free_bytes]
            if row.where == DEVICE or row.device not in with_device:  # the device's own allocations
                xs += [row.largest_buffer_bytes, row.max_alloc_bytes]
            for x, style in zip(xs, MARKS, strict=False):
                if not pd.isna(x):
                    ax.plot([x / gib] * 2, [y - 0.45, y + 0.45], **style)
        ax.tick_params(axis="y", labelsize=8)
        ax.invert_yaxis()
        ax.set(xlabel="GiB", ylabel="")
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_title(
            f"{self.path.name} at {self.n_ctx:,} cells: memory by part against free memory", fontsize=9
        )
        ax.figure.tight_layout()
        return ax.figure


# ----------------------------------------------------------------------------------------------
# The memory model.  The constants come from benchmarks/bench_check.py on the real backend
# (docs/preflight.md has the measurements); each names the part of RSS it stands for.

RUNTIME_BYTES = 100 * MIB  #: the process with llama.cpp, OpenVINO and its CPU plugin loaded
COMPILED_PER_WEIGHT_BYTE = 1.51  #: the compiled model's resident bytes per byte of weight buffer
COMPILED_BASE_BYTES = 104 * MIB  #: ... plus this, whatever the model
#: OpenVINO's activations on the first decode: bytes per token per f32 value of one layer's widths
#: (``n_embd + n_ff``): its CPU plugin keeps about this many such rows per token resident
ACTIVATION_ROWS = 14


@dataclass(frozen=True, slots=True)
class ModelSizes:
    """What the header says about sizes, shared by every device's memory model."""

    hp: HParams
    n_ctx: int  #: padded cells
    n_prompt: int  #: the first decode's tokens: one micro-batch
    kv_buffers: tuple[tuple[str, int], ...]  #: (name, bytes) of each KV cache buffer
    kv_tensor_bytes: int  #: one layer's K (or V) tensor
    compute_bytes: int  #: llama.cpp's compute buffers (reserve graph, host input rows, output row)
    static_bytes: int = 0  #: the NPU's static prefill model: its intermediates at every cell


def padded_ctx(n_ctx: int | None, n_ctx_train: int) -> int:
    """The cells llama.cpp allocates for ``-c n_ctx`` (0 or None: the training context), padded
    to 256 as ``llama_context`` pads them."""
    n = n_ctx or n_ctx_train
    return -(-n // KV_CELL_PAD) * KV_CELL_PAD


def kv_buffers(hp: HParams, n_ctx: int, n_ubatch: int) -> tuple[tuple[str, int], ...]:
    """The KV cache as llama.cpp allocates it: one f16 buffer for the layers of the full cache,
    and with a sliding window a second of ``min(n_ctx, n_swa + n_ubatch)`` cells padded to 256
    (llama-cli's default keeps the sliding window's cache small)."""
    per_cell = 2 * hp.n_embd_kv * F16_BYTES
    n_swa_layers = sum(hp.swa_layers)
    out = []
    if hp.n_layer > n_swa_layers:
        out.append(("KV cache", (hp.n_layer - n_swa_layers) * n_ctx * per_cell))
    if n_swa_layers:
        cells = padded_ctx(min(n_ctx, hp.n_swa + n_ubatch), 0)
        out.append(("KV cache (sliding window)", n_swa_layers * cells * per_cell))
    return tuple(out)


#: the requantization targets REDUCE_COMPILE_MEM streams (never the 4-bit ones)
STREAMED_TARGETS = frozenset({quant.RequantTarget.Q8_0_C, quant.RequantTarget.F16})


def policy_class(dev_class: str) -> str:
    """The requantization policy a device class follows (OTHER follows the CPU's)."""
    return dev_class if dev_class in ("CPU", "GPU", "NPU") else "CPU"


def _requant(t: Any, dev_class: str) -> quant.RequantDecision | None:
    return quant.requant_decision(t.name, dev_class, t.type, t.shape) if t.type in quant.QUANT_SPECS else None


def weight_buffer_bytes(gguf: GGUFModel, dev_class: str, skip: Sequence[str] = ()) -> int:
    """The backend's weight buffer on ``dev_class``: each tensor's allocation is its bytes in the
    file or, when larger, its layout after the requantization policy (three 64-byte aligned
    sections: weights, scales, zero points)."""
    sizes = ((t.nbytes, _requant(t, dev_class)) for t in gguf.tensors.values() if t.name not in skip)
    return sum(max(n, d.nbytes + 3 * 64) if d else n for n, d in sizes)


def requant_scratch_bytes(gguf: GGUFModel, dev_class: str, skip: Sequence[str], streamed: bool) -> int:
    """The f32 copy the backend dequantizes a weight into before requantizing it, for the largest
    such weight (``streamed``, REDUCE_COMPILE_MEM: 8-bit and f16 targets 256 rows at a time)."""
    worst = 0
    for t in gguf.tensors.values():
        decision = _requant(t, dev_class) if t.name not in skip else None
        if decision is None or decision.target is quant.RequantTarget.NATIVE:
            continue
        values = math.prod(t.shape)
        if streamed and decision.target in STREAMED_TARGETS:
            values = min(values, 256 * t.shape[-1])
        worst = max(worst, 4 * values)
    return worst


def refused_weights(gguf: GGUFModel, dev_class: str) -> list[str]:
    """Why the device cannot build a weight, per weight (``quant.requant_decision``: the NPU's
    4-bit groups of 128 need rows that are a multiple of 128)."""
    if dev_class not in ("CPU", "GPU", "NPU"):
        return []
    return [
        d.refused for t in gguf.tensors.values() if (d := _requant(t, dev_class)) is not None and not d.ok
    ]


def largest_weight(gguf: GGUFModel, dev_class: str) -> tuple[str, int]:
    """The largest single weight after the policy: one constant of the compiled model."""
    sizes = (
        (t.name, max(t.nbytes, d.nbytes) if (d := _requant(t, dev_class)) else t.nbytes)
        for t in gguf.tensors.values()
    )
    return max(sizes, key=lambda x: x[1], default=("", 0))


def largest_buffer(
    parts: Sequence[Part], gguf: GGUFModel, dev_class: str, *, own_memory: bool
) -> tuple[str, int]:
    """The largest single allocation: on a GPU or NPU, the largest constant of the compiled model
    or a KV buffer in device memory; on the CPU, the largest of ggml's buffers (the weights, each
    KV cache and the compute buffer are one buffer each)."""
    if own_memory:
        device_kv = [(p.name, p.bytes) for p in parts if p.where == DEVICE and p.name.startswith("KV cache")]
        return max([largest_weight(gguf, dev_class), *device_kv], key=lambda x: x[1])
    buffers = [
        (p.name, p.bytes) for p in parts if p.name.startswith(("weight buffer", "KV cache", "compute"))
    ]
    return max(buffers, key=lambda x: x[1], default=("", 0))


def backend_memory(sizes: ModelSizes, gguf: GGUFModel, dev: str, config: OvkitConfig) -> tuple[Part, ...]:
    """The backend's allocations with device ``dev`` selected (its exact OpenVINO id), by part.

    Only ``GPU`` exactly takes the backend's GPU branches (the KV cache moved to one USM device
    buffer, #29235); ``GPU.0`` keeps the KV cache on the host like the CPU, and so does the NPU
    ("NPU memory is too small even for kvcache").  Stateful execution keeps it on the host too."""
    cls = str(device_class(dev))
    policy = policy_class(cls)
    # llama.cpp keeps the input layer (token_embd) in the mapped file; a tied output head is that
    # tensor again, copied into the output layer's buffer
    embd = gguf.tensors.get("token_embd.weight")
    skip = () if "output.weight" not in gguf.tensors else ("token_embd.weight",)
    mapped_bytes = embd.nbytes if embd is not None else 0
    weights = weight_buffer_bytes(gguf, policy, skip)
    scratch = requant_scratch_bytes(gguf, policy, skip, streamed=config.reduce_compile_mem)
    kv_on_device = dev == "GPU" and not config.stateful(cls)
    compiled_where = HOST if cls in ("CPU", "OTHER") else DEVICE
    hp = sizes.hp
    if dev == "NPU":  # exactly: the static path
        activations, act_note = sizes.static_bytes, "the static prefill model's, at every cell (modelled)"
    else:
        activations = ACTIVATION_ROWS * 4 * (hp.n_embd + max(hp.n_ff, hp.n_ff_exp)) * sizes.n_prompt
        act_note = f"OpenVINO's, for a first decode of {sizes.n_prompt} tokens"
    kv_total = sum(b for _, b in sizes.kv_buffers)
    parts = [
        Part("runtime", HOST, Stage.LOAD, RUNTIME_BYTES, note="llama.cpp, OpenVINO and its plugin"),
        Part("file pages", HOST, Stage.LOAD, gguf.file_size - mapped_bytes, transient=True,
             note="the mapped file, read while the weights are copied, unmapped after"),
        Part("input embeddings (mapped)", HOST, Stage.LOAD, mapped_bytes, note="token_embd stays in the mapped file"),
        Part("requantization scratch", HOST, Stage.LOAD, scratch, transient=True,
             note="the largest requantized weight dequantized to f32"),
        Part("weight buffer", HOST, Stage.LOAD, weights, note="every weight as the device's policy extracts it"),
    ]  # fmt: skip
    if kv_on_device:
        parts.append(Part("KV cache staging", HOST, Stage.CONTEXT, kv_total, transient=True,
                          note="allocated on the host, then replaced by USM device memory"))  # fmt: skip
    where = DEVICE if kv_on_device else HOST
    parts += [Part(name, where, Stage.CONTEXT, size, note="one buffer") for name, size in sizes.kv_buffers]
    parts += [
        Part("compute buffers", HOST, Stage.CONTEXT, sizes.compute_bytes, note="llama.cpp's, one micro-batch"),
        Part("compiled model", compiled_where, Stage.DECODE, int(COMPILED_PER_WEIGHT_BYTE * weights) + COMPILED_BASE_BYTES,
             note="the plugin's copy of the weights, its kernels and the compile's leftovers"),
        Part("activations", compiled_where, Stage.DECODE, activations, note=act_note),
    ]  # fmt: skip
    return tuple(p for p in parts if p.bytes > 0)


# ----------------------------------------------------------------------------------------------
# Names


def naming(requested: str | None, *, core: Core | None) -> Naming:
    """What the backend does with ``GGML_OPENVINO_DEVICE=requested`` on ``core``'s devices."""
    sel = resolve_device({} if requested is None else {ENV_DEVICE: requested}, log=False, core=core)
    physical = layouts.physical(sel.available)
    lines: list[str] = []
    if not requested:
        lines.append("unset or empty: the backend uses CPU")
    elif sel.fell_back:
        lines.append(
            f"not an exact, case-sensitive member of the available devices ({', '.join(physical)}): the "
            f"backend logs 'GGML OpenVINO Backend: device {requested} is not available, fallback to CPU' "
            "and runs on the CPU"
        )
        if is_virtual(requested.upper()):
            lines.append(
                "virtual devices (AUTO:, HETERO:, MULTI:, BATCH:) are not accepted; PR #22644 (open) would "
                "accept them; with builds that pass them to OpenVINO, AUTO:GPU,CPU compiles and then every "
                "inference fails with port_find.found() on the KV tensors (#27927); multi-GPU is not "
                "supported (#25562)"
            )
        elif requested == "GPU" and any(d.startswith("GPU.") for d in physical):
            lines.append("this machine lists numbered GPUs: 'GPU' matches none of them (#29235)")
    if sel.device == "GPU":
        lines.append(
            "GPU exactly: the backend's GPU branches apply (an OpenCL context on the first platform's "
            "first GPU, the KV cache in one USM device buffer, the GPU op restrictions, manual GQA "
            "attention; GGML_OPENVINO_MEMORY_OPTIMIZE can release the host weights)"
        )
    elif sel.device.startswith("GPU"):
        lines.append(
            f'{sel.device} is accepted, but the backend\'s ~20 == "GPU" checks all miss it (#29235): no '
            "remote context, the KV cache stays in host memory, no GPU op restrictions, manual GQA off, "
            "RELEASE_WEIGHTS cannot be enabled"
        )
    elif sel.device == "NPU":
        lines.append(
            "NPU: the static path (a prefill model of GGML_OPENVINO_PREFILL_CHUNK_SIZE tokens and a decode "
            "model, both against every cell of the context), NPUW's compile config, the KV cache on the "
            "host, -np 1 only"
        )
    elif sel.device.startswith("NPU"):
        lines.append(f"{sel.device}: the static path needs exactly 'NPU'; this one runs the dynamic path")
    return Naming(requested, sel.device, sel.fell_back, tuple(lines), sel.hint)


# ----------------------------------------------------------------------------------------------
# The check


def model_sizes(
    gguf: GGUFModel, hp: HParams, n_ctx: int, n_ubatch: int, flash_attn: bool, static_chunk: int = 0
) -> tuple[ModelSizes, tuple[list[Any], ...]]:
    """Sizes from the header, and the op nodes of the prefill and decode graphs (for placement): the
    compute buffer is ggml's for llama.cpp's reserve graph plus the host's input and output rows;
    with ``static_chunk``, the NPU's static prefill model is sized too."""
    from ovkit.model.header import graph_inputs, header_graph, live_peak_bytes, op_nodes

    n_ub = min(n_ubatch, n_ctx)
    shape = GraphShape(n_ub, n_ctx, n_ctx, n_ub, flash_attn)
    g, out = header_graph(gguf, hp, shape)
    host_rows = hp.n_embd * n_ub * 4 + MIB // 2  # the input embeddings, gathered on the CPU
    compute = live_peak_bytes(g, out, tuple(graph_inputs(hp, shape))) + host_rows + hp.n_vocab * 4
    static = 0
    if static_chunk:
        chunk = min(static_chunk, n_ctx)
        static_shape = GraphShape(chunk, n_ctx, n_ctx, 1, flash_attn)
        static = live_peak_bytes(*header_graph(gguf, hp, static_shape), tuple(graph_inputs(hp, static_shape)))
        static += hp.n_head * chunk * n_ctx * 4
    kv_tensor = n_ctx * hp.n_embd_kv * F16_BYTES
    sizes = ModelSizes(hp, n_ctx, n_ub, kv_buffers(hp, n_ctx, n_ub), kv_tensor, compute, static)
    decode = header_graph(gguf, hp, GraphShape(1, n_ctx, n_ctx, 1, flash_attn))
    return sizes, (op_nodes(g, out), op_nodes(*decode))


def input_lookup(t: Any) -> bool:
    """The input embedding lookup (GET_ROWS on ``token_embd``): llama.cpp keeps the input layer's
    weights in the mapped file, so ggml's CPU runs it whatever ``supports_op`` says."""
    src = t.srcs[0] if t.srcs else None
    return str(t.op_key) == "GET_ROWS" and src is not None and src.name == "token_embd.weight"


def fallbacks(graphs: Sequence[Sequence[Any]], dev: str) -> tuple[Fallback, ...]:
    """Nodes of the prefill and decode graphs the backend leaves to ggml's CPU on ``dev`` (the
    policy's device gates apply to ``GPU`` exactly, as the backend's do)."""
    from ovkit.ops.policy import check_op

    cls = str(device_class(dev))
    gate_class = "OTHER" if cls == "GPU" and dev != "GPU" else cls
    decisions = ((t, check_op(t, gate_class)) for nodes in graphs for t in nodes if not input_lookup(t))
    found = Counter((str(t.op_key), d.reason) for t, d in decisions if not d.supported)
    return tuple(Fallback(op, n, reason) for (op, reason), n in sorted(found.items()))


def known_aborts(
    arch: str, cls: str, backend: str, config: OvkitConfig, *, flash_attn: bool, split: bool
) -> list[KnownAbort]:
    """The known aborts matching this model on this device class (``unless``: a ``GGML_OPENVINO_*``
    toggle that is on, as the backend parses them: ``atoi != 0``)."""
    on = {f"GGML_OPENVINO_{f.name.upper()}" for f in fields(config) if getattr(config, f.name) is True}
    return [
        a
        for a in KNOWN_ABORTS
        if backend in a.versions
        and (not a.archs or arch in a.archs)
        and (not a.device_classes or cls in a.device_classes)
        and a.flash_attn in (None, flash_attn)
        and (split or not a.split)
        and a.unless not in on
    ]


@dataclass(frozen=True, slots=True)
class _Failure:
    stage: Stage
    why: str
    issue: str = ""
    lifted_by: str = ""


def _abort(a: KnownAbort, found: Sequence[Fallback] = ()) -> _Failure:
    why = f"{a.what}: {a.message}"
    if a.split and found:
        n = sum(f.nodes for f in found)
        why = f"{n} nodes are left to ggml's CPU ({found[0].reason}); {why}"
    return _Failure(a.stage, why, ", ".join(a.issues), a.fixed_by)


def check_device(
    gguf: GGUFModel,
    sizes: ModelSizes | None,
    graphs: Sequence[Sequence[Any]],
    d: Any,
    *,
    core: Core,
    backend: BackendVersion,
    flash_attn: bool,
    unset: bool,
    host_free: int | None,
    config: OvkitConfig,
) -> DeviceCheck:
    """One device's verdict (``d``: an ``ovkit.devices.Device``, selected by its exact id)."""
    cls = str(d.device_class)
    arch = str(gguf.architecture)
    value = read_property(d.name, MAX_ALLOC_PROPERTY, core=core)[0] if cls == "GPU" else None
    max_alloc = None if value is None else int(value)
    shares = cls != "GPU" or shares_host_ram(d.name, core=core)  # CPU, OTHER, NPU, an integrated GPU
    dev_free = None if cls in ("CPU", "OTHER") else d.live.free_bytes
    found = fallbacks(graphs, d.name)
    aborts = known_aborts(arch, cls, backend.key, config, flash_attn=flash_attn, split=bool(found))
    notes = [f"evidence: {a.evidence}" for a in aborts]
    if sizes is None:  # an architecture ovkit has no graph for: only its known aborts speak
        weights = weight_buffer_bytes(gguf, policy_class(cls))
        f = _abort(aborts[0])
        only: tuple[Part, ...] = (Part("weight buffer", HOST, Stage.LOAD, weights),)
        return DeviceCheck(
            d.name, cls, bool(d.simulated), Verdict.FAILS, f.stage, f.why, f.issue, f.lifted_by, only,
            weights, 0, host_free, dev_free, ("", 0), max_alloc, (), tuple(notes),
        )  # fmt: skip
    parts = backend_memory(sizes, gguf, d.name, config)
    host_at, device_at = ({s: bytes_at(parts, where, s) for s in STAGES} for where in (HOST, DEVICE))
    kv_on_device = any(p.where == DEVICE and p.name.startswith("KV cache") for p in parts)
    policy = policy_class(cls)
    largest = largest_buffer(parts, gguf, policy, own_memory=cls in ("GPU", "NPU"))
    failures = [_abort(a, found) for a in aborts]
    refused = refused_weights(gguf, cls)
    if refused:
        more = f" (and {len(refused) - 1} more weights)" if len(refused) > 1 else ""
        failures.append(_Failure(Stage.LOAD, refused[0] + more))
    if max_alloc is not None and kv_on_device:
        kv_name, kv_bytes = max(sizes.kv_buffers, key=lambda x: x[1])
        split = backend.key in SPLITS_KV_BUFFER
        if split:
            notes.append(
                f"#29124 reports the {max_alloc:,}-byte cap as the buffer type's max size, so ggml splits "
                f"the KV cache into buffers under it (one layer's K or V: {sizes.kv_tensor_bytes:,} bytes)"
            )
            kv_name, kv_bytes = "KV cache's largest tensor (one layer's K)", sizes.kv_tensor_bytes
            largest = max(largest_weight(gguf, policy), (kv_name, kv_bytes), key=lambda x: x[1])
        if kv_bytes > max_alloc:
            why = (
                f"the {kv_name} is one {kv_bytes:,}-byte buffer, above {MAX_ALLOC_PROPERTY} ({max_alloc:,} "
                "bytes): 'Exceeded max size of memory object allocation', unable to create context"
            )
            lifted = "" if split else "#29124 (open): ggml then splits the KV buffer"
            failures.append(_Failure(Stage.CONTEXT, why, "#29087, #20661", lifted))
    if max_alloc is not None:
        name, size = largest_weight(gguf, policy)
        if size > max_alloc:
            why = f"weight {name} is one {size:,}-byte constant, above {MAX_ALLOC_PROPERTY} ({max_alloc:,} bytes)"
            failures.append(_Failure(Stage.DECODE, why, "#20661"))
    for stage in STAGES:  # memory, stage by stage: where it first runs out
        on_device = device_at[stage]
        need = host_at[stage] + (on_device if shares else 0)
        if host_free is not None and need > host_free:
            carved = " (its device memory is host RAM)" if shares and on_device else ""
            why = f"needs {format_bytes(need)} of host RAM{carved}, {format_bytes(host_free)} available"
            failures.append(_Failure(stage, why, "#22712, #23939"))
            break
        if dev_free is not None and on_device > dev_free:
            why = f"needs {format_bytes(on_device)} of device memory, {format_bytes(dev_free)} free"
            failures.append(_Failure(stage, why, "#23939"))
            break
    if d.name == "NPU":  # its static shapes at this context and prefill chunk
        n, chunk, n_head = sizes.n_ctx, config.prefill_chunk_size, sizes.hp.n_head
        notes.append(
            f"static shapes: the prefill model takes {chunk} tokens (GGML_OPENVINO_PREFILL_CHUNK_SIZE) against "
            f"all {n:,} cells (mask {chunk}x{n:,}: {format_bytes(chunk * n * F16_BYTES)}; one layer's attention "
            f"scores {n_head}x{chunk}x{n:,} in f32: {format_bytes(n_head * chunk * n * 4)}), the decode model 1 "
            "token against all cells: every step pays for the whole context"
        )
        if unset:
            notes.append(
                "a context left at the training length is the likely cause of NPU failures and hangs "
                "(#29288, #20938): the docs ask for an explicit -c on the NPU"
            )
    first = min(failures, key=lambda f: STAGES.index(f.stage), default=_Failure(Stage.LOAD, ""))
    why = first.why
    if unset and sizes.n_ctx > LONG_CONTEXT and first.issue.startswith(("#29087", "#22712", "#23939")):
        why += f" (-c unset: the training context {sizes.n_ctx:,} is the likely cause)"
    verdict = Verdict.FAILS if failures else Verdict.FALLBACK if found else Verdict.RUNS
    return DeviceCheck(
        d.name, cls, bool(d.simulated), verdict, first.stage if failures else None, why, first.issue,
        first.lifted_by, parts, max(host_at.values()),
        max(device_at.values()), host_free, dev_free, largest, max_alloc, found, tuple(notes),
    )  # fmt: skip


def check(
    path: str | os.PathLike[str],
    n_ctx: int | None = None,
    *,
    device: str | None = None,
    core: Core | None = None,
    simulate: str | None = None,
    n_ubatch: int = DEFAULT_N_UBATCH,
    flash_attn: bool = True,
    backend: str = DEFAULT_BACKEND,
    env: Mapping[str, str] | None = None,
) -> Preflight:
    """Will ``path`` run on each device at ``-c n_ctx`` (None or 0: the training context), and what
    will it take?  ``device``: a ``GGML_OPENVINO_DEVICE`` value, checked alone and explained;
    ``backend``: a key of ``BACKENDS``; ``env``: other ``GGML_OPENVINO_*`` settings."""
    if backend not in BACKENDS:
        raise PreflightError(
            f"backend {backend!r} is not a known version (expected one of {', '.join(BACKENDS)})"
        )
    if n_ctx is not None and (isinstance(n_ctx, bool) or not isinstance(n_ctx, int)):
        raise PreflightError(f"-c {n_ctx!r}: expected a whole number of tokens (0: the training context)")
    if n_ctx is not None and not 0 <= n_ctx <= MAX_N_CTX:
        raise PreflightError(
            f"-c {n_ctx:,}: expected 0 (the training context) to {MAX_N_CTX:,} tokens "
            "(llama.cpp holds the padded context in a uint32)"
        )
    version = BACKENDS[backend]
    if isinstance(n_ubatch, bool) or not isinstance(n_ubatch, int) or n_ubatch < 1:
        raise PreflightError(f"-ub {n_ubatch!r}: expected a whole number of tokens >= 1")
    if simulate is not None:
        try:
            core = SimulatedCore(simulate)
        except UnknownProfileError as exc:
            raise PreflightError(str(exc)) from None
    core = get_core(core)
    try:
        gguf = read_gguf(path)  # the header and tensor table, memory-mapped: no tensor data is read
    except GGUFError as exc:
        raise PreflightError(str(exc)) from None
    arch = gguf.architecture
    if arch is None:
        raise PreflightError(f"{gguf.path}: the header has no general.architecture")
    config = read_config(
        {k: v for k, v in (env or {}).items() if k.startswith("GGML_OPENVINO_") and k != ENV_DEVICE}
    )
    hp: HParams | None = None
    if arch in ARCHS:
        from ovkit.model.footprint import predicted_peak
        from ovkit.model.limits import model_hparams

        try:
            hp = model_hparams(gguf)
        except ModelError as exc:
            raise PreflightError(str(exc)) from None
    n_ctx_train = hp.n_ctx_train if hp else int(gguf.metadata.get(f"{arch}.context_length", 0) or 0)
    if not n_ctx_train and not n_ctx:
        raise PreflightError(f"{gguf.path}: -c 0 asks for the training context, but the header has no {arch}.context_length")  # fmt: skip
    cells = padded_ctx(n_ctx, n_ctx_train)
    if cells > MAX_N_CTX:
        raise PreflightError(f"{gguf.path}: a context of {cells:,} cells: llama.cpp holds it in a uint32")
    devices = list_devices(core=core)
    names = None
    if device is not None:
        names = naming(device, core=core)
        devices = [d for d in devices if d.name == names.device]
    sizes: ModelSizes | None = None
    graphs: tuple[list[Any], ...] = ()
    if hp is not None:
        chunk = config.prefill_chunk_size if any(d.name == "NPU" for d in devices) else 0
        sizes, graphs = model_sizes(gguf, hp, cells, n_ubatch, flash_attn, chunk)
    else:  # only its known aborts can answer: every device must have one
        aborts = [
            known_aborts(arch, str(d.device_class), version.key, config, flash_attn=flash_attn, split=False)
            for d in devices
        ]
        if not all(aborts) or not devices:
            raise PreflightError(
                f"{gguf.path}: architecture {arch!r} is not one ovkit can size on backend {version.key} "
                f"(expected one of {', '.join(sorted(ARCHS))})"
            )
    host_free = host_memory(core).available_bytes
    checks = tuple(
        check_device(
            gguf, sizes, graphs, d, core=core, backend=version, flash_attn=flash_attn, unset=not n_ctx,
            host_free=host_free, config=config,
        )
        for d in devices
    )  # fmt: skip
    simulated = simulate or (core.profile.name if isinstance(core, SimulatedCore) else None)
    notes: tuple[str, ...] = ()
    if not n_ctx and cells > LONG_CONTEXT:
        notes = (
            f"-c was not given: llama.cpp's default is the training context ({cells:,} cells); pass -c "
            "to size the KV cache for what you need",
        )
    return Preflight(
        gguf.path, arch, gguf.file_size, n_ctx, cells, n_ctx_train, min(n_ubatch, cells),
        sizes.n_prompt if sizes else 0, flash_attn, version, checks, names,
        predicted_peak(gguf, hp, cells) if hp else None, simulated, notes,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Command line


def add_cli_args(p: Any) -> None:
    """Arguments of ``ovkit check FILE``."""
    p.add_argument("file", help="path of a .gguf file")
    p.add_argument("-c", "--ctx-size", dest="n_ctx", type=int, default=None,
                   help="the context, as llama.cpp's -c (default: unset, the training context)")  # fmt: skip
    p.add_argument(
        "--device", metavar="D", help="a GGML_OPENVINO_DEVICE value: what the backend does with it"
    )
    p.add_argument("--simulate", metavar="PROFILE", help="a simulated device set (e.g. laptop)")
    p.add_argument("--backend", default=DEFAULT_BACKEND, help=f"backend version: {', '.join(BACKENDS)}")
    p.add_argument("--fa", choices=("on", "off"), default="on", help="flash attention (default on)")
    p.add_argument("-ub", "--ubatch-size", dest="n_ubatch", type=int, default=DEFAULT_N_UBATCH,
                   help="the micro-batch, as llama.cpp's -ub (default 512)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def cli(args: Any) -> int:
    """``ovkit check FILE``: the verdict table (exit 0 whatever the verdicts: they are the answer)."""
    import sys

    result = check(
        args.file, args.n_ctx, device=args.device, simulate=args.simulate, backend=args.backend,
        flash_attn=args.fa == "on", n_ubatch=args.n_ubatch, env=os.environ,
    )  # fmt: skip
    if args.simulate:
        print(SIMULATED_NOTICE.format(args.simulate), file=sys.stderr)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.report())
    return 0
