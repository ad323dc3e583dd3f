"""Command-line pieces shared by the scoring commands (orca-score, orca-eval, orca-leaderboard, the Space app):
the model flags with one set of names and defaults, and the --quiet switch."""

from __future__ import annotations

import argparse
import sys

DTYPES = ("auto", "float32", "bfloat16", "float16")
TOKENS_PER_BATCH_SIZE_UNIT = 256  # the deprecated --batch-size N meant N x 256 tokens (modeling_orca's unit)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


class _DeprecatedBatchSize(argparse.Action):
    """--batch-size N: sets `max_batch_tokens` to N x 256 and prints one deprecation line on stderr."""

    def __call__(self, parser, namespace, values, option_string=None):
        tokens = values * TOKENS_PER_BATCH_SIZE_UNIT
        print(f"warning: --batch-size is deprecated (it never counted inputs: N x {TOKENS_PER_BATCH_SIZE_UNIT} tokens); "
              f"use --max-batch-tokens {tokens}", file=sys.stderr)
        setattr(namespace, self.dest, tokens)


def add_model_arguments(parser: argparse.ArgumentParser, *, model: bool = True) -> None:
    """The flags every command that scores with an ORCA model shares, with the same names and defaults:
    --model and --revision (unless `model=False`, e.g. orca-eval reads its models from run folders), --device,
    --dtype, --max-batch-tokens (--batch-size: its deprecated alias, in N x 256 tokens) and --quiet."""
    if model:
        parser.add_argument("--model", required=True, help="ORCA model folder (e.g. runs/x/final) or Hub id")
        parser.add_argument("--revision", default=None,
                            help="Hub branch, tag or commit hash; pin a commit with trust_remote_code "
                                 "(default: the default branch; ignored for a folder)")
    parser.add_argument("--device", default="auto",
                        help="cpu, cuda, cuda:1, mps, ... (default: %(default)s = the GPU when there is one, else the CPU)")
    parser.add_argument("--dtype", default="auto", choices=DTYPES,
                        help="weights and activations (default: %(default)s = as saved); bfloat16 on a GPU halves "
                             "memory and time")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--max-batch-tokens", type=_positive_int, default=None, metavar="N",
                        help="tokens per forward pass, padding included, longest inputs first: many short inputs or "
                             "few long ones (default: the model's, 1,024 on the CPU, 4,096 elsewhere)")
    budget.add_argument("--batch-size", type=_positive_int, dest="max_batch_tokens", action=_DeprecatedBatchSize, metavar="N",
                        help="deprecated alias: --max-batch-tokens N x 256")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bars; transformers and huggingface_hub print errors only (no warnings, "
                             "no loading bars); this tool's own warnings still print")


def set_quiet(quiet: bool) -> None:
    """Silence (or restore) the logging and progress bars of transformers and huggingface_hub, and with `quiet`
    Python warnings (the libraries' deprecation notices). Process-wide, so for command-line entry points only; this
    tool's own warnings (`warning: ...` lines) and errors still print."""
    import warnings

    import huggingface_hub.utils as hub_utils
    from transformers.utils import logging as hf_logging

    if quiet:
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        hub_utils.disable_progress_bars()
        warnings.simplefilter("ignore")
    else:
        hf_logging.set_verbosity_warning()
        hf_logging.enable_progress_bar()
        hub_utils.enable_progress_bars()
