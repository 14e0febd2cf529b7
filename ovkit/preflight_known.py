"""What ``ovkit check`` knows fails, as data: the backend's versions in order, and the model features
that abort on some of them, each with its evidence.

Rows marked "measured here" were reproduced with the backend ``scripts/install-upstream`` builds
(``benchmarks/bench_check.py``); the others come from llama.cpp's issues and PRs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Stage(enum.StrEnum):
    """When the backend allocates (or fails): ``llama_model_load``, ``llama_init_from_model``,
    the first ``llama_decode``."""

    LOAD = "load"
    CONTEXT = "context creation"
    DECODE = "first decode"


STAGES = tuple(Stage)


@dataclass(frozen=True, slots=True)
class BackendVersion:
    """One state of llama.cpp's ggml-openvino, in order: what ``--backend`` names."""

    key: str
    date: str
    change: str  #: the llama.cpp change (PR or commit) that defines it
    merged: bool
    summary: str

    def __str__(self) -> str:
        return f"{self.key} ({self.change}, {self.date}{'' if self.merged else ', open'})"


BACKEND_VERSIONS: tuple[BackendVersion, ...] = (
    BackendVersion("pr25795", "2026-07-21", "#25795 (5735e10c4)", True, "the mirrored llama.cpp master of July"),
    BackendVersion("pr26952", "2026-08-12", "#26952 (aee56b3ab)", True, "Qwen3.5 on CPU/GPU, MEMORY_OPTIMIZE"),
    BackendVersion("pr27843", "2026-08-28", "#27843", True, "Qwen3.5 on the NPU, LOG_UNSUPPORTED_OPS"),
    BackendVersion(
        "0c1e570", "2026-10-01", "llama.cpp 0c1e570, vendored by llama-cpp-python 0.3.36", True,
        "the backend scripts/install-upstream builds",
    ),
    BackendVersion(
        "pr29124", "2026-09-19", "0c1e570 with #29124", False,
        "the GPU's CL_DEVICE_MAX_MEM_ALLOC_SIZE as its buffer max size: ggml splits large buffers",
    ),
)  # fmt: skip
BACKENDS: dict[str, BackendVersion] = {b.key: b for b in BACKEND_VERSIONS}
DEFAULT_BACKEND = "0c1e570"
SPLITS_KV_BUFFER = frozenset({"pr29124"})  #: versions whose GPU buffer type reports the cap


def versions_before(key: str) -> frozenset[str]:
    keys = list(BACKENDS)
    return frozenset(keys[: keys.index(key)])


#: llama.cpp's recurrent and hybrid architectures (``llm_arch_is_recurrent``/``_is_hybrid`` at
#: 0c1e570): their state caches (``cache_r``/``cache_s``) are written by CPY.
RECURRENT_ARCHS: frozenset[str] = frozenset({
    "mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "jamba", "falcon-h1", "plamo2",
    "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe", "qwen3next", "kimi-linear",
    "bailingmoe3", "kimi-k3", "glm5-next", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "minimax-01",
})  # fmt: skip
QWEN35 = frozenset({"qwen35", "qwen35moe"})
CPY_ABORT = (
    "pre-allocated tensor (cache_r_l0 (view) (copy of )) in a buffer (OPENVINO0) that cannot run "
    "the operation (CPY)"
)
SPLIT_FAILURE = (
    "GGML OpenVINO backend ov::Exception: ... Can't set the input tensor with index: 0, because the "
    "model input (shape=[1,8,4,256]) and the tensor (shape=(1.1.8.1024)) are incompatible; "
    "llama_decode returns -3"
)
NO_FA_FAILURE = (
    "GGML OpenVINO backend ov::Exception: ... Check 'idxValue < static_cast<int64_t>(srcDimAxis) ...' "
    "failed at src/plugins/intel_cpu/src/nodes/scatter_update.cpp; llama_decode returns -3"
)
ENABLE_FALLBACK = "GGML_OPENVINO_ENABLE_FALLBACK"


