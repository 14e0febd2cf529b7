"""ggml's quantized types as ovkit knows them: block geometry, how upstream extracts each type
(integer container, group, symmetric or not) and the checks of a quantized tensor's shape."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ovkit.dtypes import QUANT_TYPES, ggml_type
from ovkit.errors import OvkitError

QK_K = 256
Form = Literal["fast", "upstream", "upstream_bias"]
FORMS: tuple[str, ...] = ("fast", "upstream", "upstream_bias")


class QuantError(OvkitError, ValueError):
    """Raw blocks that do not hold the declared quantized tensor, or an unknown type/form."""


@dataclass(frozen=True, slots=True)
class QuantSpec:
    """One ggml quantized type: block geometry and how upstream extracts it."""

    name: str  # ggml's lower-case type name ("q4_0", "q4_K", ...)
    ggml_type: int  # GGML_TYPE_* value (= gguf.GGMLQuantizationType)
    block: int  # elements per block
    type_size: int  # bytes per block
    group: int  # elements sharing one scale after extraction
    bits: int  # bits per extracted integer weight
    symmetric: bool  # True: no zero point / bias
    upstream_weights: str  # OpenVINO element type upstream extracts to ("": upstream refuses the type)

    @property
    def host_decoded(self) -> bool:
        """A type upstream refuses: ovkit decodes it on the host into a plain f32/f16 constant."""
        return not self.upstream_weights

    @property
    def container_bits(self) -> int:
        """Bits per weight once extracted: 4-bit types stay 4-bit, 5/6/8-bit ones take a byte."""
        return 4 if self.bits == 4 else 8


def _spec(name: str, group: int, bits: int, symmetric: bool, upstream_weights: str) -> QuantSpec:
    """A spec whose enum id and block geometry come from ``ovkit.dtypes``."""
    t = ggml_type(name)
    return QuantSpec(t.name, t.id, t.block, t.size, group, bits, symmetric, upstream_weights)


#: The quantized types upstream extracts, in upstream's order.
QUANT_SPECS: dict[str, QuantSpec] = {
    s.name: s
    for s in (
        _spec("q4_0", 32, 4, True, "i4"),
        _spec("q4_1", 32, 4, False, "u4"),
        _spec("q5_1", 32, 5, False, "u8"),
        _spec("q8_0", 32, 8, True, "i8"),
        _spec("q4_K", 32, 4, False, "u4"),
        _spec("q5_K", 32, 5, False, "u8"),
        _spec("q6_K", 16, 6, True, "i8"),
        _spec("mxfp4", 32, 4, True, "f4e2m1"),
    )
}
assert tuple(QUANT_SPECS) == QUANT_TYPES, "ovkit.dtypes.QUANT_TYPES lists the types specified here"

#: The quantized types upstream refuses (not in supports_op's type gate) that ovkit still runs:
#: decoded on the host, bit for bit as ggml's ``to_float``, into a plain f32 (or exact f16)
#: constant.  Group and bits are the block's (no integer extraction happens).
# fmt: off
HOST_SPECS: dict[str, QuantSpec] = {
    name: _spec(name, ggml_type(name).block, bits, True, "")
    for name, bits in (
        ("q5_0", 5), ("q2_K", 2), ("q3_K", 3), ("iq2_xxs", 2), ("iq2_xs", 2), ("iq3_xxs", 3),
        ("iq1_s", 1), ("iq4_nl", 4), ("iq3_s", 3), ("iq2_s", 2), ("iq4_xs", 4), ("iq1_m", 1),
        ("tq1_0", 2), ("tq2_0", 2), ("nvfp4", 4), ("q1_0", 1),
    )
}
# fmt: on
HOST_TYPES: tuple[str, ...] = tuple(HOST_SPECS)
#: Every quantized type ovkit decodes: upstream's extracted types, then the host-decoded ones.
KNOWN_TYPES: tuple[str, ...] = QUANT_TYPES + HOST_TYPES
_ALL_SPECS = {**QUANT_SPECS, **HOST_SPECS}
_BY_LOWER = {k.lower(): k for k in _ALL_SPECS}


def quant_spec(qtype: str) -> QuantSpec:
    """The spec of ``qtype`` (case-insensitive: ``Q4_K``, ``q4_k`` and ``q4_K`` all work)."""
    key = _BY_LOWER.get(str(qtype).lower())
    if key is None:
        raise QuantError(f"unknown quantized type {qtype!r}; expected one of {', '.join(KNOWN_TYPES)}")
    return _ALL_SPECS[key]


def n_rows(shape: Sequence[int]) -> int:
    """Rows of a numpy ``shape`` (every axis but the last; 1 for a single row)."""
    return math.prod(int(d) for d in shape[:-1])


def checked_shape(spec: QuantSpec, shape: object, what: str = "tensor") -> tuple[int, ...]:
    """``shape`` as a tuple of positive ints with rows a whole number of blocks, else a QuantError
    naming the bad size."""
    label = f"{spec.name} {what}"
    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence | np.ndarray):
        raise QuantError(f"{label}: shape must be a sequence of positive integers, got {shape!r}")
    dims = tuple(shape)
    if not dims:
        raise QuantError(f"{label}: shape () has no row length; expected at least one dimension")
    for i, d in enumerate(dims):
        if isinstance(d, bool) or not isinstance(d, int | np.integer):
            raise QuantError(f"{label}: dimension {i} of shape {dims} is {d!r}, expected an integer")
        if d <= 0:
            raise QuantError(f"{label}: dimension {i} of shape {dims} is {d}, expected a positive size")
    out = tuple(int(d) for d in dims)
    if out[-1] % spec.block:
        raise QuantError(
            f"{label}: row length {out[-1]} (last dimension of {out}) is not a multiple of "
            f"the block size {spec.block}"
        )
    return out


def row_bytes(qtype: str, k: int) -> int:
    """Bytes of one row of ``k`` elements (``k`` must be a multiple of the block size)."""
    spec = quant_spec(qtype)
    if k % spec.block:
        raise QuantError(f"{spec.name}: row length {k} is not a multiple of the block size {spec.block}")
    return k // spec.block * spec.type_size
