"""Write a Hub-ready dataset repository: Parquet per config and split, a dataset card whose YAML
``configs:`` block lets ``datasets.load_dataset(DIR, "<config>", split=...)`` work offline, and
``stats.json`` with every figure of the card. Output bytes depend only on the inputs and the seed.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from huggingface_hub import DatasetCard, DatasetCardData
from tqdm.auto import tqdm

from orca_io.schema import FEATURES, FIELDS

from .configs import CONFIGS, RELEASE_FILES, SOURCES, build_config, licence_of, source_key
from .filters import MAX_CHARS
from .splits import NUM_FOLDS, SPLITS, make_splits
from .stats import summarize

NOT_FOR_REDISTRIBUTION = "not for redistribution"
REPO_ID_PLACEHOLDER = "<this repo>"  # replaced by the repository id when `push_to_hub.py dataset` uploads the export
CARD_TEMPLATE = Path(__file__).resolve().parent / "dataset_card.md"  # the card, for DatasetCard.from_template
# SOURCES' licence texts -> Hub licence ids (https://huggingface.co/docs/hub/repositories-licenses)
HUB_LICENCE_IDS = {"Apache-2.0": ["apache-2.0"],
                   "CC BY-SA 4.0 / CC BY-SA 3.0 / CC BY 4.0": ["cc-by-sa-4.0", "cc-by-sa-3.0", "cc-by-4.0"]}
CITATION = r"""@article{sedlacek2025orca,
  title   = {{ORCA}: Open-ended Response Correctness Assessment for Audio Question Answering},
  author  = {Sedl{\'a}{\v{c}}ek, {\v{S}}imon and Barahona, Sara and Yusuf, Bolaji and others},
  journal = {arXiv preprint arXiv:2512.09066},
  year    = {2025}
}"""


def write_parquet(records: list[dict], path: Path) -> None:
    """One Parquet file with the schema's Arrow types and the HF features in its metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([{f: r[f] for f in FIELDS} for r in records], schema=FEATURES.arrow_schema)
    pq.write_table(table, path, compression="zstd")


def available_configs(data_dir, release_dir) -> list[str]:
    """Configs whose inputs can be found: the release configs only when their file is supplied."""
    names = [n for n in CONFIGS if n not in RELEASE_FILES]
    if release_dir:
        names += [n for n, f in RELEASE_FILES.items() if (Path(release_dir) / f).exists()]
    return names


def build_repo(out, *, configs: list[str] | None = None, data_dir=None, release_dir=None, seed: int = 0,
               s1_size: int | None = None, all_folds: bool = False, for_upload: bool = False,
               progress: bool = True) -> dict:
    """Build the dataset repository under ``out``; returns the statistics written to stats.json.

    ``for_upload`` leaves out every record whose source has no licence (marked not for
    redistribution) and says so in the card. ``all_folds`` adds configs ``<name>_A1``..``_A4`` and
    ``<name>_B0``..``_B4``; the plain ``<name>`` config is always scenario A fold 0.
    """
    out = Path(out)
    names = configs or available_configs(data_dir, release_dir)
    stats: dict = {"seed": seed, "for_upload": for_upload, "configs": {}}
    yaml_configs = []
    for name in tqdm(names, desc="configs", disable=not progress):
        build = build_config(name, data_dir=data_dir, release_dir=release_dir, seed=seed, s1_size=s1_size)
        records, withheld = build.records, Counter()
        if for_upload:
            keep = []
            for r in records:
                if licence_of(r["source"]) is None:
                    withheld[source_key(r["source"])] += 1
                else:
                    keep.append(r)
            records = keep
        entry = {
            "description": CONFIGS[name].description,
            "sources": sorted({source_key(r["source"]) for r in build.records}),
            "read_skipped": {Path(k).name: dict(sorted(v.items())) for k, v in build.read_skipped.items()},
            "filtered": dict(sorted(build.filtered.items())),
            "withheld_not_for_redistribution": dict(sorted(withheld.items())),
            "summary": summarize(records),
            "splits": {},
        }
        stats["configs"][name] = entry
        if not records:
            continue
        variants = [("A", 0, name)]
        if all_folds:
            variants += [("A", k, f"{name}_A{k}") for k in range(1, NUM_FOLDS)]
            if len({r["answerer"] for r in records}) >= 3:
                variants += [("B", k, f"{name}_B{k}") for k in range(NUM_FOLDS)]
        for scenario, fold, cfg_name in variants:
            splits, info = make_splits(records, scenario=scenario, fold=fold, seed=seed)
            files = []
            for split in SPLITS:
                rel = f"data/{cfg_name}/{split}-00000-of-00001.parquet"
                write_parquet(splits[split], out / rel)
                files.append({"split": split, "path": rel})
            yaml_configs.append({"config_name": cfg_name, "data_files": files})
            entry["splits"][cfg_name] = {"scenario": scenario, "fold": fold, **info,
                                         **{s: len(splits[s]) for s in SPLITS}}
    text = json.dumps(stats, indent=2, ensure_ascii=False, sort_keys=True) + "\n"
    (out / "stats.json").write_text(text)
    (out / "README.md").write_text(dataset_card(stats, yaml_configs))
    return json.loads(text)  # exactly what stats.json holds (JSON keys are strings)


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


def size_category(n: int) -> str:
    """The Hub's size category of a dataset of n records."""
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return name
    return "1M<n<10M" if n < 10_000_000 else "n>10M"


def card_data(stats: dict, yaml_configs: list[dict]) -> DatasetCardData:
    """The card's YAML: Hub licence ids of the sources the export holds (`other` while it holds sources that may not
    be redistributed), the size category of its records, the `configs:` block `load_dataset` reads."""
    cfgs = stats["configs"]
    used = sorted({s for c in cfgs.values() for s in c["sources"]
                   if not (stats["for_upload"] and SOURCES[s][2] is None)})
    licences = [i for s in used if SOURCES[s][2] for i in HUB_LICENCE_IDS.get(SOURCES[s][2], ["other"])]
    unlicensed = any(SOURCES[s][2] is None for s in used)
    records = sum(c["summary"]["records"] for c in cfgs.values())
    configs = [{"config_name": c["config_name"], **({"default": True} if i == 0 else {}), "data_files": c["data_files"]}
               for i, c in enumerate(yaml_configs)]
    extra = {"license_name": "mixed, some sources not for redistribution (see Sources)"} if unlicensed else {}
    return DatasetCardData(
        license=list(dict.fromkeys(licences + (["other"] if unlicensed else []))) or ["other"],
        language=["en"], pretty_name="ORCA correctness ratings", size_categories=[size_category(records)],
        task_categories=["text-classification"], tags=["llm-as-a-judge", "answer-correctness", "audio-question-answering"],
        configs=configs, **extra,
    )


def dataset_card(stats: dict, yaml_configs: list[dict]) -> str:
    """The card: `dataset_card.md` (a Jinja template) through `DatasetCard.from_template`, its tables built here."""
    cfgs = stats["configs"]
    sources = []
    for key in sorted({s for c in cfgs.values() for s in c["sources"]}):
        desc, origin, lic = SOURCES[key]
        sources.append(f"| `{key}` | {desc} | {origin} | {lic or 'none stated: ' + NOT_FOR_REDISTRIBUTION} |")
    configs, per_config = [], []
    for name, c in cfgs.items():
        sp, s = c["splits"].get(name, {}), c["summary"]
        rpi = ", ".join(f"{k}: {v}" for k, v in s["ratings_per_item"].items())
        configs.append(f"| `{name}` | {sp.get('train', 0)} | {sp.get('validation', 0)} | {sp.get('test', 0)} | "
                       f"{s['questions']} | {rpi} | {_fmt(s['alpha_interval'])} | {_fmt(s['alpha_ordinal'])} |")
        per_config.append(config_summary(name, c))
    card = DatasetCard.from_template(
        card_data(stats, yaml_configs), template_path=str(CARD_TEMPLATE), for_upload=stats["for_upload"],
        seed=stats["seed"], repo_id=REPO_ID_PLACEHOLDER,
        first_config=yaml_configs[0]["config_name"] if yaml_configs else "s1_synthetic", sources=sources,
        configs=configs, per_config=per_config, max_chars=MAX_CHARS, citation=CITATION)
    return str(card).rstrip("\n") + "\n"  # Jinja drops the template's final newline


def config_summary(name: str, c: dict) -> str:
    """One config's paragraph of the card: what was kept, skipped, filtered and withheld, and its other splits."""
    s = c["summary"]
    out = [f"**{name}**: {c['description']}", "",
           f"- records kept: {s['records']} ({s['questions']} questions); mean rating {_fmt(s['mean_rating'])}",
           f"- rating histogram (1..5): {s['rating_histogram']}",
           f"- answerers: {', '.join(f'{k} ({v})' for k, v in s['answerers'].items())}",
           f"- skipped while reading: {_counts(c['read_skipped'])}",
           f"- dropped by filters: {_counts(c['filtered'])}"]
    if c["withheld_not_for_redistribution"]:
        out.append(f"- withheld (not for redistribution): {_counts(c['withheld_not_for_redistribution'])}")
    extra = [f"`{k}` (scenario {v['scenario']}, fold {v['fold']}"
             + (f", held out: {', '.join(v['held_out'])}" if v.get("held_out") else "") + ")"
             for k, v in c["splits"].items() if k != name]
    if extra:
        out.append(f"- further splits: {'; '.join(extra)}")
    return "\n".join(out)


def _counts(d: dict) -> str:
    if not d:
        return "none"
    if all(isinstance(v, dict) for v in d.values()):
        parts = [f"{f}: {_counts(v)}" for f, v in d.items() if v]
        return "; ".join(parts) or "none"
    return ", ".join(f"{k} {v}" for k, v in d.items())
