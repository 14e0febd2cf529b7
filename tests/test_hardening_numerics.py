"""NaN and layout edge cases where ovkit must give ggml's numbers: bf16 rounding of a NaN,
soft_max of a row holding a NaN, and reductions over permuted (non-contiguous) views."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset16 as ops

from ovkit import oracle
from ovkit.dtypes import bf16_round, f32_to_bf16_bits
from ovkit.engine import Engine
from ovkit.ir import round_to

#: float32 bit patterns whose bf16 rounding is an edge: NaNs whose payload sits in the low 16 bits
#: only (the rounding carry would make them ±inf), both signs of NaN and inf, the largest finite
#: (rounds up to inf), ties to even, subnormals and zeros.
EDGE_BITS = np.array(
    [
        0x7F800001, 0xFF800001, 0x7F807FFF, 0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF,
        0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F808000, 0x3F818000, 0x3F808001,
        0x00000001, 0x00008000, 0x00018000, 0x80000001, 0x00000000, 0x80000000,
    ],
    dtype=np.uint32,
)  # fmt: skip


def ggml_bf16_bits(u: np.ndarray) -> np.ndarray:
    """ggml_compute_fp32_to_bf16, written out from ggml's C for each uint32 pattern."""
    out = []
    for v in (int(x) for x in u):
        if (v & 0x7FFFFFFF) > 0x7F800000:
            out.append((v >> 16) | 64)
        else:
            out.append(((v + (0x7FFF + ((v >> 16) & 1))) >> 16) & 0xFFFF)
    return np.array(out, dtype=np.uint16)


# ---------------------------------------------------------------------------------- bf16 rounding
def test_bf16_rounding_is_ggmls_bit_for_bit_nan_kept_nan() -> None:
    x = EDGE_BITS.view(np.float32)
    want = ggml_bf16_bits(EDGE_BITS)
    np.testing.assert_array_equal(f32_to_bf16_bits(x), want)
    widened = (want.astype(np.uint32) << 16).view(np.float32)
    for name, got in (("ir.round_to", round_to("bf16", x)), ("oracle.bf16_round", oracle.bf16_round(x))):
        np.testing.assert_array_equal(got.view(np.uint32), widened.view(np.uint32), err_msg=name)
    assert np.isnan(bf16_round(x)).sum() == np.isnan(x).sum()


def bf16_passthrough_model(n: int) -> ov.Model:
    """A bf16 Parameter widened to f32: the result is exactly the bf16 the host fed."""
    p = ops.parameter([n], ov.Type.bf16, name="x")
    y = ops.convert(p, ov.Type.f32)
    y.output(0).get_tensor().set_names({"y"})
    return ov.Model([y], [p], "bf16_in")


def test_bf16_input_fed_from_f32_keeps_nan_on_the_device() -> None:
    """The engine rounds a float32 array into a bf16 input: a NaN must stay NaN (was +inf)."""
    x = EDGE_BITS.view(np.float32)
    got = Engine(env={}).run("bf16_in", lambda: bf16_passthrough_model(len(x)), {"x": x}, device="CPU")[0]
    assert np.array_equal(np.isnan(got), np.isnan(x)), got
    want = (ggml_bf16_bits(EDGE_BITS).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
