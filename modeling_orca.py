"""ORCA: a pre-trained LM + one linear layer that predicts the distribution of human correctness ratings.

x = [question; reference; rationale; transcript; candidate] -> backbone (base model, no vocabulary logits) ->
final hidden state at one position (the last real token by default) -> Linear -> parameters of a likelihood of the
1-5 ratings (Beta, Multinomial or Bernoulli). This file and configuration_orca.py are everything a Hub checkpoint
needs: the input formatter, truncation, batching and the scoring path (`predict`) all live here.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import functools
import inspect
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel
from transformers import initialization as init
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import ModelOutput, logging

try:  # loaded by transformers from a Hub snapshot: the config sits beside this file
    from .configuration_orca import OrcaConfig
except ImportError:  # imported from the repository / an installed package
    from configuration_orca import OrcaConfig

logger = logging.get_logger(__name__)

RATING_PAD = -100  # padding value of the `ratings` tensor (the usual ignore-index of transformers labels)


# ----------------------------------------------------------------------------------------------------------------
# Input formatting: the one formatter used by training, evaluation, the CLI and the leaderboard


def _text(record: dict, field: str) -> str:
    value = record.get(field)
    if value is None and field == "transcript":
        value = record.get("transcription")  # the reference release's name for it
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"record {record.get('id', '?')!r}: field {field!r} must be a string, got {type(value).__name__}")
    return value.strip()


def reference_list(record: dict) -> list[str]:
    """The acceptable reference answers of a record: one string or a list of aliases."""
    if "reference" not in record or record["reference"] is None:
        raise ValueError(f"record {record.get('id', '?')!r}: missing field 'reference'")
    refs = record["reference"]
    refs = [refs] if isinstance(refs, str) else list(refs)
    if not all(isinstance(r, str) for r in refs):
        raise TypeError(f"record {record.get('id', '?')!r}: field 'reference' must be a string or a list of strings")
    refs = [r.strip() for r in refs if r.strip()]
    if not refs:
        raise ValueError(f"record {record.get('id', '?')!r}: field 'reference' is empty")
    return refs


def join_references(refs: list[str], config: OrcaConfig) -> str:
    """All aliases in one bounded string, so a list of 20 aliases cannot crowd out the candidate."""
    kept = refs[:1]
    length = len(refs[0])
    for ref in refs[1 : config.max_joined_references]:
        length += len(config.reference_joiner) + len(ref)
        if length > config.max_reference_chars:
            break
        kept.append(ref)
    return config.reference_joiner.join(kept)


def input_fields(record: dict, config: OrcaConfig, reference: str | None = None) -> dict[str, str]:
    """The texts of the template fields of one input; `reference` picks one alias (reference_mode='max')."""
    if "candidate" not in record or record["candidate"] is None:
        raise ValueError(f"record {record.get('id', '?')!r}: missing field 'candidate'")
    fields = {}
    for name in config.template_fields:
        if name == "reference":
            fields[name] = reference if reference is not None else join_references(reference_list(record), config)
        elif name == "question" and "question" not in record:
            raise ValueError(f"record {record.get('id', '?')!r}: missing field 'question'")
        else:
            fields[name] = _text(record, name)
    return fields


def render_fields(fields: dict[str, str], config: OrcaConfig) -> str:
    parts = [
        config.field_labels.get(name, "") + value
        for name, value in fields.items()
        if value or not config.skip_empty_fields or name == "candidate"
    ]
    return config.template_prefix + config.field_separator.join(parts)


def format_input(record: dict, config: OrcaConfig, reference: str | None = None) -> str:
    """The model's input text for a record (a dict with question, reference, rationale, candidate, transcript)."""
    return render_fields(input_fields(record, config, reference), config)


def input_variants(record: dict, config: OrcaConfig) -> list[dict[str, str]]:
    """One input for reference_mode='join'; one per alias for 'max'."""
    if config.reference_mode == "max" and "reference" in config.template_fields:
        return [input_fields(record, config, ref) for ref in reference_list(record)]
    return [input_fields(record, config)]


def split_fields(fields: dict[str, str], config: OrcaConfig) -> tuple[str, str]:
    """The rendered input cut in two just before the candidate's separator: `(shared, item)` with
    `shared + item == render_fields(fields, config)`. `shared` holds the fields before the candidate (the
    question, reference and rationale in the default template), which a benchmark repeats for every answer to the
    same question; `item` starts with the separator, so a byte-level BPE tokenizer puts the separator's space or
    newline on the item's side as it would in the whole text. With no field before the candidate, `shared` is ''."""
    kept = [n for n, v in fields.items() if v or not config.skip_empty_fields or n == "candidate"]
    cut = kept.index("candidate")
    parts = [config.field_labels.get(n, "") + fields[n] for n in kept]
    sep = config.field_separator
    if cut == 0:
        return "", config.template_prefix + sep.join(parts)
    return config.template_prefix + sep.join(parts[:cut]), sep + sep.join(parts[cut:])


