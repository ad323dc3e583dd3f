"""The out-of-domain evaluation (orca-eval --ood, train.py's test.ood): a judge beside the baselines on sets no
training stage reads and on their slices, with bootstrap intervals and paired differences."""

from __future__ import annotations

import numpy as np

from orca_io.tables import markdown_table

OOD_BASELINES = ("contains", "token_f1", "embedding_cosine")
SHORT_ANSWER_WORDS = 5  # a span answer has at most this many words; longer ones are sentences
SLICE_BOOTSTRAP = 200  # resamples for slices (whole sets get the full count): enough for a rough interval


def ood_slices(records: list[dict]) -> dict[str, np.ndarray]:
    """Boolean masks of the slices reported per set: all; short span vs sentence answers; one reference alias vs
    many; answers sharing a word with the reference vs none (where none is shared, only knowledge beyond the
    reference can tell a right answer: the limit of any reference-based judge); each answering model. A slice
    equal to the whole set or empty is left out."""
    from eval_suite.baselines.similarity import token_f1

    n = len(records)
    words = np.array([len(r["candidate"].split()) for r in records])
    aliases = np.array([len(r["reference"]) for r in records])
    overlap = np.array(token_f1(records)) > 0
    slices = {
        "all": np.ones(n, dtype=bool),
        f"short (<= {SHORT_ANSWER_WORDS} words)": words <= SHORT_ANSWER_WORDS,
        f"sentence (> {SHORT_ANSWER_WORDS} words)": words > SHORT_ANSWER_WORDS,
        "one alias": aliases == 1,
        "many aliases": aliases > 1,
        "shares a word with the reference": overlap,
        "no word in common with the reference": ~overlap,
    }
    for answerer in sorted({r.get("answerer") or "unknown" for r in records}):
        slices[f"answerer {answerer}"] = np.array([(r.get("answerer") or "unknown") == answerer for r in records])
    return {name: mask for name, mask in slices.items() if name == "all" or 0 < mask.sum() < n}


def distribution_median(probs) -> np.ndarray:
    """The median rating of each predicted distribution (n, 5): the smallest rating whose cumulative probability
    reaches 1/2. Against a single human rating per item it is the statistic that minimises the expected absolute
    error; the mean is the one for the mean of many raters."""
    cum = np.cumsum(np.asarray(probs, dtype=float), axis=1)
    return 1.0 + np.argmax(cum >= 0.5 - 1e-9, axis=1)


def judge_sets(sets: dict[str, tuple[list[dict], list[float] | dict]], *, baselines=OOD_BASELINES, bootstrap: int = 1000,
               slice_bootstrap: int = SLICE_BOOTSTRAP, seed: int = 0, reference: str | None = None) -> dict:
    """ORCA beside the baselines on each set and its slices (:func:`ood_slices`).

    ``sets``: name -> (records with ratings, ORCA's predicted means in the same order, or a dict of named ORCA
    statistics whose first entry is the mean, e.g. {"orca": means, "orca_median": medians}). Returns
    {set: {slice: judge_agreement(...)}}: every judge on the same items, ``reference`` (default: the first ORCA
    statistic) as the reference of the paired differences (a baseline's ``diff_ci`` is baseline - reference)."""
    from eval_suite.baselines.similarity import BASELINES
    from eval_suite.metrics import judge_agreement
    from modeling_orca import unit_to_rating

    out = {}
    for set_name, (records, orca_mean) in sets.items():
        human = np.array([sum(r["ratings"]) / len(r["ratings"]) for r in records])
        own = orca_mean if isinstance(orca_mean, dict) else {"orca": orca_mean}
        judges = {name: np.asarray(values, dtype=float) for name, values in own.items()}
        if any(len(v) != len(records) for v in judges.values()):
            raise ValueError(f"{set_name}: {len(records)} records but {[len(v) for v in judges.values()]} predictions")
        first = reference or next(iter(judges))
        judges.update({name: unit_to_rating(np.asarray(BASELINES[name](records), dtype=float)) for name in baselines})
        out[set_name] = {}
        for slice_name, mask in ood_slices(records).items():
            out[set_name][slice_name] = judge_agreement(
                {name: pred[mask] for name, pred in judges.items()}, human[mask], reference=first, seed=seed,
                bootstrap=bootstrap if slice_name == "all" else slice_bootstrap)
    return out


