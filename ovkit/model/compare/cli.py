"""``ovkit compare-model FILE (--tokens | --prompt)``: the table (or JSON) and a failing side's case file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ovkit.model.compare.diff import compare_model
from ovkit.model.compare.records import AGAINST, DEFAULT_THRESHOLD, CompareError


def add_cli_args(p: Any) -> None:
    """Arguments of ``ovkit compare-model``."""
    p.add_argument("file", help="path of a .gguf model")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help='token ids, e.g. "1,5,9"')
    src.add_argument("--prompt", help="prompt text (tokenized by llama.cpp's tokenizer)")
    p.add_argument("-n", "--n-predict", type=int, default=0,
                   help="append llama.cpp CPU's N greedy tokens to the batch (default 0)")  # fmt: skip
    p.add_argument("--against", choices=tuple(AGAINST), default="llama.cpp",
                   help="llama.cpp: ovkit vs llama.cpp CPU (default); upstream: the real backend vs "
                   "llama.cpp CPU; both")  # fmt: skip
    p.add_argument("--fa", choices=("on", "off"), default="on", help="flash attention, as llama.cpp -fa")
    p.add_argument(
        "--ctx-size", type=int, default=512, help="KV cache cells (default 512, llama-cpp-python's)"
    )
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help=f"NMSE past which a node diverges (default {DEFAULT_THRESHOLD:g}, see docs/model.md)")  # fmt: skip
    p.add_argument("--case-out", metavar="FILE",
                   help="where a failing node's single-op case is written (default: FILE-STEM.failing-node.csv "
                   "in the current directory)")  # fmt: skip
    p.add_argument("--device", help="OpenVINO device of ovkit's side (default: GGML_OPENVINO_DEVICE's)")
    p.add_argument(
        "--requant",
        action="store_true",
        help="ovkit's side with the backend's requantization (default: the weights as stored)",
    )
    p.add_argument(
        "--f32-rerun",
        action="store_true",
        help="always rerun the real backend with its OpenVINO CPU precision set to f32 "
        "(default: only when it diverged in another precision)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def cli(args: Any) -> int:
    """``ovkit compare-model``: the table (or JSON); a failing side's case file written."""
    from ovkit.gguf import read_gguf
    from ovkit.model import reference
    from ovkit.model.arch import ModelError
    from ovkit.model.cli import prompt_ids
    from ovkit.usage import UsageError, check_count, check_positive

    check_count("-n", args.n_predict)
    check_count("--ctx-size", args.ctx_size, low=1)
    check_positive("--threshold", args.threshold)
    try:
        gguf = read_gguf(args.file)
    except ValueError as exc:  # names the file already
        raise UsageError(str(exc)) from None
    toks = prompt_ids(gguf, args.tokens, args.prompt)
    try:
        result = compare_model(
            args.file, toks, n_predict=args.n_predict, against=args.against, flash_attn=args.fa == "on",
            n_ctx=args.ctx_size, threshold=args.threshold, device=args.device,
            f32_rerun=True if args.f32_rerun else None, no_requant=not args.requant,
        )  # fmt: skip
    except (ValueError, ModelError, CompareError, reference.LlamaCppError) as exc:
        said = str(exc)  # a GGUF or model error names the file already
        raise UsageError(said if said.startswith(str(args.file)) else f"{args.file}: {said}") from None
    written = []
    for f in result.failures:
        out = Path(args.case_out or f"{Path(args.file).stem}.failing-node.csv")
        if f.case_params:
            written.append((f.write_case(out), f))
    if args.json:
        payload = result.as_dict()
        payload["case_files"] = [
            {"side": f.side, "path": str(p), "command": f.command(p)} for p, f in written
        ]
        print(json.dumps(payload, indent=2))
    else:
        print(result)
        for p, f in written:
            print(
                f"{f.side}: the failing node as a single-op case in {p}; run it three ways with:\n  {f.command(p)}"
            )
    return 1 if result.failures else 0
