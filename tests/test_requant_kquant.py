"""GGML_OPENVINO_REQUANT_KQUANT through the one requant decision (issue 19, item 2).

The targets follow ``ggml_openvino_get_requant_type`` (ggml-openvino-extra.cpp); the requantizers
follow ``quantize_q4_0`` (signed branch) and ``quantize_q4_1_asym`` (ggml-quants.cpp), checked here
against a line-by-line scalar transcription of those loops.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ovkit import quant
from ovkit.config import REQUANT_KQUANT_CHOICES
from ovkit.gguf import GGUFModel, read_gguf
from ovkit.model import Model, footprint, synthetic
from ovkit.model import placement as pl
from ovkit.simulate import SimulatedCore

R = quant.RequantTarget
ENV = "GGML_OPENVINO_REQUANT_KQUANT"
CHOICES: tuple[str | None, ...] = (None, *REQUANT_KQUANT_CHOICES)
EXPERTS = (4, 128, 64)  # a 3-D MoE expert weight, numpy order (n_expert, rows, k)

# (choice, device class, tensor, type, shape, target) as the backend's function returns them
POLICY = [
    # Q5_K/Q6_K: per-row i8 by default, the choice's 4-bit target, or kept (native)
    (None, "CPU", "blk.0.ffn_down.weight", "q6_K", (256, 256), R.Q8_0_C),
    ("q4_sym128", "GPU", "blk.0.ffn_down.weight", "q6_K", (256, 256), R.Q4_0_128),
    ("q4_sym128_all", "CPU", "blk.0.ffn_down.weight", "q5_K", (256, 256), R.Q4_0_128),
    ("q4_asym64", "GPU", "blk.0.ffn_down.weight", "q5_K", (256, 256), R.Q4_1_64),
    ("q4_asym64_all", "CPU", "blk.0.ffn_down.weight", "q6_K", (256, 256), R.Q4_1_64),
    ("native", "GPU", "blk.0.ffn_down.weight", "q6_K", (256, 256), R.NATIVE),
    # Q4_K: only the _all choices touch it
    ("q4_sym128", "CPU", "blk.0.attn_q.weight", "q4_K", (256, 256), R.NATIVE),
    ("q4_asym64", "GPU", "blk.0.attn_q.weight", "q4_K", (256, 256), R.NATIVE),
    ("q4_sym128_all", "GPU", "blk.0.attn_q.weight", "q4_K", (256, 256), R.Q4_0_128),
    ("q4_asym64_all", "CPU", "blk.0.attn_q.weight", "q4_K", (256, 256), R.Q4_1_64),
    # 3-D Q5_1/Q8_0 experts: G=64 under a choice; on GPU Q4_0_64 unless native
    (None, "CPU", "blk.0.ffn_down_exps.weight", "q8_0", EXPERTS, R.NATIVE),
    (None, "GPU", "blk.0.ffn_down_exps.weight", "q8_0", EXPERTS, R.Q4_0_64),
    (None, "GPU", "blk.0.ffn_down_exps.weight", "q5_1", EXPERTS, R.Q4_0_64),
    ("native", "GPU", "blk.0.ffn_down_exps.weight", "q5_1", EXPERTS, R.NATIVE),
    ("q4_sym128", "CPU", "blk.0.ffn_down_exps.weight", "q8_0", EXPERTS, R.Q4_0_64),
    ("q4_asym64", "CPU", "blk.0.ffn_down_exps.weight", "q5_1", EXPERTS, R.Q4_1_64),
    ("q4_asym64_all", "GPU", "blk.0.ffn_down_exps.weight", "q8_0", EXPERTS, R.Q4_1_64),
    ("bogus", "GPU", "blk.0.ffn_down_exps.weight", "q8_0", EXPERTS, R.Q4_0_64),  # an unknown word: unset
    # one expert (ne[2] == 1) is no MoE tensor; 2-D Q8_0 stays native
    (None, "GPU", "blk.0.ffn_down_exps.weight", "q8_0", (1, 128, 64), R.NATIVE),
    ("q4_sym128", "GPU", "blk.0.attn_q.weight", "q8_0", (128, 128), R.NATIVE),
    # the name rules and the NPU come before the choice
    ("q4_asym64_all", "GPU", "output.weight", "q6_K", (256, 256), R.Q8_0_C),
    ("q4_asym64_all", "GPU", "token_embd.weight", "q4_K", (256, 256), R.Q8_0_C),
    ("native", "NPU", "blk.0.ffn_down.weight", "q6_K", (256, 256), R.Q4_0_128),
    ("q4_asym64_all", "NPU", "blk.0.ffn_down_exps.weight", "q8_0", (4, 128, 128), R.Q4_0_128),
]


@pytest.mark.parametrize(("choice", "cls", "name", "qtype", "shape", "target"), POLICY)
def test_each_choice_reaches_the_requant_decision(
    choice: str | None, cls: str, name: str, qtype: str, shape: tuple[int, ...], target: R
) -> None:
    assert quant.requant_type(name, cls, qtype, shape=shape, kquant=choice) is target
    assert quant.requant_decision(name, cls, qtype, shape, kquant=choice).target is target


def test_the_default_choice_is_the_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert quant.requant_type("blk.0.ffn_down.weight", "CPU", "q6_K") is R.Q8_0_C
    monkeypatch.setenv(ENV, "q4_asym64_all")
    assert quant.requant_type("blk.0.ffn_down.weight", "CPU", "q6_K") is R.Q4_1_64
    assert quant.requant_decision("blk.0.attn_q.weight", "GPU", "q4_K", (8, 256)).target is R.Q4_1_64
    monkeypatch.setenv(ENV, "")  # empty is unset
    assert quant.requant_type("blk.0.ffn_down.weight", "CPU", "q6_K") is R.Q8_0_C


def test_grouped_targets_need_whole_groups() -> None:
    d = quant.requant_decision("blk.0.ffn_down_exps.weight", "GPU", "q8_0", (4, 64, 96), kquant=None)
    assert d.target is R.Q4_0_64 and "multiple of 64, got 96" in d.refused
    assert quant.requant_decision("blk.0.ffn_down.weight", "CPU", "q6_K", (4, 256), kquant="q4_asym64").ok


def test_requant_bytes_of_the_new_targets() -> None:
    """``ggml_openvino_get_extracted_layout``: u4/i4 weights, an f16 scale per group, and for
    Q4_1_64 a u4 zero point per group, two a byte."""
    n = 4 * 128 * 64
    assert quant.requant_bytes(R.Q4_0_64, "q8_0", EXPERTS) == n // 2 + n // 64 * 2
    assert quant.requant_bytes(R.Q4_1_64, "q8_0", EXPERTS) == n // 2 + n // 64 * 2 + n // 64 // 2


# -- the requantizers against the backend's loops -------------------------------------------------
def _roundf(v: np.float32) -> int:
    """C roundf: half away from zero."""
    return int(math.copysign(math.floor(abs(float(v)) + 0.5), float(v)))


def _c_q4_0_signed(x: np.ndarray, qk: int) -> tuple[list[int], list[float]]:
    """``quantize_q4_0``'s signed branch, loop for loop, in f32."""
    q, scales = [], []
    for i in range(x.size // qk):
        amax, mx = np.float32(0), np.float32(0)
        for j in range(qk):
            v = x[i * qk + j]
            if amax < abs(v):
                amax, mx = abs(v), v
        d = np.float32(mx / np.float32(-8))
        if d == 0:
            scales.append(1.0)
            q += [0] * qk
            continue
        inv = np.float32(np.float32(1) / d)
        scales.append(float(np.float16(d)))
        q += [max(-8, min(7, _roundf(np.float32(x[i * qk + j] * inv)))) for j in range(qk)]
    return q, scales


def _c_q4_1_asym(x: np.ndarray, qk: int) -> tuple[list[int], list[float], list[int]]:
    """``quantize_q4_1_asym``, loop for loop, in f32."""
    q, scales, zps = [], [], []
    for i in range(x.size // qk):
        group = x[i * qk : (i + 1) * qk]
        vmin, vmax = group[0], group[0]
        for v in group[1:]:
            vmin, vmax = min(vmin, v), max(vmax, v)
        vmin, vmax = min(vmin, np.float32(0)), max(vmax, np.float32(0))
        d = np.float32((vmax - vmin) / np.float32(15))
        if d == 0:
            scales.append(1.0)
            zps.append(0)
            q += [0] * qk
            continue
        inv = np.float32(np.float32(1) / d)
        zq = max(0, min(15, _roundf(np.float32(-vmin * inv))))
        scales.append(float(np.float16(d)))
        zps.append(zq)
        q += [max(0, min(15, _roundf(np.float32(v * inv)) + zq)) for v in group]
    return q, scales, zps


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 128)).astype(np.float32)
    x[1] += 3.0  # an all-positive row: the asymmetric range holds 0
    x[2, :64] = 0.0  # a zero group
    x[3, 5] = -x[3].__abs__().max()  # ties of magnitude: the first one wins
    x[3, 9] = -x[3, 5]
    x[4] *= 1e-3
    return x


