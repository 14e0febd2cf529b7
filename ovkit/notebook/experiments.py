"""The walkthroughs' small experiments: they run something (quantized matmuls, a weight release,
one layer of a model, supports_op per selection) and return its numbers as a table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ovkit.devices import physical_device_ids
from ovkit.memory import format_bytes, process_rss_bytes
from ovkit.runtime import Core

if TYPE_CHECKING:
    import pandas as pd


# -- quantized weights ---------------------------------------------------------------------------
def quantized_matmul_table(
    w: Any, x: Any, device: str, types: Sequence[str] | None = None, *, core: Core | None = None
) -> pd.DataFrame:
    """``x @ W.T`` on ``device`` for ``w`` in each quantized type (default: every one): size, bits
    per weight, and NMSE against the dequantized weights (and against ggml's quantized kernels
    when available)."""
    import pandas as pd

    from ovkit import oracle, quant
    from ovkit.graph import Graph

    rows = []
    for qtype in quant.QUANT_TYPES if types is None else types:
        qw = quant.quantize(qtype, w)
        g = Graph()
        got = g.compute(g.mul_mat(g.constant(qw), g.input("x", x.shape)), {"x": x}, device=device, core=core)
        row = {
            "type": qtype,
            "size": format_bytes(qw.nbytes),
            "bits/weight": 8 * qw.nbytes / w.size,
            "NMSE vs dequantized": oracle.nmse(got, x @ qw.dequantize().T),
            "quantization error": oracle.nmse(qw.dequantize(), w),
        }
        if oracle.ggml_available():
            row["NMSE vs ggml"] = oracle.nmse(got, oracle.ggml_mul_mat_quant(qtype, w, x))
        rows.append(row)
    return pd.DataFrame(rows).set_index("type")


# -- weight release ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReleaseDemo:
    """What releasing one f16 weight's host copy did (see :func:`weight_release_demo`)."""

    message: str
    released_bytes: int
    rss_before: int
    rss_after: int
    zeros_after: bool
    results_unchanged: bool
    recompile_error: str

    @property
    def rss_drop(self) -> int:
        return self.rss_before - self.rss_after

    def __str__(self) -> str:
        rss = f"{format_bytes(self.rss_before)} -> {format_bytes(self.rss_after)}: {format_bytes(self.rss_drop)}"
        return (
            f"{self.message}\nresident memory {rss} back to the OS\nhost copy reads as zeros now: "
            f"{self.zeros_after}\nresults unchanged: {self.results_unchanged}\nrecompile refused: {self.recompile_error}"
        )

    __repr__ = __str__


def weight_release_demo(rows: int, k: int, seed: int = 0) -> ReleaseDemo:
    """Compile a ``rows x k`` f16 matmul on the CPU from an ovkit host weight buffer (zero-copy,
    as upstream), then release the host copy as the engine does on the first cache hit."""
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    from ovkit import buffers, weight_release
    from ovkit.config import read_config
    from ovkit.runtime import default_core

    rng = np.random.default_rng(seed)
    weight_release.reset()
    wbuf = buffers.alloc_buffer("CPU", rows * k * 2, "weights", host=True)
    try:
        wt = wbuf.place("blk.0.ffn_up.weight", (rows, k), "f16")
        wbuf.set_weight(wt, (rng.standard_normal((rows, k)) * 0.05).astype(np.float16))  # registers it
        xin = ops.parameter([1, k], ov.Type.f32, name="x")
        weight = ops.convert(ops.constant(wt.numpy(), shared_memory=True), "f32")
        model = ov.Model([ops.matmul(xin, weight, False, True)], [xin])
        request = default_core().compile_model(model, "CPU").create_infer_request()
        x = rng.standard_normal((1, k)).astype(np.float32)
        before = np.array(request.infer({0: x})[0])
        rss_before = process_rss_bytes()
        released = weight_release.on_cache_hit("CPU", read_config({"GGML_OPENVINO_RELEASE_WEIGHTS": "1"}))
        rss_after = process_rss_bytes()
        if released is None:
            raise RuntimeError("weight release found no registered host weights to release")
        unchanged = bool(np.array_equal(np.array(request.infer({0: x})[0]), before))
        try:
            weight_release.before_compile("CPU")
            refused = "no (expected WeightsReleasedError)"
        except weight_release.WeightsReleasedError as exc:
            refused = str(exc)
        zeros = not wbuf.data.any()
    finally:
        wbuf.free()
        weight_release.reset()  # a notebook only: a real backend process has no way back
    return ReleaseDemo(
        released.message, released.released_bytes, rss_before, rss_after, zeros, unchanged, refused
    )


