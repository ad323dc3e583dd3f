"""Checkpoints of the reference release (github.com/BUTSpeechFIT/ORCA: model/config.yaml, model/lm/, the head in
model/model_minus_lm.pt, tokenizer/): converting one into an ORCA model folder, checked against the release's own
computation on edge-case records before it is written (`push_to_hub.py convert-reference`); the release's field
names for a prediction; and finding a released judge (Hub id or folder) and converting it once into orca's cache,
which the one loader (eval_suite.models.loading) does first. Imports nothing from eval_suite.models.loading or eval_suite.models.release:
they import this module."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orca_io.files import staged_dir, write_json_atomic


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


def reference_fields(pred: dict, config) -> dict:
    """A prediction in the reference release's field names and scale: `rating_orca` = the mean rating on [0, 1]
    (unclamped), `variance_orca` = the variance on that scale (the 1-5 variance / 16; 0.0 for a Bernoulli head,
    as the release writes)."""
    from modeling_orca import rating_to_unit

    span = config.rating_max - config.rating_min
    return {
        "rating_orca": float(rating_to_unit(pred["mean"], config.rating_min, config.rating_max)),
        "variance_orca": 0.0 if pred["variance"] is None else pred["variance"] / span**2,
    }


def compare_with_reference(want: list[dict], got: list[dict]) -> float:
    """Largest absolute difference of rating_orca and variance_orca over the records."""
    return max(abs(w[k] - g[k]) for w, g in zip(want, got) for k in ("rating_orca", "variance_orca"))


def convert_reference(src: Path, base_model: str | None, out: Path, dtype_name: str = "float32") -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from configuration_orca import OrcaConfig
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
    got = [reference_fields(p, config) for p in model.predict(records, tokenizer)]
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


# Released judges: a Hub id or a folder in the release's layout, found, converted once and kept in orca's cache.
# Here rather than in eval_suite.models.release so that imports run one way: release -> loading -> reference_checkpoint
# (the loader resolves a released judge through this module; release holds the user's entry points).

# Variance thresholds of the release's variance-gated clamping, on its [0, 1] score scale, calibrated on dev by the
# authors (BUTSpeechFIT/ORCA, download_and_infer.py, MODEL_VAR_THRESHOLDS). The Hub repositories themselves do not
# hold them.
RELEASED_JUDGES = {
    "BUT-FIT/orca-gemma-3-4b-it-multinomial": 0.05,
    "BUT-FIT/orca-llama-3.2-3b-it-multinomial": 0.05,
    "BUT-FIT/orca-olmo-2-1b-multinomial": 0.005,
}
REFERENCE_FILES = ("model/config.yaml", "model/model_minus_lm.pt", "model/lm", "tokenizer")
PROVENANCE = "orca_release.json"  # written beside the converted weights: where they came from


class ReleaseError(Exception):
    """A released checkpoint that cannot be found or converted; the message says which repository, which file and
    what to do."""


def cache_root() -> Path:
    """Where converted judges are kept: orca's one cache folder ($ORCA_CACHE, default ~/.cache/orca), beside the
    converted backbones."""
    from eval_suite.models.backbones import cache_dir

    return cache_dir()


def is_reference_layout(folder: Path) -> bool:
    return (Path(folder) / "model" / "config.yaml").is_file()


def _hub_cache_has(repo_id: str) -> bool:
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    return (Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")).is_dir()


def hub_snapshot(repo_id: str, revision: str | None, allow_patterns=None) -> Path | None:
    """The snapshot folder of `repo_id` at `revision` (its name is the commit), with the files matching
    `allow_patterns` (all when None) downloaded. None when no such repository is known (on the Hub, or in the cache
    when offline): the caller's usual loader then reports it in its own words."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    wanted = revision or "the default branch"
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=allow_patterns))
    except RevisionNotFoundError:
        raise ReleaseError(f"{repo_id}: no revision {wanted!r} on the Hub; pass --revision with a branch, tag or "
                           "commit hash the repository has") from None
    except (RepositoryNotFoundError, HFValidationError):
        return None
    except LocalEntryNotFoundError:  # offline, or the Hub unreachable
        if not _hub_cache_has(repo_id):
            return None
        raise ReleaseError(f"{repo_id}: revision {wanted!r} is not in the local Hugging Face cache and the Hub cannot "
                           "be reached (HF_HUB_OFFLINE or no network); download it once online, or pass --revision "
                           "with a commit the cache holds") from None


