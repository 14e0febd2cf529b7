"""precision="ggml": llama.cpp CPU's quantized-matmul numerics (q8 activations) and flash
attention (f16 accumulator), op by op and on the real models, against ggml (ggml-python) and
llama.cpp (llama-cpp-python, CPU build).

The op tests compare one quantized MUL_MAT per weight type and one FLASH_ATTN_EXT per attention
shape with ggml's own kernels; the model tests
run both fetched real models (python -m ovkit.model.fetch) on three prompts, 24 greedy steps, the
same fed tokens on both sides, with precision="ggml" and with the default exact f32.
"""

from __future__ import annotations

import functools
import gc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from model_helpers import real_model

from ovkit import oracle, quant
from ovkit.model import Model
from ovkit.model.cli import compare
from ovkit.model.reference import run_reference, tokenize
from ovkit.ops import ggml_numerics

# ------------------------------------------------------------------------------------- one op
#: The weight types of the real models and the rest of upstream's types, with host-decoded Q5_0,
#: Q2_K, Q3_K: every dot type (q8_0, q8_1, q8_K) is met.
OP_TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K", "mxfp4", "q2_K", "q3_K")
#: ggml's per-block integer sums and ours (f32 products of the same q8 values) differ only in f32
#: rounding: measured NMSE 1e-14..3e-13 on these shapes, where f32 activations give 3e-5..6e-5
#: and a single q8 value rounded the other way ~1e-9.
OP_MAX_NMSE = 1e-12


def _ov_mul_mat(weight: quant.QuantizedWeight, x: np.ndarray) -> np.ndarray:
    """``weight.ov_mul_mat(x)`` compiled alone on the CPU in f32, as ovkit compiles f32 (exact
    activations on every CPU kind)."""
    import openvino as ov
    import openvino.opset13 as ops

    from ovkit.engine import RunConfig

    p = ops.parameter(list(x.shape), np.float32)
    model = ov.Model([ops.result(weight.ov_mul_mat(p.output(0)))], [p])
    compiled = ov.Core().compile_model(model, "CPU", RunConfig(inference_precision="f32").properties("CPU"))
    return np.asarray(compiled(x)[0])


@pytest.mark.parametrize("qtype", OP_TYPES)
def test_quantized_mul_mat_matches_ggml_kernels(qtype: str) -> None:
    """A quantized MUL_MAT with ggml's numerics equals ggml's own kernels to f32 rounding; with
    exact f32 activations it is off by the activations' q8 rounding (so the test can fail)."""
    rng = np.random.default_rng(23)
    rows, k, n = 48, 1024, 5
    w = rng.standard_normal((rows, k)).astype(np.float32) + 0.5  # a mean: q4_1/q5_1 use their min
    x = (rng.standard_normal((n, k)) * 3 + 1).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero activation block (d = 0)
    x[1, 5] = -np.abs(x[1, :256]).max() - 1  # a negative value of largest magnitude (q8_K's sign)
    base = quant.quantize(qtype, w)
    theirs = oracle.ggml_mul_mat_quant(qtype, w, x).reshape(n, rows)
    ours = _ov_mul_mat(ggml_numerics.with_ggml_numerics(base, qtype), x)
    exact = _ov_mul_mat(base, x)
    assert oracle.nmse(ours, theirs) <= OP_MAX_NMSE, ggml_numerics.vec_dot_type(qtype)
    assert oracle.nmse(exact, theirs) > 1e3 * OP_MAX_NMSE


@pytest.mark.parametrize("qtype", ["q4_1", "q5_1"])
def test_q8_1_min_term_uses_the_stored_f16_sum(qtype: str) -> None:
    """q8_1's ``s`` is stored in f16 and multiplies the weights' mins: reproducing it takes the
    error from ~4e-11 (exact d·Σq) to f32 rounding."""
    rng = np.random.default_rng(5)
    rows, k, n = 32, 4096, 3
    w = (rng.standard_normal((rows, k)) + 2).astype(np.float32)
    x = (rng.standard_normal((n, k)) + 1).astype(np.float32)
    base = quant.quantize(qtype, w)
    theirs = oracle.ggml_mul_mat_quant(qtype, w, x).reshape(n, rows)
    ours = _ov_mul_mat(ggml_numerics.with_ggml_numerics(base, qtype), x)
    assert oracle.nmse(ours, theirs) <= OP_MAX_NMSE


