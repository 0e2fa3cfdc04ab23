"""Flags shared by `inference-server` and `inference-server checkpoint`: how the model would run.

The runtime options are part of the identity (precision), so `checkpoint show` takes the same
flags as the server to print the digest that server will report.
"""

from __future__ import annotations

import argparse

from inference_server.backends.contract import RuntimeOptions

EXIT_BAD_INPUT = 2
EXIT_LOAD_FAILED = 1


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", help="override the manifest's backend: a name or module:factory")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--attn-impl", default="sdpa", choices=("eager", "sdpa", "flash_attention_2"))
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--tf32", action="store_true", help="allow TF32 matmuls on CUDA")
    parser.add_argument("--autocast", action="store_true", help="run under torch.autocast")


def runtime_options(args: argparse.Namespace) -> RuntimeOptions:
    return RuntimeOptions(
        device=args.device,
        dtype=args.dtype,
        attn_impl=args.attn_impl,
        compile=args.compile,
        tf32=args.tf32,
        autocast=args.autocast,
    )


def one_line(error: BaseException) -> str:
    """An error's message on one line (a plug-in's or a YAML parser's may span several)."""
    return " ".join(str(error).split())
