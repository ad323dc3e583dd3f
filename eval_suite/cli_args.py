"""Command-line pieces shared by the scoring commands (orca-score, orca-eval, orca-leaderboard, the Space app):
the model flags with one set of names and defaults, and the --quiet switch."""

from __future__ import annotations

import argparse

DTYPES = ("auto", "float32", "bfloat16", "float16")


def add_model_arguments(parser: argparse.ArgumentParser, *, model: bool = True, batch_size: int = 16) -> None:
    """The flags every command that scores with an ORCA model shares, with the same names and defaults:
    --model and --revision (unless `model=False`, e.g. orca-eval reads its models from run folders), --device,
    --dtype, --batch-size and --quiet."""
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
    parser.add_argument("--batch-size", type=int, default=batch_size,
                        help="token budget of one forward pass: N x 256 tokens, padding included, longest inputs "
                             "first (about N inputs of 256 tokens, more shorter ones); on the CPU a pass holds at "
                             "most the model's cpu_batch_tokens (4,096), so there N above 16 changes nothing "
                             "(default: %(default)s)")
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
