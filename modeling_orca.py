"""ORCA: a pre-trained LM + one linear layer that predicts the distribution of human correctness ratings.

x = [question; reference; rationale; transcript; candidate] -> backbone (base model, no vocabulary logits) ->
final hidden state at one position (the last real token by default) -> Linear -> parameters of a likelihood of the
1-5 ratings (Beta, Multinomial or Bernoulli). This file and configuration_orca.py are everything a Hub checkpoint
needs, read top to bottom: the input formatter; the heads' statistics and losses; prefix-tree rows; the model;
the scoring path (`predict`); the `pipeline()` task. Nothing here changes process-wide settings or the backbone.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, AutoTokenizer, Pipeline, PreTrainedModel
from transformers import initialization as init
from transformers.utils import ModelOutput, logging

try:  # loaded by transformers from a Hub snapshot: the config sits beside this file
    from .configuration_orca import OrcaConfig
except ImportError:  # imported from the repository / an installed package
    from configuration_orca import OrcaConfig

logger = logging.get_logger(__name__)

RATING_PAD = -100  # padding value of the `ratings` tensor (the usual ignore-index of transformers labels)
PIPELINE_TASK = "orca-scoring"  # pipeline(PIPELINE_TASK, model=folder_or_repo, trust_remote_code=True)


def rating_to_unit(x, rating_min: float = 1, rating_max: float = 5):
    """A rating on the rating_min..rating_max scale (float, numpy array or tensor) on [0, 1]: (x - 1) / 4."""
    return (x - rating_min) / (rating_max - rating_min)


def unit_to_rating(u, rating_min: float = 1, rating_max: float = 5):
    """The inverse of `rating_to_unit`: 1 + 4 u."""
    return rating_min + (rating_max - rating_min) * u


# ----------------------------------------------------------------------------------------------------------------
# Input formatting: the one formatter used by training, evaluation, the CLI and the leaderboard


def _text(record: dict, field: str, config: OrcaConfig) -> str:
    value = record.get(field)
    if value is None and field == "transcript":
        value = record.get("transcription")  # the reference release's name for it
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"record {record.get('id', '?')!r}: field {field!r} must be a string, got {type(value).__name__}")
    return value.strip() if config.strip_fields else value


def reference_list(record: dict, strip: bool = True) -> list[str]:
    """The acceptable reference answers of a record: one string or a list of aliases. With `strip`, each alias
    is stripped and empty ones are dropped; without, they are kept exactly (`OrcaConfig.strip_fields=False`)."""
    if "reference" not in record or record["reference"] is None:
        raise ValueError(f"record {record.get('id', '?')!r}: missing field 'reference'")
    refs = record["reference"]
    refs = [refs] if isinstance(refs, str) else list(refs)
    if not all(isinstance(r, str) for r in refs):
        raise TypeError(f"record {record.get('id', '?')!r}: field 'reference' must be a string or a list of strings")
    if strip:
        refs = [r.strip() for r in refs if r.strip()]
    if not refs:
        raise ValueError(f"record {record.get('id', '?')!r}: field 'reference' is empty")
    return refs


def _trigrams(text: str) -> set[str]:
    text = " " + " ".join("".join(c if c.isalnum() else " " for c in text.lower()).split()) + " "
    return {text[i : i + 3] for i in range(len(text) - 2)}


def closest_references(refs: list[str], candidate: str, k: int) -> list[str]:
    """The `k` aliases the candidate covers best (share of an alias's character trigrams found in the candidate, so
    an alias inside a long sentence scores 1), in their original order; ties keep the earlier alias. String work
    only: with reference_mode='max' a record with 200 aliases costs `k` forward passes, not 200."""
    if k <= 0 or len(refs) <= k:
        return refs
    cand = _trigrams(candidate)
    cover = [len((g := _trigrams(r)) & cand) / max(1, len(g)) for r in refs]
    best = sorted(range(len(refs)), key=lambda i: (-cover[i], i))[:k]
    return [refs[i] for i in sorted(best)]


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
            fields[name] = reference if reference is not None else join_references(reference_list(record, config.strip_fields), config)
        elif name == "question" and "question" not in record:
            raise ValueError(f"record {record.get('id', '?')!r}: missing field 'question'")
        else:
            fields[name] = _text(record, name, config)
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
    """One input for reference_mode='join'; one per alias for 'max' (the `max_scored_references` aliases closest to
    the candidate when set)."""
    if config.reference_mode == "max" and "reference" in config.template_fields:
        refs = reference_list(record, config.strip_fields)
        refs = closest_references(refs, _text(record, "candidate", config), config.max_scored_references)
        return [input_fields(record, config, ref) for ref in refs]
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
        cut = tokenizer.decode(tokens[: max(0, len(tokens) - excess - 2)])
        fields[name] = cut.strip() if config.strip_fields else cut
        ids = encode(fields)
    return ids[: config.max_length]  # only the labels alone can still exceed the budget


# ----------------------------------------------------------------------------------------------------------------
# The three likelihoods: statistics on the rating scale and the negative log-likelihood of individual ratings


def _beta_params(logits: torch.Tensor, config: OrcaConfig) -> tuple[torch.Tensor, torch.Tensor]:
    log_ab = logits.float().clamp(-config.beta_log_param_limit, config.beta_log_param_limit)
    return log_ab[..., 0].exp(), log_ab[..., 1].exp()


def betainc(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor, max_terms: int = 4096) -> torch.Tensor:
    """The regularised incomplete beta function I_x(a, b) (the Beta CDF), elementwise in float64, by its continued
    fraction (modified Lentz; Numerical Recipes 6.4). torch has no betainc; this stays on the tensors' device. Not
    differentiable. Up to `max_terms` terms: the fraction needs about sqrt(max(a, b)) of them near the mean of a
    very concentrated Beta, a handful elsewhere; convergence is checked every 16 terms."""
    dtype = torch.float32 if a.device.type == "mps" else torch.float64  # MPS has no float64
    a, b, x = (t.detach().to(dtype) for t in torch.broadcast_tensors(a, b, x))
    # the fraction converges fast for x < (a + 1) / (a + b + 2); beyond it, I_x(a, b) = 1 - I_{1-x}(b, a)
    flip = x > (a + 1) / (a + b + 2)
    a, b, x = torch.where(flip, b, a), torch.where(flip, a, b), torch.where(flip, 1 - x, x)
    log_front = a * x.log() + b * torch.log1p(-x) + torch.lgamma(a + b) - torch.lgamma(a) - torch.lgamma(b) - a.log()
    negligible = log_front < math.log(torch.finfo(dtype).tiny)  # x^a (1-x)^b / (a B(a, b)) underflows: I = 0
    tiny = torch.finfo(dtype).tiny * 1e10

    def nonzero(t):
        return torch.where(t.abs() < tiny, tiny, t)

    c = torch.ones_like(x)
    d = 1 / nonzero(1 - (a + b) * x / (a + 1))
    h = d
    for m in range(1, max_terms + 1):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        for coef in (even, odd):
            d = 1 / nonzero(1 + coef * d)
            c = nonzero(1 + coef / c)
            h = h * d * c
        if m % 16 == 0 and bool((((d * c - 1).abs() < 4 * torch.finfo(dtype).eps) | negligible).all()):
            break
    value = torch.where(negligible, 0.0, log_front.exp() * h)
    return torch.where(flip, 1 - value, value)


def beta_bin_probs(alpha: torch.Tensor, beta: torch.Tensor, num_bins: int) -> torch.Tensor:
    """(B, num_bins) float32: the Beta(alpha, beta) mass of each of `num_bins` equal parts of [0, 1] (not
    differentiable)."""
    edges = torch.linspace(0, 1, num_bins + 1, dtype=torch.float64, device=alpha.device)[1:-1]  # (K - 1,)
    cdf = betainc(alpha[:, None], beta[:, None], edges[None].to(alpha.device))  # (B, K - 1)
    cdf = torch.cat([torch.zeros_like(cdf[:, :1]), cdf, torch.ones_like(cdf[:, :1])], dim=1)
    return cdf.diff(dim=1).clamp_min(0).float()


def distribution_statistics(logits: torch.Tensor, config: OrcaConfig, with_probs: bool = True):
    """(mean, variance, probs) on the rating scale; variance and probs are None for Bernoulli, probs also for Beta
    without `with_probs` (its bin masses take a numerical series: `forward` skips them while training)."""
    lo, hi, k = config.rating_min, config.rating_max, config.num_ratings
    span = hi - lo
    if config.score_type == "beta":
        alpha, beta = _beta_params(logits, config)
        total = alpha + beta
        mean = unit_to_rating(alpha / total, lo, hi)
        variance = span**2 * alpha * beta / (total**2 * (total + 1))
        return mean, variance, beta_bin_probs(alpha, beta, k) if with_probs else None
    if config.score_type == "multinomial":
        probs = logits.float().softmax(-1)  # (B, K)
        values = torch.arange(lo, lo + k, device=logits.device, dtype=probs.dtype)
        mean = probs @ values
        variance = (probs * (values - mean[:, None]) ** 2).sum(-1)
        return mean, variance, probs
    phi = torch.sigmoid(logits.float()[..., 0])
    return unit_to_rating(phi, lo, hi), None, None


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
    clamped = ratings.clamp(config.rating_min, config.rating_max)
    scaled = rating_to_unit(clamped.float(), config.rating_min, config.rating_max)  # (B, R) in [0, 1]
    if config.score_type == "beta":
        alpha, beta = _beta_params(logits, config)
        eps = config.beta_epsilon
        y = scaled.clamp(eps, 1 - eps)
        a, b = alpha[:, None], beta[:, None]
        log_pdf = (a - 1) * y.log() + (b - 1) * torch.log1p(-y) + torch.lgamma(a + b) - torch.lgamma(a) - torch.lgamma(b)
        return -(log_pdf * present).sum(-1)
    if config.score_type == "multinomial":
        log_probs = logits.float().log_softmax(-1)
        index = (clamped - config.rating_min).long()
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
        if any(isinstance(x, bool) or not float(x).is_integer() for x in r):  # 4.5 must not become 4 unseen
            raise ValueError(f"ratings of item {i} are {list(r)}: ratings must be integers")
        if r:
            out[i, : len(r)] = torch.tensor([int(x) for x in r], dtype=torch.long)
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
# Prefix-tree rows: the answers to one question share their first tokens (question, reference, rationale). In a
# causal decoder a token's hidden states depend on its prefix only, so inputs can be laid out as a trie in one
# batch row, each distinct prefix once: a token attends to itself and its ancestors (a tree-shaped causal mask),
# its position is its depth, and each input is pooled at its last token's node. Scoring (`predict`) and training
# (`pack_prefix_tree` + `forward`) use this one layout. Exact up to float rounding, for gradients too: a shared
# token's gradient is the sum of what each answer sends it. With dropout on, a shared token gets one dropout mask
# for all the answers that share it instead of one each: the same distribution, not the same numbers.


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

    def ancestors(self) -> np.ndarray:
        """(n, n) bool: node i may attend to node j (j is i or one of its ancestors)."""
        n = len(self.tokens)
        out = np.zeros((n, n), dtype=bool)
        for i, p in enumerate(self.parent):
            if p >= 0:
                out[i] = out[p]
            out[i, i] = True
        return out


def _prefix_tree_rows(token_ids: list[list[int]], groups=None, max_row_tokens: int | None = None) -> list[_PrefixTree]:
    """The inputs as prefix trees, one per row. Inputs with equal `groups` keys (all, without `groups`) share a
    trie, in sorted order so that similar inputs are neighbours; a row is closed when the next input's new tokens
    would take it past `max_row_tokens`."""
    members: dict[Any, list[int]] = {}
    for i, ids in enumerate(token_ids):
        if not ids:
            raise ValueError(f"input {i} has no tokens")
        members.setdefault(None if groups is None else groups[i], []).append(i)
    rows = []
    for group in members.values():
        tree = _PrefixTree()
        for i in sorted(group, key=lambda i: token_ids[i]):
            if max_row_tokens and tree.ends and len(tree.tokens) + tree.new_nodes(token_ids[i]) > max_row_tokens:
                rows.append(tree)
                tree = _PrefixTree()
            tree.add(i, token_ids[i])
        rows.append(tree)
    return rows


def _pack_rows(rows: list[_PrefixTree], pad_token_id: int) -> tuple[dict[str, torch.Tensor], list[int]]:
    """Batch tensors of prefix-tree rows (see `pack_prefix_tree`) and the input index of each `pool_index` row."""
    width = max(len(r.tokens) for r in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.eye(width, dtype=torch.bool).repeat(len(rows), 1, 1)  # (R, L, L); padding sees itself: no NaN
    pool, inputs = [], []
    for r, row in enumerate(rows):
        n = len(row.tokens)
        input_ids[r, :n] = torch.tensor(row.tokens, dtype=torch.long)
        position_ids[r, :n] = torch.tensor(row.depth, dtype=torch.long)
        mask[r, :n, :n] = torch.from_numpy(row.ancestors())
        for i, node in row.ends:
            pool.append((r, node))
            inputs.append(i)
    packed = dict(input_ids=input_ids, attention_mask=mask[:, None], position_ids=position_ids,
                  pool_index=torch.tensor(pool, dtype=torch.long))  # fmt: skip
    return packed, inputs


def pack_prefix_tree(token_ids: list[list[int]], pad_token_id: int, *, groups=None, max_row_tokens: int | None = None) -> dict[str, torch.Tensor]:
    """Inputs (token id lists) as prefix-tree rows, for `forward` (training) as `predict` lays them out:
    `input_ids` (R, L), `attention_mask` (R, 1, L, L) bool (True: may attend), `position_ids` (R, L) (the depth
    in the trie) and `pool_index` (N, 2) long: (row, position) of each input's last token, in input order.
    `groups`: one hashable key per input (e.g. its question); inputs share rows only with inputs of the same key
    (all inputs share, without it). `max_row_tokens`: start a new row rather than pass this many tokens."""
    rows = _prefix_tree_rows(token_ids, groups, max_row_tokens)
    packed, inputs = _pack_rows(rows, pad_token_id)
    pool_index = torch.empty_like(packed["pool_index"])
    pool_index[torch.tensor(inputs, dtype=torch.long)] = packed["pool_index"]
    return dict(packed, pool_index=pool_index)


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


# ----------------------------------------------------------------------------------------------------------------
# The model


@dataclass
class OrcaOutput(ModelOutput):
    """
    loss: mean over inputs of each input's negative log-likelihood (when `ratings` is given).
    logits: raw head output, (N, 2) Beta (log alpha, log beta), (N, 5) Multinomial, (N, 1) Bernoulli.
    mean, variance: predicted mean and variance of the ratings on the rating scale (variance None for Bernoulli).
    probs: predicted probability of each rating (N, 5); for Beta the Beta mass of each fifth of [0, 1] (not
        differentiable, and None in training mode); None for Bernoulli.
    hidden_states, attentions: the backbone's, when `output_hidden_states` / `output_attentions` are asked.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    mean: torch.FloatTensor | None = None
    variance: torch.FloatTensor | None = None
    probs: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


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
    # default token budget of a batch on CPU: activations that stay in the last-level cache beat bigger matrix
    # multiplies there (SmolLM2, 300 answers: 1,024-token batches 14 % faster than 4,096; docs/performance.md)
    cpu_batch_tokens = 1024

    # tokens of one prefix-tree row in `predict` (a question's shared ids and some of its answers' ids): every
    # token of a row is scored against all of the row's keys, masked or not, so longer rows waste attention work
    share_row_tokens = 512

    def __init__(self, config: OrcaConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        self.backbone = backbone if backbone is not None else AutoModel.from_config(config.backbone_config)
        hidden_size = self.backbone.config.get_text_config().hidden_size
        self.score_head = nn.Linear(hidden_size, config.num_head_outputs)
        params = inspect.signature(self.backbone.forward).parameters
        self._backbone_kwargs = {"use_cache": False} if "use_cache" in params else {}
        self._backbone_takes_position_ids = "position_ids" in params
        # saved with the config: `pipeline(PIPELINE_TASK, model=folder, trust_remote_code=True)` finds its class here
        config.custom_pipelines = {PIPELINE_TASK: {"impl": "modeling_orca.OrcaScoringPipeline", "pt": ["AutoModel"], "type": "text"}}
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

    @property
    def prefix_sharing_supported(self) -> bool:
        """Whether inputs may share a prefix-tree row (`pack_prefix_tree`; `predict` does it by itself): exact
        for a causal decoder pooled at the last token (the shared tokens never see what follows them), under an
        attention implementation that takes a custom 4D mask (sdpa, eager). Encoders (BERT) and mean or cls
        pooling are scored one input per row."""
        if self.config.pooling != "last":
            return False
        if self.backbone.config._attn_implementation not in ("sdpa", "eager"):
            return False
        flags = [m.is_causal for m in self.backbone.modules() if isinstance(getattr(m, "is_causal", None), bool)]
        return bool(flags) and all(flags)

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

    def _tree_mask(self, mask: torch.Tensor, position_ids: torch.Tensor):
        """The backbone's attention mask for prefix-tree rows: `mask` (R, 1, L, L) bool, as a 4D mask (boolean for
        sdpa, additive for eager), which transformers passes to every layer as it is. A sliding window (Gemma 2/3,
        Mistral, Qwen2) is applied here, on positions: per layer type where the backbone has layer types."""
        config = self.backbone.config.get_text_config()
        window = getattr(config, "sliding_window", None)
        layer_types = getattr(config, "layer_types", None) or []
        masks = {"full_attention": mask}
        if window:
            near = position_ids[:, None, :, None] - position_ids[:, None, None, :] < window  # (R, 1, L, L)
            masks["sliding_attention"] = mask & near
        if self.backbone.config._attn_implementation == "eager":  # eager attention adds its mask to the scores
            dtype = self.backbone.dtype
            masks = {k: torch.zeros(m.shape, dtype=dtype, device=m.device).masked_fill(~m, torch.finfo(dtype).min) for k, m in masks.items()}
        if window and "sliding_attention" in layer_types:
            return masks  # one mask per layer type (Gemma 2/3, Qwen2)
        return masks["sliding_attention" if window and not layer_types else "full_attention"]  # all slide (Mistral) or none

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        pool_index: torch.LongTensor | None = None,
        ratings: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        with_probs: bool | None = None,
        **kwargs,
    ) -> OrcaOutput:
        """Padded rows (`attention_mask` (B, T)), one input each: pooled as `config.pooling` says. Or prefix-tree
        rows from `pack_prefix_tree` (`attention_mask` (R, 1, L, L) bool, `position_ids`, `pool_index` (N, 2)): N
        inputs pooled at `pool_index`, in its order; outputs and loss equal those of one row per input.
        `ratings` (N, max ratings), padded with RATING_PAD, gives the loss. `with_probs` (default: in eval mode) computes
        the Beta head's bin probabilities, a float64 series that training and `predict`'s batches do not need."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        backbone_kwargs = dict(self._backbone_kwargs, **kwargs)
        if output_hidden_states is not None:
            backbone_kwargs["output_hidden_states"] = output_hidden_states
        if output_attentions is not None:
            backbone_kwargs["output_attentions"] = output_attentions
        if attention_mask.dim() == 4:
            if position_ids is None or pool_index is None:
                raise ValueError("a 4D (prefix-tree) attention_mask needs position_ids and pool_index: see pack_prefix_tree")
            if not self.prefix_sharing_supported:
                raise ValueError(
                    f"prefix-tree rows need a causal decoder pooled at the last token with sdpa or eager attention; "
                    f"this model: pooling={self.config.pooling!r}, attention {self.backbone.config._attn_implementation!r}"
                )
            backbone_mask = self._tree_mask(attention_mask.bool(), position_ids)
        else:
            backbone_mask = attention_mask
            if position_ids is None and self._backbone_takes_position_ids:
                # positions count real tokens only, so left padding gives the same outputs as right padding
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)
        if position_ids is not None:
            backbone_kwargs["position_ids"] = position_ids
        out = self.backbone(input_ids=input_ids, attention_mask=backbone_mask, **backbone_kwargs)
        hidden = out.last_hidden_state  # (B, T, H)
        if pool_index is not None:
            pooled = hidden[pool_index[:, 0], pool_index[:, 1]]  # (N, H)
        else:
            pooled = self.pool(hidden, attention_mask)  # (B, H)
        logits = self.score_head(pooled.to(self.score_head.weight.dtype))  # (N, num_head_outputs)
        mean, variance, probs = distribution_statistics(logits, self.config, with_probs=not self.training if with_probs is None else with_probs)
        loss = ratings_nll(logits, ratings, self.config).mean() if ratings is not None else None
        return OrcaOutput(loss=loss, logits=logits, mean=mean, variance=variance, probs=probs,
                          hidden_states=getattr(out, "hidden_states", None), attentions=getattr(out, "attentions", None))  # fmt: skip

    # ------------------------------------------------------------------------------------------------------------
    # Scoring: the one path of the CLI, the evaluation, the leaderboard and the pipeline

    def format_input(self, record: dict, reference: str | None = None) -> str:
        return format_input(record, self.config, reference)

    def collate(self, token_ids: list[list[int]], pad_token_id: int) -> dict[str, torch.Tensor]:
        """Right-padded batch tensors from token id lists, on the model's device."""
        input_ids, attention_mask = pad_token_ids(token_ids, pad_token_id)
        return {"input_ids": input_ids.to(self.device), "attention_mask": attention_mask.to(self.device)}

    def _score_plain(self, token_ids: list[list[int]], pad_id: int, budget: int, progress) -> torch.Tensor:
        """Logits of each input, one input per row: longest first, batches of up to `budget` tokens (padding
        included)."""
        logits = torch.empty((len(token_ids), self.config.num_head_outputs), dtype=torch.float32)
        order = sorted(range(len(token_ids)), key=lambda j: -len(token_ids[j]))
        for idx in _token_batches(order, [len(t) for t in token_ids], budget):
            logits[idx] = self(**self.collate([token_ids[j] for j in idx], pad_id), with_probs=False).logits.float().cpu()
            progress(len(idx))
        return logits

    def _score_shared(self, token_ids: list[list[int]], groups: list, pad_id: int, budget: int, progress) -> torch.Tensor:
        """Logits of each input, inputs of one group (the same ids before the candidate) sharing prefix-tree rows
        of at most `share_row_tokens` tokens: longest rows first, batches of up to `budget` tokens."""
        logits = torch.empty((len(token_ids), self.config.num_head_outputs), dtype=torch.float32)
        rows = _prefix_tree_rows(token_ids, groups, self.share_row_tokens)
        lengths = [len(r.tokens) for r in rows]
        for batch in _token_batches(sorted(range(len(rows)), key=lambda r: -lengths[r]), lengths, budget):
            packed, inputs = _pack_rows([rows[r] for r in batch], pad_id)
            logits[inputs] = self(**{k: v.to(self.device) for k, v in packed.items()}, with_probs=False).logits.float().cpu()
            progress(len(inputs))
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
        (default `batch_size * 256`, at most `cpu_batch_tokens` on CPU), longest inputs first. With `share_prefix`
        (default: the config's `share_prefix`) and `prefix_sharing_supported`, the answers to one question share
        prefix-tree rows (exact: see `pack_prefix_tree`); inputs cut to `max_length` are scored on their own. The
        model is left as it was: same weights, config and train/eval mode of every module, also after an error."""
        records = list(records)
        modes = [(m, m.training) for m in self.modules()]
        self.eval()
        try:
            logits, owner = self._predict_logits(records, tokenizer, batch_size, show_progress, share_prefix, max_batch_tokens)
        finally:
            for module, training in modes:
                module.training = training

        # per record: the variant with the highest predicted mean
        mean, variance, probs = distribution_statistics(logits, self.config)
        best: dict[int, int] = {}
        for j, i in enumerate(owner):
            if i not in best or mean[j] > mean[best[i]]:
                best[i] = j
        threshold = clamp_threshold
        if threshold is None and self.config.clamp:
            threshold = self.config.clamp_variance_threshold
        results = []
        for i, record in enumerate(records):
            j = best[i]
            result = {
                "mean": float(mean[j]),
                "variance": None if variance is None else float(variance[j]),
                "probs": None if probs is None else [float(p) for p in probs[j]],
            }
            score = rating_to_unit(result["mean"], self.config.rating_min, self.config.rating_max)
            result["score"] = clamp_scores(score, result["variance"], self.config.clamp_margin, threshold)
            if record.get("ratings"):
                result["nll"] = float(ratings_nll(logits[j : j + 1], pad_ratings([record["ratings"]]), self.config)[0])
            results.append(result)
        return results

    def _predict_logits(self, records, tokenizer, batch_size, show_progress, share_prefix, max_batch_tokens):
        """(logits of each input variant, the record of each variant)."""
        variants, owner = [], []
        for i, record in enumerate(records):
            for fields in input_variants(record, self.config):
                variants.append(fields)
                owner.append(i)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        budget = max_batch_tokens if max_batch_tokens is not None else max(1, batch_size) * 256
        if self.device.type == "cpu" and max_batch_tokens is None:
            budget = min(budget, self.cpu_batch_tokens)
        share = self.config.share_prefix if share_prefix is None else share_prefix
        share = share and self.prefix_sharing_supported

        # distinct inputs: (shared ids, or None when cut to max_length, item ids)
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

        logits = torch.empty((len(keys), self.config.num_head_outputs), dtype=torch.float32)
        tree = [u for u, (shared, item) in enumerate(keys) if share and shared is not None and len(shared) + len(item) <= self.share_row_tokens]
        plain = sorted(set(range(len(keys))) - set(tree))
        if tree:
            logits[tree] = self._score_shared([list(keys[u][0] + keys[u][1]) for u in tree], [keys[u][0] for u in tree], pad_id, budget, progress)
        if plain:
            ids = [list(keys[u][1]) if keys[u][0] is None else list(keys[u][0] + keys[u][1]) for u in plain]
            logits[plain] = self._score_plain(ids, pad_id, budget, progress)
        if bar is not None:
            bar.close()
        return logits[torch.tensor(which, dtype=torch.long)], owner


# ----------------------------------------------------------------------------------------------------------------
# pipeline(): `pipeline("orca-scoring", model=folder_or_repo, trust_remote_code=True)(records)` returns what
# `predict` returns (a saved config names this class under `custom_pipelines`)


class OrcaScoringPipeline(Pipeline):
    """Scores one record (a dict: question, reference, candidate, optional rationale / transcript / ratings) or a
    list of them with `model.predict`; keyword arguments (batch_size, share_prefix, max_batch_tokens,
    clamp_threshold, show_progress) go to `predict`."""

    _load_tokenizer = True

    def _sanitize_parameters(self, **kwargs):
        return {}, kwargs, {}

    def __call__(self, records, **kwargs):
        single = isinstance(records, dict)
        records = [records] if single else list(records)
        params = {**self._forward_params, **kwargs}
        if params.get("batch_size") is None and self._batch_size is not None:
            params["batch_size"] = self._batch_size
        results = self.model.predict(records, self.tokenizer, **{k: v for k, v in params.items() if v is not None})
        return results[0] if single else results

    # the steps of a transformers pipeline, for callers that drive them one by one: the same `predict`
    def preprocess(self, record, **kwargs):
        return {"record": record}

    def _forward(self, model_inputs, **kwargs):
        return self.model.predict([model_inputs["record"]], self.tokenizer, **kwargs)[0]

    def postprocess(self, model_outputs, **kwargs):
        return model_outputs


# `save_pretrained` writes `auto_map` so `AutoModel.from_pretrained(folder, trust_remote_code=True)` finds these
# classes; this only sets class attributes (nothing global is registered)
OrcaConfig.register_for_auto_class()
OrcaForCorrectnessDistribution.register_for_auto_class("AutoModel")

__all__ = [
    "OrcaForCorrectnessDistribution",
    "OrcaOutput",
    "OrcaPreTrainedModel",
    "OrcaScoringPipeline",
    "PIPELINE_TASK",
    "RATING_PAD",
    "betainc",
    "distribution_statistics",
    "format_input",
    "pack_prefix_tree",
    "pad_ratings",
    "pad_token_ids",
    "rating_to_unit",
    "ratings_nll",
    "unit_to_rating",
]