def _special_tokens(tokenizer, config: OrcaConfig) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text (BOS / CLS, EOS / SEP) when `add_special_tokens`."""
    if not config.add_special_tokens:
        return [], []
    probe = "a"
    plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
    full = tokenizer(probe, add_special_tokens=True)["input_ids"]
    for k in range(len(full) - len(plain) + 1):
        if full[k : k + len(plain)] == plain:
            return full[:k], full[k + len(plain) :]
    raise ValueError(f"{type(tokenizer).__name__}: cannot tell its special tokens apart from the text's own ids")


def encode_segments(fields_list: list[dict[str, str]], tokenizer, config: OrcaConfig) -> list[tuple[list[int], list[int]]]:
    """`(shared ids, item ids)` of each input, untruncated: the special tokens before the text and the tokens of
    the fields before the candidate, then the tokens of the rest (separator, candidate, later fields) and the
    special tokens after the text. The two parts are tokenised separately (each distinct shared text once), so the
    shared ids of all answers to one question are the same ids, token for token: the scoring path may compute them
    once (prefix sharing) and get exactly what it gets for the concatenation."""
    lead, trail = _special_tokens(tokenizer, config)
    pairs = [split_fields(f, config) for f in fields_list]
    shared_texts = list(dict.fromkeys(p[0] for p in pairs))
    shared_ids = dict(zip(shared_texts, tokenizer(shared_texts, add_special_tokens=False)["input_ids"])) if shared_texts else {}
    item_ids = tokenizer([p[1] for p in pairs], add_special_tokens=False)["input_ids"] if pairs else []
    return [(lead + shared_ids[p[0]], ids + trail) for p, ids in zip(pairs, item_ids)]


def encode_fields(fields_list: list[dict[str, str]], tokenizer, config: OrcaConfig) -> list[list[int]]:
    """Token ids of each input (shared ids + item ids of `encode_segments`: the one encoding of training and
    scoring), cut to `config.max_length` field by field in `config.truncation_order`."""
    all_ids = [shared + item for shared, item in encode_segments(fields_list, tokenizer, config)]
    for i, ids in enumerate(all_ids):
        if len(ids) > config.max_length:
            all_ids[i] = _truncate(dict(fields_list[i]), tokenizer, config)
    return all_ids


def _truncate(fields: dict[str, str], tokenizer, config: OrcaConfig) -> list[int]:
    def encode(f):
        ((shared, item),) = encode_segments([f], tokenizer, config)
        return shared + item

    ids = encode(fields)
    for name in config.truncation_order:
        excess = len(ids) - config.max_length
        if excess <= 0:
            break
        if not fields.get(name):
            continue
        tokens = tokenizer(fields[name], add_special_tokens=False)["input_ids"]
        # a few tokens of slack: text re-tokenised at the cut may merge differently
        fields[name] = tokenizer.decode(tokens[: max(0, len(tokens) - excess - 2)]).strip()
        ids = encode(fields)
    return ids[: config.max_length]  # only the labels alone can still exceed the budget


# ----------------------------------------------------------------------------------------------------------------
# The three likelihoods: statistics on the rating scale and the negative log-likelihood of individual ratings


def _beta_params(logits: torch.Tensor, config: OrcaConfig) -> tuple[torch.Tensor, torch.Tensor]:
    log_ab = logits.float().clamp(-config.beta_log_param_limit, config.beta_log_param_limit)
    return log_ab[..., 0].exp(), log_ab[..., 1].exp()


def _beta_bin_probs(alpha: torch.Tensor, beta: torch.Tensor, num_bins: int) -> torch.Tensor:
    """Beta mass of each of `num_bins` equal parts of [0, 1] (no autograd: scipy's regularised incomplete beta)."""
    from scipy.special import betainc

    a = alpha.detach().double().cpu().numpy()[:, None]
    b = beta.detach().double().cpu().numpy()[:, None]
    edges = torch.linspace(0, 1, num_bins + 1, dtype=torch.float64).numpy()[None, 1:-1]
    cdf = torch.from_numpy(betainc(a, b, edges))  # (B, num_bins - 1)
    cdf = torch.cat([torch.zeros_like(cdf[:, :1]), cdf, torch.ones_like(cdf[:, :1])], dim=1)
    return cdf.diff(dim=1).clamp_min(0).to(device=alpha.device, dtype=torch.float32)


def distribution_statistics(logits: torch.Tensor, config: OrcaConfig):
    """(mean, variance, probs) on the rating scale; variance and probs are None for Bernoulli."""
    lo, span, k = config.rating_min, config.rating_max - config.rating_min, config.num_ratings
    if config.score_type == "beta":
        alpha, beta = _beta_params(logits, config)
        total = alpha + beta
        mean = lo + span * alpha / total
        variance = span**2 * alpha * beta / (total**2 * (total + 1))
        return mean, variance, _beta_bin_probs(alpha, beta, k)
    if config.score_type == "multinomial":
        probs = logits.float().softmax(-1)  # (B, K)
        values = torch.arange(lo, lo + k, device=logits.device, dtype=probs.dtype)
        mean = probs @ values
        variance = (probs * (values - mean[:, None]) ** 2).sum(-1)
        return mean, variance, probs
    phi = torch.sigmoid(logits.float()[..., 0])
    return lo + span * phi, None, None


def check_ratings(ratings: torch.Tensor, config: OrcaConfig) -> torch.Tensor:
    """Mask of real ratings; raises on a value outside the scale or an item without ratings."""
    if ratings.dtype.is_floating_point or ratings.dtype == torch.bool:
        raise TypeError(f"ratings must be an integer tensor (padding {RATING_PAD}), got {ratings.dtype}")
    present = ratings != RATING_PAD
    bad = present & ((ratings < config.rating_min) | (ratings > config.rating_max))
    if bad.any():
        row, col = bad.nonzero()[0].tolist()
        raise ValueError(
            f"rating {ratings[row, col].item()} (item {row}, position {col}) is outside "
            f"{config.rating_min}..{config.rating_max}; pad with {RATING_PAD}"
        )
    empty = ~present.any(-1)
    if empty.any():
        raise ValueError(f"item {empty.nonzero()[0].item()} has no ratings; unrated items cannot give a loss")
    return present


def ratings_nll(logits: torch.Tensor, ratings: torch.Tensor, config: OrcaConfig) -> torch.Tensor:
    """Negative log-likelihood of each item's ratings, shape (B,): summed over its individual ratings
    (Beta, Multinomial); cross-entropy against the mean rating scaled to [0, 1] (Bernoulli)."""
    present = check_ratings(ratings, config)
    lo, span = config.rating_min, config.rating_max - config.rating_min
    scaled = (ratings.clamp(config.rating_min, config.rating_max) - lo).float() / span  # (B, R) in [0, 1]
    if config.score_type == "beta":
        alpha, beta = _beta_params(logits, config)
        eps = config.beta_epsilon
        y = scaled.clamp(eps, 1 - eps)
        a, b = alpha[:, None], beta[:, None]
        log_pdf = (a - 1) * y.log() + (b - 1) * torch.log1p(-y) + torch.lgamma(a + b) - torch.lgamma(a) - torch.lgamma(b)
        return -(log_pdf * present).sum(-1)
    if config.score_type == "multinomial":
        log_probs = logits.float().log_softmax(-1)
        index = (ratings.clamp(config.rating_min, config.rating_max) - lo).long()
        return -(log_probs.gather(-1, index) * present).sum(-1)
    target = (scaled * present).sum(-1) / present.sum(-1)
    return F.binary_cross_entropy_with_logits(logits.float()[..., 0], target, reduction="none")


def pad_token_ids(token_ids: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), right-padded to the longest list: the one batching of training and scoring."""
    width = max(len(ids) for ids in token_ids)
    input_ids = torch.full((len(token_ids), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(token_ids), width), dtype=torch.long)
    for i, ids in enumerate(token_ids):
        input_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[i, : len(ids)] = 1
    return input_ids, attention_mask


def pad_ratings(ratings: list[list[int]], device=None) -> torch.Tensor:
    """A (B, max ratings) long tensor from lists of ratings, padded with RATING_PAD."""
    width = max((len(r) for r in ratings), default=1) or 1
    out = torch.full((len(ratings), width), RATING_PAD, dtype=torch.long, device=device)
    for i, r in enumerate(ratings):
        if r:
            out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def clamp_scores(score01, variance, margin: float, threshold: float | None):
    """The reference release's clamping: a confident score (variance <= threshold) strictly within `margin` of 0
    or 1 becomes exactly 0 or 1. The one rule: eval_suite.clamping applies and tunes it over arrays."""
    if threshold is None or variance is None:
        return score01
    if score01 < margin and variance <= threshold:
        return 0.0
    if score01 > 1 - margin and variance <= threshold:
        return 1.0
    return score01


# ----------------------------------------------------------------------------------------------------------------
# CPU memory: glibc hands large freed blocks back to the kernel (munmap past its mmap threshold, trimming the top
# of the heap past its trim threshold), so each layer's activations are written into freshly faulted, zeroed
# pages. Scoring 1,000 answers with SmolLM2 in 4,096-token batches took 5.6M page faults and a fifth of its time
# in the kernel (docs/performance.md). Keeping freed memory for reuse removes them: blocks up to 32 MiB (glibc's largest mmap
# threshold) come from the heap, and up to 256 MiB of free heap is kept rather than trimmed.

_MALLOC_MMAP_THRESHOLD = 32 << 20
_MALLOC_TRIM_THRESHOLD = 256 << 20
_malloc_tuned = False


def tune_cpu_malloc() -> bool:
    """Process-wide and once: make glibc's malloc keep freed memory for reuse (see above). `predict` calls it on
    CPU; set the environment variable ORCA_TUNE_MALLOC=0 to leave malloc as it is. Returns whether the tuning is
    in force (False where the C library is not glibc)."""
    global _malloc_tuned
    if _malloc_tuned or os.environ.get("ORCA_TUNE_MALLOC", "1") == "0":
        return _malloc_tuned
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    _malloc_tuned = bool(mallopt(m_mmap_threshold, _MALLOC_MMAP_THRESHOLD) and mallopt(m_trim_threshold, _MALLOC_TRIM_THRESHOLD))
    if _malloc_tuned:
        logger.info("glibc malloc tuned for CPU scoring (ORCA_TUNE_MALLOC=0 to skip)")
    return _malloc_tuned


# Attention over prefix-tree rows (`predict` with prefix sharing, on CPU). A row's mask is lower triangular (a
# node's ancestors come before it), but SDPA's CPU kernel computes every query-key pair under a mask, and
# transformers repeats each key/value head for every query head it serves once a mask is given. Chunks of queries,
# each against the keys up to its last query, skip most of the masked upper triangle (42 % fewer query-key pairs on
# SmolLM2's rows of EVOUNA-NQ), and grouped-query attention in the kernel skips the copies: 1.2x faster attention
# there (`benchmarks/bench_attention.py`).


def tree_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, query_chunk=32, **kwargs):
    """transformers' SDPA attention for a bool mask that is lower triangular with an offset (query i never sees
    key j > i + offset, offset = cached keys = kv length - q length): each chunk of `query_chunk` queries runs
    against the keys up to its last query only. Other calls go to transformers' `sdpa_attention_forward`."""
    q_len, kv_len = query.shape[2], key.shape[2]
    if (attention_mask is None or attention_mask.dtype != torch.bool or attention_mask.dim() != 4 or dropout
            or q_len <= query_chunk or kwargs.get("softcap") is not None or not getattr(module, "is_causal", False)):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    # query (B, Hq, T, D); key, value (B, Hkv, offset + T, D); attention_mask (B, 1 or Hq, T, offset + T)
    offset = kv_len - q_len
    out = query.new_empty(query.shape[0], q_len, query.shape[1], value.shape[-1])  # (B, T, Hq, D)
    for start in range(0, q_len, query_chunk):
        end = min(start + query_chunk, q_len)
        out[:, start:end] = F.scaled_dot_product_attention(
            query[:, :, start:end], key[:, :, : offset + end], value[:, :, : offset + end],
            attn_mask=attention_mask[:, :, start:end, : offset + end], scale=scaling,
            enable_gqa=key.shape[1] != query.shape[1],
        ).transpose(1, 2)  # fmt: skip
    return out, None