@pytest.mark.parametrize("target", [R.Q4_0_64, R.Q4_0_128])
def test_symmetric_requant_is_the_backends_quantize_q4_0(target: R, rows: np.ndarray) -> None:
    dec = quant.requantize(rows, target)
    q, scales = _c_q4_0_signed(rows.reshape(-1), dec.group)
    assert dec.group == (64 if target is R.Q4_0_64 else 128) and dec.bias is None
    assert dec.q.reshape(-1).tolist() == q
    assert dec.scale.reshape(-1).tolist() == scales
    # the format's error: at most one step |d| per group (+8 clamps to 7), d as stored in f16
    err = np.abs(dec.dequantize() - rows).reshape(rows.shape[0], -1, dec.group).max(axis=2)
    assert (err <= np.abs(dec.scale) * 1.001).all()


def test_asymmetric_requant_is_the_backends_quantize_q4_1_asym(rows: np.ndarray) -> None:
    dec = quant.requantize(rows, R.Q4_1_64)
    q, scales, zps = _c_q4_1_asym(rows.reshape(-1), 64)
    assert dec.group == 64 and dec.bias is not None
    assert dec.q.reshape(-1).tolist() == q
    assert dec.scale.reshape(-1).tolist() == scales
    np.testing.assert_array_equal(
        dec.bias.reshape(-1), -np.array(zps, np.float32) * np.array(scales, np.float32)
    )
    assert dec.q.min() >= 0 and dec.q.max() <= 15
    err = np.abs(dec.dequantize() - rows).reshape(rows.shape[0], -1, 64).max(axis=2)
    assert (err <= dec.scale * 1.001).all()
    # zero stays exactly zero (the range always holds it)
    assert (dec.dequantize()[2, :64] == 0).all()


