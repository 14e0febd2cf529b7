"""The curated case table: one record, one input generator, the sets as tags."""

from __future__ import annotations

import numpy as np
import pytest

from ovkit.catalogue import curated
from ovkit.catalogue.case import Case, Init, Leaf, draw, draw_all


def test_sets_and_names() -> None:
    sizes = {tag: len(curated.cases(tag)) for tag in curated.SETS}
    assert sizes == {"test-ops": 107, "ggml": 298, "perf": 21}
    names = [c.name for c in curated.cases()]
    assert len(names) == len(set(names)) == sum(sizes.values())
    assert curated.find("SCALE(type=f32,ne_a=[10,10,1,1],s=0.5)").tags == {"test-ops"}
    with pytest.raises(ValueError, match="case set 'smoke' is not known"):
        curated.cases("smoke")
    with pytest.raises(KeyError, match="no curated case named 'NOPE"):
        curated.find("NOPE()")


def test_comparison_cases_carry_their_variant_and_expected_rejection() -> None:
    c = curated.find("UNARY.EXP(type=f32,ne_a=[128,2,2,2],v=0)")
    assert c.rejected == "exp" and c.max_err == 1e-7
    block = [c for c in curated.cases("ggml") if c.op == "LLAMA_BLOCK"]
    assert len(block) == 4 and all(c.max_err == 2e-3 and "test_llama" in c.why for c in block)


def test_masks_and_positions() -> None:
    rng = np.random.default_rng(0)
    causal = draw(Leaf("m", (8, 4, 1, 1), "f16", Init("causal_mask")), rng)[0, 0]
    assert causal.dtype == np.float16 and causal.shape == (4, 8)
    # query i sees keys 0 .. i + (n_kv - n_q): the last query sees every key
    assert [int(np.isfinite(row).sum()) for row in causal] == [5, 6, 7, 8]
    padded = draw(Leaf("m", (8, 4, 1, 1), "f32", Init("padded_mask")), rng)[0, 0]
    assert np.isinf(padded[[1, 3]]).all() and np.isfinite(padded[2]).sum() == 7
    pos = draw(Leaf("p", (5, 1, 1, 1), "i32", Init("pos")), rng)
    assert pos.dtype == np.int32 and pos.ravel().tolist() == [0, 1, 2, 3, 4]


def test_values_are_drawn_from_the_case_name() -> None:
    c = curated.find("ADD(type=f32,ne_a=[10,3,4,1],ne_b=[10,3,4,1])")
    a, b = draw_all(c), draw_all(c)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    other = Case(c.op, c.params + ",x=1", c.leaves, c.program)
    assert not np.array_equal(draw_all(other)["a"], a["a"])


def test_relabel_and_param() -> None:
    c = curated.find("CONCAT(type=f32,ne_a=[10,4,1,1],ne_b=[6,4,1,1],dim=0)")
    assert curated.param(c, "type") == "f32" and curated.param(c, "ne_b") == "[6,4,1,1]"
    with pytest.raises(KeyError, match="no parameter 'mode'"):
        curated.param(c, "mode")
    from dataclasses import replace

    wider = replace(c, leaves=(replace(c.leaves[0], ne=(12, 4, 1, 1), dtype="f16"), c.leaves[1]))
    assert curated.relabel(wider).name == "CONCAT(type=f16/f32,ne_a=[12,4,1,1],ne_b=[6,4,1,1],dim=0)"


def test_importing_the_curated_table_builds_no_case() -> None:
    """The sets are built on demand: importing them makes no Case (the comparison set was filled
    at import time)."""
    import subprocess
    import sys

    code = (
        "import gc; import ovkit.catalogue.curated as c; from ovkit.catalogue.case import Case; "
        "print(sum(isinstance(o, Case) for o in gc.get_objects()), len(c.cases('ggml')) > 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "True"]
