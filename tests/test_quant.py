"""Quantized weights: block decoding vs gguf, mul_mat/get_rows on the real CPU vs ggml, policy table."""

from __future__ import annotations

import numpy as np
import pytest

from ovkit import oracle, quant
from ovkit.graph import Graph

MUL_MAT_NMSE = 5e-4  # test-backend-ops' MUL_MAT threshold
GET_ROWS_NMSE = 1e-7


@pytest.fixture
def rng() -> np.random.Generator:
    """A generator seeded afresh for every test: its data do not depend on which tests ran first."""
    return np.random.default_rng(1234)


@pytest.fixture(scope="module")
def weights() -> np.ndarray:
    return np.random.default_rng(4321).standard_normal((48, 512)).astype(np.float32)


@pytest.mark.parametrize("qtype", quant.QUANT_TYPES)
def test_decode_matches_gguf_reference(qtype: str, weights: np.ndarray) -> None:
    qw = quant.quantize(qtype, weights)
    ours = qw.dequantize()
    assert ours.shape == weights.shape
    np.testing.assert_array_equal(ours, quant.reference_dequantize(qtype, qw.raw, qw.shape))
    np.testing.assert_array_equal(ours, oracle.dequantize(qtype, qw.raw, qw.shape))


@pytest.mark.parametrize("qtype", quant.QUANT_TYPES)
def test_three_d_experts_decode(qtype: str, rng: np.random.Generator) -> None:
    w = rng.standard_normal((2, 8, 256)).astype(np.float32)
    qw = quant.quantize(qtype, w)
    assert qw.shape == (2, 8, 256)
    np.testing.assert_array_equal(qw.dequantize(), quant.reference_dequantize(qtype, qw.raw, qw.shape))


def _ggml_blocks(qw: quant.QuantizedWeight) -> oracle.QuantArray:
    return oracle.QuantArray(qw.qtype, qw.shape, qw.raw)


@pytest.mark.parametrize("form", ["fast", "upstream_bias"])
@pytest.mark.parametrize("n", [1, 8])
@pytest.mark.parametrize("qtype", quant.QUANT_TYPES)
def test_mul_mat_matches_ggml_on_cpu(
    qtype: str, n: int, form: str, weights: np.ndarray, rng: np.random.Generator
) -> None:
    qw = quant.quantize(qtype, weights, form=form)  # type: ignore[arg-type]
    x = rng.standard_normal((n, weights.shape[1])).astype(np.float32)
    g = Graph()
    out = g.compute(g.mul_mat(g.constant(qw), g.input("x", x.shape)), {"x": x}, device="CPU")
    expected = oracle.ggml_call("mul_mat", _ggml_blocks(qw), x)
    assert out.size == n * weights.shape[0]
    assert oracle.nmse(out.reshape(expected.shape), expected) < MUL_MAT_NMSE


@pytest.mark.parametrize("n", [1, 8])
@pytest.mark.parametrize("qtype", quant.QUANT_TYPES)
def test_f32_mul_mat_is_exact_on_every_cpu(qtype: str, n: int, weights: np.ndarray) -> None:
    """Graph.compute's f32 is exact f32 on every CPU kind: on CPUs with VNNI or AMX the plugin's
    default would quantize the activations meeting a compressed weight to int8 (NMSE ~3e-5)."""
    qw = quant.quantize(qtype, weights)
    # its own generator: the module's is shared, and its draws feed the tests that follow
    x = np.random.default_rng(n).standard_normal((n, weights.shape[1])).astype(np.float32)
    g = Graph()
    out = g.compute(g.mul_mat(g.constant(qw), g.input("x", x.shape)), {"x": x}, device="CPU")
    exact = _exact_product(x, qw.dequantize())
    assert oracle.nmse(out.reshape(exact.shape), exact) < EXACT_NMSE


@pytest.mark.parametrize("qtype", ["q4_1", "q4_K", "q5_1", "q5_K"])
def test_upstream_rounded_zero_points_lose_accuracy(
    qtype: str, weights: np.ndarray, rng: np.random.Generator
) -> None:
    """Upstream's integer zero point round(-min/scale) is lossy; ovkit's fast form is not."""
    qw = quant.quantize(qtype, weights)
    exact = qw.dequantize()
    upstream = qw.with_form("upstream")
    x = rng.standard_normal((4, weights.shape[1])).astype(np.float32)
    fast_err = oracle.nmse(_run_ov(qw, x), x @ exact.T)
    up_err = oracle.nmse(_run_ov(upstream, x), x @ exact.T)
    assert fast_err < MUL_MAT_NMSE < up_err


def _run_ov(qw: quant.QuantizedWeight, x: np.ndarray) -> np.ndarray:
    import openvino as ov
    import openvino.opset13 as ops

    p = ops.parameter(list(x.shape), ov.Type.f32)
    model = ov.Model([qw.ov_mul_mat(p.output(0))], [p])
    compiled = ov.Core().compile_model(model, "CPU")
    return np.asarray(compiled.create_infer_request().infer({0: x})[0])


