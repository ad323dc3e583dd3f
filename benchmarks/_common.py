"""Shared pieces of the benchmarks: real records, the release template, backbones, memory and GEMM probes."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from transformers.utils import logging as _hf_logging  # noqa: E402

from eval_suite.models.reference_checkpoint import REFERENCE_TEMPLATE  # noqa: E402

_hf_logging.set_verbosity_error()
_hf_logging.disable_progress_bar()

# the reference release's input string (" |context: {rationale} |question: {question} |correct answer: {reference}
# |candidate answer: {candidate}", no special tokens): the converter's template, without its scoring-only settings
RELEASE_TEMPLATE = {key: REFERENCE_TEMPLATE[key] for key in (
    "template_fields", "field_labels", "field_separator", "template_prefix", "skip_empty_fields", "add_special_tokens")}
BACKBONES = ("smollm2", "minilm", "gemma3-270m", "qwen2.5-coder-1.5b-instruct", "tiny-llama", "llama3b-random")
# random-weight Llamas with SmolLM2's tokenizer: a 2-layer one for smoke runs, and one of Llama-3.2-3B's sizes (the
# vocabulary aside: SmolLM2's 49,152 ids, not 128,256) for a GPU run
RANDOM_LLAMAS = {
    "tiny-llama": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    "llama3b-random": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
                           num_key_value_heads=8, head_dim=128, rope_theta=500000.0, tie_word_embeddings=True),
}


def load_records(n: int, data_dir: str | None = None, config: str = "s3_evouna_nq") -> list[dict]:
    """The first `n` answers of EVOUNA-NQ (test split, then validation and train), in file order: every question
    with all of its answers (5 answering systems), as a benchmark file lists them."""
    import dataset_builder

    splits = dataset_builder.load_config(config, data_dir=data_dir)
    out: list[dict] = []
    for split in ("test", "validation", "train"):
        for record in splits[split].to_list():
            if len(out) >= n:
                return out
            out.append(record)
    return out


def backbone_folder(name: str, tmp: Path) -> tuple[str, str]:
    """(folder, pooling) of a benchmark backbone. `tiny-llama` is a random 2-layer Llama with SmolLM2's tokenizer
    (for smoke runs)."""
    from eval_suite.models.backbones import BACKBONES as OFFLINE
    from eval_suite.models.backbones import minilm_path, smollm2_path

    if name in ("smollm2", "gemma3-270m", "qwen2.5-coder-1.5b-instruct"):
        return str(OFFLINE[name]()), "last"
    if name == "minilm":
        return str(minilm_path()), "mean"  # the sentence encoder's own pooling; no prefix sharing for an encoder
    if name in RANDOM_LLAMAS:
        from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

        folder = tmp / name
        if not (folder / "config.json").exists():
            tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
            torch.manual_seed(0)
            config = LlamaConfig(vocab_size=len(tokenizer), **RANDOM_LLAMAS[name])
            # initialised where it will run (3B parameters take minutes to initialise on a CPU), saved in bfloat16
            with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
                model = LlamaForCausalLM(config)
            model.to(torch.bfloat16 if name != "tiny-llama" else torch.float32).save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            del model
        return str(folder), "last"
    raise SystemExit(f"unknown backbone {name!r}; choose from {', '.join(BACKBONES)}")


def orca_model(folder: str, pooling: str, *, add_special_tokens: bool | None = None, score_type: str = "multinomial", seed: int = 0,
               device: str = "cpu", dtype: torch.dtype = torch.float32):  # fmt: skip
    """An ORCA model on the backbone with the release template and a visible (seeded, std 0.05) head."""
    from modeling_orca import OrcaForCorrectnessDistribution

    kwargs = dict(RELEASE_TEMPLATE, pooling=pooling)
    if add_special_tokens is not None:
        kwargs["add_special_tokens"] = add_special_tokens
    model, tokenizer = OrcaForCorrectnessDistribution.from_backbone(folder, score_type=score_type, dtype=dtype, **kwargs)
    torch.manual_seed(seed)
    torch.nn.init.normal_(model.score_head.weight, std=0.05)
    return model.to(device).eval(), tokenizer


def is_decoder(backbone) -> bool:
    """A causal LM (its vocabulary head is `AutoModelForCausalLM`'s) rather than an encoder (`AutoModelForMaskedLM`)."""
    return any(getattr(m, "is_causal", None) is True for m in backbone.modules())


class PeakMemory:
    """Peak resident memory of this process while the block runs (sampled every `interval` s from /proc). 50 ms,
    not less: the sampler is a Python thread that wakes, takes the GIL and preempts one of the 2 cores' compute
    threads each time, inside the timed runs; a model's layers repeat their peak every few ms, so it is caught."""

    def __init__(self, interval: float = 0.05):
        self.peak = self.start = 0
        self.interval = interval

    @staticmethod
    def rss() -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:  # not Linux: ru_maxrss (a process-wide peak)
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _poll(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(self.interval)

    def __enter__(self):
        self.start = self.peak = self.rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())

    @property
    def peak_mib(self) -> float:
        return self.peak / 2**20

    @property
    def extra_mib(self) -> float:
        return (self.peak - self.start) / 2**20


def gemm_gflops(size: int = 2048, repeats: int = 3, device: str = "cpu", dtype: torch.dtype = torch.float32, op: str = "mm") -> float:
    """Matrix-multiply rate (GFLOP/s) at the current torch thread count (or on the GPU): median of `repeats`.
    `op`: "mm" (`torch.mm(a, b)`, the floor of bench_scoring.py) or "linear" (`F.linear(a, b)` = a @ b.T, what a
    model's layers call: on CPUs without bfloat16 kernels `torch.mm` in bfloat16 takes a path 15-20x slower than
    `F.linear`'s, so a bfloat16 floor needs "linear")."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    product = {"mm": torch.mm, "linear": torch.nn.functional.linear}[op]
    sync = torch.cuda.synchronize if a.is_cuda else (lambda: None)
    product(a, b)
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        product(a, b)
        sync()
        times.append(time.perf_counter() - t)
    times.sort()
    return 2 * size**3 / times[len(times) // 2] / 1e9


def run_info(args) -> dict:
    """What a result file records about its run: package and library versions, the repository revision, the
    command's arguments."""
    import subprocess

    import transformers

    from orca_io.version import package_version

    try:
        revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        revision, dirty = None, None
    return dict(package=dict(name="orca-judge", version=package_version()), git_revision=revision, uncommitted_changes=dirty,
                torch=torch.__version__, transformers=transformers.__version__, threads=torch.get_num_threads(),
                date=time.strftime("%Y-%m-%dT%H:%M:%S%z"), args=vars(args))  # fmt: skip


def load_line() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average n/a"


def floor_tokens(token_ids: list[list[int]], causal: bool) -> tuple[int, list[int]]:
    """(tokens computed at least once, the attention context of each): a causal decoder pooled at the last token
    needs each distinct token prefix once (a trie over all inputs, context = depth); otherwise each distinct input's
    tokens, each seeing the whole input."""
    contexts = []
    if causal:
        seen = set()
        for ids in token_ids:
            for k in range(len(ids)):
                key = tuple(ids[: k + 1])
                if key not in seen:
                    seen.add(key)
                    contexts.append(k + 1)
    else:
        for ids in {tuple(t) for t in token_ids}:
            contexts += [len(ids)] * len(ids)
    return len(contexts), contexts


def backbone_flops(model, contexts: list[int]) -> float:
    """Matrix FLOPs of the backbone: 2 x linear weights per token + 4 x attention width x context per token and layer."""
    backbone = model.backbone
    cfg = backbone.config.get_text_config()
    linear = sum(m.weight.numel() for n, m in backbone.named_modules() if isinstance(m, torch.nn.Linear) and "pooler" not in n)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    width = cfg.num_attention_heads * head_dim
    return 2.0 * linear * len(contexts) + 4.0 * width * cfg.num_hidden_layers * sum(contexts)