@dataclass(frozen=True, slots=True)
class KnownAbort:
    """A model feature that fails on given backend versions, with its evidence."""

    key: str
    what: str  #: the feature, in words
    stage: Stage
    message: str  #: what the backend says
    issues: tuple[str, ...]  #: llama.cpp issues and PRs that report or fix it
    evidence: str
    versions: frozenset[str]  #: the backend versions it fails on
    fixed_by: str = ""  #: the change or setting that lifts it ("" when none is known)
    archs: frozenset[str] = frozenset()  #: any of these architectures (empty: any)
    device_classes: frozenset[str] = frozenset()  #: on these device classes (empty: all)
    flash_attn: bool | None = None  #: only with flash attention on/off (None: either)
    split: bool = False  #: only when nodes are left to ggml's CPU (the graph is split)
    unless: str = ""  #: a GGML_OPENVINO_* toggle that avoids it


KNOWN_ABORTS: tuple[KnownAbort, ...] = (
    KnownAbort(
        "recurrent-cpy",
        "Qwen3.5's recurrent state (cache_r/cache_s) is written by CPY",
        Stage.CONTEXT,
        CPY_ABORT,
        ("#20562", "#20619"),
        "#20562 (Qwen3.5 on CPU, GPU and NPU, STATEFUL 0 or 1, 2026-03 to 2026-05), #20619; Qwen3.5 "
        "dense and MoE enabled on CPU/GPU by #26952",
        versions_before("pr26952"),
        fixed_by="#26952 (merged 2026-08-12)",
        archs=QWEN35,
        device_classes=frozenset({"CPU", "GPU", "OTHER"}),
    ),
    KnownAbort(
        "recurrent-cpy-npu",
        "Qwen3.5's recurrent state on the NPU's static path",
        Stage.CONTEXT,
        CPY_ABORT,
        ("#20562", "#27843"),
        "#20562 (Lunar Lake NPU, 2026-05-02); Qwen3.5 on the NPU came with #27843",
        versions_before("pr27843"),
        fixed_by="#27843 (merged 2026-08-28)",
        archs=QWEN35,
        device_classes=frozenset({"NPU"}),
    ),
    KnownAbort(
        "recurrent-cpy-other",
        "a recurrent or hybrid architecture's state is written by CPY",
        Stage.CONTEXT,
        CPY_ABORT,
        ("#20562", "#20619", "#28048"),
        "#20619 (2026-06), #28048 (GPU, cache_r_l1; closed 2026-09-04 as 'will be resolved'); no fix for "
        "architectures other than Qwen3.5 found; not confirmed on later builds",
        versions_before("0c1e570"),
        archs=RECURRENT_ARCHS - QWEN35,
    ),
    KnownAbort(
        "split-graph",
        "nodes left to ggml's CPU split the graph, and the backend binds a split graph's inputs as if it "
        "were whole",
        Stage.DECODE,
        SPLIT_FAILURE,
        (),
        "measured here: a llama with Q5_0 weights (supports_op's type gate refuses Q5_0, so its MUL_MATs "
        "go to ggml's CPU) and Gemma-3-270M Q4_K_M (Q5_0 attention and FFN projections) fail at the first "
        "decode; both run with GGML_OPENVINO_ENABLE_FALLBACK=1, which makes the backend detect the split",
        frozenset({"0c1e570", "pr29124"}),
        fixed_by=f"{ENABLE_FALLBACK}=1 (the backend then detects the split graph)",
        split=True,
        unless=ENABLE_FALLBACK,
    ),
    KnownAbort(
        "no-flash-attn",
        "without flash attention the V cache is written transposed, one row per element",
        Stage.DECODE,
        NO_FA_FAILURE,
        (),
        "measured here on the CPU: a Q8_0 llama and SmolLM2-135M fail at the first decode with -fa off "
        "(GGML_OPENVINO_ENABLE_FALLBACK does not help); other devices untested",
        frozenset({"0c1e570", "pr29124"}),
        fixed_by="flash attention on (-fa on, llama.cpp's default picks it)",
        device_classes=frozenset({"CPU"}),
        flash_attn=False,
    ),
)