@pytest.mark.parametrize("qtype", quant.QUANT_TYPES)
def test_fast_form_keeps_weights_compressed(qtype: str, weights: np.ndarray) -> None:
    """The CPU plugin runs the main FullyConnected on the packed integer/fp4 weights, not on f32."""
    import openvino as ov
    import openvino.opset13 as ops

    qw = quant.quantize(qtype, weights)
    p = ops.parameter([1, weights.shape[1]], ov.Type.f32)
    compiled = ov.Core().compile_model(ov.Model([qw.ov_mul_mat(p.output(0))], [p]), "CPU")
    precisions = [
        op.get_rt_info()["runtimePrecision"].astype(str)
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"
    ]
    expected = {
        "q4_0": "i4",
        "q4_1": "i4",
        "q4_K": "i4",
        "q5_1": "i8",
        "q5_K": "i8",
        "q8_0": "i8",
        "q6_K": "i8",
        "mxfp4": "i8",
    }
    assert expected[qtype] in precisions
    assert qw.container == expected[qtype]


@pytest.mark.parametrize("qtype", quant.QUANT_TYPES)
def test_get_rows_matches_ggml_on_cpu(qtype: str, weights: np.ndarray) -> None:
    qw = quant.quantize(qtype, weights)
    rows = np.array([0, 5, 47, 5, 12], np.int32)
    g = Graph()
    out = g.compute(
        g.get_rows(g.constant(qw), g.input("ids", rows.shape, "i32")), {"ids": rows}, device="CPU"
    )
    expected = oracle.ggml_call("get_rows", _ggml_blocks(qw), rows)
    assert out.shape == (5, weights.shape[1])
    assert oracle.nmse(out, expected) < GET_ROWS_NMSE


def test_wrong_block_bytes_name_sizes() -> None:
    with pytest.raises(quant.QuantError, match=r"q4_0 .*\(4, 64\) needs 144 bytes of blocks, got 100"):
        quant.from_blocks("q4_0", b"\0" * 100, (4, 64))


def test_row_not_multiple_of_block() -> None:
    with pytest.raises(quant.QuantError, match="row length 100 is not a multiple of the block size 256"):
        quant.row_bytes("q4_K", 100)


def test_unknown_type_lists_known() -> None:
    with pytest.raises(quant.QuantError, match="unknown quantized type 'q8_K'; expected one of q4_0.*q1_0"):
        quant.quant_spec("q8_K")


def test_type_names_case_insensitive() -> None:
    assert quant.quant_spec("Q4_K").name == "q4_K"
    assert quant.quant_spec("MXFP4").name == "mxfp4"


@pytest.mark.parametrize(
    ("name", "device", "qtype", "target"),
    [
        ("token_embd.weight", "CPU", "q4_0", quant.RequantTarget.Q8_0_C),
        ("token_embd.weight", "NPU", "q6_K", quant.RequantTarget.F16),
        ("token_embd.weight", "NPU", "q4_K", quant.RequantTarget.Q8_0_C),
        ("output.weight", "GPU", "q4_0", quant.RequantTarget.Q8_0_C),
        ("blk.0.ffn_down.weight", "CPU", "q6_K", quant.RequantTarget.Q8_0_C),
        ("blk.0.ffn_down.weight", "GPU", "q5_K", quant.RequantTarget.Q8_0_C),
        ("blk.0.ffn_down.weight", "NPU", "q5_K", quant.RequantTarget.Q4_0_128),
        ("blk.0.attn_q.weight", "CPU", "q4_K", quant.RequantTarget.NATIVE),
        ("blk.0.attn_q.weight", "NPU", "q8_0", quant.RequantTarget.Q4_0_128),
        ("blk.0.attn_q.weight", "GPU", "mxfp4", quant.RequantTarget.NATIVE),
    ],
)
def test_requant_policy(name: str, device: str, qtype: str, target: quant.RequantTarget) -> None:
    assert quant.requant_type(name, device, qtype) is target


def test_no_requant_keeps_native() -> None:
    assert quant.requant_type("output.weight", "NPU", "q6_K", no_requant=True) is quant.RequantTarget.NATIVE


def test_requant_table_is_data() -> None:
    df = quant.requant_table()
    assert list(df.columns) == [
        "tensor",
        "device_class",
        "types",
        "target",
        "requant_kquant",
        "experts_only",
        "note",
    ]
    assert len(df) == len(quant.REQUANT_RULES)
    assert set(df["device_class"]) == {"CPU", "GPU", "NPU"}


def test_requant_bytes() -> None:
    shape = (4096, 4096)
    n = 4096 * 4096
    assert quant.requant_bytes(quant.RequantTarget.Q8_0_C, "q6_K", shape) == n + 4096 * 2
    assert quant.requant_bytes(quant.RequantTarget.Q4_0_128, "q4_K", shape) == n // 2 + n // 128 * 2
    assert quant.requant_bytes(quant.RequantTarget.F16, "q6_K", shape) == 2 * n