def test_ggml_numerics_are_their_own_compiled_graph() -> None:
    """The weight's digest (the compile cache key) tells ggml numerics from exact ones, and the
    dot type follows the GGUF's type (Q5_0 repacked to Q8_0 blocks still uses q8_0)."""
    w = quant.quantize("q4_1", np.ones((8, 64), np.float32))
    g = ggml_numerics.with_ggml_numerics(w, "q4_1")
    assert g.digest != w.digest and g.dot_type == "q8_1"
    assert ggml_numerics.vec_dot_type("Q4_K") == "q8_K" and ggml_numerics.vec_dot_type("q5_0") == "q8_0"
    import pickle

    back = pickle.loads(pickle.dumps(g))
    assert isinstance(back, ggml_numerics.GgmlNumericsWeight) and back.digest == g.digest


def test_unknown_precision_is_refused(tmp_path: Path) -> None:
    from ovkit.model import synthetic
    from ovkit.model.arch import ModelError

    path = synthetic("llama", tmp_path / "m.gguf", weight_type="q8_0", n_embd=64, n_ff=128)
    with pytest.raises(ModelError, match="precision 'ggml8' is not one of exact, device, ggml"):
        Model(path, precision="ggml8")


# ------------------------------------------------------------------------------- attention
def _flash_attn(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, ggml: ggml_numerics.F16Kernels | None
) -> np.ndarray:
    """One FLASH_ATTN_EXT (scale 1/8) on the CPU in f32, marked for ggml's numerics with the
    ``ggml`` kernels or not.  The policy's Q/K/V permute rule is about llama.cpp's graphs, so the
    translation runs directly."""
    from ovkit.graph import Graph

    g = Graph()
    feed = {"q": q, "k": k, "v": v, "m": mask}
    ins = {n: g.input(n, a.shape, "f32" if a.dtype == np.float32 else "f16") for n, a in feed.items()}
    out = g.flash_attn_ext(ins["q"], ins["k"], ins["v"], ins["m"], 0.125, 0.0, 0.0)
    if ggml:
        ggml_numerics.mark(g, ggml)
    return np.asarray(g.compute(out, feed, device="CPU", policy=False))


#: (heads, KV heads, query rows, keys, head size): SmolLM2's prefill and decode shapes (9/3 heads
#: of 64), Gemma-3-270M's (4/1 heads of 256), 192 wide heads (with AVX512-FP16: 128 columns in
#: f16 arithmetic, 64 in f32; 64 leftovers of the dot in double), and 70 query rows (ggml's tiled
#: f32 path).
FA_SHAPES = ((9, 3, 8, 40, 64), (9, 3, 1, 64, 64), (4, 1, 8, 30, 256), (4, 2, 8, 20, 192), (4, 2, 70, 80, 32))


def oracle_kernels() -> ggml_numerics.F16Kernels:
    """The f16 kernels of ggml-python's build (the oracle's ggml): its ISA and, probed, whether its
    ggml_vec_dot_f16 accumulates in f16 (ggml-python 0.0.45's ggml 0.15 does with AVX512-FP16,
    where llama.cpp's newer ggml sums in f32)."""
    return ggml_numerics.f16_kernels("ggml-python-openvino", oracle.ggml_dot_f16_in_f16())


