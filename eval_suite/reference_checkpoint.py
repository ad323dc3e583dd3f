"""Converting a checkpoint of the reference release (github.com/BUTSpeechFIT/ORCA: model/config.yaml, model/lm/, the
head in model/model_minus_lm.pt, tokenizer/) into an ORCA model folder, checked against the release's own
computation on edge-case records before it is written (`push_to_hub.py convert-reference`, eval_suite.release)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dataset_builder.files import staged_dir


class ConversionError(Exception):
    """A checkpoint that cannot be converted, or a conversion that does not reproduce the release's scores."""


# The reference release (github.com/BUTSpeechFIT/ORCA, orca_score/data.py and infer.py) scores a record as
#   "" + " |context: " + rationale + " |question: " + question + " |correct answer: " + reference
#      + " |candidate answer: " + candidate
# with nothing stripped (an empty field keeps its label), tokenised whole without special tokens and never
# truncated, pooled at the last real token of the last hidden state. The same in OrcaConfig's terms; a list of
# aliases is the one string its aliases joined by " / " (the release reads one reference string).
NO_LIMIT = 2**31 - 1
REFERENCE_TEMPLATE = dict(
    template_fields=["rationale", "question", "reference", "candidate"],
    field_labels={"rationale": "|context: ", "question": "|question: ", "reference": "|correct answer: ",
                  "candidate": "|candidate answer: "},
    field_separator=" ", template_prefix=" ", skip_empty_fields=False, strip_fields=False, add_special_tokens=False,
    pooling="last", reference_mode="join", reference_joiner=" / ", max_joined_references=NO_LIMIT,
    max_reference_chars=NO_LIMIT, max_scored_references=0, max_length=NO_LIMIT, clamp=False,
)


def _reference_beta(z):
    a, b = z.exp()
    return a / (a + b), a * b / ((a + b + 1) * (a + b) ** 2)


def _reference_multinomial(z):
    import torch

    probs, k = z.softmax(-1), torch.arange(5, dtype=torch.float64) / 4
    rating = probs @ k
    return rating, probs @ (k - rating) ** 2


def _reference_bernoulli(z):  # entry 0 of a softmax over two logits; no variance
    import torch

    return z.softmax(-1)[0], torch.zeros(())


def _difference_of_rows(weight, bias):  # softmax([z0, z1])[0] = sigmoid(z0 - z1): one logit, the rows' difference
    return (weight[0] - weight[1])[None], (bias[0] - bias[1])[None]


def _same_rows(weight, bias):
    return weight, bias


@dataclass(frozen=True)
class ReferenceHead:
    """A head of the reference release: our head it converts to (`score_type`), the rows of its linear layer, its
    own computation of (rating_orca, variance_orca) on [0, 1] from that layer's float64 outputs z (written out here
    as the release does, independently of heads_orca: the conversion is checked against it) and the map of its
    (weight, bias) onto our head's."""

    score_type: str
    outputs: int
    rating_and_variance: Callable
    to_ours: Callable = _same_rows


# the release's score_type -> its head. "mse" is scored like "bernoulli" (softmax entry 0) and "bmm" like "beta"
# (the same parameters, trained with other losses).
REFERENCE_HEADS = {
    "bernoulli": ReferenceHead("bernoulli", 2, _reference_bernoulli, _difference_of_rows),
    "mse": ReferenceHead("bernoulli", 2, _reference_bernoulli, _difference_of_rows),
    "beta": ReferenceHead("beta", 2, _reference_beta),
    "bmm": ReferenceHead("beta", 2, _reference_beta),
    "multinomial": ReferenceHead("multinomial", 5, _reference_multinomial),
}

_LONG_RATIONALE = " ".join(f"Bell {i} rings in the old stone tower, and the wind carries its echo over the square."
                           for i in range(1, 41))  # about 800 tokens: over the 512 our own models are cut to
