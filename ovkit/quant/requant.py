"""Upstream's requantization: the targets a weight becomes per device class (:class:`RequantTarget`),
ggml's arithmetic of each (:func:`requantize`) and the policy table (:data:`REQUANT_RULES`,
queried by :func:`requant_type`)."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit.config import FROM_ENV, FromEnv, requant_kquant_env
from ovkit.dtypes import QUANT_TYPES
from ovkit.quant.decode import Decoded
from ovkit.quant.specs import HOST_TYPES, QuantError, n_rows, quant_spec

if TYPE_CHECKING:
    import pandas as pd


class RequantTarget(enum.StrEnum):
    """What a weight becomes on a device (NATIVE = extracted as its own type; UNSUPPORTED = the
    device refuses the type, as upstream's type gate does for the host-decoded types)."""

    NATIVE = "native"
    UNSUPPORTED = "not supported"
    Q8_0_C = "q8_0_c"  # per-row symmetric i8 (G = ne0)
    Q4_0_128 = "q4_0_128"  # symmetric i4, G = 128
    Q4_0_64 = "q4_0_64"  # symmetric i4, G = 64 (REQUANT_KQUANT's MoE experts; GPU's Q5_1/Q8_0 experts)
    Q4_1_64 = "q4_1_64"  # u4 with a u4 zero point per group, G = 64 (REQUANT_KQUANT=q4_asym64_all)
    F16 = "f16"


#: OpenVINO element type of a requantized weight's Constant.
REQUANT_CONTAINER: dict[RequantTarget, str] = {
    RequantTarget.Q8_0_C: "i8",
    RequantTarget.Q4_0_128: "i4",
    RequantTarget.Q4_0_64: "i4",
    RequantTarget.Q4_1_64: "u4",
    RequantTarget.F16: "f16",
}


def _roundf(v: np.ndarray) -> np.ndarray:
    """C ``roundf``/``lroundf`` of f32 values: half away from zero (exact: f32 + 0.5 fits f64)."""
    w = v.astype(np.float64)
    return np.trunc(w + np.copysign(0.5, w))


def _f16_scale(d: np.ndarray) -> np.ndarray:
    """The f16 scale upstream stores (``ov::float16(d)``), as f32."""
    with np.errstate(over="ignore"):
        return d.astype(np.float16).astype(np.float32)


def _requant_q4_sym(g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``quantize_q4_0``'s signed branch per group: ``d = max / -8`` (max: the value of largest
    magnitude, first one on ties), ``q = clamp(roundf(x * (1/d)), -8, 7)``; a zero group gets
    scale 1 and zeros."""
    idx = np.abs(g).argmax(axis=2)[..., None]
    d = (np.take_along_axis(g, idx, axis=2) / np.float32(-8)).astype(np.float32)
    zero = d == 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = (np.float32(1) / np.where(zero, np.float32(1), d)).astype(np.float32)
        q = np.clip(_roundf((g * inv).astype(np.float32)), -8, 7)
    q = np.where(zero, 0, q).astype(np.int8)
    return q, np.where(zero, np.float32(1), _f16_scale(d))[..., 0], None


def _requant_q4_asym(g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``quantize_q4_1_asym`` per group: the range widened to hold 0, ``d = (max - min) / 15``,
    zero point ``zq = clamp(lroundf(-min / d), 0, 15)``, ``q = clamp(lroundf(x / d) + zq, 0, 15)``
    (``/ d`` as ``* (1/d)`` in f32), value ``(q - zq) * f16(d)``: here ``q * s + bias`` with
    ``bias = -zq * s``; a constant-zero group gets scale 1, zero point 0 and zeros."""
    lo = np.minimum(g.min(axis=2, keepdims=True), np.float32(0))
    hi = np.maximum(g.max(axis=2, keepdims=True), np.float32(0))
    with np.errstate(over="ignore", invalid="ignore"):
        d = ((hi - lo) / np.float32(15)).astype(np.float32)
    zero = d == 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = (np.float32(1) / np.where(zero, np.float32(1), d)).astype(np.float32)
        zq = np.clip(_roundf((-lo * inv).astype(np.float32)), 0, 15)
        q = np.clip(_roundf((g * inv).astype(np.float32)) + zq, 0, 15)
    q = np.where(zero, 0, q).astype(np.uint8)
    zq = np.where(zero, 0, zq).astype(np.float32)[..., 0]
    scale = np.where(zero, np.float32(1), _f16_scale(d))[..., 0]
    return q, scale, (-zq * scale).astype(np.float32)


#: Upstream's grouped 4-bit requantizers (``requantize_to_buffers`` in ggml-quants.cpp): target ->
#: (elements per scale, quantizer).  Q8_0_C is per row and has its own code below.
REQUANT_GROUPED: dict[RequantTarget, tuple[int, Callable[..., Any]]] = {
    RequantTarget.Q4_0_128: (128, _requant_q4_sym),
    RequantTarget.Q4_0_64: (64, _requant_q4_sym),
    RequantTarget.Q4_1_64: (64, _requant_q4_asym),
}


def requantize(values: np.ndarray, target: RequantTarget) -> Decoded:
    """Upstream's requantization of f32 rows (``requantize_to_buffers``): Q8_0_C per row, or the
    grouped 4-bit quantizers, scales rounded to f16 as the device holds them."""
    x = np.asarray(values, dtype=np.float32)
    rows, k = x.shape[0] if x.ndim > 1 else 1, x.shape[-1]
    x = x.reshape(rows, k)
    if target is RequantTarget.Q8_0_C:
        d = np.abs(x).max(axis=1, keepdims=True) / 127.0
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(d != 0, np.rint(x / d), 0).astype(np.int8)
        return Decoded(q, d.astype(np.float32), None, k)
    if target in REQUANT_GROUPED:
        refused = requant_refusal(target, "f32", (rows, k), "rows")
        if refused:
            raise QuantError(refused)
        group, quantizer = REQUANT_GROUPED[target]
        q, scale, bias = quantizer(x.reshape(rows, k // group, group))
        return Decoded(q.reshape(rows, k), scale, bias, group)
    raise QuantError(f"requantize: {target!s} is not an integer requantization target")


@dataclass(frozen=True, slots=True)
class RequantRule:
    """One row of the policy: a tensor-name prefix (or ``*``), device class, source types, target;
    ``kquant``: the GGML_OPENVINO_REQUANT_KQUANT values the row applies to (``*``: any, unset
    included); ``experts``: only 3-D MoE expert weights (ggml ``ne[2] > 1``)."""

    name_prefix: str
    device_class: str  # "CPU", "GPU", "NPU"
    types: tuple[str, ...]  # source types the row applies to ("*" = every quantized type)
    target: RequantTarget
    note: str = ""
    kquant: tuple[str, ...] = ("*",)
    experts: bool = False

    def matches(self, tensor_name: str, device_class: str, qtype: str, experts: bool, kquant: str) -> bool:
        return (
            self.device_class == device_class
            and (self.name_prefix == "*" or tensor_name.startswith(self.name_prefix))
            and (self.types == ("*",) or qtype in self.types)
            and (self.kquant == ("*",) or kquant in self.kquant)
            and (experts or not self.experts)
        )


_K56 = ("q5_K", "q6_K")
_OTHER = tuple(q for q in QUANT_TYPES if q not in _K56)  # every other type upstream extracts
_EXPERT_8BIT = ("q5_1", "q8_0")  # MoE experts kept at 8 bits by default (grouped u8/i8)
_SYM128 = ("q4_sym128", "q4_sym128_all")
_ASYM64 = ("q4_asym64", "q4_asym64_all")
_CPU_GPU = ("CPU", "GPU")

#: Upstream's ``ggml_openvino_get_requant_type`` (ggml-openvino-extra.cpp): first matching row
#: wins, in its order: the name rules, the NPU's blanket i4, then on CPU/GPU the REQUANT_KQUANT
#: choices (Q4_K with ``_all``, 3-D Q5_1/Q8_0 experts, Q5_K/Q6_K).  It follows the newest source
#: (Intel's fork, whose variable list ``ovkit.config.ENV_VARS`` follows); llama-cpp-python
#: 0.3.36's copy has no ``q4_asym64`` (without ``_all``) and reads it as unset.  The
#: host-decoded types come first: supports_op's type gate refuses them before any rule.
# fmt: off
REQUANT_RULES: tuple[RequantRule, ...] = (
    *(RequantRule("*", d, HOST_TYPES, RequantTarget.UNSUPPORTED, "refused by supports_op's type gate")
      for d in ("CPU", "GPU", "NPU")),
    *(RequantRule("token_embd.weight", d, ("*",), RequantTarget.Q8_0_C, "embeddings: per-row i8") for d in _CPU_GPU),
    RequantRule("token_embd.weight", "NPU", ("q6_K",), RequantTarget.F16, "NPU embeddings from Q6_K: f16"),
    RequantRule("token_embd.weight", "NPU", ("*",), RequantTarget.Q8_0_C, "NPU embeddings: per-row i8"),
    *(RequantRule("output.weight", d, ("*",), RequantTarget.Q8_0_C, "output head: per-row i8")
      for d in ("CPU", "GPU", "NPU")),
    RequantRule("*", "NPU", _K56, RequantTarget.Q4_0_128, "NPU: i4 symmetric, G=128"),
    RequantRule("*", "NPU", _OTHER, RequantTarget.Q4_0_128, "NPU: i4 symmetric G=128 (even Q8_0)"),
    *(rule for d in _CPU_GPU for rule in (
        RequantRule("*", d, ("q4_K",), RequantTarget.Q4_0_128, "REQUANT_KQUANT: Q4_K too", ("q4_sym128_all",)),
        RequantRule("*", d, ("q4_K",), RequantTarget.Q4_1_64, "REQUANT_KQUANT: Q4_K too", ("q4_asym64_all",)),
        RequantRule("*", d, _EXPERT_8BIT, RequantTarget.Q4_0_64, "REQUANT_KQUANT: 8-bit experts, G=64",
                    _SYM128, True),
        RequantRule("*", d, _EXPERT_8BIT, RequantTarget.Q4_1_64, "REQUANT_KQUANT: 8-bit experts, G=64",
                    _ASYM64, True),
    )),
    RequantRule("*", "GPU", _EXPERT_8BIT, RequantTarget.NATIVE, "REQUANT_KQUANT=native: experts kept",
                ("native",), True),
    RequantRule("*", "GPU", _EXPERT_8BIT, RequantTarget.Q4_0_64,
                "GPU: 8-bit experts to i4 G=64 (the plugin's grouped 8-bit GatherMatmul is wrong)", experts=True),
    *(rule for d in _CPU_GPU for rule in (
        RequantRule("*", d, _K56, RequantTarget.Q4_0_128, "REQUANT_KQUANT: i4 symmetric, G=128", _SYM128),
        RequantRule("*", d, _K56, RequantTarget.Q4_1_64, "REQUANT_KQUANT: u4 asymmetric, G=64", _ASYM64),
        RequantRule("*", d, _K56, RequantTarget.NATIVE, "REQUANT_KQUANT=native", ("native",)),
        RequantRule("*", d, _K56, RequantTarget.Q8_0_C, "Q5_K/Q6_K: per-row i8 on CPU/GPU"),
    )),
    *(RequantRule("*", d, _OTHER, RequantTarget.NATIVE, "native extraction") for d in _CPU_GPU),
)
# fmt: on


def requant_refusal(target: RequantTarget, qtype: str, shape: Sequence[int], what: str = "weight") -> str:
    """Why a device cannot build a ``qtype`` weight of ``shape`` requantized to ``target`` ("" if
    it can): upstream refuses the type, or a grouped 4-bit target's groups straddle rows (its
    Reshape back to ``[rows, ne0]`` then fails)."""
    name = str(qtype)
    if target is RequantTarget.UNSUPPORTED:
        return (
            f"{name} {what}: requant target {target!s}: the policy refuses this weight "
            "(upstream has no extraction for it); expected a target the device builds"
        )
    k = int(shape[-1])
    group = REQUANT_GROUPED[target][0] if target in REQUANT_GROUPED else 0
    if group and k % group:
        return (
            f"{name} {what} of shape {tuple(int(d) for d in shape)}: requant target {target!s} "
            f"needs rows that are a multiple of {group}, got {k}; upstream's requantization has "
            "no other group for it (its weight Reshape fails and the model does not load)"
        )
    return ""


@dataclass(frozen=True, slots=True)
class RequantDecision:
    """What a device class does with one stored weight: the target, its bytes, or why it cannot."""

    name: str
    qtype: str
    shape: tuple[int, ...]
    target: RequantTarget
    refused: str  # "" when the device builds the weight

    @property
    def ok(self) -> bool:
        return not self.refused

    @property
    def nbytes(self) -> int:
        """Bytes on the device after the policy (a refused Q4_0_128 weight: what upstream allocates
        before its build fails; UNSUPPORTED has no size: QuantError)."""
        return requant_bytes(self.target, self.qtype, self.shape)


def requant_decision(
    tensor_name: str,
    device_class: str,
    qtype: str,
    shape: Sequence[int],
    *,
    no_requant: bool = False,
    kquant: str | None | FromEnv = FROM_ENV,
) -> RequantDecision:
    """Upstream's target for this weight on ``device_class`` and, when the device cannot build it,
    the reason: the one decision placement, fit and the runner share."""
    target = requant_type(tensor_name, device_class, qtype, no_requant=no_requant, shape=shape, kquant=kquant)
    dims = tuple(int(d) for d in shape)
    what = f"weight {tensor_name!r}" if tensor_name else "weight"
    name = quant_spec(qtype).name
    return RequantDecision(tensor_name, name, dims, target, requant_refusal(target, name, dims, what))


def requant_type(
    tensor_name: str,
    device_class: str,
    qtype: str,
    *,
    no_requant: bool = False,
    shape: Sequence[int] = (),
    kquant: str | None | FromEnv = FROM_ENV,
) -> RequantTarget:
    """The policy's target for a quantized weight (native with ``no_requant``, upstream's
    ``use_bias``); ``shape`` tells MoE experts apart, ``kquant`` is REQUANT_KQUANT (default: the env)."""
    spec = quant_spec(qtype)
    cls = str(device_class).upper()
    if cls not in ("CPU", "GPU", "NPU") or (no_requant and not spec.host_decoded):
        return RequantTarget.NATIVE
    choice = requant_kquant_env() if kquant is FROM_ENV else kquant
    experts = len(shape) >= 3 and int(shape[-3]) > 1
    for rule in REQUANT_RULES:
        if rule.matches(tensor_name, cls, spec.name, experts, str(choice or "")):
            return rule.target
    return RequantTarget.NATIVE


def requant_table() -> pd.DataFrame:
    """The policy as a DataFrame (one row per rule, in match order)."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "tensor": r.name_prefix,
                "device_class": r.device_class,
                "types": ", ".join(r.types),
                "target": str(r.target),
                "requant_kquant": ", ".join(r.kquant),
                "experts_only": r.experts,
                "note": r.note,
            }
            for r in REQUANT_RULES
        ]
    )


def requant_bytes(target: RequantTarget, qtype: str, shape: Sequence[int]) -> int:
    """Bytes a weight of ``shape`` occupies after the policy (weights + scales [+ zero points]);
    a host-decoded type kept NATIVE is an f32 constant (its upper bound)."""
    spec = quant_spec(qtype)
    if target is RequantTarget.UNSUPPORTED:
        raise QuantError(f"requant_bytes: the policy refuses {spec.name} weights ({target!s}): no size")
    n = math.prod(int(d) for d in shape)
    rows = n_rows(shape)
    if target is RequantTarget.Q8_0_C:
        return n + rows * 2
    if target in REQUANT_GROUPED:  # u4/i4 weights, f16 scales [, u4 zero points two a byte]
        groups = n // REQUANT_GROUPED[target][0]
        return n // 2 + groups * 2 + ((groups + 1) // 2 if target is RequantTarget.Q4_1_64 else 0)
    if target is RequantTarget.F16:
        return n * 2
    if spec.host_decoded:
        return n * 4
    groups = n // spec.group
    zp = 0 if spec.symmetric else (groups + 1) // 2 if spec.bits == 4 else groups  # u4 or u8 zero points
    scale_bytes = groups * (1 if spec.name == "mxfp4" else 2)  # f8e8m0 or f16
    return n * spec.container_bits // 8 + scale_bytes + zp
