"""MANUAL_GQA_ATTN and DISABLE_KV_SLICE: attention as the backend builds it (issue 19, item 2).

The backend (openvino/op/flash_attn_ext.cpp) translates grouped-query attention with MatMul/Softmax
on 5-D Q/K/V when GGML_OPENVINO_MANUAL_GQA_ATTN is on (the default on GPU) and with
ScaledDotProductAttention when it is off; ovkit's own form (flag unset off GPU) groups the query
heads with 4-D MatMuls, and takes SDPA too from SDPA_MIN_QUERIES query rows on (long prefills).
Each form must give ggml's values; the OpenVINO model must hold the form's ops.
GGML_OPENVINO_DISABLE_KV_SLICE turns off feeding the KV cache as its first n_kv rows
(``try_make_kv_sliced_tensor`` in utils.cpp).
"""

from __future__ import annotations

import numpy as np
import pytest

from ovkit import Graph, oracle
from ovkit.engine import GRAPH_RUN_CONFIG, RunConfig, get_engine, run_model
from ovkit.ir import Op, from_model_output
from ovkit.ops import translate
from ovkit.ops.feed import prepare_feed
from ovkit.ops.table import TABLE
from ovkit.ops.translate import SDPA_MIN_QUERIES, attention_form, model_inputs
from ovkit.simulate import SimulatedCore

FA_MAX_NMSE = TABLE[Op.FLASH_ATTN_EXT].max_nmse  #: test_flash_attn_ext's threshold

ENV = "GGML_OPENVINO_MANUAL_GQA_ATTN"
RNG = np.random.default_rng(19)