# Scored by the converter (ours against the reference's computation) and by the tests: the inputs where a formatter
# can differ from the reference's string. Every record has ratings, as the release's reader drops those without.
REFERENCE_EDGE_RECORDS = [
    {"id": "spaces", "question": "  Which instrument plays the melody?  ", "reference": [" violin ", "fiddle "],
     "rationale": " A solo violin plays over soft piano chords. ", "candidate": "  It is a violin.  ", "ratings": [5, 5, 4]},
    {"id": "tabs-newlines", "question": "What animal is barking?\n", "reference": "\tdog",
     "rationale": "\tA dog barks twice.\n\n", "candidate": "A cat, I think.\n", "ratings": [1, 1]},
    {"id": "empty-rationale", "question": "How many bells ring?", "reference": "three", "rationale": "",
     "candidate": "three ", "ratings": [5]},
    {"id": "unicode", "question": "Quel instrument joue ? 🎻", "reference": ["violon", "小提琴", "skrzypce"],
     "rationale": "Un violon solo joue — très doucement, cafe\u0301 au lait.", "candidate": "C'est un violon 🎻\u00a0",
     "ratings": [5, 4]},
    {"id": "long", "question": "How many bells ring?", "reference": "forty", "rationale": _LONG_RATIONALE,
     "candidate": "I counted forty bells.", "ratings": [5, 5]},
    {"id": "many-aliases", "question": "How many strings does a violin have?",
     "reference": ["4", "four", "IV", "vier", "quatre", "cuatro", "quattro", "četyre", "четыре", "四", "fyra", "neljä",
                   "négy", "dört", "ארבע", "أربعة", "four strings", "4 strings", "G D A E", "G, D, A and E"],
     "candidate": "It has four strings.", "rationale": "A violinist tunes each string in turn.", "ratings": [5, 5, 5]},
    {"id": "empty-candidate", "question": "What is the speaker's name?", "reference": "Anna", "rationale": "   ",
     "candidate": "", "ratings": [1, 1]},
    {"id": "whitespace-candidate", "question": "What is the speaker's name?", "reference": "Anna",
     "rationale": "A woman says: my name is Anna.", "candidate": " \t ", "ratings": [1]},
]


def read_reference_config(path: Path) -> dict:
    """yaml.safe_load plus one tag: the release writes its config with yaml.dump, which tags the default
    `layers_to_use: (-1,)` as `!!python/tuple`. It is read as a list; every other Python tag is still refused."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("tag:yaml.org,2002:python/tuple", lambda loader, node: loader.construct_sequence(node))
    try:
        return yaml.load(path.read_text(), Loader=Loader) or {}
    except yaml.YAMLError as err:
        raise ConversionError(f"{path}: not a plain YAML config: {' '.join(str(err).split())}") from err


def reference_input(record: dict) -> str:
    """The release's input string of a record, written out on its own (not through our formatter)."""
    refs = record["reference"]
    ref = refs if isinstance(refs, str) else " / ".join(refs)
    return (f" |context: {record.get('rationale', '')} |question: {record['question']} "
            f"|correct answer: {ref} |candidate answer: {record['candidate']}")


def reference_predictions(causal_lm, tokenizer, weight, bias, head: ReferenceHead, records: list[dict]) -> list[dict]:
    """`rating_orca` and `variance_orca` (on [0, 1], as the release writes them) computed the release's way: its
    string, tokenised whole without special tokens, the causal LM's last hidden state at the last token, its head
    mapping (in float64). One input at a time, so no padding."""
    import torch

    out = []
    with torch.no_grad():
        for record in records:
            ids = tokenizer(reference_input(record), add_special_tokens=False, return_tensors="pt")["input_ids"]
            hidden = causal_lm(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1]  # [H]
            z = hidden.double() @ weight.double().T + bias.double()  # [K]
            rating, variance = head.rating_and_variance(z)
            out.append({"rating_orca": float(rating), "variance_orca": float(variance)})
    return out


def read_reference_checkpoint(src: Path) -> tuple[dict, dict]:
    import torch

    model_dir = src / "model"
    for need in (model_dir / "config.yaml", model_dir / "model_minus_lm.pt", model_dir / "lm", src / "tokenizer"):
        if not need.exists():
            raise ConversionError(f"{need} not found: expected a reference checkpoint with model/config.yaml, "
                               "model/lm/, model/model_minus_lm.pt and tokenizer/")
    ref_config = read_reference_config(model_dir / "config.yaml")
    if ref_config.get("score_type") not in REFERENCE_HEADS:
        raise ConversionError(f"reference score_type {ref_config.get('score_type')!r} is not one of "
                           f"{', '.join(REFERENCE_HEADS)}")
    if list(ref_config.get("layers_to_use", [-1]) or []) != [-1]:
        raise ConversionError(f"layers_to_use={ref_config['layers_to_use']}: only the last layer ([-1]) can be converted")
    if ref_config.get("use_cls_token"):
        raise ConversionError("use_cls_token=True (a learned extra input token) cannot be converted")
    try:  # weights_only: a .pt file is a pickle, and a full unpickle could run arbitrary code
        head = torch.load(model_dir / "model_minus_lm.pt", map_location="cpu", weights_only=True)
    except Exception as err:
        raise ConversionError(f"{model_dir / 'model_minus_lm.pt'} is not a plain tensor state dict: "
                           f"{str(err).strip().splitlines()[0]}") from err
    if not isinstance(head, dict) or set(head) != {"linear.weight", "linear.bias"}:
        keys = sorted(head) if isinstance(head, dict) else type(head).__name__
        raise ConversionError(f"model_minus_lm.pt must hold exactly linear.weight and linear.bias, got {keys}")
    return ref_config, head