@pytest.mark.parametrize("shape", FA_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_flash_attention_matches_ggml_kernels(shape: tuple[int, int, int, int, int]) -> None:
    """FLASH_ATTN_EXT with f16 K/V and ggml's numerics (the oracle build's kernels) equals ggml's
    CPU kernel to the last bits: under 64 query rows Q is rounded to f16, Q·K summed in
    ggml_vec_dot_f16's order and V·softmax accumulated in f16 key by key (measured: bitwise equal,
    also with AVX512-FP16's f16 arithmetic); from 64 rows ggml's tiled path is f32 (5.7e-14).
    ovkit's exact f32 attention is 2e-8..1.6e-6 off."""
    h, h_kv, n_q, n_kv, d = shape
    rng = np.random.default_rng(16)
    q = rng.standard_normal((1, h, n_q, d)).astype(np.float32)
    k = rng.standard_normal((1, h_kv, n_kv, d)).astype(np.float16)
    v = (rng.standard_normal((1, h_kv, n_kv, d)) * 3).astype(np.float16)
    mask = np.zeros((-(-n_q // 8) * 8, n_kv), np.float16)  # causal-like, a masked key, a masked row
    for i in range(mask.shape[0]):
        mask[i, n_kv - 10 + i :] = -np.inf
    mask[:, 3] = -np.inf
    mask[min(1, n_q - 1), :] = -np.inf if n_q > 1 else 0.0
    theirs = oracle.ggml_call("flash_attn_ext", q, k, v, mask, 0.125, 0.0, 0.0)
    ours = _flash_attn(q, k, v, mask, ggml=oracle_kernels()).reshape(theirs.shape)
    exact = _flash_attn(q, k, v, mask, ggml=None).reshape(theirs.shape)
    assert oracle.nmse(ours, theirs) <= FA_MAX_NMSE
    assert oracle.nmse(exact, theirs) > 1e3 * FA_MAX_NMSE


def test_f16_kernels_follow_the_builds_isa(monkeypatch: pytest.MonkeyPatch) -> None:
    """The attention numerics follow what the build compiled for: AVX2 and AVX-512 widen f16 to
    f32, AVX512-FP16 computes V·softmax in f16 (and, in ggml-python's older ggml, Q·K too)."""
    from ovkit import native

    pick = ggml_numerics.f16_kernels.__wrapped__  # uncached
    for isa, name in (
        ({"avx2"}, "avx2"),
        ({"avx2", "avx512f", "avx512_bf16"}, "avx512"),
        ({"avx2", "avx512f", "avx512_fp16"}, "avx512fp16"),
    ):
        monkeypatch.setattr(native, "build_isa", lambda build, isa=isa: frozenset(isa))
        assert pick("llama-cpp-python-cpu").name == name
    assert pick("ggml-python-openvino", True) == ggml_numerics.kernels_named("avx512fp16-f16dot")
    monkeypatch.setattr(native, "build_isa", lambda build: frozenset({"avx2", "avx512f"}))
    with pytest.raises(ValueError, match="ggml-python-openvino accumulates its f16 dot in f16 but"):
        pick("ggml-python-openvino", True)
    with pytest.raises(ValueError, match="unknown ggml f16 kernels 'avx3'; expected one of avx2, "):
        ggml_numerics.kernels_named("avx3")


#: ggml numerics against ggml's FLASH_ATTN_EXT: f32 rounding of the last steps at most (measured
#: 0 to 5.7e-14); one f16 value of the accumulator rounded the other way is ~1e-9, the AVX-512
#: kernels against AVX512-FP16's 2e-10 (64-wide heads) to 1.3e-6 (256).
FA_MAX_NMSE = 1e-12


def test_exp_is_glibc_expf() -> None:
    """ggml's flash attention calls C's expf (glibc's: correctly rounded but for ~0.06% of
    arguments); OpenVINO's CPU Exp is an ulp off for about half of them, which flips f16 roundings
    of the attention accumulator.  ggml_numerics.exp_f32 is correctly rounded (measured: on every
    argument drawn here), so it differs from glibc only where glibc is not."""
    import ctypes
    import ctypes.util

    import openvino as ov
    import openvino.opset13 as ops

    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    x = -np.random.default_rng(3).random(50_000).astype(np.float32) * 87
    x[:4] = (0.0, -87.0, -100.0, -np.inf)
    p = ops.parameter([x.size], np.float32)
    model = ov.Model([ops.result(ggml_numerics.exp_f32(p.output(0))), ops.result(ops.exp(p))], [p])
    got = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(x)
    ours, plain = np.asarray(got[0]), np.asarray(got[1])
    glibc = np.array([libm.expf(float(v)) for v in x], np.float32)
    assert np.mean(ours != glibc) <= 2e-3 and ours[3] == 0.0
    assert np.mean(plain != glibc) > 0.1


# ------------------------------------------------------------------------------ real models
REAL = ("smollm2-135m", "gemma3-270m")
#: Three prompts; each is fed as its first PROMPT_TOKENS ids (one prefill shape: two compiles per
#: model and precision).  The second parts exact f32 from llama.cpp at a near-tie (issue 23).
PROMPTS = (
    "The capital of France is a city where",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    if n < 2:\n        return n",
)
PROMPT_TOKENS = 8
N_DECODE = 24
#: precision="ggml" at the first prompt position, against llama.cpp CPU.  There attention has one
#: key (softmax 1, the output is that V row in both), so on SmolLM2 (llama: matmuls, RMS norms,
#: SiLU) only the matmul numerics differ: measured 3e-6..2e-5 where exact f32 gives 6e-4.  That is
#: not f32 rounding: the matmuls add the q8 blocks in OpenVINO's order, not ggml's (1e-13), and
#: the q8/f16 roundings that follow flip where a value sits that close to a boundary; SmolLM2
#: amplifies a flip over its layers (docs/model.md, Precision: node by node).  Later positions go
#: the same way, attention reproduced or not.  Gemma-3-270M is not asserted: at its BOS position
#: in a batch ggml measured 1.6e-4 (6e-14 fed alone, without a flip).
GGML_FIRST_MAX_NMSE = 1e-4
#: exact f32 against llama.cpp CPU: the q8 rounding of every quantized matmul's activations,
#: compounded over the layers (issue 23 measured up to 4.85e-2 on SmolLM2).
EXACT_MAX_NMSE = 5e-2
#: A near-tie: llama.cpp's logit of its own pick exceeds its logit of ovkit's pick by less than
#: NEAR_TIE_RMS × the RMS difference of the two logit vectors at that position.  That RMS is the
#: noise the two computations put on each logit; the margin is a difference of two such logits,
#: whose noise is ~√2 × RMS, so 3 × RMS is about two of its standard deviations.
NEAR_TIE_RMS = 3.0


@functools.cache
def prompt_ids(path: Path, text: str) -> tuple[int, ...]:
    """The first PROMPT_TOKENS ids of ``text`` (llama.cpp's tokenizer, one subprocess per
    model and prompt: the runs of both precisions feed the same ids)."""
    ids = tokenize(path, text)
    assert len(ids) >= PROMPT_TOKENS, (text, ids)
    return tuple(ids[:PROMPT_TOKENS])


def near_tie(ours: np.ndarray, theirs: np.ndarray) -> bool:
    """Whether the greedy picks of two logit vectors differ only at a near-tie (NEAR_TIE_RMS)."""
    a, b = int(ours.argmax()), int(theirs.argmax())
    rms = float(np.sqrt(np.mean((ours.astype(np.float64) - theirs) ** 2)))
    return float(theirs[b]) - float(theirs[a]) < NEAR_TIE_RMS * rms


@pytest.fixture(autouse=True)
def _collect() -> Any:
    """Free each test's models before the next: a precision="ggml" SmolLM2 peaks near 4 GB, and
    models left to a later collection added up to 19.7 GB of RSS in one suite run."""
    yield
    gc.collect()


@pytest.fixture(scope="module")
def runs() -> Any:
    """``runs(name, precision)``: per prompt, compare() of ovkit against llama.cpp CPU on ovkit's
    greedy tokens, plus the decode steps where the greedy picks part and those of them that are
    not near-ties.
    precision="ggml" is asserted at the first prompt position only: it decodes one step."""
    done: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def run(name: str, precision: str) -> list[dict[str, Any]]:
        if (name, precision) in done:
            return done[(name, precision)]
        path = real_model(name)
        model = Model(path, n_ctx=64, no_requant=True, precision=precision)
        n_decode = N_DECODE if precision == "exact" else 1
        out = []
        for text in PROMPTS:
            prompt = list(prompt_ids(path, text))
            gen = model.generate(prompt, n_decode, all_logits=True)  # position 0 is asserted
            ref = run_reference(path, prompt, gen.tokens, n_ctx=64)
            c = compare(gen, ref)
            ours = np.concatenate([gen.prompt_logits[-1:], gen.decode_logits])
            theirs = np.concatenate([ref.prompt_logits[-1:], ref.decode_logits])
            parted = [i for i in range(len(ours)) if ours[i].argmax() != theirs[i].argmax()]
            c["parted"] = parted  # decode steps (0: the prompt's pick) where the greedy picks differ
            c["not_near_ties"] = [i for i in parted if not near_tie(ours[i], theirs[i])]
            c["text"] = text
            out.append(c)
        done[(name, precision)] = out
        del model, gen
        gc.collect()  # a Model's graphs sit in reference cycles: free its compiled models now
        return out

    return run


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL)
def test_exact_precision_parts_only_at_near_ties(runs: Any, name: str) -> None:
    """Default exact f32, weights as stored (Gemma's Q5_0 as Q8_0 blocks): logit NMSE per
    position <= 5e-2, and wherever the greedy picks part, llama.cpp's own top two are a near-tie."""
    for c in runs(name, "exact"):
        assert c["max_nmse"] <= EXACT_MAX_NMSE, (c["text"], c["nmse_per_position"])
        assert not c["not_near_ties"], (c["text"], c["parted"])


#: Prompts of PROMPTS whose first position must meet GGML_FIRST_MAX_NMSE: a single q8 value
#: rounded the other way in any of the 30 layers is amplified to ~1e-4 at the logits.  Measured:
#: no such flip on the three prompts on AVX2 machines; on an AMD EPYC with AVX-512 one, at "def
#: fibonacci" (ffn_norm-5, whose values equal llama.cpp's to 1e-13, quantized one value otherwise:
#: 2.0e-4 where exact f32 gave 1.1e-4; the other two 1.3e-5 and 2.2e-5 against 1.6e-4 and 6.4e-4).
GGML_FIRST_MIN_PROMPTS = 2


@pytest.mark.slow
def test_ggml_precision_matches_llama_cpp_matmuls(runs: Any) -> None:
    """precision="ggml" on SmolLM2 at the first prompt position (matmul numerics alone): within
    GGML_FIRST_MAX_NMSE of llama.cpp and closer than exact f32, on all prompts but a q8 flip's."""
    met = []
    for ggml, exact in zip(runs("smollm2-135m", "ggml"), runs("smollm2-135m", "exact"), strict=True):
        first, first_exact = ggml["nmse_per_position"][0], exact["nmse_per_position"][0]
        met.append((first <= GGML_FIRST_MAX_NMSE and first < first_exact, ggml["text"], first, first_exact))
    assert sum(m[0] for m in met) >= GGML_FIRST_MIN_PROMPTS, met


#: Gemma-3-270M fed its BOS alone: every matmul of the model (Q5_0, Q4_K, Q6_K, Q8_0 and F32
#: weights) with llama.cpp's q8 activations, attention over one key.  Measured: ggml 6e-14 (equal
#: up to f32 summation order), exact f32 5.6e-4.
GGML_ONE_TOKEN_MAX_NMSE = 1e-10


@pytest.mark.slow
def test_ggml_precision_reproduces_gemma_on_one_token() -> None:
    """precision="ggml" on one token equals llama.cpp CPU to f32 rounding; exact f32 does not."""
    path = real_model("gemma3-270m")
    bos = [2]
    theirs = run_reference(path, bos, [], n_ctx=64).prompt_logits[0]
    got = {
        precision: Model(path, n_ctx=64, no_requant=True, precision=precision).eval(bos)[0]
        for precision in ("ggml", "exact")
    }
    assert oracle.nmse(got["ggml"], theirs) <= GGML_ONE_TOKEN_MAX_NMSE
    assert oracle.nmse(got["exact"], theirs) > 1e3 * GGML_ONE_TOKEN_MAX_NMSE


#: SmolLM2's first layer with precision="ggml", against llama.cpp CPU's own nodes: the matmuls with
#: q8 activations and flash attention as ggml computes it leave f32 summation order only (measured
#: 6e-14..4e-13; with ovkit's f32 attention attn_out-0 was 7e-7 and ffn_up-0 2.7e-5 from the
#: positions after the first).  Where an activation row entering a matmul is not bitwise llama.cpp's
#: (OpenVINO's RMS kernel sums in its own order, so a norm's scale can be an ulp off) one of its q8
#: values can round the other way: on an AMD EPYC with AVX-512, attn_norm-0 at position 4 of this
#: prompt flipped one q8 value (Qcur-0 there 2e-7, attention from there on 2e-6..8e-6), on the
#: AVX2 machines none did.  The nodes are asserted at the positions before such a flip.
GGML_LAYER0_MAX_NMSE = 1e-11
LAYER0 = ("attn_out-0", "ffn_inp-0", "ffn_gate-0", "ffn_up-0", "ffn_out-0", "l_out-0")
#: Positions before the first flip needed: attention over more than one key is then exercised.
MIN_CLEAN_POSITIONS = 2


def q8_flipped(ours: np.ndarray, theirs: np.ndarray) -> bool:
    """Whether two activation rows quantize to different q8_0/q8_1 blocks (32 values; ``d =
    f16(amax/127)``, ``q = round(x·127/amax)``, the AVX kernels' multiplier)."""
    out = []
    for row in (ours, theirs):
        blocks = row.astype(np.float32).reshape(-1, 32)
        amax = np.abs(blocks).max(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(amax > 0, np.rint(blocks * (np.float32(127) / amax)), 0)
        out.append((q, (amax / np.float32(127)).astype(np.float16)))
    return not all(np.array_equal(a, b) for a, b in zip(out[0], out[1], strict=True))


@pytest.mark.slow
def test_ggml_precision_reproduces_llama_cpp_attention_node_by_node() -> None:
    """compare-model's node capture on SmolLM2, eight prompt tokens in one batch with flash
    attention: with precision="ggml" the first layer's nodes after attention equal llama.cpp CPU's
    to f32 rounding at every position before a q8 rounding flip (at least two of them)."""
    from ovkit.model.compare.diff import llama_keyed, run_llama, run_ovkit

    path = real_model("smollm2-135m")
    toks = list(prompt_ids(path, PROMPTS[1]))
    ref = llama_keyed(run_llama(path, toks, n_ctx=64))
    ours, _ = run_ovkit(path, toks, n_ctx=64, precision="ggml")

    def rows(name: str) -> tuple[np.ndarray, np.ndarray]:
        return ours[(name, 0)][1].reshape(PROMPT_TOKENS, -1), ref[(name, 0)][2].reshape(PROMPT_TOKENS, -1)

    attn_in, ffn_in = rows("attn_norm-0"), rows("ffn_norm-0")
    # attention mixes the positions: a flip in Q/K/V's input reaches every later position; the
    # feed-forward nodes of a position need its own ffn_norm row unflipped too
    first = next((p for p in range(PROMPT_TOKENS) if q8_flipped(attn_in[0][p], attn_in[1][p])), PROMPT_TOKENS)
    assert first >= MIN_CLEAN_POSITIONS, first
    for name in LAYER0:
        got, theirs = rows(name)
        for p in range(first):
            if name.startswith(("ffn_gate", "ffn_up", "ffn_out", "l_out")) and q8_flipped(
                ffn_in[0][p], ffn_in[1][p]
            ):
                continue
            assert oracle.nmse(got[p], theirs[p]) <= GGML_LAYER0_MAX_NMSE, (name, p, first)
