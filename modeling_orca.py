"""ORCA: a pre-trained LM + one linear layer that predicts the distribution of human correctness ratings.

x = [question; reference; rationale; transcript; candidate] -> backbone (base model, no vocabulary logits) ->
final hidden state at one position (the last real token by default) -> Linear -> parameters of a likelihood of the
1-5 ratings (Beta, Multinomial or Bernoulli: the heads, one class each in heads_orca.py). Read top to bottom: the
heads' statistics and losses; the model (`forward`); the scoring path (`predict`); the `pipeline()` task. A Hub
checkpoint carries this file and the four it imports: configuration_orca.py (the config and its input template),
heads_orca.py (the heads), processing_orca.py (formatting and tokenising records) and packing_orca.py (padded and
prefix-tree batches). Nothing here changes process-wide settings or the backbone.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoModel, AutoTokenizer, Pipeline, PreTrainedModel
from transformers import initialization as init
from transformers.pipelines import PipelineRegistry
from transformers.utils import ModelOutput, logging

try:  # loaded by transformers from a Hub snapshot: the other files sit beside this one
    from .configuration_orca import OrcaConfig
    from .heads_orca import HEADS, beta_bin_probs, betainc, head_for, rating_to_unit, unit_to_rating
    from .packing_orca import padded_batches, prefix_tree_batches, share_row_tokens, tree_attention_mask
    from .processing_orca import distinct_inputs, format_input, record_variants, set_pad_token
except ImportError:  # imported from the repository / an installed package
    from configuration_orca import OrcaConfig
    from heads_orca import HEADS, beta_bin_probs, betainc, head_for, rating_to_unit, unit_to_rating
    from packing_orca import padded_batches, prefix_tree_batches, share_row_tokens, tree_attention_mask
    from processing_orca import distinct_inputs, format_input, record_variants, set_pad_token

logger = logging.get_logger(__name__)

RATING_PAD = -100  # padding value of the `ratings` tensor (the usual ignore-index of transformers labels)
PIPELINE_TASK = "orca-scoring"  # pipeline(PIPELINE_TASK, model=folder_or_repo, trust_remote_code=True)
# `predict`'s deprecated `batch_size` was a token budget in these units: batch_size=N meant batches of N x 256 tokens
TOKENS_PER_BATCH_SIZE_UNIT = 256
DEFAULT_BATCH_TOKENS = 16 * TOKENS_PER_BATCH_SIZE_UNIT  # `max_batch_tokens` when not given (off the CPU): 4,096


# ----------------------------------------------------------------------------------------------------------------
# The heads (heads_orca.py, one class per likelihood): statistics on the rating scale and the negative
# log-likelihood of individual ratings, for the head `config.score_type` names


def distribution_statistics(logits: torch.Tensor, config: OrcaConfig, with_probs: bool = True):
    """(mean, variance, probs) on the rating scale; variance and probs are None for Bernoulli, probs also for Beta
    without `with_probs` (its bin masses take a numerical series: `forward` skips them while training)."""
    return head_for(config).statistics(logits, with_probs)


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
    present = check_ratings(ratings, config)  # (B, R)
    clamped = ratings.clamp(config.rating_min, config.rating_max)  # the padding too: `present` masks it out
    return head_for(config).nll(logits, clamped, present)


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


def clamp_confident_score(score01, variance, margin: float, threshold: float | None):
    """The reference release's clamping: a confident score (variance <= threshold) strictly within `margin` of 0
    or 1 becomes exactly 0 or 1. The one rule: eval_suite.scoring.clamping applies and tunes it over arrays."""
    if threshold is None or variance is None:
        return score01
    if score01 < margin and variance <= threshold:
        return 0.0
    if score01 > 1 - margin and variance <= threshold:
        return 1.0
    return score01


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
    # the head is tiny and reads states of any dtype: float32 keeps its training and its statistics exact when the
    # backbone runs in bfloat16
    _keep_in_fp32_modules = ["score_head"]

    def _init_weights(self, module):
        # only the head: the backbone keeps its pre-trained weights (its own _init_weights covers a fresh one)
        if isinstance(module, nn.Linear) and module is getattr(self, "score_head", None):
            init.xavier_normal_(module.weight, gain=self.config.head_init_gain)
            init.constant_(module.bias, self.config.head_init_bias)


class OrcaForCorrectnessDistribution(OrcaPreTrainedModel):
    # most tokens of a batch on CPU when `max_batch_tokens` is not given (DEFAULT_BATCH_TOKENS elsewhere): on a quiet
    # 2-core machine, SmolLM2 on 1,000 answers, 512-2,048 took 65-71 s and 4,096 76-79 s; the Qwen2.5-1.5B judge on 50
    # answers, 1,024 against 2,048 in three alternating pairs, 1.20-1.39x faster (docs/performance.md, rounds 7 and 8)
    cpu_batch_tokens = 1024

    def __init__(self, config: OrcaConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        self.backbone = backbone if backbone is not None else AutoModel.from_config(config.backbone_config)
        hidden_size = self.backbone.config.get_text_config().hidden_size
        self.score_head = nn.Linear(hidden_size, config.num_head_outputs)
        params = inspect.signature(self.backbone.forward).parameters
        self._backbone_kwargs = {"use_cache": False} if "use_cache" in params else {}
        self._backbone_takes_position_ids = "position_ids" in params
        self._saving_through_pipeline = False
        self.share_row_tokens = share_row_tokens(self.backbone)  # most tokens of a prefix-tree row in `predict`
        self.post_init()

    def get_input_embeddings(self):
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.backbone.set_input_embeddings(value)

    @classmethod
    def from_backbone(cls, name_or_path, *, score_type: str = "multinomial", revision: str | None = None, dtype=None, **config_kwargs):
        """An ORCA model on a pre-trained backbone's weights (head freshly initialised) and its tokenizer, with a
        pad token set when the backbone has none. Returns `(model, tokenizer)`."""
        tokenizer = set_pad_token(AutoTokenizer.from_pretrained(name_or_path, revision=revision), str(name_or_path))
        backbone = AutoModel.from_pretrained(name_or_path, revision=revision, dtype=dtype)
        backbone.config.pad_token_id = tokenizer.pad_token_id
        config = OrcaConfig(backbone_config=backbone.config, score_type=score_type, **config_kwargs)
        return cls(config, backbone=backbone), tokenizer

    def save_pretrained(self, save_directory, **kwargs):
        """`PreTrainedModel.save_pretrained`, by way of `OrcaScoringPipeline.save_pretrained`: transformers writes the
        pipeline's entry into config.json's `custom_pipelines` there (what `pipeline(PIPELINE_TASK, model=folder,
        trust_remote_code=True)` reads; it is made by `register_pipeline` at the end of this file) and then saves
        the model by calling this method again."""
        if self._saving_through_pipeline or not kwargs.get("is_main_process", True):
            return super().save_pretrained(save_directory, **kwargs)
        self._saving_through_pipeline = True
        try:
            device = None if getattr(self, "hf_device_map", None) else self.device  # the pipeline must not move it
            OrcaScoringPipeline(model=self, device=device).save_pretrained(save_directory, **kwargs)
        finally:
            self._saving_through_pipeline = False

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

    def _backbone_mask_and_positions(self, attention_mask, position_ids, pool_index):
        """The backbone's attention mask and position ids: for prefix-tree rows (a 4D `attention_mask`) the tree
        mask (packing_orca.tree_attention_mask) and the given depths; for padded rows the (B, T) mask as it is and,
        unless given, positions that count real tokens only (so left padding equals right padding)."""
        if attention_mask.dim() == 4:  # (R, 1, L, L) bool
            if position_ids is None or pool_index is None:
                raise ValueError("a 4D (prefix-tree) attention_mask needs position_ids and pool_index: see pack_prefix_tree")
            if not self.prefix_sharing_supported:
                raise ValueError(
                    f"prefix-tree rows need a causal decoder pooled at the last token with sdpa or eager attention; "
                    f"this model: pooling={self.config.pooling!r}, attention {self.backbone.config._attn_implementation!r}"
                )
            return tree_attention_mask(attention_mask.bool(), position_ids, self.backbone.config, self.backbone.dtype), position_ids
        if position_ids is None and self._backbone_takes_position_ids:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)  # (B, T)
        return attention_mask, position_ids

    def pooled_states(self, input_ids, attention_mask=None, position_ids=None, pool_index=None, **kwargs):
        """(pooled, backbone output): the final hidden state each input is pooled at, (N, H) in the backbone's
        dtype, which is all the head reads (a frozen backbone's pooled states can be cached and the head trained on
        them: training/state_cache.py). Inputs as `forward` takes them; `kwargs` go to the backbone (None dropped)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)  # (B, T)
        backbone_mask, position_ids = self._backbone_mask_and_positions(attention_mask, position_ids, pool_index)
        backbone_kwargs = dict(self._backbone_kwargs, position_ids=position_ids, **kwargs)
        backbone_kwargs = {k: v for k, v in backbone_kwargs.items() if v is not None}
        out = self.backbone(input_ids=input_ids, attention_mask=backbone_mask, **backbone_kwargs)
        hidden = out.last_hidden_state  # (B, T, H)
        if pool_index is not None:
            return hidden[pool_index[:, 0], pool_index[:, 1]], out  # (N, H)
        return self.pool(hidden, attention_mask), out  # (B, H)

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
        rows from `packing_orca.pack_prefix_tree` (`attention_mask` (R, 1, L, L) bool, `position_ids`, `pool_index` (N, 2)): N
        inputs pooled at `pool_index`, in its order; outputs and loss equal those of one row per input.
        `ratings` (N, max ratings), padded with RATING_PAD, gives the loss. `with_probs` (default: in eval mode) computes
        the Beta head's bin probabilities, a float64 series that training and `predict`'s batches do not need."""
        kwargs.update(output_hidden_states=output_hidden_states, output_attentions=output_attentions)
        pooled, out = self.pooled_states(input_ids, attention_mask, position_ids, pool_index, **kwargs)  # (N, H)
        logits = self.score_head(pooled.to(self.score_head.weight.dtype))  # (N, num_head_outputs)
        mean, variance, probs = distribution_statistics(logits, self.config, with_probs=not self.training if with_probs is None else with_probs)
        loss = ratings_nll(logits, ratings, self.config).mean() if ratings is not None else None
        return OrcaOutput(loss=loss, logits=logits, mean=mean, variance=variance, probs=probs,
                          hidden_states=getattr(out, "hidden_states", None), attentions=getattr(out, "attentions", None))  # fmt: skip

    # ------------------------------------------------------------------------------------------------------------
    # Scoring: the one path of the CLI, the evaluation, the leaderboard and the pipeline

    def format_input(self, record: dict, reference: str | None = None) -> str:
        """The model's input text for a record, as its config formats it (processing_orca.format_input)."""
        return format_input(record, self.config, reference)

    def _states_plain(self, token_ids: list[list[int]], pad_id: int, budget: int, out: torch.Tensor, rows: list[int], progress) -> None:
        """Pooled states of each input into `out[rows]`, one input per padded row (packing_orca.padded_batches)."""
        self._states_of_batches(padded_batches(token_ids, pad_id, budget), out, rows, progress)

    def _states_shared(self, token_ids: list[list[int]], groups: list, pad_id: int, budget: int, out: torch.Tensor, rows: list[int], progress) -> None:
        """Pooled states of each input into `out[rows]`: the inputs of one group (the same ids before the candidate)
        share a trie, and tries share prefix-tree rows of at most `share_row_tokens` and the batch budget
        (packing_orca.prefix_tree_batches)."""
        batches = prefix_tree_batches(token_ids, pad_id, budget, groups=groups, max_row_tokens=min(self.share_row_tokens, budget))
        self._states_of_batches(batches, out, rows, progress)

    def _states_of_batches(self, batches, out: torch.Tensor, rows: list[int], progress) -> None:
        """`out[rows[i]]` = the pooled state of input i, from `(input indices, forward inputs)` batches."""
        for inputs, batch in batches:
            pooled, _ = self.pooled_states(**{k: v.to(self.device) for k, v in batch.items()})
            out[[rows[i] for i in inputs]] = pooled.cpu()
            progress(len(inputs))

    @torch.inference_mode()
    def predict(
        self,
        records: list[dict],
        tokenizer,
        *,
        max_batch_tokens: int | None = None,
        show_progress: bool = False,
        clamp_threshold: float | None = None,
        share_prefix: bool | None = None,
        batch_size: int | None = None,
    ) -> list[dict[str, Any]]:
        """Score records; returns one dict per record, in input order: `mean`, `variance` (None for Bernoulli),
        `probs` (list of 5 floats, None for Bernoulli), `score` (mean scaled to [0, 1], clamped when the config or
        `clamp_threshold` asks), and `nll` of the record's `ratings` when it has any. With reference_mode='max'
        each alias is one input and the alias giving the highest mean wins. `encode` then `predict_from_states`.

        Batches hold up to `max_batch_tokens` tokens, padding included (default: `cpu_batch_tokens` on CPU, else
        DEFAULT_BATCH_TOKENS: 1,024 and 4,096), longest inputs first, so a batch holds many short inputs or few long
        ones. `batch_size` (deprecated: not a count of inputs) means `batch_size` x 256 tokens, at most
        `cpu_batch_tokens` on CPU. Inputs are tokenised once; identical inputs are scored once. With `share_prefix`
        (default: the config's `share_prefix`) and `prefix_sharing_supported`, the answers to one question share
        prefix-tree rows (exact: see `pack_prefix_tree`); inputs cut to `max_length` are scored on their own. The
        model is left as it was: same weights, config and train/eval mode of every module, also after an error."""
        records = list(records)
        budget = self._batch_token_budget(max_batch_tokens, batch_size)  # here: the warning names predict's caller
        states, owner = self.encode(records, tokenizer, max_batch_tokens=budget, show_progress=show_progress, share_prefix=share_prefix)
        return self.predict_from_states(records, states, owner, clamp_threshold)

    @torch.inference_mode()
    def predict_from_states(self, records: list[dict], states: torch.Tensor, owner: list[int], clamp_threshold: float | None = None) -> list[dict[str, Any]]:
        """`predict`'s results from `encode`'s output: the head on each input's pooled state (V, H), then per
        record the variant with the highest mean, clamping and the NLL of its ratings."""
        head = self.score_head.weight
        logits = self.score_head(states.to(head.device, head.dtype)).float().cpu()  # (V, num_head_outputs)
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
            result["score"] = clamp_confident_score(score, result["variance"], self.config.clamp_margin, threshold)
            if record.get("ratings"):
                result["nll"] = float(ratings_nll(logits[j : j + 1], pad_ratings([record["ratings"]]), self.config)[0])
            results.append(result)
        return results

    def _batch_token_budget(self, max_batch_tokens: int | None, batch_size: int | None) -> int:
        """Tokens per batch (padding included): `max_batch_tokens` when given, else DEFAULT_BATCH_TOKENS or the
        deprecated `batch_size` units of TOKENS_PER_BATCH_SIZE_UNIT, at most `cpu_batch_tokens` on CPU."""
        if batch_size is not None:
            if max_batch_tokens is not None:
                raise ValueError("give max_batch_tokens (tokens per batch) or the deprecated batch_size, not both")
            warnings.warn(f"batch_size is deprecated: it is a token budget (batch_size x {TOKENS_PER_BATCH_SIZE_UNIT} "
                          "tokens), not a count of inputs; pass max_batch_tokens (tokens per batch, padding included)",
                          FutureWarning, stacklevel=4)  # this, predict or encode, torch's inference_mode, the caller
        if max_batch_tokens is not None:
            return max_batch_tokens
        budget = DEFAULT_BATCH_TOKENS if batch_size is None else max(1, batch_size) * TOKENS_PER_BATCH_SIZE_UNIT
        return min(budget, self.cpu_batch_tokens) if self.device.type == "cpu" else budget

    @torch.inference_mode()
    def encode(self, records: list[dict], tokenizer, *, max_batch_tokens: int | None = None, show_progress: bool = False,
               share_prefix: bool | None = None, batch_size: int | None = None) -> tuple[torch.Tensor, list[int]]:
        """(states, owner): the pooled final hidden state of every input variant of every record (one per alias with
        reference_mode='max'), (V, H) on the CPU in the backbone's dtype, and the index of each variant's record.
        Batching and prefix sharing as in `predict`; the model is left in the mode it was in."""
        variants, owner = record_variants(records, self.config)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        budget = self._batch_token_budget(max_batch_tokens, batch_size)
        share = self.config.share_prefix if share_prefix is None else share_prefix
        share = share and self.prefix_sharing_supported

        keys, which = distinct_inputs(variants, tokenizer, self.config)  # keys: (shared ids or None, item ids)
        hidden_size = self.score_head.in_features
        states = torch.empty((len(keys), hidden_size), dtype=self.backbone.dtype)
        # inputs cut to max_length (shared ids None) and rows too long to share are scored one per row
        tree = [u for u, (shared, item) in enumerate(keys) if share and shared is not None and len(shared) + len(item) <= self.share_row_tokens]
        plain = sorted(set(range(len(keys))) - set(tree))
        modes = [(m, m.training) for m in self.modules()]
        self.eval()
        bar = tqdm(total=len(keys), desc="scoring", unit="input", disable=not show_progress)
        try:
            if tree:
                self._states_shared([list(keys[u][0] + keys[u][1]) for u in tree], [keys[u][0] for u in tree], pad_id, budget, states, tree, bar.update)
            if plain:
                ids = [list(keys[u][1]) if keys[u][0] is None else list(keys[u][0] + keys[u][1]) for u in plain]
                self._states_plain(ids, pad_id, budget, states, plain, bar.update)
        finally:
            bar.close()
            for module, training in modes:
                module.training = training
        return states[torch.tensor(which, dtype=torch.long)], owner