def perf_cases_within(cases: Iterable[Any], max_mib: float, max_gflop: float) -> list[Any]:
    """The perf cases with at most ``max_mib`` MiB of inputs and ``max_gflop`` GFLOP of work."""
    import numpy as np

    from ovkit.catalogue.case import PLAIN_TYPES

    def input_bytes(c: Any) -> int:
        return sum(
            int(np.prod(lf.ne)) * np.dtype(PLAIN_TYPES.get(lf.dtype, np.float32)).itemsize for lf in c.leaves
        )

    return [c for c in cases if input_bytes(c) <= max_mib * (1 << 20) and c.flops <= max_gflop * 1e9]


# -- GGUF ----------------------------------------------------------------------------------------
def tiny_llama_tensors(
    n_layers: int, n_embd: int, n_ff: int, n_vocab: int, qtype: str, down_qtype: str, seed: int = 0
) -> dict[str, Any]:
    """Random llama-style weights with llama.cpp's tensor names: matrices quantized to ``qtype``
    (``ffn_down`` and the output head to ``down_qtype``, as mixed quantizations do), norms f32."""
    import numpy as np

    from ovkit import quant

    rng = np.random.default_rng(seed)

    def weight(name: str, rows: int, cols: int, qt: str) -> Any:
        w = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
        return quant.quantize(qt, w, name=name)

    tensors: dict[str, Any] = {"token_embd.weight": weight("token_embd.weight", n_vocab, n_embd, qtype)}
    for i in range(n_layers):
        b = f"blk.{i}."
        tensors[b + "attn_norm.weight"] = np.ones(n_embd, np.float32)
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensors[b + part + ".weight"] = weight(b + part + ".weight", n_embd, n_embd, qtype)
        tensors[b + "ffn_norm.weight"] = np.ones(n_embd, np.float32)
        tensors[b + "ffn_gate.weight"] = weight(b + "ffn_gate.weight", n_ff, n_embd, qtype)
        tensors[b + "ffn_up.weight"] = weight(b + "ffn_up.weight", n_ff, n_embd, qtype)
        tensors[b + "ffn_down.weight"] = weight(b + "ffn_down.weight", n_embd, n_ff, down_qtype)
    tensors["output_norm.weight"] = np.ones(n_embd, np.float32)
    tensors["output.weight"] = weight("output.weight", n_vocab, n_embd, down_qtype)
    return tensors


def layer_matmul_table(
    model: Any, layer: int, x: Any, device: str, *, core: Core | None = None
) -> pd.DataFrame:
    """One layer's seven matmuls run from their quantized blocks on ``device``: NMSE against the
    dequantized weights (``ffn_down`` after SwiGLU, as the layer computes it) and against ggml."""
    import numpy as np
    import pandas as pd

    from ovkit import oracle
    from ovkit.graph import Graph

    prefix = f"blk.{layer}."
    w = {n[len(prefix) :].split(".")[0]: model.constant(n) for n in model.tensors if n.startswith(prefix)}
    w = {k: v for k, v in w.items() if "norm" not in k}
    g = Graph()
    xin = g.input("x", x.shape)
    c = {k: g.constant(v) for k, v in w.items()}
    outs = {k: g.mul_mat(c[k], xin) for k in w if k != "ffn_down"}
    outs["ffn_down"] = g.mul_mat(c["ffn_down"], g.swiglu_split(outs["ffn_gate"], outs["ffn_up"]))
    got = dict(zip(outs, g.compute(list(outs.values()), {"x": x}, device=device, core=core), strict=True))
    # ffn_down's input, SwiGLU as the device computed it
    act = got["ffn_gate"] / (1 + np.exp(-got["ffn_gate"])) * got["ffn_up"]
    rows = []
    for k in outs:
        src = act if k == "ffn_down" else x
        row = {"matmul": k, "type": w[k].dtype, "shape": w[k].shape}
        row["NMSE vs dequantized"] = oracle.nmse(got[k], src @ w[k].dequantize().T)
        if oracle.ggml_available():
            blocks = oracle.QuantArray(w[k].dtype, w[k].shape, w[k].raw)
            row["NMSE vs ggml"] = oracle.nmse(got[k], oracle.ggml_call("mul_mat", blocks, src))
        rows.append(row)
    return pd.DataFrame(rows).set_index("matmul")


# -- device selection ----------------------------------------------------------------------------
def supports_op_matrix(
    op: Any, *, core: Core | None = None
) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """``supports_op`` of every device for ``op`` with each device selected in turn: the yes/no
    matrix (rows: the selection) and every decision with its reason."""
    import pandas as pd

    from ovkit.selection import Backend, resolve_device

    physical = physical_device_ids(core)
    decisions = {}
    for selected in physical:
        backend = Backend(
            resolve_device(env={"GGML_OPENVINO_DEVICE": selected}, log=False, core=core), core=core
        )
        decisions[selected] = {name: backend.supports_op(name, op) for name in physical}
    matrix = pd.DataFrame(
        {f"selected {s}": {n: "yes" if d else "no" for n, d in row.items()} for s, row in decisions.items()}
    ).T
    return matrix.rename_axis(columns=f"supports_op(device, {op.op})"), decisions