def _f(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


_MASK = np.where(np.arange(16)[None, :] > np.arange(6)[:, None] + 9, -np.inf, 0).astype(np.float16)
_MASK[2] = -np.inf  # a fully masked row: ggml gives 0 (SDPA alone gives NaN)
_H16 = np.float16

# (id, q, k, v, mask): numpy order [B, H, n_q, D], [B, H_kv, n_kv, D], [B, H_kv, n_kv, Dv], [n_q, n_kv]
CASES = [
    ("gqa4-f16-mask", _f(1, 8, 6, 32), _f(1, 2, 16, 32, dtype=_H16), _f(1, 2, 16, 32, dtype=_H16), _MASK),
    ("gqa2-f32-dv8", _f(1, 4, 6, 16), _f(1, 2, 16, 16), _f(1, 2, 16, 8), _MASK),
    ("mha-f16-mask", _f(1, 4, 6, 16), _f(1, 4, 16, 16, dtype=_H16), _f(1, 4, 16, 16, dtype=_H16), _MASK),
    ("mqa-f16", _f(1, 4, 6, 16), _f(1, 1, 16, 16, dtype=_H16), _f(1, 1, 16, 16, dtype=_H16), None),
    (
        "n_q-equals-heads-f16",
        _f(1, 2, 2, 64),
        _f(1, 2, 32, 64, dtype=_H16),
        _f(1, 2, 32, 64, dtype=_H16),
        None,
    ),
]
_TYPE = {np.float32: "f32", np.float16: "f16"}


def _graph(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None):  # type: ignore[no-untyped-def]
    g = Graph()
    arrays = {"q": q, "k": k, "v": v} | ({"mask": mask} if mask is not None else {})
    x = {n: g.input(n, a.shape, _TYPE[a.dtype.type]) for n, a in arrays.items()}
    out = g.flash_attn_ext(x["q"], x["k"], x["v"], x.get("mask"), 0.25, 0.0, 0.0)
    return g, out, arrays


def _ops(model: object) -> list[tuple[str, int]]:
    """(op type, output rank) of every node of an OpenVINO model."""
    return [
        (n.get_type_name(), n.get_output_partial_shape(0).rank.get_length()) for n in model.get_ordered_ops()
    ]  # type: ignore[attr-defined]


def _expected_form(flag: bool | None, q: np.ndarray, k: np.ndarray) -> str:
    n_h, h_kv = q.shape[1], k.shape[1]
    if flag is None:
        return "grouped"
    return "manual" if flag and n_h > h_kv > 1 else "sdpa"


@pytest.mark.parametrize("flag", [None, True, False], ids=["unset-ovkit", "on-manual", "off-sdpa"])
@pytest.mark.parametrize(("case", "q", "k", "v", "mask"), CASES, ids=[c[0] for c in CASES])
def test_each_form_has_its_ops_and_ggmls_values(
    case: str, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, flag: bool | None
) -> None:
    g, out, arrays = _graph(q, k, v, mask)
    model, names = g.to_model([out], manual_gqa=flag)
    ops = _ops(model)
    types = {t for t, _ in ops}
    form = _expected_form(flag, q, k)
    if form == "sdpa":
        assert "ScaledDotProductAttention" in types and "Softmax" not in types and "MatMul" not in types
    else:
        assert "ScaledDotProductAttention" not in types and "Softmax" in types
        matmul_ranks = {r for t, r in ops if t == "MatMul"}
        assert matmul_ranks == ({5} if form == "manual" else {4}), ops
    raw = run_model(
        model, model_inputs(names, prepare_feed(g, [out], arrays)), "CPU", run_config=GRAPH_RUN_CONFIG
    )
    got = from_model_output(out, raw[0])
    expected = oracle.ggml_call("flash_attn_ext", q, k, v, mask, 0.25, 0.0, 0.0)
    assert not np.isnan(got).any()
    assert oracle.nmse(got, expected) < FA_MAX_NMSE, case
    # the same values as ovkit's own form
    base, _ = g.to_model([out])
    ref = from_model_output(
        out,
        run_model(
            base, model_inputs(names, prepare_feed(g, [out], arrays)), "CPU", run_config=GRAPH_RUN_CONFIG
        )[0],
    )
    assert oracle.nmse(got, ref) < 1e-10


@pytest.mark.parametrize("rows", [SDPA_MIN_QUERIES - 1, SDPA_MIN_QUERIES])
def test_ovkits_own_form_takes_sdpa_for_long_prefills(rows: int) -> None:
    """Flag unset: from SDPA_MIN_QUERIES query rows on (a long prefill) OpenVINO's fused SDPA,
    below it the grouped MatMuls (cheaper for a decode step); ggml's values either way, a fully
    masked row included."""
    n_kv = 160
    mask = np.where(np.arange(n_kv)[None, :] > np.arange(rows)[:, None] + 32, -np.inf, 0).astype(np.float16)
    mask[5] = -np.inf
    q, k, v = _f(1, 8, rows, 32), _f(1, 2, n_kv, 32, dtype=_H16), _f(1, 2, n_kv, 32, dtype=_H16)
    g, out, arrays = _graph(q, k, v, mask)
    model, names = g.to_model([out])
    assert ("ScaledDotProductAttention" in {t for t, _ in _ops(model)}) is (rows >= SDPA_MIN_QUERIES)
    raw = run_model(
        model, model_inputs(names, prepare_feed(g, [out], arrays)), "CPU", run_config=GRAPH_RUN_CONFIG
    )
    got = from_model_output(out, raw[0])
    expected = oracle.ggml_call("flash_attn_ext", q, k, v, mask, 0.25, 0.0, 0.0)
    assert not np.isnan(got).any() and not got.reshape(rows, 8, 32)[5].any()  # a fully masked row: 0
    assert oracle.nmse(got, expected) < FA_MAX_NMSE


#: NMSE between the two forms of ovkit's own attention: at f32 both are exact up to summation
#: order; at the device's default precision (bf16 with AMX or avx512_bf16) each rounds on its own
#: (about 1e-5 from the exact values), and a miscomputed form is off by 1 or more.
FORMS_AGREE = {"f32": 1e-10, "default": 1e-4}


def _run_form(
    g: Graph, out: object, arrays: dict[str, np.ndarray], form: str, config: RunConfig
) -> np.ndarray:
    """``out`` computed in ovkit's own ``form`` (SDPA or grouped MatMuls, whatever the rows)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(translate, "SDPA_MIN_QUERIES", 1 if form == "sdpa" else 1 << 62)
        model, names = g.to_model([out])
    assert ("ScaledDotProductAttention" in {t for t, _ in _ops(model)}) is (form == "sdpa")
    raw = run_model(model, model_inputs(names, prepare_feed(g, [out], arrays)), "CPU", run_config=config)
    return from_model_output(out, raw[0])


@pytest.mark.parametrize("precision", sorted(FORMS_AGREE))
@pytest.mark.parametrize(("n_head", "n_head_kv"), [(8, 2), (4, 4)], ids=["gqa", "mha"])
@pytest.mark.parametrize("kv_type", [np.float16, np.float32], ids=["f16", "f32"])
@pytest.mark.parametrize("masked", [True, False], ids=["mask", "nomask"])
@pytest.mark.parametrize("rows", [SDPA_MIN_QUERIES - 1, SDPA_MIN_QUERIES])
@pytest.mark.parametrize("head_size", [64, 128, 256])
def test_sdpa_and_grouped_forms_agree_on_this_machine(
    head_size: int, rows: int, masked: bool, kv_type: type, n_head: int, n_head_kv: int, precision: str
) -> None:
    """ovkit takes SDPA for long prefills for speed, the grouped MatMuls below: the CPU plugin
    picks its kernels by instruction set (AVX-512 makes SDPA an MHA snippet, which miscomputed an
    element-wise op fused after it at head size >= 128), so both forms must give the same numbers
    on the machine the tests run on, at f32 and at the device's default precision."""
    n_kv = 256
    rng = np.random.default_rng(head_size + rows)
    q = rng.standard_normal((1, n_head, rows, head_size)).astype(np.float32)
    k, v = (rng.standard_normal((1, n_head_kv, n_kv, head_size)).astype(kv_type) for _ in "kv")
    mask = None
    if masked:  # causal over the last `rows` keys, one row fully masked (ggml: 0)
        mask = np.where(np.arange(n_kv)[None, :] > np.arange(rows)[:, None] + n_kv - rows, -np.inf, 0)
        mask = mask.astype(np.float16)
        mask[3] = -np.inf
    scale = 1 / np.sqrt(head_size)
    g = Graph()
    arrays = {"q": q, "k": k, "v": v} | ({"mask": mask} if mask is not None else {})
    x = {n: g.input(n, a.shape, _TYPE[a.dtype.type]) for n, a in arrays.items()}
    out = g.flash_attn_ext(x["q"], x["k"], x["v"], x.get("mask"), scale, 0.0, 0.0)
    config = GRAPH_RUN_CONFIG if precision == "f32" else RunConfig()
    sdpa = _run_form(g, out, arrays, "sdpa", config)
    grouped = _run_form(g, out, arrays, "grouped", config)
    assert not np.isnan(sdpa).any() and not np.isnan(grouped).any()
    assert oracle.nmse(sdpa, grouped) < FORMS_AGREE[precision]
    if masked:
        assert not sdpa.reshape(rows, n_head, head_size)[3].any()
    if precision == "f32":
        expected = oracle.ggml_call("flash_attn_ext", q, k, v, mask, scale, 0.0, 0.0)
        assert oracle.nmse(grouped, expected) < FA_MAX_NMSE


def test_ops_the_backend_refuses_keep_ovkits_form() -> None:
    """Sinks, softcap and ALiBi: the backend's policy refuses them and SDPA has none of them."""
    assert attention_form(False, 8, 2, plain=False) == "grouped"
    assert attention_form(True, 8, 2, plain=False) == "grouped"
    g, out, _ = _graph(*CASES[0][1:])
    g.flash_attn_ext_add_sinks(out, g.input("sinks", (8,), "f32"))
    model, _ = g.to_model([out], manual_gqa=False)
    assert "ScaledDotProductAttention" not in {t for t, _ in _ops(model)}


@pytest.mark.parametrize(
    ("device", "raw", "form"),
    [
        ("CPU", None, "grouped"),
        ("GPU", None, "manual"),  # unset: on for the GPU class
        ("CPU", "1", "manual"),
        ("GPU", "0", "sdpa"),
        ("NPU", "0", "sdpa"),
    ],
)
def test_the_engine_translates_with_the_devices_flag(
    device: str, raw: str | None, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if raw is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, raw)
    engine = get_engine(SimulatedCore("laptop"))
    q, k, v, mask = CASES[0][1:]
    # as a model builds it (the backend's pattern): Q, K, V are PERMUTE <- VIEW <- base tensor
    g = Graph()
    arrays = {n: np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for n, a in (("q", q), ("k", k), ("v", v))}
    base = {n: g.input(n, a.shape, _TYPE[a.dtype.type]) for n, a in arrays.items()}
    qkv = [g.permute(g.view_tensor(base[n]), 0, 2, 1, 3) for n in ("q", "k", "v")]
    arrays["mask"] = mask
    out = g.flash_attn_ext(*qkv, g.input("mask", mask.shape, "f16"), 0.25, 0.0, 0.0)
    plan = engine.plan(g, [out], device, None)
    types = {t for t, _ in _ops(plan.factory())}
    assert ("ScaledDotProductAttention" in types) is (form == "sdpa")
    # the flag is part of the compiled graph's key, as of upstream's model-cache key
    assert ("+manual_gqa:" in plan.structure) is (form != "grouped")
    if device == "CPU":
        got = g.compute(out, arrays, device="CPU")
        expected = oracle.ggml_call("flash_attn_ext", q, k, v, mask, 0.25, 0.0, 0.0)
        assert oracle.nmse(got, expected) < FA_MAX_NMSE


def test_a_models_logits_are_the_same_in_every_form(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GQA model (4 heads, 2 KV heads; Q8_0, which the CPU and GPU classes hold alike): the
    simulated GPU's manual form and SDPA give the CPU's logits."""
    from ovkit.model import Model, synthetic

    path = synthetic("llama", tmp_path / "gqa.gguf", weight_type="q8_0")  # type: ignore[operator]
    core = SimulatedCore("laptop")
    monkeypatch.delenv(ENV, raising=False)
    tokens = [1, 5, 9, 3]
    cpu = Model(path, n_ctx=32, core=core, device="CPU", shapes="buckets").eval(tokens)
    for raw in (None, "0"):  # unset: on for the GPU class; 0: SDPA
        if raw is not None:
            monkeypatch.setenv(ENV, raw)
            get_engine(core).reload()
        model = Model(path, n_ctx=32, core=core, device="GPU")
        gpu = model.eval(tokens)
        assert oracle.nmse(gpu, cpu) < 1e-10, raw
        plans = [b.session.plan for b in model._buckets.values() if b.session is not None]
        assert plans and all(p.manual_gqa is (raw is None) for p in plans)
        types = {n.get_type_name() for n in plans[0].factory().get_ordered_ops()}
        assert ("ScaledDotProductAttention" in types) is (raw == "0")


def test_disable_kv_slice_feeds_the_whole_cache(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GGML_OPENVINO_DISABLE_KV_SLICE: the cache inputs keep all n_ctx rows (the attention reads
    its n_kv rows inside the graph) instead of the n_kv-row view; the logits do not change."""
    from ovkit.model import Model, synthetic

    path = synthetic("llama", tmp_path / "kv.gguf", weight_type="q8_0")  # type: ignore[operator]
    tokens = [1, 5, 9, 3]
    rows = {}
    logits = {}
    for raw in (None, "1"):
        if raw is None:
            monkeypatch.delenv("GGML_OPENVINO_DISABLE_KV_SLICE", raising=False)
        else:
            monkeypatch.setenv("GGML_OPENVINO_DISABLE_KV_SLICE", raw)
        model = Model(path, n_ctx=512, device="CPU", shapes="buckets")
        logits[raw] = model.eval(tokens)
        (bucket,) = model._buckets.values()
        params = {
            p.get_friendly_name(): p.get_partial_shape()
            for p in bucket.session.plan.factory().get_parameters()
        }
        rows[raw] = {params[n][-2].get_length() for n in bucket.caches}
        assert {len(c) for c in bucket.caches.values()} == rows[raw]
    n_kv = model.shape(len(tokens), 0).n_kv
    assert rows == {None: {n_kv}, "1": {512}} and n_kv < 512
    assert oracle.nmse(logits["1"], logits[None]) < 1e-12
