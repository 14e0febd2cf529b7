"""llama.cpp's CPU backend against itself: the same tokens fed as one prompt batch and one token
at a time (``n_batch`` 512 against 1), logit NMSE per position.  ``python
benchmarks/probe_llama_self_noise.py [--models smollm2-135m,gemma3-270m] [-n 8]``.

A batch runs other kernels than a single token (llamafile's tinyBLAS or the repacked gemm instead of
vec_dot / gemv) with the same q8 activations and the same integer block sums, added in another
order: what separates two of llama.cpp's own CPU kernels for one computation.  The precision
issue asks ovkit's ``precision="ggml"`` to stay within 1e-5 of llama.cpp per position; where
llama.cpp's two kernel choices are farther apart than that, only its exact kernel, bit for bit,
meets that bound.
"""

from __future__ import annotations

import argparse

import numpy as np
from _util import load_average

#: the prompts of tests/test_model_ggml_numerics.py, 8 tokens each there too
PROMPTS = (
    "The capital of France is a city where",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    if n < 2:\n        return n",
)
PROMPT_TOKENS = 8


def main(argv: list[str] | None = None) -> None:
    from ovkit import oracle
    from ovkit.model.fetch import real_model
    from ovkit.model.reference import run_reference, tokenize

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="smollm2-135m,gemma3-270m")
    p.add_argument("-n", type=int, default=8, help="greedy tokens fed after the prompt")
    args = p.parse_args(argv)
    print(f"load average before: {load_average()}")
    for name in args.models.split(","):
        path = real_model(name)
        for text in PROMPTS:
            prompt = tokenize(path, text)[:PROMPT_TOKENS]
            fed: list[int] = []
            for _ in range(args.n):  # llama.cpp's own greedy tokens, fed to both runs
                batch = run_reference(path, prompt, fed, n_ctx=64)
                fed.append(batch.tokens[-1])
            batch = run_reference(path, prompt, fed, n_ctx=64)
            single = run_reference(path, prompt, fed, n_ctx=64, n_batch=1)
            a = np.concatenate([batch.prompt_logits, batch.decode_logits])
            b = np.concatenate([single.prompt_logits, single.decode_logits])
            per = [oracle.nmse(a[i], b[i]) for i in range(len(a))]
            over = sum(x > 1e-5 for x in per)
            print(
                f"{name} {text!r}: batch vs one at a time, NMSE per position "
                + " ".join(f"{x:.1e}" for x in per)
                + f"; max {max(per):.1e}, {over}/{len(per)} positions above 1e-5; greedy "
                + ("equal" if batch.tokens == single.tokens else "differs")
            )
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