@pytest.mark.parametrize("qtype", quant.QUANT_TYPES)
def test_ov_get_rows_exact_and_keeps_table_compressed(qtype: str, weights: np.ndarray) -> None:
    import openvino as ov
    import openvino.opset13 as ops

    qw = quant.quantize(qtype, weights)
    rows = np.array([[3, 0], [47, 3]], np.int32)
    idx = ops.parameter(list(rows.shape), ov.Type.i32)
    compiled = ov.Core().compile_model(ov.Model([qw.ov_get_rows(idx.output(0))], [idx]), "CPU")
    out = np.asarray(compiled.create_infer_request().infer({0: rows})[0])
    expected = oracle.ggml_call("get_rows", _ggml_blocks(qw), rows.reshape(-1)).reshape(2, 2, -1)
    assert out.shape == (2, 2, weights.shape[1])
    assert oracle.nmse(out, expected) < GET_ROWS_NMSE
    const_types = {
        op.get_output_element_type(0).get_type_name()
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "Const"
    }
    assert const_types & {"i4", "u4", "i8", "u8", "f4e2m1"}, const_types


@pytest.mark.parametrize("qtype", ["q5_K", "q6_K"])
def test_cpu_policy_requant_q8_0_c_within_threshold(
    qtype: str, weights: np.ndarray, rng: np.random.Generator
) -> None:
    """Upstream's CPU policy turns Q5_K/Q6_K into per-row i8; still within MUL_MAT's NMSE vs ggml."""
    qw = quant.quantize(qtype, weights, name="blk.0.ffn_down.weight").apply_policy("CPU")
    assert qw.requant is quant.RequantTarget.Q8_0_C
    assert qw.container == "i8" and qw.decoded.group == weights.shape[1]
    x = rng.standard_normal((2, weights.shape[1])).astype(np.float32)
    expected = oracle.ggml_call("mul_mat", _ggml_blocks(qw), x)
    assert oracle.nmse(_run_ov(qw, x), expected) < MUL_MAT_NMSE


def test_requant_q4_0_128_and_f16(weights: np.ndarray) -> None:
    qw = quant.quantize("q8_0", weights, name="blk.0.attn_q.weight")
    npu = qw.apply_policy("NPU")
    assert npu.requant is quant.RequantTarget.Q4_0_128 and npu.container == "i4"
    dec = npu.decoded
    assert dec.q.min() >= -8 and dec.q.max() <= 7 and dec.group == 128
    # the value of largest magnitude in each group is represented exactly as -8 * d
    assert (
        oracle.nmse(npu.dequantize(), qw.dequantize()) < 2e-2
    )  # 4-bit in 128-groups: ~1.2e-2 for Gaussian rows
    emb = quant.quantize("q6_K", weights, name="token_embd.weight").apply_policy("NPU")
    assert emb.requant is quant.RequantTarget.F16
    np.testing.assert_array_equal(
        emb.dequantize(), emb.with_requant("native").dequantize().astype(np.float16)
    )


def test_compile_hints_only_for_all_8bit_weights(weights: np.ndarray) -> None:
    q8 = quant.quantize("q8_0", weights)
    q4 = quant.quantize("q4_K", weights)
    assert quant.compile_hints([q8]) == {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
    assert quant.compile_hints([q8], n_tokens=8) == {}  # batches keep int8 activations
    assert quant.compile_hints([q8, q4]) == {}
    q6 = quant.quantize("q6_K", weights)
    assert quant.compile_hints([q6], n_tokens=8) == {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 16}
    assert quant.compile_hints([q6, q4], n_tokens=8) == {}
    assert quant.compile_hints([]) == {}


def test_upstream_forms_use_upstream_containers(weights: np.ndarray) -> None:
    assert quant.quantize("mxfp4", weights, form="upstream").container == "f4e2m1"
    assert quant.quantize("q4_K", weights, form="upstream").container == "u4"
    assert quant.quantize("q5_1", weights, form="upstream_bias").container == "u8"
    assert quant.quantize("q4_0", weights, form="upstream").container == "i4"


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((), r"q4_0 weight 'w': shape \(\) has no row length; expected at least one dimension"),
        ((-2, 32), r"dimension 0 of shape \(-2, 32\) is -2, expected a positive size"),
        ((0, 32), r"dimension 0 of shape \(0, 32\) is 0, expected a positive size"),
        ((2.0, 32), r"dimension 0 of shape \(2\.0, 32\) is 2\.0, expected an integer"),
        ((2, 32.5), r"dimension 1 of shape \(2, 32\.5\) is 32\.5, expected an integer"),
        (32, r"shape must be a sequence of positive integers, got 32"),
        ((2, 48), r"row length 48 \(last dimension of \(2, 48\)\) is not a multiple of the block size 32"),
    ],
)
def test_from_blocks_refuses_bad_shapes_by_name(shape: object, message: str) -> None:
    with pytest.raises(quant.QuantError, match=message):
        quant.from_blocks("q4_0", b"", shape, name="w")  # type: ignore[arg-type]
    with pytest.raises(quant.QuantError, match=message.split(": ", 1)[-1]):
        quant.decode_blocks("q4_0", b"", shape)  # type: ignore[arg-type]


# -- hostile scales: every form compiles; the fast form keeps ovkit's contract (docs/quant.md) ------