class _AtPositions(nn.Module):
    """`inner`, a module that works on each position on its own, (B, T, H) -> (B, T, H), run at `positions`
    (flat indices into B x T) only; zeros elsewhere."""

    def __init__(self, inner: nn.Module, positions: torch.Tensor):
        super().__init__()
        self.inner = inner
        self.positions = positions

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        flat = hidden.reshape(-1, hidden.shape[-1])  # (B*T, H)
        out = torch.zeros_like(flat)
        out[self.positions] = self.inner(flat[self.positions])
        return out.view_as(hidden)


# ----------------------------------------------------------------------------------------------------------------
# The model


@dataclass
class OrcaOutput(ModelOutput):
    """
    loss: mean over items of each item's negative log-likelihood (when `ratings` is given).
    logits: raw head output, (B, 2) Beta (log alpha, log beta), (B, 5) Multinomial, (B, 1) Bernoulli.
    mean, variance: predicted mean and variance of the ratings on the rating scale (variance None for Bernoulli).
    probs: predicted probability of each rating (B, 5); for Beta the Beta mass of each fifth of [0, 1] (not
        differentiable); None for Bernoulli.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    mean: torch.FloatTensor | None = None
    variance: torch.FloatTensor | None = None
    probs: torch.FloatTensor | None = None


class OrcaPreTrainedModel(PreTrainedModel):
    config_class = OrcaConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    def _init_weights(self, module):
        # only the head: the backbone keeps its pre-trained weights (its own _init_weights covers a fresh one)
        if isinstance(module, nn.Linear) and module is getattr(self, "score_head", None):
            init.xavier_normal_(module.weight, gain=self.config.head_init_gain)
            init.constant_(module.bias, self.config.head_init_bias)


class OrcaForCorrectnessDistribution(OrcaPreTrainedModel):
    def __init__(self, config: OrcaConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        self.backbone = backbone if backbone is not None else AutoModel.from_config(config.backbone_config)
        hidden_size = self.backbone.config.get_text_config().hidden_size
        self.score_head = nn.Linear(hidden_size, config.num_head_outputs)
        params = inspect.signature(self.backbone.forward).parameters
        self._backbone_kwargs = {"use_cache": False} if "use_cache" in params else {}
        self._backbone_takes_position_ids = "position_ids" in params
        # the key/value cache argument: `cache` from transformers 5.24 on, `past_key_values` before
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values" if "past_key_values" in params else None
        self.post_init()

    def get_input_embeddings(self):
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.backbone.set_input_embeddings(value)

    @classmethod
    def from_backbone(cls, name_or_path, *, score_type: str = "multinomial", revision: str | None = None, dtype=None, **config_kwargs):
        """An ORCA model on a pre-trained backbone's weights (head freshly initialised) and its tokenizer, with a
        pad token set when the backbone has none. Returns `(model, tokenizer)`."""
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, revision=revision)
        if tokenizer.pad_token is None:
            # padding positions are masked and never pooled, so any existing token will do
            tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
            if tokenizer.pad_token is None:
                raise ValueError(f"{name_or_path}: the tokenizer has no pad, eos or unk token to pad with")
        backbone = AutoModel.from_pretrained(name_or_path, revision=revision, dtype=dtype)
        backbone.config.pad_token_id = tokenizer.pad_token_id
        config = OrcaConfig(backbone_config=backbone.config, score_type=score_type, **config_kwargs)
        model = cls(config, backbone=backbone)
        if dtype is not None:
            model.score_head.to(dtype)
        return model, tokenizer

    def pool_index(self, attention_mask: torch.Tensor) -> torch.Tensor | None:
        """(B,) the position each row is pooled at ("last" or "first" real token; right or left padding), None for
        mean pooling."""
        if self.config.pooling == "mean":
            return None
        mask = attention_mask.bool()
        positions = torch.arange(mask.shape[1], device=mask.device)
        if self.config.pooling == "last":
            return torch.where(mask, positions, -1).argmax(-1)  # last real token
        return torch.where(mask, -positions, -mask.shape[1]).argmax(-1)  # first real token

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T, H) -> (B, H); works with right or left padding."""
        index = self.pool_index(attention_mask)
        if index is None:
            mask = attention_mask.bool()
            summed = hidden.masked_fill(~mask[..., None], 0).sum(1)  # masked_fill: padded rows may hold NaN
            return summed / mask.sum(1, keepdim=True).clamp_min(1).to(hidden.dtype)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), index]

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        ratings: torch.LongTensor | None = None,
        **kwargs,
    ) -> OrcaOutput:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        backbone_kwargs = dict(self._backbone_kwargs)
        if self._backbone_takes_position_ids:
            # positions count real tokens only, so left padding gives the same outputs as right padding
            backbone_kwargs["position_ids"] = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, **backbone_kwargs, **kwargs)
        pooled = self.pool(hidden.last_hidden_state, attention_mask)  # (B, H)
        logits = self.score_head(pooled.to(self.score_head.weight.dtype))  # (B, num_head_outputs)
        mean, variance, probs = distribution_statistics(logits, self.config)
        loss = ratings_nll(logits, ratings, self.config).mean() if ratings is not None else None
        return OrcaOutput(loss=loss, logits=logits, mean=mean, variance=variance, probs=probs)

    # ------------------------------------------------------------------------------------------------------------
    # Scoring path shared by the CLI, the evaluation and the leaderboard

    def format_input(self, record: dict, reference: str | None = None) -> str:
        return format_input(record, self.config, reference)

    def collate(self, token_ids: list[list[int]], pad_token_id: int) -> dict[str, torch.Tensor]:
        """Right-padded batch tensors from token id lists, on the model's device."""
        input_ids, attention_mask = pad_token_ids(token_ids, pad_token_id)
        return {"input_ids": input_ids.to(self.device), "attention_mask": attention_mask.to(self.device)}

    # default token budget of a batch on CPU: activations that stay in the last-level cache beat bigger matrix
    # multiplies there (SmolLM2, 300 answers: 1,024-token batches 14 % faster than 4,096; docs/performance.md)
    cpu_batch_tokens = 1024

    # tokens of one row of prefix-shared scoring (a question's shared ids and some of its answers' ids): longer
    # rows waste attention work (a token is scored against every earlier key of its row, masked or not, or on a GPU
    # against all of the row's keys)
    share_row_tokens = 512

    # queries per chunk of the prefix-tree attention on CPU (`tree_attention_forward`); None: transformers' SDPA
    tree_attention_queries: int | None = 32

    # `predict` runs the last layer's MLP at the pooled positions only (nothing reads the others' final states)
    prune_last_mlp = True

    def prefix_sharing_supported(self) -> bool:
        """Whether `predict` can compute an input's shared ids once for all inputs that start with them: exact for
        a causal decoder pooled at the last token (the shared tokens never see what follows them), under an
        attention implementation that takes a custom 4D mask (sdpa, eager). Encoders (BERT) and mean or cls
        pooling are scored one input per row."""
        if self.config.pooling != "last":
            return False
        if self.backbone.config._attn_implementation not in ("sdpa", "eager"):
            return False
        flags = [m.is_causal for m in self.backbone.modules() if isinstance(getattr(m, "is_causal", None), bool)]
        return bool(flags) and all(flags)

    def _row_limit(self) -> int:
        # a 4D mask replaces the backbone's own masks, sliding-window ones included: rows within the window only
        window = getattr(self.backbone.config.get_text_config(), "sliding_window", None)
        return min(self.share_row_tokens, window) if window else self.share_row_tokens

    def _score_plain(self, token_ids: list[list[int]], pad_id: int, budget: int, progress) -> torch.Tensor:
        """Logits of each input, one input per row: longest first, batches of up to `budget` tokens (padding
        included) through `forward`."""
        logits = torch.empty((len(token_ids), self.config.num_head_outputs), dtype=torch.float32)
        order = sorted(range(len(token_ids)), key=lambda j: -len(token_ids[j]))
        for idx in _token_batches(order, [len(t) for t in token_ids], budget):
            batch = self.collate([token_ids[j] for j in idx], pad_id)
            index = self.pool_index(batch["attention_mask"])
            width = batch["input_ids"].shape[1]
            positions = None if index is None else torch.arange(len(idx), device=index.device) * width + index
            with self._last_mlp_at(positions):
                out = self(**batch)
            logits[idx] = out.logits.float().cpu()
            progress(len(idx))
        return logits

    @contextlib.contextmanager
    def _last_mlp_at(self, positions: torch.Tensor | None):
        """While the context lasts, the backbone's last layer runs its MLP at `positions` (flat indices into the
        batch's B x T) only: an MLP works on each position on its own, and the pooled positions' final states are
        all that is read. Without `positions`, a `layers[-1].mlp` or with `prune_last_mlp` off: nothing changes."""
        layers = getattr(self.backbone, "layers", None)
        last = layers[-1] if isinstance(layers, nn.ModuleList) and len(layers) else None
        mlp = getattr(last, "mlp", None)
        if positions is None or not self.prune_last_mlp or not isinstance(mlp, nn.Module):
            yield
            return
        last.mlp = _AtPositions(mlp, positions)
        try:
            yield
        finally:
            last.mlp = mlp

    @contextlib.contextmanager
    def _tree_attention(self):
        """While the context lasts, an SDPA backbone on CPU attends through `tree_attention_forward`."""
        config = self.backbone.config
        if not self.tree_attention_queries or self.device.type != "cpu" or config._attn_implementation != "sdpa":
            yield
            return
        name = f"orca_tree_sdpa_{self.tree_attention_queries}"
        if name not in ALL_ATTENTION_FUNCTIONS:
            ALL_ATTENTION_FUNCTIONS.register(name, functools.partial(tree_attention_forward, query_chunk=self.tree_attention_queries))
        config._attn_implementation = name
        try:
            yield
        finally:
            config._attn_implementation = "sdpa"

    def _prefix_cache(self, prefix: list[int]):
        """The backbone's key/value cache of `prefix` (batch 1), or None without a prefix or a cache argument."""
        if not prefix or self._cache_kwarg is None:
            return None
        with self._last_mlp_at(torch.zeros(0, dtype=torch.long, device=self.device)):  # only its keys and values are read
            out = self.backbone(input_ids=torch.tensor([prefix], device=self.device), use_cache=True)
        return out.cache if self._cache_kwarg == "cache" else out.past_key_values

    def _score_shared(self, rows: list[_PrefixTree], n: int, pad_id: int, budget: int, progress, prefix: list[int]) -> torch.Tensor:
        """Logits of inputs given as prefix trees, one tree per batch row: every distinct prefix of the inputs of a
        tree is one token of the row, attending to itself and its ancestors (a tree-shaped causal mask, position =
        depth), and each input is pooled at its last token's node. Equal to scoring every input on its own row:
        in a causal decoder a token's hidden states depend on its prefix only. `prefix`, the first tokens of every
        input (the template's start, common to all questions), is computed once: each row starts after it and
        attends to its cached keys and values."""
        logits = torch.empty((n, self.config.num_head_outputs), dtype=torch.float32)
        cache = self._prefix_cache(prefix)
        skip = len(prefix) if cache is not None else 0  # every tree's first `skip` nodes are the prefix's tokens
        lengths = [len(r.tokens) - skip for r in rows]
        order = sorted(range(len(rows)), key=lambda u: -lengths[u])
        eager = self.backbone.config._attn_implementation == "eager"
        with self._tree_attention():
            for batch in _token_batches(order, lengths, budget):
                width = max(lengths[u] for u in batch)
                input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
                position_ids = torch.zeros((len(batch), width), dtype=torch.long)
                mask = torch.ones((len(batch), width, skip + width), dtype=torch.bool)  # (B, T, prefix + T)
                mask[:, :, skip:] = torch.eye(width, dtype=torch.bool)  # padding sees itself: no NaN
                ends, targets = [], []  # flat position (b * T + node) of each input's last token, its input index
                for b, u in enumerate(batch):
                    row = rows[u]
                    size = lengths[u]
                    input_ids[b, :size] = torch.tensor(row.tokens[skip:], dtype=torch.long)
                    position_ids[b, :size] = torch.tensor(row.depth[skip:], dtype=torch.long)
                    mask[b, :size, skip : skip + size] = torch.from_numpy(row.ancestors()[skip:, skip:])
                    for j, node in row.ends:
                        ends.append(b * width + node - skip)
                        targets.append(j)
                mask = mask[:, None]  # (B, 1, T, prefix + T)
                if eager:
                    mask = torch.zeros(mask.shape, dtype=self.dtype).masked_fill(~mask, torch.finfo(self.dtype).min)
                kwargs = dict(self._backbone_kwargs)
                if cache is not None:
                    kwargs[self._cache_kwarg] = past = copy.deepcopy(cache)  # the forward appends to its cache
                    past.batch_repeat_interleave(len(batch))
                ends = torch.tensor(ends, device=self.device)
                with self._last_mlp_at(ends):
                    hidden = self.backbone(
                        input_ids=input_ids.to(self.device),
                        attention_mask=mask.to(self.device),
                        position_ids=position_ids.to(self.device),
                        **kwargs,
                    ).last_hidden_state  # (B, T, H)
                pooled = hidden.reshape(-1, hidden.shape[-1])[ends]  # (inputs, H)
                logits[targets] = self.score_head(pooled.to(self.score_head.weight.dtype)).float().cpu()
                progress(len(targets))
        return logits

    @torch.inference_mode()
    def predict(
        self,
        records: list[dict],
        tokenizer,
        batch_size: int = 16,
        show_progress: bool = False,
        clamp_threshold: float | None = None,
        *,
        share_prefix: bool | None = None,
        max_batch_tokens: int | None = None,
    ) -> list[dict[str, Any]]:
        """Score records; returns one dict per record, in input order: `mean`, `variance` (None for Bernoulli),
        `probs` (list of 5 floats, None for Bernoulli), `score` (mean scaled to [0, 1], clamped when the config or
        `clamp_threshold` asks), and `nll` of the record's `ratings` when it has any. With reference_mode='max'
        each alias is one input and the alias giving the highest mean wins.

        Inputs are tokenised once; identical inputs are scored once. Batches hold up to `max_batch_tokens` tokens
        (default `batch_size * 256`, at most `cpu_batch_tokens` on CPU), longest inputs first. On CPU it first
        calls `tune_cpu_malloc`. With `share_prefix` (default: the config's
        `share_prefix`) and a causal decoder pooled at the last token, the ids shared by all answers to one
        question (the fields before the candidate) are computed once per question and batch row (exact: see
        `prefix_sharing_supported`); inputs cut to `max_length` are scored on their own. Those rows attend in
        chunks of `tree_attention_queries` queries on CPU (`tree_attention_forward`). With `prune_last_mlp`, the
        backbone's last layer runs its MLP at the pooled positions only."""
        was_training = self.training
        self.eval()
        records = list(records)
        variants, owner = [], []
        for i, record in enumerate(records):
            for fields in input_variants(record, self.config):
                variants.append(fields)
                owner.append(i)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        budget = max_batch_tokens if max_batch_tokens is not None else max(1, batch_size) * 256
        if self.device.type == "cpu":
            tune_cpu_malloc()
            if max_batch_tokens is None:
                budget = min(budget, self.cpu_batch_tokens)
        share = self.config.share_prefix if share_prefix is None else share_prefix
        share = share and self.prefix_sharing_supported()

        # distinct inputs: (shared ids or None when cut to max_length, item ids)
        inputs: dict[tuple, int] = {}
        which = []
        for fields, (shared, item) in zip(variants, encode_segments(variants, tokenizer, self.config)):
            if len(shared) + len(item) > self.config.max_length:
                key = (None, tuple(_truncate(dict(fields), tokenizer, self.config)))
            else:
                key = (tuple(shared), tuple(item))
            which.append(inputs.setdefault(key, len(inputs)))
        keys = list(inputs)

        bar = None
        if show_progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(keys), desc="scoring", unit="input")

        def progress(k):
            if bar is not None:
                bar.update(k)

        if share:
            limit = self._row_limit()
            groups: dict[tuple, list[int]] = {}
            plain = []
            for u, (shared, item) in enumerate(keys):
                if shared is None or len(shared) + len(item) > limit:
                    plain.append(u)
                else:
                    groups.setdefault(shared, []).append(u)
            units = []
            for shared, members in groups.items():
                tree = _PrefixTree()
                for u in sorted(members, key=lambda u: keys[u][1]):  # similar answers share more tokens
                    ids = shared + keys[u][1]
                    if tree.ends and len(tree.tokens) + tree.new_nodes(ids) > limit:
                        units.append(tree)  # a question's answers over rows of at most `limit` tokens
                        tree = _PrefixTree()
                    tree.add(u, ids)
                units.append(tree)
            # the first tokens of every shared input (the template's start), short of each input's last token
            inputs = [keys[u][0] + keys[u][1] for members in groups.values() for u in members]
            common = list(os.path.commonprefix(inputs)[: min(map(len, inputs)) - 1]) if inputs else []
            logits = self._score_shared(units, len(keys), pad_id, budget, progress, common)
            if plain:
                plain_ids = [list(keys[u][1]) if keys[u][0] is None else list(keys[u][0] + keys[u][1]) for u in plain]
                logits[plain] = self._score_plain(plain_ids, pad_id, budget, progress)
        else:
            token_ids = [list(item) if shared is None else list(shared + item) for shared, item in keys]
            logits = self._score_plain(token_ids, pad_id, budget, progress)
        if bar is not None:
            bar.close()
        self.train(was_training)
        logits = logits[torch.tensor(which, dtype=torch.long)]

        # per record: the variant with the highest predicted mean
        mean, variance, probs = distribution_statistics(logits, self.config)
        best: dict[int, int] = {}
        for j, i in enumerate(owner):
            if i not in best or mean[j] > mean[best[i]]:
                best[i] = j
        threshold = clamp_threshold
        if threshold is None and self.config.clamp:
            threshold = self.config.clamp_variance_threshold
        span = self.config.rating_max - self.config.rating_min
        results = []
        for i, record in enumerate(records):
            j = best[i]
            result = {
                "mean": float(mean[j]),
                "variance": None if variance is None else float(variance[j]),
                "probs": None if probs is None else [float(p) for p in probs[j]],
            }
            score = (result["mean"] - self.config.rating_min) / span
            result["score"] = clamp_scores(score, result["variance"], self.config.clamp_margin, threshold)
            if record.get("ratings"):
                result["nll"] = float(ratings_nll(logits[j : j + 1], pad_ratings([record["ratings"]]), self.config)[0])
            results.append(result)
        return results


