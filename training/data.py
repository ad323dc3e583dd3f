"""A stage's records: a dataset_builder config, or JSONL files; seeded dev samples; training token ids."""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from configuration_orca import OrcaConfig

logger = logging.getLogger("orca.train")


class DataError(ValueError):
    pass


def load_stage_data(stage: dict, cfg: dict) -> dict[str, list[dict]]:
    """Records of a stage: a dataset_builder config, or JSONL files of the record schema / the release format."""
    if "files" in stage:
        from dataset_builder.filters import apply_filters
        from orca_io.jsonl import read_records

        out = {}
        for split, path in stage["files"].items():
            # the paper's rules apply to user files too: over-long, flagged and unrated items out (dev and test
            # need ratings to be scored against)
            out[split], dropped = apply_filters(read_records(path).records, require_rated=True)
            if dropped:
                logger.warning("%s: dropped %s", path, dict(dropped))
        seen: dict[str, str] = {}
        for split, records in out.items():
            for r in records:
                if seen.setdefault(r["id"], split) != split:  # the same item in two splits leaks into the scores
                    raise DataError(f"id {r['id']!r} is in both {seen[r['id']]} ({stage['files'][seen[r['id']]]}) and {split} ({stage['files'][split]})")
        return out
    import dataset_builder

    d = cfg["data"]
    splits = dataset_builder.load_config(
        stage["dataset"], scenario=d["scenario"], fold=d["fold"], data_dir=d["data_dir"],
        release_dir=d["release_dir"], seed=d["seed"], s1_size=d["s1_size"],
        release=d.get("release"), release_revision=d.get("release_revision"),
    )
    return {name: split.to_list() for name, split in splits.items()}


def sample_records(records: list[dict], k: int | None, seed: int) -> list[dict]:
    """At most k records, a seeded sample in input order (dev evaluations during training stay cheap)."""
    if not k or len(records) <= k:
        return records
    keep = set(random.Random(seed).sample(range(len(records)), k))
    return [r for i, r in enumerate(records) if i in keep]


def sample_questions(records: list[dict], k: int | None, seed: int) -> list[dict]:
    """At most k records made of whole questions (a seeded sample of questions, records in input order): the
    answers to one question share their prefix, so a frozen backbone computes it once for all of them."""
    if not k or len(records) <= k:
        return records
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        groups.setdefault(r.get("question_id") or r["question"], []).append(i)
    keys = list(groups)
    random.Random(seed).shuffle(keys)
    keep: set[int] = set()
    for key in keys:
        if len(keep) + len(groups[key]) <= k:
            keep.update(groups[key])
    return [r for i, r in enumerate(records) if i in keep]


def tokenize_records(records: list[dict], tokenizer, config: OrcaConfig) -> list[list[int]]:
    """Training inputs: the first input variant (all aliases joined, or the first alias for reference_mode='max')."""
    from processing_orca import encode_fields, input_variants

    return encode_fields([input_variants(r, config)[0] for r in records], tokenizer, config)