@pytest.mark.parametrize(("qtype", "target"), [("q8_0", R.Q4_0_64), ("q5_1", R.Q4_1_64)])
def test_a_requantized_weight_holds_its_values_within_the_format(qtype: str, target: R) -> None:
    rng = np.random.default_rng(3)
    w = quant.quantize(qtype, rng.standard_normal(EXPERTS).astype(np.float32), "blk.0.ffn_down_exps.weight")
    rq = w.apply_policy("GPU", kquant="q4_sym128" if target is R.Q4_0_64 else "q4_asym64_all")
    assert rq.requant is target and rq.container == ("i4" if target is R.Q4_0_64 else "u4")
    err = np.abs(rq.dequantize() - w.dequantize()).reshape(-1, 64).max(axis=1)
    assert (err <= np.abs(rq.decoded.scale.reshape(-1)) * 1.001).all()
    # the OpenVINO constant holds the same values
    import openvino as ov

    compiled = ov.Core().compile_model(ov.Model([rq.to_ov_node()], []), "CPU")
    np.testing.assert_array_equal(compiled({})[0], rq.dequantize())


# -- one decision: footprint, placement, the runner -----------------------------------------------
@pytest.fixture(scope="module")
def core() -> SimulatedCore:
    return SimulatedCore("laptop")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GGUFModel]:
    d: Path = tmp_path_factory.mktemp("kquant")
    return {
        # 3-D Q8_0 experts (down: k = 64, so the NPU's G=128 refuses it)
        "moe-q8_0": read_gguf(
            synthetic("qwen3moe", d / "moe.gguf", weight_type="q8_0", n_embd=128, n_ff=256, n_ff_exp=64)
        ),
        # Q6_K everywhere (rows of 256)
        "llama-q6_K": read_gguf(synthetic("llama", d / "k6.gguf", weight_type="q6_K", n_embd=256, n_ff=256)),
    }