def adapter_base_model(lm_dir: Path, given: str | None) -> str:
    """The base model of a LoRA adapter: --base-model when given, else `base_model_name_or_path` of its
    adapter_config.json."""
    if given:
        return given
    try:
        base = json.loads((lm_dir / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError) as err:
        raise ConversionError(f"{lm_dir / 'adapter_config.json'}: unreadable ({err}); pass --base-model") from None
    if not base:
        raise ConversionError(f"{lm_dir / 'adapter_config.json'} names no base_model_name_or_path: pass --base-model "
                           "(the Hub id or folder the adapter was trained on)")
    return base


LOCAL_KEYS = ("_name_or_path", "name_or_path", "is_local", "local_files_only")


def tidy_saved_folder(folder: Path, backbone_class: str) -> None:
    """Remove what only describes this machine (the folders things were loaded from, offline flags) from a saved
    model folder's config.json (and its backbone_config) and tokenizer_config.json, and let the backbone config's
    `architectures` name the class whose weights the folder holds (e.g. LlamaModel, not LlamaForCausalLM)."""
    for name in ("config.json", "tokenizer_config.json"):
        path = folder / name
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        for part in (data, data.get("backbone_config") or {}):
            for key in LOCAL_KEYS:
                part.pop(key, None)
        if "backbone_config" in data:
            data["backbone_config"]["architectures"] = [backbone_class]
        path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def compare_with_reference(want: list[dict], got: list[dict]) -> float:
    """Largest absolute difference of rating_orca and variance_orca over the records."""
    return max(abs(w[k] - g[k]) for w, g in zip(want, got) for k in ("rating_orca", "variance_orca"))


def convert_reference(src: Path, base_model: str | None, out: Path, dtype_name: str = "float32") -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from configuration_orca import OrcaConfig
    from eval_suite.loading import reference_fields
    from modeling_orca import OrcaForCorrectnessDistribution
    from processing_orca import set_pad_token

    ref_config, head = read_reference_checkpoint(src)
    ref_head = REFERENCE_HEADS[ref_config["score_type"]]
    ref_type = ref_head.score_type
    lm_dir = src / "model" / "lm"
    # merge in float32 whatever the stored dtype, then cast once at the end
    if (lm_dir / "adapter_config.json").exists():
        from peft import PeftModel

        base = adapter_base_model(lm_dir, base_model)
        try:
            causal = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        except OSError as err:
            raise ConversionError(f"base model {base} of the LoRA adapter in {lm_dir}: {err}") from None
        causal = PeftModel.from_pretrained(causal, lm_dir).merge_and_unload()
    else:
        causal = AutoModelForCausalLM.from_pretrained(lm_dir, dtype=torch.float32)
    causal.eval()
    tokenizer = set_pad_token(AutoTokenizer.from_pretrained(src / "tokenizer"), str(src / "tokenizer"))  # as the release does

    weight, bias = head["linear.weight"].float(), head["linear.bias"].float()
    backbone = causal.base_model  # the decoder without its lm_head: what AutoModel loads
    hidden = backbone.config.get_text_config().hidden_size
    if tuple(weight.shape) != (ref_head.outputs, hidden) or tuple(bias.shape) != (weight.shape[0],):
        raise ConversionError(f"head of shape {tuple(weight.shape)} does not fit score_type {ref_config['score_type']!r} "
                           f"and hidden size {hidden} (expected {(ref_head.outputs, hidden)})")

    backbone.config.pad_token_id = tokenizer.pad_token_id
    config = OrcaConfig(backbone_config=backbone.config, score_type=ref_type, **REFERENCE_TEMPLATE)
    model = OrcaForCorrectnessDistribution(config, backbone=backbone).eval()
    with torch.no_grad():
        ours_weight, ours_bias = ref_head.to_ours(weight, bias)
        model.score_head.weight.copy_(ours_weight)
        model.score_head.bias.copy_(ours_bias)

    records = REFERENCE_EDGE_RECORDS
    want = reference_predictions(causal, tokenizer, weight, bias, ref_head, records)
    got = [reference_fields(p, config) for p in model.predict(records, tokenizer, batch_size=len(records))]
    worst = compare_with_reference(want, got)
    if worst > 1e-5:
        raise ConversionError(f"the converted model's scores differ from the reference computation by {worst:.2e} "
                           f"on the {len(records)} check records")

    model.to(getattr(torch, dtype_name))
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConversionError(f"{out} already exists and is not empty; remove it or choose another folder")
    with staged_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tidy_saved_folder(tmp, type(backbone).__name__)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp made it private
    print(f"converted {src} ({ref_config['score_type']} -> {ref_type}) into {out}; on {len(records)} check records "
          f"(surrounding whitespace, empty fields, unicode, a long input, many aliases) rating_orca and variance_orca "
          f"equal the reference computation (max difference {worst:.1e})")