class _PrefixTree:
    """Token sequences as a trie laid out in one row: `tokens[i]` has parent `parent[i]` (-1 for a root) and
    position `depth[i]`; parents come before children; `ends` holds (input index, node of its last token)."""

    def __init__(self):
        self.tokens: list[int] = []
        self.parent: list[int] = []
        self.depth: list[int] = []
        self.ends: list[tuple[int, int]] = []
        self._child: dict[tuple[int, int], int] = {}

    def new_nodes(self, ids) -> int:
        node = -1
        for k, token in enumerate(ids):
            node = self._child.get((node, token))
            if node is None:
                return len(ids) - k
        return 0

    def add(self, index: int, ids) -> None:
        node = -1
        for k, token in enumerate(ids):
            child = self._child.get((node, token))
            if child is None:
                child = len(self.tokens)
                self._child[(node, token)] = child
                self.tokens.append(token)
                self.parent.append(node)
                self.depth.append(k)
            node = child
        self.ends.append((index, node))

    def ancestors(self):
        """(n, n) bool: node i may attend to node j (j is i or one of its ancestors)."""
        import numpy as np

        n = len(self.tokens)
        out = np.zeros((n, n), dtype=bool)
        for i, p in enumerate(self.parent):
            if p >= 0:
                out[i] = out[p]
            out[i, i] = True
        return out


def _token_batches(order: list[int], lengths: list[int], budget: int) -> list[list[int]]:
    """Consecutive runs of `order` (longest first) whose padded size, count x first length, fits `budget`
    (at least one each)."""
    batches, batch = [], []
    for j in order:
        if batch and (len(batch) + 1) * lengths[batch[0]] > budget:
            batches.append(batch)
            batch = []
        batch.append(j)
    if batch:
        batches.append(batch)
    return batches


def _register() -> None:
    OrcaConfig.register_for_auto_class()
    OrcaForCorrectnessDistribution.register_for_auto_class("AutoModel")
    # in-process registration so `AutoModel.from_pretrained(folder)` also works without trust_remote_code
    try:
        AutoConfig.register("orca", OrcaConfig)
        AutoModel.register(OrcaConfig, OrcaForCorrectnessDistribution)
    except ValueError:
        pass  # already registered (the repository module and a Hub snapshot of it in one process)


_register()

__all__ = [
    "OrcaForCorrectnessDistribution",
    "OrcaOutput",
    "OrcaPreTrainedModel",
    "RATING_PAD",
    "distribution_statistics",
    "format_input",
    "pad_ratings",
    "pad_token_ids",
    "ratings_nll",
    "tune_cpu_malloc",
]
