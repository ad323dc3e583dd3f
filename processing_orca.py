"""ORCA's input: a record's fields rendered as the template of `OrcaConfig` says, and tokenised.

A record is a dict with question, reference (a string or a list of aliases), rationale, transcript and candidate.
`format_input` gives the model's input text; `encode_fields` its token ids, cut to `max_length` field by field.
Training, evaluation, the CLI and the leaderboard all format through this file, and a Hub checkpoint carries it
beside modeling_orca.py, so a saved model formats its input exactly as it was trained. Plain strings and token id
lists only: no tensors, no process-wide settings.
"""

from __future__ import annotations

try:  # loaded by transformers from a Hub snapshot: the config sits beside this file
    from .configuration_orca import OrcaConfig
except ImportError:  # imported from the repository / an installed package
    from configuration_orca import OrcaConfig


def field_text(record: dict, field: str, config: OrcaConfig) -> str:
    """The text of one field of a record: '' when absent, stripped when `config.strip_fields`."""
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
    """Character trigrams of the lowercased text, runs of other characters than letters and digits as one space."""
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
            fields[name] = field_text(record, name, config)
    return fields


def render_fields(fields: dict[str, str], config: OrcaConfig) -> str:
    """The input text: each field's label and value, joined by the separator, between the template prefix and
    suffix."""
    parts = [
        config.field_labels.get(name, "") + value
        for name, value in fields.items()
        if value or not config.skip_empty_fields or name == "candidate"
    ]
    return config.template_prefix + config.field_separator.join(parts) + config.template_suffix


def format_input(record: dict, config: OrcaConfig, reference: str | None = None) -> str:
    """The model's input text for a record (a dict with question, reference, rationale, candidate, transcript)."""
    return render_fields(input_fields(record, config, reference), config)


def input_variants(record: dict, config: OrcaConfig) -> list[dict[str, str]]:
    """One input for reference_mode='join'; one per alias for 'max' (the `max_scored_references` aliases closest to
    the candidate when set)."""
    if config.reference_mode == "max" and "reference" in config.template_fields:
        refs = reference_list(record, config.strip_fields)
        refs = closest_references(refs, field_text(record, "candidate", config), config.max_scored_references)
        return [input_fields(record, config, ref) for ref in refs]
    return [input_fields(record, config)]


def record_variants(records: list[dict], config: OrcaConfig) -> tuple[list[dict[str, str]], list[int]]:
    """Every record's `input_variants`, in order, and the index of each variant's record."""
    variants, owner = [], []
    for i, record in enumerate(records):
        for fields in input_variants(record, config):
            variants.append(fields)
            owner.append(i)
    return variants, owner


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
        return "", config.template_prefix + sep.join(parts) + config.template_suffix
    return config.template_prefix + sep.join(parts[:cut]), sep + sep.join(parts[cut:]) + config.template_suffix


def special_tokens(tokenizer, config: OrcaConfig) -> tuple[list[int], list[int]]:
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
    lead, trail = special_tokens(tokenizer, config)
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
            all_ids[i] = truncated_ids(fields_list[i], tokenizer, config)
    return all_ids


def truncated_ids(fields: dict[str, str], tokenizer, config: OrcaConfig) -> list[int]:
    """Token ids of one input cut to `config.max_length`: fields give up tokens in `config.truncation_order`,
    each re-tokenised after its cut (so the candidate, last in the default order, is cut last)."""
    fields = dict(fields)

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


def distinct_inputs(fields_list: list[dict[str, str]], tokenizer, config: OrcaConfig) -> tuple[list[tuple], list[int]]:
    """The distinct encoded inputs, as `(shared ids, item ids)` tuples of `encode_segments` (an input cut to
    `max_length` as `(None, its truncated ids)`, as it shares nothing), and the index of each input among them."""
    keys: dict[tuple, int] = {}
    which = []
    for fields, (shared, item) in zip(fields_list, encode_segments(fields_list, tokenizer, config)):
        if len(shared) + len(item) > config.max_length:
            key = (None, tuple(truncated_ids(fields, tokenizer, config)))
        else:
            key = (tuple(shared), tuple(item))
        which.append(keys.setdefault(key, len(keys)))
    return list(keys), which

def set_pad_token(tokenizer, source: str):
    """Give a tokenizer without a pad token its eos (or unk) token as one: padding is masked and never pooled, so
    any existing token will do. Returns the tokenizer; `source` names it in the error when it has neither."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
        if tokenizer.pad_token is None:
            raise ValueError(f"{source}: the tokenizer has no pad, eos or unk token to pad with")
    return tokenizer


__all__ = [
    "closest_references",
    "distinct_inputs",
    "encode_fields",
    "encode_segments",
    "field_text",
    "format_input",
    "input_fields",
    "input_variants",
    "join_references",
    "record_variants",
    "reference_list",
    "render_fields",
    "set_pad_token",
    "special_tokens",
    "split_fields",
    "truncated_ids",
]
