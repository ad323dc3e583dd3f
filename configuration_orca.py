"""ORCA model configuration.

ORCA (Open-ended Response Correctness Assessment, arXiv 2512.09066) predicts the distribution of the 1-5
correctness ratings that human annotators would give a candidate answer. This config holds the backbone's own
config as a nested sub-config, the likelihood of the head, the pooling, and the input template: the template
lives here (not in a tokenizer or a training script) so that a checkpoint on the Hub formats its input exactly as
it was trained, with nothing but its own files (processing_orca.py applies the template).
"""

from __future__ import annotations

from typing import Literal

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

try:  # loaded by transformers from a Hub snapshot: the other files sit beside this one
    from .heads_orca import HEADS, head_for
except ImportError:  # imported from the repository / an installed package
    from heads_orca import HEADS, head_for

SCORE_TYPES = tuple(HEADS)  # the heads (heads_orca.HEADS), each one class
POOLINGS = ("last", "mean", "cls")
TEMPLATE_FIELDS = ("question", "reference", "rationale", "transcript", "candidate")
REFERENCE_MODES = ("join", "max")


def _check_choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"OrcaConfig.{name}={value!r} is not supported; allowed values: {', '.join(allowed)}")


@strict
class OrcaConfig(PreTrainedConfig):
    r"""
    Configuration of [`OrcaForCorrectnessDistribution`].

    Args:
        backbone_config (`dict` or `PreTrainedConfig`):
            Config of the pre-trained LM (any model type `AutoConfig` knows: llama, olmo2, gemma3_text, qwen2,
            bert, ...). Its base model (`AutoModel`) is used: no vocabulary projection is ever computed.
        score_type (`str`): likelihood of the head, a name in `heads_orca.HEADS`. `"beta"`: 2 outputs (log alpha,
            log beta) of a Beta over ratings scaled to [0, 1]; `"multinomial"`: one logit per rating;
            `"bernoulli"`: 1 logit, the mean rating scaled to [0, 1] (mean only, the paper's baseline).
        pooling (`str`): `"last"` (last non-pad token, the paper's choice for decoders), `"mean"` or `"cls"`
            (first non-pad token, for encoders).
        rating_min, rating_max (`int`): the Likert scale, 1..5 in the paper. Means and variances are reported on it.
        template_fields (`list[str]`): fields of a record that make up the input, in order. Leave out `question`,
            `rationale` or `transcript` for input ablations; `candidate` is required.
        field_labels (`dict[str, str]`): text put before each field's value.
        field_separator (`str`): text between fields (the paper's separator tokens).
        template_prefix (`str`): text before the first field.
        template_suffix (`str`): text after the last field, e.g. a question to the backbone that the last token's
            state (`pooling="last"`) then answers.
        skip_empty_fields (`bool`): leave out a field (label included) whose value is empty.
        strip_fields (`bool`): strip leading and trailing whitespace from every field's value (and each reference
            alias, dropping empty aliases). `False` keeps every value exactly as given, as the reference release
            formats its input: set in checkpoints converted from it.
        add_special_tokens (`bool`): let the tokenizer add BOS/CLS/SEP tokens.
        max_chars (`int`): the paper's data rule: instances with any text over this many characters are dropped
            from training data. At scoring time longer texts are scored with a warning (see `max_length`).
        max_length (`int`): token budget of one input. Longer inputs are cut field by field in
            `truncation_order`, so the candidate is cut last.
        truncation_order (`list[str]`): which fields give up tokens first.
        reference_mode (`str`): how a list of acceptable reference answers is used. `"join"`: all in one input,
            at most `max_joined_references` of them and `max_reference_chars` characters; `"max"`: one forward pass
            per reference, keeping the distribution with the highest mean.
        reference_joiner (`str`): text between joined references.
        max_scored_references (`int`): with `"max"` and more aliases than this, only the ones closest to the
            candidate (share of an alias's character trigrams found in the candidate; ties keep the earlier alias)
            are scored, so a record with 10-200 aliases costs this many passes. 0 = every alias.
        clamp (`bool`), clamp_margin (`float`), clamp_variance_threshold (`float`): the reference release's
            clamping of confident scores to exactly 0 or 1 (off by default).
        head_init_gain (`float`), head_init_bias (`float`): xavier-normal gain and constant bias of the head.
        beta_epsilon (`float`): ratings scaled to [0, 1] are clamped to [eps, 1 - eps] so ratings 1 and 5 have a
            finite Beta log-density.
        beta_log_param_limit (`float`): log alpha and log beta are clamped to +-this so extreme logits give finite
            losses and statistics.
        share_prefix (`bool`): at scoring time (`predict`), compute the tokens shared by all answers to one question
            (the fields before the candidate) once for all of them. Exact, and used only where it is (a causal
            decoder pooled at the last token); a switch for measuring it, not a modelling choice.
    """

    model_type = "orca"
    sub_configs_defaults = {"backbone_config": SubConfigSpec(config_class=AutoConfig, model_type="llama")}

    backbone_config: dict | PreTrainedConfig | None = None
    score_type: Literal["beta", "multinomial", "bernoulli"] = "multinomial"  # the names in heads_orca.HEADS
    pooling: Literal["last", "mean", "cls"] = "last"
    rating_min: int = 1
    rating_max: int = 5
    template_fields: list[str] | tuple[str, ...] = ("question", "reference", "rationale", "transcript", "candidate")
    field_labels: dict[str, str] | None = None
    field_separator: str = "\n"
    template_prefix: str = ""
    template_suffix: str = ""
    skip_empty_fields: bool = True
    strip_fields: bool = True
    add_special_tokens: bool = True
    max_chars: int = 1000
    max_length: int = 512
    truncation_order: list[str] | tuple[str, ...] = ("rationale", "transcript", "question", "reference", "candidate")
    reference_mode: Literal["join", "max"] = "join"
    reference_joiner: str = " / "
    max_joined_references: int = 8
    max_reference_chars: int = 400
    max_scored_references: int = 0
    clamp: bool = False
    clamp_margin: float = 0.125
    clamp_variance_threshold: float | None = None
    head_init_gain: float = 0.01
    head_init_bias: float = 0.0
    beta_epsilon: float = 1e-3
    beta_log_param_limit: float = 15.0
    share_prefix: bool = True

    def __post_init__(self, **kwargs):
        if self.field_labels is None:
            self.field_labels = {
                "question": "Question: ",
                "reference": "Reference answer: ",
                "rationale": "Audio description: ",
                "transcript": "Transcript: ",
                "candidate": "Candidate answer: ",
            }
        self.template_fields = list(self.template_fields)
        self.truncation_order = list(self.truncation_order)
        # checked here rather than in a `validate_*` hook so users get a plain ValueError at construction
        self._check_orca_fields()
        # a live backbone config passed in is shared, not copied; the parent's __post_init__ would set its
        # attention implementation to ours (unset): keep the one it was loaded with
        backbone_attn = getattr(self.backbone_config, "_attn_implementation", None)
        super().__post_init__(**kwargs)
        if backbone_attn is not None and self._attn_implementation is None:
            self._attn_implementation = backbone_attn

    def _check_orca_fields(self):
        _check_choice("score_type", self.score_type, SCORE_TYPES)
        _check_choice("pooling", self.pooling, POOLINGS)
        _check_choice("reference_mode", self.reference_mode, REFERENCE_MODES)
        for field in list(self.template_fields) + list(self.truncation_order) + list(self.field_labels):
            _check_choice("template field", field, TEMPLATE_FIELDS)
        if "candidate" not in self.template_fields:
            raise ValueError("OrcaConfig.template_fields must include 'candidate'")
        if len(set(self.template_fields)) != len(self.template_fields):
            raise ValueError(f"OrcaConfig.template_fields has a repeated field: {self.template_fields}")
        for name in ("field_separator", "template_prefix", "template_suffix"):
            if not isinstance(getattr(self, name), str):  # e.g. None from an empty command-line value
                raise ValueError(f"OrcaConfig.{name} must be a string, got {getattr(self, name)!r}")
        if self.rating_max <= self.rating_min:
            raise ValueError(f"OrcaConfig needs rating_min < rating_max, got {self.rating_min}..{self.rating_max}")
        if not 0 < self.beta_epsilon < 0.5:
            raise ValueError(f"OrcaConfig.beta_epsilon must be in (0, 0.5), got {self.beta_epsilon}")
        if self.max_scored_references < 0:
            raise ValueError(f"OrcaConfig.max_scored_references must be >= 0, got {self.max_scored_references}")
        if self.max_length < 8 or self.max_chars < 1 or self.max_joined_references < 1:
            raise ValueError("OrcaConfig.max_length must be >= 8, max_chars and max_joined_references >= 1")

    @property
    def num_ratings(self) -> int:
        return self.rating_max - self.rating_min + 1

    @property
    def num_head_outputs(self) -> int:
        return head_for(self).num_outputs


__all__ = ["OrcaConfig"]
