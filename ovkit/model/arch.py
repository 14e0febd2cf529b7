"""Architectures as data: what differs between ``llama``, ``qwen2``, ``qwen3``, ``qwen3moe`` and
``gemma3`` (an :class:`ArchSpec` row each), and :class:`HParams`, the sizes read from GGUF metadata
under the ``<arch>.`` keys llama.cpp reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ovkit.errors import OvkitError
from ovkit.ir import RopeType


class ModelError(OvkitError, ValueError):
    """A GGUF model ovkit cannot build (unknown architecture, missing tensor, bad hparams)."""


@dataclass(frozen=True, slots=True)
class ArchSpec:
    """One architecture's differences from the common decoder layer."""

    name: str
    rope_type: int
    qkv_bias: bool = False  # attn_{q,k,v}.bias added after the projections (qwen2)
    qk_norm: bool = False  # attn_{q,k}_norm: RMS norm of every head before rope (qwen3)
    moe: bool = False  # ffn_{gate,up,down}_exps routed by ffn_gate_inp (softmax, top-k, weights renormed)
    ffn_act: str = "silu"  # the gated FFN's activation: silu (SWIGLU) or gelu (GEGLU, tanh form)
    embd_scale: bool = False  # inp_embd scaled by sqrt(n_embd) (named inp_scaled)
    post_norms: bool = False  # post_attention_norm / post_ffw_norm RMS norms before each residual add
    q_scale: bool = False  # Q scaled by the attention scale before attention (KQ scale 1 then)
    names_attn_out: bool = True  # the output projection is named attn_out (gemma3 leaves it unnamed)
    swa_pattern: int = 0  # sliding-window layers: il % n < n - 1 when the GGUF has no pattern (0: none)


ARCHS: dict[str, ArchSpec] = {
    a.name: a
    for a in (
        ArchSpec("llama", RopeType.NORMAL),
        ArchSpec("qwen2", RopeType.NEOX, qkv_bias=True),
        ArchSpec("qwen3", RopeType.NEOX, qk_norm=True),
        ArchSpec("qwen3moe", RopeType.NEOX, qk_norm=True, moe=True),
        ArchSpec(
            "gemma3",
            RopeType.NEOX,
            qk_norm=True,
            ffn_act="gelu",
            embd_scale=True,
            post_norms=True,
            q_scale=True,
            names_attn_out=False,
            swa_pattern=6,
        ),
    )
}


def arch_spec(name: str) -> ArchSpec:
    try:
        return ARCHS[name]
    except KeyError:
        raise ModelError(
            f"architecture {name!r} is not supported (expected one of {sorted(ARCHS)})"
        ) from None