#: f16 bit patterns written into the first scale (``d``) of the hostile blocks
F16_SCALES = {"nan": 0x7E00, "inf": 0x7C00, "-inf": 0xFC00, "f16 max": 0x7BFF, "subnormal": 0x0001}
#: MXFP4 e8m0 exponent bytes: 0 and 1 (scales 2**-128 and 2**-127, f32 subnormals), 2**-30
#: (weights ~1e-9), the largest exponents (x12 overflows f32)
MXFP4_EXPONENTS = {"e0 (2**-128)": 0, "e1 (2**-127)": 1, "e98 (2**-30)": 98, "e254": 254, "e255": 255}
_SCALE_OFFSET = {"q6_K": 208}  # d sits at the end of a q6_K block, at the start of the others

#: The CPU plugin's default for f32 activations: on CPUs with VNNI (avx2_vnni, avx512_core_vnni,
#: AMX) a compressed FullyConnected quantizes them to int8 in groups of 32, elsewhere it does not
PLUGIN_DEFAULT = {"INFERENCE_PRECISION_HINT": "f32"}
#: The same with dynamic quantization off: the kernels decompress the weights in f32 on every CPU
NO_DYNAMIC_QUANT = {**PLUGIN_DEFAULT, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
#: NMSE of an f32 product of the exact weights against the product in f64
EXACT_NMSE = 1e-9


def _with_scale(qtype: str, bits: int, rng: np.random.Generator) -> quant.QuantizedWeight:
    """Blocks of a [4, 512] weight with the hostile scale in every block of row 0 and in every
    other block of row 1 (its first); rows 2 and 3 as ggml quantized them."""
    qw = quant.quantize(qtype, rng.standard_normal((4, 512)).astype(np.float32))
    blocks = np.frombuffer(qw.raw, np.uint8).copy().reshape(4, -1, qw.spec.type_size)
    hostile = blocks[0], blocks[1, ::2]
    for b in hostile:
        if qtype == "mxfp4":
            b[:, 0] = bits
        else:
            at = _SCALE_OFFSET.get(qtype, 0)
            b[:, at : at + 2] = np.frombuffer(np.uint16(bits).tobytes(), np.uint8)
    blocks[1, ::2] = hostile[1]
    return quant.from_blocks(qtype, blocks.tobytes(), qw.shape)


def _compiled(
    qw: quant.QuantizedWeight, build: str, x: np.ndarray, config: dict[str, object] = PLUGIN_DEFAULT
) -> np.ndarray:
    import openvino as ov
    import openvino.opset13 as ops

    p = ops.parameter(list(x.shape), ov.Type.i32 if x.dtype == np.int32 else ov.Type.f32)
    out = qw.ov_get_rows(p.output(0)) if build == "get_rows" else qw.ov_mul_mat(p.output(0))
    compiled = ov.Core().compile_model(ov.Model([out], [p]), "CPU", config)
    return np.asarray(compiled.create_infer_request().infer({0: x})[0])


def _fc_kernels(qw: quant.QuantizedWeight) -> set[str]:
    """The runtime precisions of the FullyConnected kernels the CPU plugin runs for ``x @ qw.T``."""
    import openvino as ov
    import openvino.opset13 as ops

    p = ops.parameter([1, qw.k], ov.Type.f32)
    compiled = ov.Core().compile_model(ov.Model([qw.ov_mul_mat(p.output(0))], [p]), "CPU", PLUGIN_DEFAULT)
    return {
        op.get_rt_info()["runtimePrecision"].astype(str)
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"
    }


def _exact_product(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w.T`` in f64: NaN and ±inf where the weights' own NaN/inf reach the sum."""
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(np.float64) @ w.astype(np.float64).T


def _row_nmse(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """NMSE of each output column (one weight row) over the batch."""
    return ((got - exact) ** 2).sum(axis=0) / (exact**2).sum(axis=0)


def _assert_contract(got: np.ndarray, exact: np.ndarray, bound: float, what: str) -> None:
    """ovkit's mul_mat contract for the fast form: the exact product's NaN and ±inf entry for
    entry (a row with a NaN/inf weight), and every row of finite weights within ``bound``."""
    finite = np.isfinite(exact)
    np.testing.assert_array_equal(np.where(finite, 0, got), np.where(finite, 0, exact), err_msg=what)
    clean = finite.all(axis=0)
    nmse = _row_nmse(got[:, clean].astype(np.float64), exact[:, clean])
    assert (nmse < bound).all(), f"{what}: NMSE per finite row {nmse} (bound {bound})"


HOSTILE_SCALES = [
    (q, label, bits) for q in quant.QUANT_TYPES if q != "mxfp4" for label, bits in F16_SCALES.items()
]
HOSTILE_SCALES += [("mxfp4", label, e) for label, e in MXFP4_EXPONENTS.items()]


@pytest.mark.parametrize(
    ("qtype", "label", "bits"), HOSTILE_SCALES, ids=[f"{q}-{lb}" for q, lb, _ in HOSTILE_SCALES]
)
def test_every_form_computes_hostile_scales_and_fast_keeps_the_contract(
    qtype: str, label: str, bits: int, rng: np.random.Generator
) -> None:
    """The contract holds on every CPU: get_rows is ggml's to_float bit for bit; mul_mat has the
    exact product's NaN/±inf and is within 1e-9 of it per finite row with dynamic quantization
    off, within test-backend-ops' bound with the plugin's default (int8 activations on VNNI CPUs)."""
    qw = _with_scale(qtype, bits, rng)
    ggml_rows = oracle.dequantize(qtype, qw.raw, qw.shape)
    np.testing.assert_array_equal(qw.dequantize(), ggml_rows)  # the numpy decode, NaN for NaN
    x = rng.standard_normal((3, 512)).astype(np.float32)
    exact = _exact_product(x, ggml_rows)
    # ggml's own kernel quantizes x (its NaN/inf pattern is its integer sums times the scale):
    # a loose check of the oracle on the finite entries
    finite = np.isfinite(exact)
    ggml_mm = oracle.ggml_call("mul_mat", _ggml_blocks(qw), x).reshape(exact.shape)
    if finite.any():
        assert oracle.nmse(ggml_mm[finite], exact[finite]) < 1e-2
    rows = np.array([0, 1, 2, 3, 1], np.int32)
    for form in quant.FORMS:
        w = qw.with_form(form)  # type: ignore[arg-type]
        got_rows = _compiled(w, "get_rows", rows)
        got_mm = _compiled(w, "mul_mat", x)
        assert got_rows.shape == (5, 512) and got_mm.shape == (3, 4), form
        if form != "fast":  # upstream's forms: upstream's f16 scales, computed (no value promised)
            continue
        np.testing.assert_array_equal(got_rows, ggml_rows[rows], err_msg=f"{qtype} {label} get_rows")
        _assert_contract(got_mm, exact, MUL_MAT_NMSE, f"{qtype} {label} mul_mat, plugin default")
        exact_mm = _compiled(w, "mul_mat", x, NO_DYNAMIC_QUANT)
        _assert_contract(exact_mm, exact, EXACT_NMSE, f"{qtype} {label} mul_mat, no dynamic quantization")


def test_mxfp4_subnormal_scales_decode_and_multiply_as_ggml(rng: np.random.Generator) -> None:
    """Exponent bytes 0 and 1 scale by 2**-128 and 2**-127, f32 subnormals that the CPU plugin
    flushes in any constant it loads: the fast form still gives ggml's values, subnormals included,
    and keeps the weight compressed; only the folded ``to_ov_node`` constant flushes them."""
    import openvino as ov
    import openvino.opset13 as ops

    qw = quant.quantize("mxfp4", rng.standard_normal((4, 256)).astype(np.float32))
    blocks = np.frombuffer(qw.raw, np.uint8).copy().reshape(4, -1, qw.spec.type_size)
    blocks[0, :, 0], blocks[1, :, 0], blocks[2, ::2, 0] = 0, 1, [0, 1, 0, 1]  # row 3 untouched
    qw = quant.from_blocks("mxfp4", blocks.tobytes(), qw.shape)
    ggml_rows = oracle.dequantize("mxfp4", qw.raw, qw.shape)
    subnormal = (ggml_rows != 0) & (np.abs(ggml_rows) < np.finfo(np.float32).smallest_normal)
    assert subnormal[:3].any(axis=1).all()
    rows = np.array([3, 0, 1, 2, 0], np.int32)
    got = _compiled(qw, "get_rows", rows)
    np.testing.assert_array_equal(got.view(np.uint32), ggml_rows[rows].view(np.uint32))
    for scale in (1.0, 2.0**100):  # 2**100: every product x*w a normal f32
        x = (rng.standard_normal((3, 256)) * scale).astype(np.float32)
        exact = _exact_product(x, ggml_rows)
        _assert_contract(_compiled(qw, "mul_mat", x, NO_DYNAMIC_QUANT), exact, EXACT_NMSE, f"x*{scale}")
        _assert_contract(_compiled(qw, "mul_mat", x), exact, MUL_MAT_NMSE, f"x*{scale}, plugin default")
    kernels = _fc_kernels(qw)
    assert "i8" in kernels and "f32" not in kernels, kernels  # both parts stay compressed
    # the known difference: the whole table as one constant (to_ov_node) loses the subnormals
    p = ops.parameter([1], ov.Type.f32)
    table = ops.add(qw.to_ov_node(), ops.multiply(p, ops.constant(np.float32(0))))
    compiled = ov.Core().compile_model(ov.Model([table], [p]), "CPU", PLUGIN_DEFAULT)
    folded = np.asarray(compiled.create_infer_request().infer({0: np.ones(1, np.float32)})[0])
    np.testing.assert_array_equal(folded[~subnormal], ggml_rows[~subnormal])
    assert ((folded[subnormal] == 0) | (folded[subnormal] == ggml_rows[subnormal])).all()


NON_FINITE = [("q4_0", 0x7C00), ("q8_0", 0x7E00), ("q4_1", 0xFC00), ("q6_K", 0x7C00), ("mxfp4", 255)]


@pytest.mark.parametrize(("qtype", "bits"), NON_FINITE, ids=[q for q, _ in NON_FINITE])
def test_weights_with_nan_or_inf_run_as_a_plain_f32_matmul(
    qtype: str, bits: int, rng: np.random.Generator
) -> None:
    """Why the NaN/inf pattern holds on every CPU: such a weight is the f32 constant of ggml's
    values, never a compressed FullyConnected, which quantizes the activations on CPUs with VNNI
    (integer sums times an inf scale: ±inf or NaN where the product is not); finite weights stay
    compressed."""
    qw = _with_scale(qtype, bits, rng)
    assert not np.isfinite(qw.dequantize()).all()
    assert qw.container == "f32"
    assert _fc_kernels(qw) == {"f32"}
    clean = quant.from_blocks(qtype, qw.raw[len(qw.raw) // 2 :], (2, qw.k))  # rows 2 and 3
    assert clean.container != "f32" and clean.container in _fc_kernels(clean)  # (+ the f32 residual)


def test_valid_mxfp4_weights_of_magnitude_1e_9(rng: np.random.Generator) -> None:
    w = (rng.standard_normal((8, 256)) * 1e-9).astype(np.float32)
    qw = quant.quantize("mxfp4", w)
    assert qw.decoded.exponent is not None and qw.decoded.exponent.max() < 110  # scales below f16's range
    x = rng.standard_normal((3, 256)).astype(np.float32)
    g = Graph()
    out = g.compute(g.mul_mat(g.constant(qw), g.input("x", x.shape)), {"x": x}, device="CPU")
    expected = oracle.ggml_call("mul_mat", _ggml_blocks(qw), x)
    assert np.isfinite(out).all()
    assert oracle.nmse(out.reshape(expected.shape), expected) < MUL_MAT_NMSE


# -- the types upstream refuses: decoded on the host, bit for bit as ggml's to_float ---------------


def _same_bits_nan_free(ours: np.ndarray, ggml: np.ndarray) -> None:
    """Equal bit for bit, NaN for NaN (a NaN's sign/payload bits are not a value)."""
    nan = np.isnan(ggml)
    np.testing.assert_array_equal(np.isnan(ours), nan)
    np.testing.assert_array_equal(
        np.where(nan, 0, ours).view(np.uint32), np.where(nan, 0, ggml).view(np.uint32)
    )


#: The grid types whose ggml quantizer first builds its neighbour tables (10-25 s a type here):
#: their weights are random blocks with a finite scale instead.
_SLOW_QUANTIZERS = ("iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s")


def _finite_random_blocks(
    qtype: str, shape: tuple[int, int], rng: np.random.Generator
) -> quant.QuantizedWeight:
    """Random blocks (every grid index and sign) whose f16 scale is 0.01."""
    spec = quant.quant_spec(qtype)
    blocks = rng.integers(0, 256, (shape[0] * shape[1] // spec.block, spec.type_size), dtype=np.uint8)
    h = int(np.float16(0.01).view(np.uint16))
    if qtype == "iq1_m":  # the scale's 4 nibbles are the top nibbles of the 4 u16 sub-block scales
        sc = blocks[:, 48:56].copy().view(np.uint16)
        for j in range(4):
            sc[:, j] = (sc[:, j] & 0x0FFF) | (((h >> (4 * j)) & 0xF) << 12)
        blocks[:, 48:56] = sc.view(np.uint8)
    else:  # d is the block's first field
        blocks[:, 0:2] = np.frombuffer(np.uint16(h).tobytes(), np.uint8)
    return quant.from_blocks(qtype, blocks.tobytes(), shape)


@pytest.mark.parametrize("qtype", quant.HOST_TYPES)
def test_host_type_decodes_as_ggml_and_computes_on_cpu(qtype: str, rng: np.random.Generator) -> None:
    spec = quant.quant_spec(qtype)
    k = 2 * spec.block
    if qtype in _SLOW_QUANTIZERS:
        qw = _finite_random_blocks(qtype, (6, k), rng)
    else:
        qw = quant.quantize(qtype, rng.uniform(-1, 1, (6, k)).astype(np.float32))
    assert np.isfinite(qw.dequantize()).all()
    ggml_rows = oracle.dequantize(qtype, qw.raw, qw.shape)
    np.testing.assert_array_equal(qw.dequantize().view(np.uint32), ggml_rows.view(np.uint32))
    # random bytes: NaN, inf, subnormal and huge scales, every grid index and sign pattern
    noise = quant.from_blocks(qtype, rng.integers(0, 256, len(qw.raw), dtype=np.uint8).tobytes(), qw.shape)
    _same_bits_nan_free(noise.dequantize(), oracle.dequantize(qtype, noise.raw, noise.shape))
    # on OpenVINO's CPU: get_rows gives ggml's rows exactly, mul_mat is within test-backend-ops' bound
    rows = np.array([5, 0, 5], np.int32)
    np.testing.assert_array_equal(_compiled(qw, "get_rows", rows), ggml_rows[rows])
    x = rng.uniform(-1, 1, (3, k)).astype(np.float32)
    expected = oracle.ggml_call("mul_mat", _ggml_blocks(qw), x)
    assert oracle.nmse(_compiled(qw, "mul_mat", x).reshape(expected.shape), expected) < MUL_MAT_NMSE
    assert qw.container in ("f32", "f16")


def test_q1_0_block_layout() -> None:
    """One f16 scale, then 128 sign bits low bit first: bit 1 is +d, bit 0 is -d."""
    bits = np.zeros(16, np.uint8)
    bits[0], bits[15] = 0b0000_0101, 0b1000_0000  # elements 0, 2 and 127 positive
    raw = np.float16(0.75).tobytes() + bits.tobytes()
    expected = np.full(128, -0.75, np.float32)
    expected[[0, 2, 127]] = 0.75
    np.testing.assert_array_equal(quant.from_blocks("q1_0", raw, (1, 128)).dequantize()[0], expected)
    np.testing.assert_array_equal(oracle.dequantize("q1_0", raw, (1, 128))[0], expected)


@pytest.mark.parametrize("device", ["CPU", "GPU", "NPU"])
def test_policy_refuses_host_types_as_upstream_does(device: str, rng: np.random.Generator) -> None:
    qw = quant.quantize("iq4_nl", rng.uniform(-1, 1, (2, 64)).astype(np.float32), name="token_embd.weight")
    assert quant.requant_type(qw.name, device, "iq4_nl") is quant.RequantTarget.UNSUPPORTED
    assert quant.requant_type("blk.0.attn_q.weight", device, "q5_0", no_requant=True) is (
        quant.RequantTarget.UNSUPPORTED
    )
    with pytest.raises(
        quant.QuantError, match="iq4_nl weight 'token_embd.weight': requant target not supported"
    ):
        qw.apply_policy(device)
    with pytest.raises(quant.QuantError, match="form 'upstream' does not exist .*expected 'fast'"):
        qw.with_form("upstream")
    with pytest.raises(quant.QuantError, match="the policy refuses q2_K weights"):
        quant.requant_bytes(quant.RequantTarget.UNSUPPORTED, "q2_K", (4, 256))
    assert "q5_0" in quant.requant_table().query("target == 'not supported'")["types"].iloc[0]


# -- views of quantized tensors (test-backend-ops views and permutes its quantized K/V) -------------


def test_quantized_view_of_whole_blocks_matches_ggml() -> None:
    from ovkit.catalogue import run
    from ovkit.catalogue.case import Case, Leaf

    def program(b: object, x: dict[str, object]) -> object:
        w = x["w"]
        # rows 1..3 of the second block column, then a permute of the batch dims
        v = b.view_3d(w, 32, 3, 2, w.nb[1], w.nb[2], w.nb[1] + w.nb[0])  # type: ignore[attr-defined]
        return b.mul_mat(b.permute(v, 0, 1, 3, 2), x["x"])  # type: ignore[attr-defined]

    for qtype in ("q4_0", "iq4_nl"):
        leaves = (Leaf("w", (64, 4, 2, 1), qtype), Leaf("x", (32, 5, 1, 2)))
        case = Case("MUL_MAT", f"quantized view {qtype}", leaves, program, max_err=MUL_MAT_NMSE)
        result = run.run_case(case, policy="none")
        assert result.status == "OK", (qtype, result.detail)


@pytest.mark.parametrize(
    "params",
    [
        "hsk=64,hsv=64,nh=4,nr23=[1,1],kv=512,nb=1,mask=1,sinks=1,max_bias=0.000000,logit_softcap=0.000000,"
        "prec=f32,type_K=q8_0,type_V=q8_0,permute=[0,2,1,3]",
        "hsk=72,hsv=72,nh=4,nr23=[1,1],kv=96,nb=2,mask=1,sinks=0,max_bias=0.000000,logit_softcap=0.000000,"
        "prec=f32,type_K=q4_0,type_V=q8_0,permute=[0,1,2,3]",
    ],
)
def test_flash_attn_over_quantized_kv_views_matches_ggml(params: str) -> None:
    from ovkit.catalogue import run

    result = run.run_row(run.Row("FLASH_ATTN_EXT", params), policy="none")
    assert result.status == "OK", result.detail


def test_quantized_views_off_block_boundaries_are_refused_by_name(rng: np.random.Generator) -> None:
    from ovkit.graph import GraphError

    g = Graph()
    w = g.constant(quant.quantize("q4_0", rng.uniform(-1, 1, (4, 64)).astype(np.float32)))
    assert w.nb == (18, 36, 144, 144)  # ggml's strides: 18-byte blocks of 32 elements
    with pytest.raises(
        GraphError,
        match=r"VIEW: operand offset: expected whole q4_0 blocks \(a multiple of 18 bytes\), given 5",
    ):
        g.view_2d(w, 32, 3, w.nb[1], 5)
    with pytest.raises(GraphError, match=r"VIEW: operand nb\[1\]: expected whole q4_0 blocks .*given 20"):
        g.view_2d(w, 32, 3, 20, 0)
    with pytest.raises(
        GraphError, match=r"VIEW: operand ne: expected ne\[0\] a multiple of the q4_0 block size 32"
    ):
        g.view_2d(w, 16, 3, w.nb[1], 0)
    with pytest.raises(
        GraphError, match=r"PERMUTE: operand axes: expected dim 0 kept innermost for q4_0 blocks"
    ):
        g.permute(w, 1, 0, 2, 3)
    with pytest.raises(GraphError, match="TRANSPOSE: operand a: expected a plain-typed tensor"):
        g.transpose(w)


# -- writing quantized tensors: CPY / SET_ROWS into Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 ----------------


@pytest.mark.parametrize("qtype", quant.ROUND_TRIPS)
def test_written_blocks_read_back_as_ggml_writes_them(qtype: str, rng: np.random.Generator) -> None:
    """numpy and OpenVINO give ggml's from_float then to_float bit for bit, bf16-rounded values
    (exact ties x/d = k + 0.5, repeated magnitudes of both signs) included."""
    import openvino as ov
    import openvino.opset13 as ops

    from ovkit.ir import round_to
    from ovkit.ops.formulas import quantized_write
    from ovkit.ops.ov_array import OPENVINO
    from ovkit.ops.reference import NUMPY

    x = round_to("bf16", rng.uniform(-150, 150, (64, 256)).astype(np.float32))
    dst = oracle.quantize(qtype, np.zeros_like(x))
    ggml = np.asarray(oracle.ggml_program(lambda b, v: b.cpy(v["x"], v["d"]), {"x": x, "d": dst})).reshape(
        x.shape
    )
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(quantized_write(NUMPY, x, qtype, x.shape), ggml)
    p = ops.parameter(list(x.shape), ov.Type.f32)
    model = ov.Model([quantized_write(OPENVINO, p.output(0), qtype, x.shape)], [p])
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    np.testing.assert_array_equal(compiled.create_infer_request().infer({0: x})[0], ggml)


@pytest.mark.parametrize(
    ("op", "params"),
    [
        ("SET_ROWS", "type_src=f32,type_dst=q4_1,type_idx=i64,ne=[256,5,1,3],nr23=[1,1],r=1,v=1"),
        (
            "CPY",
            "type_src=bf16,type_dst=q4_0,ne_src=[256,4,4,4],permute_src=[0,0,0,0],permute_dst=[0,0,0,0],_src_transpose=0",
        ),
        (
            "CPY",
            "type_src=q8_0,type_dst=q8_0,ne_src=[32,2,3,4],permute_src=[0,3,1,2],permute_dst=[0,2,1,3],_src_transpose=0",
        ),
    ],
)
def test_catalogue_rows_writing_quantized_tensors_match_ggml(op: str, params: str) -> None:
    from ovkit.catalogue import run

    result = run.run_row(run.Row(op, params), policy="none")
    assert result.status == "OK", result.detail


def test_writing_other_quantized_types_is_refused_by_name(rng: np.random.Generator) -> None:
    from ovkit.graph import GraphError
    from ovkit.ops.formulas import quantized_write
    from ovkit.ops.reference import NUMPY

    with pytest.raises(quant.QuantError, match=r"writing q4_K values .* expected one of q4_0, q4_1, q5_0"):
        quantized_write(NUMPY, np.zeros((1, 256), np.float32), "q4_K", (1, 256))
    g = Graph()
    dst = g.constant(quant.quantize("q4_K", rng.uniform(-1, 1, (2, 256)).astype(np.float32)))
    with pytest.raises(GraphError, match=r"CPY: operand b: expected type in \{f32, .*q8_0\}, given q4_K"):
        g.cpy(g.input("x", (2, 256)), dst)


def test_scale_group_and_hints_are_told_without_decoding() -> None:
    """``scale_group`` is the decoded group for every type and requant target; compile hints of a
    model with a 4-bit weight decode nothing (Model() reads no weight before its first compile)."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((8, 512)).astype(np.float32)
    for qtype in sorted(quant.KNOWN_TYPES):
        slow = qtype in _SLOW_QUANTIZERS  # their blocks as they come, not their grids' first build
        base = _finite_random_blocks(qtype, w.shape, rng) if slow else quant.quantize(qtype, w)
        for target in (quant.RequantTarget.NATIVE, *quant.REQUANT_CONTAINER):
            try:
                weight = base.with_requant(target)
                group = weight.decoded.group
            except quant.QuantError:
                continue
            assert weight.scale_group == group, (qtype, target)
            assert weight.may_be_int8() or weight.container not in ("i8", "u8"), (qtype, target)
    fresh = [quant.quantize(t, w) for t in ("q4_0", "q8_0", "q6_K")]
    fresh = [quant.QuantizedWeight(q.qtype, q.shape, q.raw, q.name) for q in fresh]
    assert quant.compile_hints(fresh, 1) == {} and quant.compile_hints(fresh, 8) == {}
    assert not any("decoded" in vars(q) for q in fresh)
    eight = [quant.QuantizedWeight(q.qtype, q.shape, q.raw, q.name) for q in fresh[1:]]
    assert quant.compile_hints(eight, 1) == {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