def reference_source(name_or_path: str, revision: str | None = None) -> tuple[Path, str, str] | None:
    """(checkpoint folder, what it is: `repo@commit` or the folder, cache key) when `name_or_path` is a
    reference-release checkpoint (a folder, or a Hub id: downloaded whole at one commit); None when it is something
    else for the usual loader (an ORCA folder or Hub id, or a name that is neither, which that loader reports)."""
    folder = Path(name_or_path)
    if folder.is_dir():
        if not is_reference_layout(folder):
            return None
        return folder, str(folder.resolve()), f"local/{_folder_digest(folder)}"
    if name_or_path.count("/") != 1 or name_or_path.startswith((".", "/")):
        return None
    revision = getattr(revision, "resolved", None) or revision  # a ResolvedRevision: its commit
    heads = hub_snapshot(name_or_path, revision, allow_patterns=["config.json", "model/config.yaml"])
    if heads is None:
        return None
    if not is_reference_layout(heads):
        if (heads / "config.json").is_file():
            return None  # an ORCA (transformers) repository
        raise ReleaseError(f"{name_or_path}@{heads.name}: neither an ORCA model (no config.json) nor a reference-release "
                           "checkpoint (no model/config.yaml): check the repository id and --revision")
    commit = heads.name
    snapshot = hub_snapshot(name_or_path, commit, allow_patterns=["model/*", "tokenizer/*"])  # at the heads' commit
    for need in REFERENCE_FILES:
        if not (snapshot / need).exists():
            raise ReleaseError(f"{name_or_path}@{commit}: {need} not found in {snapshot}; a reference checkpoint holds "
                               f"{', '.join(REFERENCE_FILES)} (download it again with `hf download {name_or_path} "
                               f"--revision {commit}`)")
    return snapshot, f"{name_or_path}@{commit}", f"{name_or_path.replace('/', '--')}/{commit}"


def _folder_digest(folder: Path) -> str:
    """A local checkpoint has no commit: it is identified by its path and its files' names, sizes and times."""
    files = sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
                   for p in folder.rglob("*") if p.is_file())
    return hashlib.sha256(json.dumps([str(folder.resolve()), files]).encode()).hexdigest()[:20]


def released_threshold(name_or_path: str) -> float | None:
    """The release's calibrated variance threshold ([0, 1] scale) of a released judge; None for any other."""
    return RELEASED_JUDGES.get(name_or_path)


def set_clamp_default(folder: Path, threshold01: float) -> None:
    """Turn clamping on in a converted folder's config.json with the release's threshold. The release compares it
    with the variance on its [0, 1] scale, `predict` with the variance on the rating scale: times (max - min)^2."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    span = config.get("rating_max", 5) - config.get("rating_min", 1)
    config.update(clamp=True, clamp_variance_threshold=threshold01 * span**2)
    write_json_atomic(path, config, indent=2)


def convert_source(src: Path, described: str, threshold01: float | None, out: Path, *, base_model: str | None = None,
                   dtype: str = "float32") -> None:
    """Run the converter on a reference checkpoint folder into the empty folder `out`, then set the clamping
    default and write where it came from. Conversion problems come back as ReleaseError naming the source."""
    try:
        convert_reference(src, base_model, out, dtype)
    except ConversionError as err:
        repo, _, commit = described.partition("@")
        again = f"hf download {repo} --revision {commit} --force-download" if commit else "copy it again"
        raise ReleaseError(f"{described}: {err}. A damaged file: download it again (`{again}`) and retry; a LoRA base "
                           f"model that cannot be loaded: `push_to_hub.py convert-reference --src {repo} --base-model "
                           "HUB_ID --out DIR`, then score DIR") from None
    if threshold01 is not None:
        set_clamp_default(out, threshold01)
    # a local folder's path stays out: a converted folder may be published, and paths describe only this machine
    source = "a local folder" if Path(described).is_absolute() else described
    base = None if base_model is None or Path(base_model).exists() else base_model
    write_json_atomic(out / PROVENANCE, {"source": source, "release_clamp_threshold": threshold01,
                                         "base_model": base, "dtype": dtype})


def converted_judge(name_or_path: str, revision: str | None = None) -> Path | None:
    """The converted folder of a reference-release checkpoint (Hub id or folder), converting it on first use; None
    when `name_or_path` is not one (load it as it is)."""
    from filelock import FileLock

    found = reference_source(name_or_path, revision)
    if found is None:
        return None
    src, described, key = found
    target = cache_root() / "converted" / key
    if (target / PROVENANCE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):  # two processes converting the same commit: the second waits, then reuses
        if not (target / PROVENANCE).is_file():
            print(f"converting {described} into {target} (once)", file=sys.stderr)
            with staged_dir(target) as tmp:
                convert_source(src, described, released_threshold(name_or_path), tmp)
    return target


def resolve_judge(name_or_path: str, revision: str | None = None) -> tuple[str, str | None]:
    """(what to load, revision to load it at): a reference-release checkpoint's converted folder (no revision), else
    the arguments unchanged. The loader of every command calls this first."""
    converted = converted_judge(str(name_or_path), revision)
    return (str(converted), None) if converted is not None else (name_or_path, revision)