@dataclass(frozen=True, slots=True)
class HParams:
    """The sizes and rope settings llama.cpp reads for a decoder model."""

    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    head_dim: int
    n_ctx_train: int = 4096
    rms_eps: float = 1e-6
    rope_freq_base: float = 10000.0
    rope_freq_scale: float = 1.0  # 1 / rope.scaling.factor for linear scaling
    n_expert: int = 0  # MoE: experts per layer, used per token, and each expert's FFN width
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_swa: int = 0  # sliding window (0: every layer attends to the whole cache)
    swa_layers: tuple[bool, ...] = ()  # per layer: True = sliding window (empty: none)
    rope_freq_base_swa: float = 10000.0  # the sliding layers' rope base (their scale is 1)
    final_logit_softcapping: float = 0.0  # gemma: logits = c * tanh(logits / c) when > 0

    def __post_init__(self) -> None:
        for field_name in ("n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "head_dim"):
            if getattr(self, field_name) < 1:
                raise ModelError(f"{field_name}={getattr(self, field_name)} must be >= 1")
        if self.n_head % self.n_head_kv:
            raise ModelError(f"n_head={self.n_head} must be a multiple of n_head_kv={self.n_head_kv}")
        if self.head_dim % 2:
            raise ModelError(f"head_dim={self.head_dim} must be even (rope rotates pairs)")
        if arch_spec(self.arch).moe and not (1 <= self.n_expert_used <= self.n_expert and self.n_ff_exp >= 1):
            raise ModelError(
                f"{self.arch}: expert_count={self.n_expert}, expert_used_count={self.n_expert_used}, "
                f"expert_feed_forward_length={self.n_ff_exp}: expected 1 <= used <= count and a width >= 1"
            )

        if self.swa_layers and (len(self.swa_layers) != self.n_layer or self.n_swa < 1):
            raise ModelError(
                f"{self.arch}: sliding_window={self.n_swa} with a layer pattern of {len(self.swa_layers)} "
                f"entries: expected a window >= 1 and one entry per layer ({self.n_layer})"
            )

    def is_swa(self, il: int) -> bool:
        """Layer ``il`` attends through the sliding window (and the SWA cache)."""
        return bool(self.swa_layers) and self.swa_layers[il]

    def rope_base_scale(self, il: int) -> tuple[float, float]:
        """llama.cpp's ``get_rope_freq_base/scale``: the SWA values on sliding layers."""
        if self.is_swa(il):
            return self.rope_freq_base_swa, 1.0
        return self.rope_freq_base, self.rope_freq_scale

    @property
    def attn_scale(self) -> float:
        """The KQ scale in f32: 1/sqrt(head_dim); gemma3 27B (62 layers): 1/sqrt(n_embd/n_head)."""
        import numpy as np

        width = self.n_embd // self.n_head if self.arch == "gemma3" and self.n_layer == 62 else self.head_dim
        return float(np.float32(1.0) / np.sqrt(np.float32(width)))

    @property
    def spec(self) -> ArchSpec:
        return arch_spec(self.arch)

    @property
    def n_embd_q(self) -> int:
        return self.head_dim * self.n_head

    @property
    def n_embd_kv(self) -> int:
        return self.head_dim * self.n_head_kv

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any], n_vocab: int | None = None) -> HParams:
        """Read ``<arch>.*`` keys as llama.cpp's ``load_hparams`` does (missing required keys fail)."""
        arch = md.get("general.architecture")
        if not isinstance(arch, str):
            raise ModelError("GGUF metadata has no general.architecture")
        arch_spec(arch)

        def key(name: str, default: Any = None) -> Any:
            value = md.get(f"{arch}.{name}", default)
            if value is None:
                raise ModelError(f"GGUF metadata lacks {arch}.{name}")
            return value

        n_embd = int(key("embedding_length"))
        n_head = int(key("attention.head_count"))
        vocab = n_vocab or md.get(f"{arch}.vocab_size") or len(md.get("tokenizer.ggml.tokens") or [])
        scaling = str(md.get(f"{arch}.rope.scaling.type", "none"))
        factor = float(md.get(f"{arch}.rope.scaling.factor", 1.0) or 1.0)
        if scaling not in ("none", "linear"):
            raise ModelError(
                f"{arch}.rope.scaling.type={scaling!r} is not supported (expected none or linear)"
            )
        moe = arch_spec(arch).moe
        n_expert = int(key("expert_count")) if moe else 0
        n_used = int(key("expert_used_count")) if moe else 0
        n_ff = int(key("feed_forward_length", 0))
        n_layer = int(key("block_count"))
        n_swa = int(md.get(f"{arch}.attention.sliding_window", 0) or 0) if arch_spec(arch).swa_pattern else 0
        swa_layers: tuple[bool, ...] = ()
        if n_swa > 0:  # llama.cpp's load_swa_pattern: a per-layer array, else a period (default per arch)
            pattern = md.get(f"{arch}.attention.sliding_window_pattern", arch_spec(arch).swa_pattern)
            if isinstance(pattern, list | tuple):
                swa_layers = tuple(bool(x) for x in pattern)[:n_layer]
            else:
                n_pat = int(pattern)
                swa_layers = tuple(n_pat == 0 or il % n_pat < n_pat - 1 for il in range(n_layer))
        return cls(
            arch=arch,
            n_vocab=int(vocab),
            n_embd=n_embd,
            n_layer=n_layer,
            n_head=n_head,
            n_head_kv=int(key("attention.head_count_kv", n_head)),
            n_ff=n_ff,
            head_dim=int(key("attention.key_length", n_embd // n_head)),
            n_ctx_train=int(key("context_length", 4096)),
            rms_eps=float(key("attention.layer_norm_rms_epsilon", 1e-6)),
            rope_freq_base=float(key("rope.freq_base", 10000.0)),
            rope_freq_scale=1.0 / factor if scaling == "linear" else 1.0,
            n_expert=n_expert,
            n_expert_used=n_used,
            # llama.cpp: expert_feed_forward_length, else n_ff / n_expert_used
            n_ff_exp=int(key("expert_feed_forward_length", n_ff // n_used if n_used else 0)) if moe else 0,
            n_swa=n_swa if swa_layers else 0,
            swa_layers=swa_layers,
            rope_freq_base_swa=float(md.get(f"{arch}.rope.freq_base_swa", 10000.0)),
            final_logit_softcapping=float(md.get(f"{arch}.final_logit_softcapping", 0.0) or 0.0),
        )