def _expected_bytes(g: GGUFModel, cls: str, choice: str | None) -> int:
    return sum(
        quant.requant_decision(t.name, cls, t.type, t.shape, kquant=choice).nbytes
        if t.type in quant.QUANT_SPECS
        else t.nbytes
        for t in g.tensors.values()
    )


@pytest.mark.parametrize("choice", CHOICES)
@pytest.mark.parametrize("name", ["moe-q8_0", "llama-q6_K"])
def test_footprint_placement_and_runner_agree_per_choice(
    name: str,
    choice: str | None,
    models: dict[str, GGUFModel],
    core: SimulatedCore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if choice is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, choice)
    g = models[name]
    probe = Model(g, n_ctx=32, core=core, device="CPU")
    nodes = pl.node_table(probe, pl.targets(core), n_prompt=4)
    placed = nodes[nodes["graph"] == "decode"].groupby("device")["weight_bytes"].sum()
    fit = footprint.fit(probe, raw=True, core=core).set_index("device")["weight_bytes"]
    for target in pl.targets(core):
        expected = _expected_bytes(g, target.device_class, choice)
        assert placed[target.label] == fit[target.label] == g.weight_bytes(target.device_class) == expected
        if target.device_class == "NPU":
            continue  # the choice does not reach the NPU (its blanket i4 comes first)
        model = Model(g, n_ctx=32, core=core, device=target.name)
        held = {
            n: w.requant
            for n, w in model.weights.items()
            if isinstance(w, quant.QuantizedWeight) and g.tensors[n].type in quant.QUANT_SPECS
        }
        assert held == {
            n: quant.requant_type(
                n, target.device_class, g.tensors[n].type, shape=g.tensors[n].shape, kquant=choice
            )
            for n in held
        }
    # what the user sees: the GPU's bytes move with the choice
    gpu = {c: _expected_bytes(g, "GPU", c) for c in CHOICES}
    assert len(set(gpu.values())) >= 3, gpu


def test_a_requantized_moe_model_runs_on_the_simulated_gpu(
    models: dict[str, GGUFModel], core: SimulatedCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU's default Q4_0_64 experts and q4_asym64_all's Q4_1_64 ones give logits close to the
    CPU's native 8-bit experts (4-bit in groups of 64)."""
    monkeypatch.delenv(ENV, raising=False)
    g = models["moe-q8_0"]
    native = Model(g, n_ctx=32, core=core, device="CPU").eval([1, 2, 3])
    for choice, target in ((None, R.Q4_0_64), ("q4_asym64_all", R.Q4_1_64)):
        if choice:
            monkeypatch.setenv(ENV, choice)
        model = Model(g, n_ctx=32, core=core, device="GPU")
        assert model.weights["blk.0.ffn_down_exps.weight"].requant is target
        logits = model.eval([1, 2, 3])
        assert np.isfinite(logits).all()
        assert np.corrcoef(logits.ravel(), native.ravel())[0, 1] > 0.95