# ----------------------------------------------------------------------------------------------------------------
# pipeline(): `pipeline("orca-scoring", model=folder_or_repo, trust_remote_code=True)(records)` returns what
# `predict` returns (a saved config names this class under `custom_pipelines`)


class OrcaScoringPipeline(Pipeline):
    """Scores one record (a dict: question, reference, candidate, optional rationale / transcript / ratings) or a
    list of them with `model.predict`; keyword arguments (max_batch_tokens, share_prefix, clamp_threshold,
    show_progress) go to `predict`. `batch_size` (of the call or of `pipeline(...)`) keeps transformers' meaning,
    a count of records: at most that many per `predict` call (default: all in one), each batched by tokens."""

    _load_tokenizer = True

    def _sanitize_parameters(self, **kwargs):
        return {}, kwargs, {}

    def __call__(self, records, **kwargs):
        single = isinstance(records, dict)
        records = [records] if single else list(records)
        params = {k: v for k, v in {**self._forward_params, **kwargs}.items() if v is not None}
        step = params.pop("batch_size", None) or self._batch_size or max(1, len(records))
        results = [p for i in range(0, len(records), step) for p in self.model.predict(records[i : i + step], self.tokenizer, **params)]
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

# The pipeline's entry in a saved config.json (`custom_pipelines`), made as transformers documents it for a custom
# pipeline shared with remote code: `register_pipeline`, then `Pipeline.save_pretrained` (which the model's
# `save_pretrained` goes through). transformers' guide registers in its process-wide PIPELINE_REGISTRY, which a Hub
# file must not change; `pipeline()` never needs that registration (it reads the task from the saved config), so the
# entry is registered in a registry of this file's own: `register_pipeline` then only sets the class attribute
# `OrcaScoringPipeline._registered_impl`, from which `Pipeline.save_pretrained` writes the entry.
PipelineRegistry(supported_tasks={}, task_aliases={}).register_pipeline(
    PIPELINE_TASK, pipeline_class=OrcaScoringPipeline, pt_model=AutoModel, type="text"
)

__all__ = [
    "DEFAULT_BATCH_TOKENS",
    "HEADS",
    "OrcaForCorrectnessDistribution",
    "OrcaOutput",
    "OrcaPreTrainedModel",
    "OrcaScoringPipeline",
    "PIPELINE_TASK",
    "RATING_PAD",
    "TOKENS_PER_BATCH_SIZE_UNIT",
    "beta_bin_probs",
    "betainc",
    "check_ratings",
    "clamp_confident_score",
    "distribution_statistics",
    "head_for",
    "pad_ratings",
    "rating_to_unit",
    "ratings_nll",
    "unit_to_rating",
]
