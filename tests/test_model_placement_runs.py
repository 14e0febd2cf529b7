"""Placement, fit and the runner share one requant decision (issue 21, item 2).

For every device of the simulated laptop the placement table's ``ovkit_runs`` is checked against
a real ``Model`` on that device: a device it calls runnable constructs the model and evaluates
one token; any other refuses with the reason placement gives.  One compile per runnable pair.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from model_helpers import real_model

from ovkit import quant
from ovkit.model import Model, footprint, synthetic
from ovkit.model import placement as pl
from ovkit.simulate import SimulatedCore


@pytest.mark.parametrize(
    ("row", "target", "refused"),
    [
        (576, quant.RequantTarget.Q4_0_128, True),  # SmolLM2's n_embd
        (1536, quant.RequantTarget.Q4_0_128, False),
        (64, quant.RequantTarget.Q4_0_128, True),
    ],
)
def test_npu_q4_0_128_needs_whole_groups_of_128(row: int, target: quant.RequantTarget, refused: bool) -> None:
    d = quant.requant_decision("blk.0.attn_q.weight", "NPU", "q4_1", (192, row))
    assert d.target is target and (not d.ok) is refused
    if refused:
        assert f"multiple of 128, got {row}" in d.refused and "blk.0.attn_q.weight" in d.refused
    # embeddings and the output head stay per-row i8 on NPU, whatever the row length
    assert quant.requant_decision("token_embd.weight", "NPU", "q8_0", (512, row)).ok
    assert quant.requant_decision("blk.0.attn_q.weight", "CPU", "q4_1", (192, row)).ok


def test_refused_weight_cannot_be_built_by_name() -> None:
    rng = np.random.default_rng(0)
    w = quant.quantize("q8_0", rng.standard_normal((4, 96)).astype(np.float32), name="blk.0.attn_q.weight")
    decision = quant.requant_decision(w.name, "NPU", w.qtype, w.shape)
    with pytest.raises(quant.QuantError) as exc:
        w.apply_policy("NPU")
    assert str(exc.value) == decision.refused


@pytest.fixture(scope="module")
def core() -> SimulatedCore:
    return SimulatedCore("laptop")


def _models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("placement-runs")
    return {
        # rows of 64: the NPU's Q4_0_128 requant refuses every block weight
        "synthetic-64": synthetic("llama", d / "s64.gguf", weight_type="q8_0"),
        # rows of 128 and 256: whole groups, the NPU runs it
        "synthetic-128": synthetic("llama", d / "s128.gguf", weight_type="q8_0", n_embd=128, n_ff=256),
    }


@pytest.mark.parametrize("name", ["synthetic-64", "synthetic-128", "smollm2-135m"])
def test_placement_runs_agrees_with_a_real_model_on_every_device(
    name: str, core: SimulatedCore, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from ovkit.gguf import read_gguf

    path = read_gguf(real_model(name) if name == "smollm2-135m" else _models(tmp_path_factory)[name])
    probe = Model(path, n_ctx=32, core=core, device="CPU")
    nodes = pl.node_table(probe, pl.targets(core), n_prompt=4)
    runs = pl.summary(nodes, raw=True).groupby("device")["ovkit_runs"].all()
    fit = footprint.fit(probe, raw=True, core=core).set_index("device")
    weights_fit = path.fit_check(core).set_index("device")  # the GGUF-only fit check agrees
    refused = pl.fallbacks(nodes, raw=True)
    seen = {}
    for target in pl.targets(core):
        ok = bool(runs[target.label])
        assert bool(fit.loc[target.label, "runs"]) is ok, (target, fit.loc[target.label, "why_not"])
        assert bool(weights_fit.loc[target.name, "fits"]) is ok
        assert (weights_fit.loc[target.name, "refused"] == "") is ok
        if ok:
            model = Model(path, n_ctx=32, core=core, device=target.name)
            logits = model.eval([1])
            assert logits.shape == (1, model.hp.n_vocab) and np.isfinite(logits).all()
        else:
            reasons = set(refused.loc[refused["device"] == target.label, "reason"])
            with pytest.raises(ValueError) as exc:
                Model(path, n_ctx=32, core=core, device=target.name).eval([1])
            assert str(exc.value) in reasons
            assert not fit.loc[target.label, "fits"]
            assert fit.loc[target.label, "why_not"].startswith(str(exc.value))
        seen[target.device_class] = ok
    expected_npu = name == "synthetic-128"
    assert seen == {"CPU": True, "GPU": True, "NPU": expected_npu}