def ood_evaluation(model, tokenizer, *, data_dir=None, fold: int = 0, seed: int = 0, max_batch_tokens: int | None = None,
                   in_domain: tuple[list[dict], list[dict]] | None = None, baselines=OOD_BASELINES,
                   bootstrap: int = 1000, show_progress: bool = False, keep_predictions: bool = False,
                   max_items: int | None = None, batch_size: int | None = None) -> dict:
    """Score the out-of-domain sets (``dataset_builder.configs.ood_sets``) with ``model.predict`` and compare with
    the baselines; ``in_domain`` = (test records, their ``predict`` outputs) already scored is put first, as
    ``in_domain_test``. ORCA appears as ``orca`` (the predicted mean), for heads with a distribution as
    ``orca_median`` (:func:`distribution_median`) and, where the model's config switches clamping on, as
    ``orca_clamped`` (the clamped ``score`` users get, on 1-5). The paired differences (``diff_ci``) are taken
    against the score users get (``reference``: ``orca_clamped`` where the config clamps, else ``orca``).
    ``keep_predictions`` adds ``predictions``: per out-of-domain set, one {id, ratings, mean, variance, probs,
    score} per record, in order. ``max_items``: score a seeded sample of at most this many items of each
    out-of-domain set (kept in order; the sizes are in the result's ``n``). ``max_batch_tokens`` goes to
    ``predict`` (None: its default); ``batch_size`` is ``predict``'s deprecated one (batch_size x 256 tokens)."""
    from dataset_builder.configs import ood_sets
    from modeling_orca import unit_to_rating

    config = model.config

    def statistics(preds: list[dict]) -> dict:
        out = {"orca": [p["mean"] for p in preds]}
        if preds and preds[0].get("probs") is not None:
            out["orca_median"] = list(distribution_median([p["probs"] for p in preds]))
        if config.clamp:
            scores = np.array([p["score"] for p in preds])
            out["orca_clamped"] = list(unit_to_rating(scores, config.rating_min, config.rating_max))
        return out

    sets, kept = {}, {}
    if in_domain is not None:
        sets["in_domain_test"] = (in_domain[0], statistics(in_domain[1]))
    for name, records in ood_sets(data_dir=data_dir, fold=fold, seed=seed).items():
        if max_items and len(records) > max_items:
            keep = set(np.random.default_rng([seed, len(records)]).choice(len(records), max_items, replace=False).tolist())
            records = [r for i, r in enumerate(records) if i in keep]
        budget = {"max_batch_tokens": max_batch_tokens} if batch_size is None else {"batch_size": batch_size}
        preds = model.predict(records, tokenizer, **budget, show_progress=show_progress)
        sets[name] = (records, statistics(preds))
        kept[name] = [{"id": r["id"], "ratings": r["ratings"], "mean": p["mean"], "variance": p["variance"],
                       "probs": p["probs"], "score": p["score"]} for r, p in zip(records, preds)]
    reference = "orca_clamped" if config.clamp else "orca"
    return {"sets": judge_sets(sets, baselines=baselines, bootstrap=bootstrap, seed=seed, reference=reference),
            "reference": reference, "baselines": list(baselines), "bootstrap": bootstrap,
            "slice_bootstrap": SLICE_BOOTSTRAP, "fold": fold, "seed": seed, "max_items": max_items,
            **({"predictions": kept} if keep_predictions else {})}


def _with_ci(m: dict, key: str) -> str:
    value, ci = m.get(key), (m.get("ci") or {}).get(key)
    if value is None:
        return "-"
    return f"{value:.3f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{value:.3f}"


def _difference(m: dict, reference: dict, key: str) -> str:
    ci = m["diff_ci"].get(key)
    if m.get(key) is None or reference.get(key) is None or not ci:
        return "-"
    return f"{m[key] - reference[key]:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]"


def ood_markdown(ood: dict, *, slices: bool = True) -> str:
    """Markdown tables of :func:`ood_evaluation`: one row per set and judge (whole sets), then the slices."""
    keys = ("spearman", "kendall", "mae_mean", "roc_auc", "calibration_error")
    head = ["set", "n", "judge", "Spearman", "Kendall", "MAE (1-5)", "ROC-AUC", "calib. error"]
    rows = []
    for set_name, per_slice in ood["sets"].items():
        judges = per_slice["all"]
        for judge, m in judges.items():
            rows.append([set_name, m["n"], f"**{judge}**" if judge == "orca" else judge] + [_with_ci(m, k) for k in keys])
    parts = [markdown_table(head, rows)]
    reference = ood.get("reference", "orca")
    drows = []  # paired: the same bootstrap draws for both judges, so an interval off 0 is a real difference
    for set_name, per_slice in ood["sets"].items():
        judges = per_slice["all"]
        for judge, m in judges.items():
            if m.get("diff_ci"):
                drows.append([set_name, f"{judge} - {reference}"]
                             + [_difference(m, judges[reference], k) for k in ("spearman", "roc_auc", "mae_mean")])
    if drows:
        parts.append(markdown_table(["set", "paired difference", "Spearman [95 %]", "ROC-AUC [95 %]", "MAE [95 %]"], drows))
    if slices:
        srows = []
        for set_name, per_slice in ood["sets"].items():
            for slice_name, judges in per_slice.items():
                if slice_name == "all":
                    continue
                for judge, m in judges.items():
                    srows.append([set_name, slice_name, m["n"], judge] + [_with_ci(m, k) for k in ("spearman", "mae_mean", "roc_auc")])
        parts.append(markdown_table(["set", "slice", "n", "judge", "Spearman", "MAE (1-5)", "ROC-AUC"], srows))
    return "\n\n".join(parts)
