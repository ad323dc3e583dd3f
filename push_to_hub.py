"""Publish ORCA on the Hugging Face Hub, and convert checkpoints of the public reference release.

    python push_to_hub.py model --checkpoint runs/orca/final --repo-id ORG/NAME [--private] [--revision BRANCH]
    python push_to_hub.py model --checkpoint runs/orca/final --repo-id ORG/NAME --dry-run --local-dir out/model
    python push_to_hub.py dataset --dir out/orca --repo-id ORG/NAME          # a `dataset_builder build --for-upload` export
    python push_to_hub.py metric --repo-id ORG/orca_metric                   # the evaluate module as a Gradio Space
    python push_to_hub.py convert-reference --src REF_RUN --base-model meta-llama/Llama-3.2-1B --out out/converted

Every folder is built in a temporary directory and checked before anything is uploaded or renamed into place,
so a failure never leaves a half-written folder. Errors (no token, network failure, a refused upload, a bad
input) are reported in one line with exit code 2. See docs/push_to_hub.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData, SpaceCard, SpaceCardData, get_token
from huggingface_hub.errors import HfHubHTTPError

from dataset_builder.export import CITATION, REPO_ID_PLACEHOLDER
from eval_suite.models.reference_checkpoint import ConversionError, tidy_saved_folder
from orca_io.files import staged_dir
from orca_io.tables import markdown_table

try:  # the HTTP client of huggingface_hub >= 2 (httpx before)
    from httpx2 import TransportError
except ImportError:  # pragma: no cover
    from httpx import TransportError

REPO = Path(__file__).resolve().parent
METRIC_DIR = REPO / "eval_suite" / "orca_metric"
CARD_TEMPLATE = REPO / "eval_suite" / "hub_assets" / "model_card.md"  # the model card, for ModelCard.from_template
SPACE_CARD_TEMPLATE = REPO / "eval_suite" / "hub_assets" / "leaderboard_space_card.md"
SPACE_APP = REPO / "eval_suite" / "hub_assets" / "leaderboard_space_app.py"  # the Space's app.py, copied

# Scored before and after every save/convert: an alias list, an empty rationale, a wrong and a right answer.
CHECK_RECORDS = [
    {"id": "c1", "question": "Which instrument plays the melody?", "reference": ["violin", "fiddle"],
     "rationale": "A solo violin plays over soft piano chords.", "candidate": "It is a violin."},
    {"id": "c2", "question": "What animal is barking?", "reference": "dog", "rationale": "",
     "candidate": "A cat, I think."},
    {"id": "c3", "question": "How many bells ring?", "reference": "three",
     "rationale": "Three church bells ring one after another.", "candidate": "3"},
]

# Short names train.py accepts for the offline backbones -> their Hub ids (for the card's `base_model`).
KNOWN_BACKBONES = {"smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct", "minilm": "sentence-transformers/all-MiniLM-L6-v2"}


class PublishError(Exception):
    """A problem reported to the user in one line (exit code 2)."""


@contextmanager
def staging_dir(target: Path | None):
    """A fresh folder to build in; it becomes `target` (orca_io.files.staged_dir: renamed into place) only if the
    block succeeds. With no target (an upload) it is deleted afterwards either way."""
    if target is None:
        with tempfile.TemporaryDirectory(prefix=".orca-") as tmp:
            yield Path(tmp)
        return
    target = Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise PublishError(f"{target} already exists and is not empty; remove it or choose another folder")
    with staged_dir(target) as tmp:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp made it private


# ------------------------------------------------------------------------------------------------ Hub calls


def hub_token() -> str:
    token = get_token()
    if not token:
        raise PublishError("no Hugging Face token: run `hf auth login` or set HF_TOKEN (a token with write access)")
    return token


def upload(folder: Path, repo_id: str, repo_type: str, *, private: bool, revision: str | None, message: str,
           **create_kwargs) -> str:
    """create_repo + upload_folder (one commit); returns the commit hash."""
    api = HfApi(token=hub_token())
    url = api.create_repo(repo_id, repo_type=repo_type, private=private or None, exist_ok=True, **create_kwargs)
    if revision and revision != "main":
        api.create_branch(repo_id, repo_type=repo_type, branch=revision, exist_ok=True)
    info = api.upload_folder(repo_id=repo_id, folder_path=folder, repo_type=repo_type, revision=revision,
                             commit_message=message)
    print(f"uploaded to {url} (branch {revision or 'main'}); pin this upload with revision=\"{info.oid}\"")
    return info.oid


def http_error_message(err: HfHubHTTPError) -> str:
    status = err.response.status_code if err.response is not None else "?"
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    hint = " (check that the token has write access to this namespace)" if status in (401, 403) else ""
    return f"the Hub refused the request (HTTP {status}){hint}: {first}"


# ------------------------------------------------------------------------------------------------ model


def load_checkpoint(checkpoint: Path):
    from transformers import AutoTokenizer

    from modeling_orca import OrcaForCorrectnessDistribution

    if (checkpoint / "adapter_config.json").exists():
        raise PublishError(f"{checkpoint} is a LoRA adapter; publish the merged folder train.py writes (RUN/final)")
    config_file = checkpoint / "config.json"
    if not config_file.exists() or json.loads(config_file.read_text()).get("model_type") != "orca":
        raise PublishError(f"{checkpoint} is not an ORCA model folder (no config.json with model_type 'orca')")
    model = OrcaForCorrectnessDistribution.from_pretrained(checkpoint).eval()
    return model, AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True)


def find_metrics(checkpoint: Path, given: str | None) -> dict | None:
    """metrics.json of the training run: given, beside the checkpoint or one level up (RUN/final -> RUN)."""
    candidates = [Path(given)] if given else [checkpoint / "metrics.json", checkpoint.parent / "metrics.json"]
    for path in candidates:
        if path.exists():
            return json.loads(path.read_text())
    if given:
        raise PublishError(f"{given} not found")
    print(f"warning: no metrics.json beside {checkpoint}; the card will have no evaluation results", file=sys.stderr)
    return None


def hub_base_model(metrics: dict | None, given: str | None) -> str | None:
    """The backbone's Hub id, when there is one (not a local folder or a random tiny test backbone)."""
    if given:
        return given
    name = ((metrics or {}).get("config") or {}).get("model", {}).get("backbone")
    if not name or name.startswith("tiny-") or Path(name).exists():
        return None
    return KNOWN_BACKBONES.get(name, name if name.count("/") == 1 else None)


# Hub licence ids of base models, by a part of their Hub id (first match wins). An ORCA model is a derivative of
# its base model, so its card carries the base model's licence.
BASE_MODEL_LICENCES = (
    ("llama-3.3", "llama3.3"), ("llama-3.2", "llama3.2"), ("llama-3.1", "llama3.1"), ("llama-3", "llama3"),
    ("llama-2", "llama2"), ("gemma", "gemma"), ("smollm", "apache-2.0"), ("all-minilm", "apache-2.0"),
    ("olmo", "apache-2.0"),
)


def model_licence(base_model: str | None, backbone_type: str, given: str | None) -> str:
    """The card's licence: --license when given, else the base model's; refuses to guess for an unknown base."""
    if given:
        return given
    name = (base_model or "").lower()
    for part, licence in BASE_MODEL_LICENCES:
        if part in name:
            return licence
    if backbone_type.startswith("gemma"):
        return "gemma"
    raise PublishError(f"cannot tell the licence of the base model ({base_model or 'unknown: pass --base-model'}, "
                       f"{backbone_type}): pass --license with its Hub licence id (e.g. apache-2.0, llama3.2, gemma)")


def min_transformers_version() -> str:
    """The lowest transformers version this package supports (its pyproject.toml requirement)."""
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in deps if d.replace(" ", "").startswith("transformers"))
    return spec.replace(" ", "")[len("transformers"):]


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


def model_card(config, metrics: dict | None, *, repo_id: str, revision: str | None, base_model: str | None,
               dataset_id: str | None, licence: str | None = None) -> ModelCard:
    run = (metrics or {}).get("config") or {}
    stages = run.get("stages", {})
    done = (metrics or {}).get("stages", {})
    last_stage = next(reversed(done), None)
    eval_dataset = (stages.get(last_stage, {}).get("dataset") or last_stage) if last_stage else None
    test = (metrics or {}).get("test", {})

    # the model's own test metrics as structured results (the baselines only go into the table); the Hub's
    # model-index needs the Hub id of the dataset they were measured on
    names = {"spearman": ("spearmanr", "Spearman rho"), "kendall": ("kendalltau", "Kendall tau-b"),
             "mae_mean": ("mae", "MAE of the mean rating (1-5)"), "mae_variance": ("mae_variance", "MAE of the rating variance"),
             "nll": ("nll", "NLL of the human ratings"), "roc_auc": ("roc_auc", "ROC AUC")}
    eval_results = [
        EvalResult(task_type="text-classification", task_name="Answer correctness rating distribution",
                   dataset_type=dataset_id, dataset_name=eval_dataset or dataset_id, dataset_split="test",
                   metric_type=metric_type, metric_name=metric_name, metric_value=round(test["orca"][key], 6))
        for key, (metric_type, metric_name) in names.items()
        if dataset_id and test.get("orca", {}).get(key) is not None
    ]
    data = ModelCardData(
        model_name=repo_id.split("/")[-1], base_model=base_model, library_name="transformers",
        license=model_licence(base_model, config.backbone_config.model_type, licence),
        # no pipeline_tag: no Hub task fits (pipeline("text-classification") cannot read ORCA records); the card
        # shows the model's own pipeline task instead
        language="en", datasets=[dataset_id] if dataset_id else None, eval_results=eval_results or None,
        tags=["orca", "llm-as-a-judge", "answer-correctness", "custom_code"],
    )

    from modeling_orca import PIPELINE_TASK

    lora = run.get("lora", {})
    stages_rows = []
    for name, summary in done.items():
        stage, counts = stages.get(name, {}), summary.get("counts", {})
        split_counts = " / ".join(str(counts.get(s, "-")) for s in ("train", "validation", "test"))
        stages_rows.append([name, f"`{stage.get('dataset', 'files')}`", split_counts,
                            f"{summary.get('steps')} ({summary.get('best_step')})", stage.get("lr"),
                            _fmt(summary.get("best_dev_spearman"))])
    cols = ("spearman", "kendall", "mae", "roc_auc")
    return ModelCard.from_template(
        data, template_path=str(CARD_TEMPLATE),
        base_name=base_model or run.get("model", {}).get("backbone") or config.backbone_config.model_type,
        backbone_type=config.backbone_config.model_type, score_type=config.score_type,
        head_outputs=config.num_head_outputs, pooling=config.pooling, lora=lora if lora.get("enabled") else None,
        template_fields=config.template_fields, template_suffix=repr(config.template_suffix)[1:-1] if config.template_suffix else "",
        max_length=config.max_length, reference_mode=config.reference_mode,
        stages_table=markdown_table(["stage", "dataset", "train / validation / test", "steps (best)", "peak LR",
                                     "best dev Spearman"], stages_rows) if done else "",
        last_stage=last_stage,
        test_table=markdown_table(["judge", *cols], [[judge] + [_fmt(m.get(c)) for c in cols] for judge, m in test.items()])
        if test else "",
        min_transformers=min_transformers_version(), repo_id=repo_id, revision=revision or "main",
        pipeline_task=PIPELINE_TASK, citation=CITATION,
    )


# The loader of the validation: a new interpreter, offline, outside the repository, the code from the folder only.
VALIDATE_SCRIPT = """
import json, sys
from transformers import AutoConfig, AutoModel, AutoTokenizer
folder, records = sys.argv[1], json.loads(sys.argv[2])
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
model = AutoModel.from_pretrained(folder, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
assert "transformers_modules" in type(model).__module__, type(model).__module__
print(json.dumps(model.predict(records, tokenizer, max_batch_tokens=512)))
"""


def predictions_differ(want: list[dict], got: list[dict], tol: float = 1e-5) -> str | None:
    """The first difference over `tol` between two lists of `predict` outputs, or None."""
    for i, (a, b) in enumerate(zip(want, got)):
        for key in ("mean", "variance", "probs", "score"):
            x, y = a[key], b[key]
            xs, ys = (x, y) if isinstance(x, list) else ([x], [y])
            if (x is None) != (y is None) or (x is not None and max(abs(u - v) for u, v in zip(xs, ys)) > tol):
                return f"record {i}: {key} {x} != {y}"
    return None


def validate_in_fresh_process(folder: Path, expected: list[dict]) -> None:
    """Load the folder with AutoModel/AutoTokenizer (trust_remote_code) in a new offline process and check that
    its predictions equal the checkpoint's."""
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH="", HF_MODULES_CACHE=str(Path(work) / "modules"))
        proc = subprocess.run([sys.executable, "-c", VALIDATE_SCRIPT, str(folder.resolve()), json.dumps(CHECK_RECORDS)],
                              capture_output=True, text=True, cwd=work, env=env, timeout=1800)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise PublishError(f"the built folder does not load in a fresh process: {last}")
    problem = predictions_differ(expected, json.loads(proc.stdout.strip().splitlines()[-1]))
    if problem:
        raise PublishError(f"the built folder predicts differently from the checkpoint: {problem}")


def build_model_folder(args, out: Path) -> None:
    checkpoint = Path(args.checkpoint)
    model, tokenizer = load_checkpoint(checkpoint)
    metrics = find_metrics(checkpoint, args.metrics)
    # safetensors; config with auto_map; the model's code files (modeling_orca.py and the files it imports relatively)
    model.save_pretrained(out, max_shard_size=args.max_shard_size)
    tokenizer.save_pretrained(out)
    tidy_saved_folder(out, type(model.backbone).__name__)
    card = model_card(model.config, metrics, repo_id=args.repo_id, revision=args.revision,
                      base_model=hub_base_model(metrics, args.base_model), dataset_id=args.dataset_id,
                      licence=args.license)
    card.save(out / "README.md")
    validate_in_fresh_process(out, model.predict(CHECK_RECORDS, tokenizer, max_batch_tokens=512))


def build_and_publish(args, build, repo_type: str, message: str, **create_kwargs) -> None:
    """`build(folder)` writes and checks a repository folder: into --local-dir for a dry run, else into a staging
    folder that is uploaded as one commit."""
    if args.dry_run:
        with staging_dir(Path(args.local_dir)) as tmp:
            build(tmp)
        print(f"wrote and checked {args.local_dir} (dry run: nothing uploaded)")
        return
    hub_token()  # fail before the (long) build
    with staging_dir(None) as tmp:
        build(tmp)
        upload(tmp, args.repo_id, repo_type, private=args.private, revision=args.revision, message=message, **create_kwargs)


def cmd_model(args) -> None:
    build_and_publish(args, lambda out: build_model_folder(args, out), "model",
                      f"Upload ORCA model from {Path(args.checkpoint).name}")


# ------------------------------------------------------------------------------------------------ dataset


def check_dataset_export(folder: Path) -> dict:
    """Refuse an export that holds records of sources not for redistribution, or was built without --for-upload."""
    import pyarrow.parquet as pq

    from dataset_builder.configs import licence_of, source_key

    if not (folder / "README.md").exists() or not (folder / "stats.json").exists():
        raise PublishError(f"{folder} is not a dataset_builder export (README.md and stats.json expected)")
    files = sorted(folder.glob("data/**/*.parquet"))
    if not files:
        raise PublishError(f"{folder}/data holds no Parquet files")
    withheld = Counter()
    for path in files:  # the records themselves, not only what stats.json claims
        for source in set(pq.read_table(path, columns=["source"]).column("source").to_pylist()):
            if licence_of(source) is None:
                withheld[source_key(source)] += 1
    if withheld:
        raise PublishError(f"{folder} holds records of sources marked not for redistribution "
                           f"({', '.join(sorted(withheld))}); rebuild with `python -m dataset_builder build --for-upload`")
    stats = json.loads((folder / "stats.json").read_text())
    if not stats.get("for_upload"):
        # its card tells readers the export must not be uploaded
        raise PublishError(f"{folder} was built without --for-upload; rebuild with "
                           "`python -m dataset_builder build --for-upload`")
    return stats


def cmd_dataset(args) -> None:
    folder = Path(args.dir)
    stats = check_dataset_export(folder)
    print(f"{folder}: configs {', '.join(stats['configs'])}; every source may be redistributed")
    if args.dry_run:
        print("dry run: nothing uploaded")
        return
    hub_token()
    with staging_dir(None) as tmp:
        stage_dataset(folder, tmp, args.repo_id)
        upload(tmp, args.repo_id, "dataset", private=args.private, revision=args.revision,
               message="Upload ORCA correctness ratings (dataset_builder export)")


def stage_dataset(folder: Path, out: Path, repo_id: str) -> None:
    """The export as uploaded: its files (hard links where the filesystem allows) and its card with the
    repository id in the usage example."""
    def link_or_copy(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(folder, out, dirs_exist_ok=True, copy_function=link_or_copy)
    card = out / "README.md"
    text = (folder / "README.md").read_text()
    card.unlink()  # a hard link: writing through it would change the export
    card.write_text(text.replace(REPO_ID_PLACEHOLDER, repo_id))


# ------------------------------------------------------------------------------------------------ metric

HUB_USAGE = """## Load it from the Hub

```python
import evaluate

orca = evaluate.load("{repo_id}")
orca.compute(predictions=[4.5, 1.5, 3.0], references=[[5, 4, 5], [1, 1, 2], [3, 2, 4]])
```

"""


def build_metric_folder(repo_id: str, out: Path) -> str:
    """The evaluate module as a Space: `evaluate.load("ORG/NAME")` fetches NAME.py from the Space, so the script
    is named after the repository, and its `eval_suite` import is replaced by a copy of eval_suite/metrics.py
    beside it (a Space has no eval_suite package; evaluate fetches relative imports)."""
    import evaluate

    from eval_suite.metrics import compute_metrics

    name = repo_id.split("/")[-1]
    if not name.isidentifier():
        raise PublishError(f"metric repository name {name!r} must be a Python identifier (evaluate imports {name}.py)")
    source = (METRIC_DIR / "orca_metric.py").read_text()
    old = "from eval_suite.metrics import compute_metrics"
    if source.count(old) != 1:
        raise PublishError(f"{METRIC_DIR / 'orca_metric.py'} no longer imports compute_metrics as expected: {old!r}")
    (out / f"{name}.py").write_text(source.replace(old, "from .orca_metric_core import compute_metrics"))
    shutil.copyfile(REPO / "eval_suite" / "metrics.py", out / "orca_metric_core.py")
    shutil.copyfile(METRIC_DIR / "app.py", out / "app.py")  # the Space's Gradio app
    (out / "requirements.txt").write_text("evaluate>=0.4.5\ndatasets>=4.0\nnumpy>=1.26\nscipy>=1.13\n")
    card = (METRIC_DIR / "README.md").read_text()
    marker = "## Metric Description"
    (out / "README.md").write_text(card.replace(marker, HUB_USAGE.format(repo_id=repo_id) + marker, 1))

    # check: the Space's script loads on its own and agrees with the package
    preds, refs = [4.5, 1.5, 3.0, 2.0], [[5, 4, 5], [1, 1, 2], [3, 2, 4], [2]]
    with tempfile.TemporaryDirectory() as cache:
        got = evaluate.load(str(out / f"{name}.py"), cache_dir=cache).compute(predictions=preds, references=refs)
    want = compute_metrics(preds, human_ratings=refs)
    if got["spearman"] != want["spearman"] or got["mae_mean"] != want["mae_mean"]:
        raise PublishError(f"the Space's metric script disagrees with eval_suite.metrics: {got} != {want}")
    return name


def cmd_metric(args) -> None:
    build_and_publish(args, lambda out: build_metric_folder(args.repo_id, out), "space",
                      "Upload the ORCA evaluate metric", space_sdk="gradio")


# ------------------------------------------------------------------------------------------------ leaderboard Space


def build_leaderboard_space(args, out: Path) -> None:
    """The Space folder: app.py (copied) with space_args.json (this judge and results repository), the benchmarks' question
    files under data/, requirements.txt pinned to this package's version, and a README with the Space's YAML header."""
    from importlib.metadata import PackageNotFoundError, version

    from eval_suite.leaderboard.data import BENCHMARKS, SubmissionError, default_data_dir, load_questions
    from orca_io.version import package_version

    try:
        gradio_version = version("gradio")
    except PackageNotFoundError:
        raise PublishError("gradio is not installed: pip install 'orca-judge[space]'") from None
    given = dict(q.split("=", 1) for q in args.questions)
    app_args = ["--model", args.model] + (["--revision", args.model_revision] if args.model_revision else [])
    # host and port: the app reads GRADIO_SERVER_NAME / GRADIO_SERVER_PORT, which a Space sets
    app_args += ["--benchmark", *args.benchmark, "--data-dir", "data", "--results", "leaderboard-results"]
    for name in args.benchmark:
        if name not in BENCHMARKS:
            raise PublishError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
        spec = BENCHMARKS[name]
        source = Path(given[name]) if name in given else Path(args.data_dir or default_data_dir()) / (spec.default_file or "")
        try:  # a question file the app cannot read is refused here, not in the running Space
            n = len(load_questions(name, questions=source))
        except SubmissionError as err:
            raise PublishError(f"{name}: {err}") from None
        rel = spec.default_file or f"{name}/{source.name}"
        (out / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, out / "data" / rel)
        if spec.default_file is None:
            app_args += ["--questions", f"{name}=data/{rel}"]
        print(f"{name}: {n} questions from {source}")
    if args.results_repo:
        app_args += ["--results-repo", args.results_repo]
    results = f"the Hub dataset {args.results_repo}" if args.results_repo else "the Space's disk (lost on a restart)"
    shutil.copyfile(SPACE_APP, out / "app.py")
    space_args = {"judge": args.model, "judge_revision": args.model_revision, "results": results, "args": app_args}
    (out / "space_args.json").write_text(json.dumps(space_args, indent=1) + "\n")
    spec = args.package_spec or f"orca-judge[space]=={package_version()}"
    # gradio's OAuth extra: the app signs users in on a Space (only owners replace their entries)
    (out / "requirements.txt").write_text(f"{spec}\ngradio[oauth]=={gradio_version}\n")
    title = args.title or "ORCA leaderboard"
    data = SpaceCardData(title=title, emoji="🎧", colorFrom="indigo", colorTo="blue", sdk="gradio",
                         sdk_version=gradio_version, python_version="3.11", app_file="app.py", pinned=False, hf_oauth=True,
                         license="apache-2.0", short_description="Audio-LM answers ranked by ORCA's predicted correctness",
                         tags=["leaderboard", "audio", "evaluation"])
    token_note = ("Set the Space secret `HF_TOKEN` to a token with write access to the results dataset: without it "
                  "the app refuses to start." if args.results_repo else
                  "Results are kept on the Space's disk; pass `--results-repo` to keep them in a Hub dataset.")
    card = SpaceCard.from_template(
        data, template_path=str(SPACE_CARD_TEMPLATE), title=title, model=args.model, model_revision=args.model_revision,
        benchmarks=", ".join(BENCHMARKS[b].title for b in args.benchmark), token_note=token_note, citation=CITATION)
    card.save(out / "README.md")
    compile((out / "app.py").read_text(), "app.py", "exec")  # the Space's entry point at least parses


def cmd_leaderboard(args) -> None:
    build_and_publish(args, lambda out: build_leaderboard_space(args, out), "space", "Upload the ORCA leaderboard",
                      space_sdk="gradio")


def cmd_convert(args) -> None:
    from eval_suite.models.release import convert_to_folder  # a folder or a Hub id (downloaded at --revision)

    convert_to_folder(args.src, Path(args.out), revision=args.revision, base_model=args.base_model, dtype=args.dtype)


# ------------------------------------------------------------------------------------------------ CLI


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def publishing(name, help_text, func):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--repo-id", required=True, help="ORG/NAME on the Hub")
        p.add_argument("--private", action="store_true", help="create the repository private")
        p.add_argument("--revision", default=None, help="branch to commit to (created when missing; default main)")
        p.add_argument("--dry-run", action="store_true", help="build and check everything, upload nothing")
        p.set_defaults(func=func)
        return p

    p = publishing("model", "upload a trained ORCA model folder with a model card", cmd_model)
    p.add_argument("--checkpoint", required=True, help="merged model folder (train.py's RUN/final)")
    p.add_argument("--local-dir", help="with --dry-run: write the repository folder here")
    p.add_argument("--max-shard-size", default="2GB", help="safetensors shard size (default 2GB)")
    p.add_argument("--metrics", default=None, help="metrics.json of the run (default: beside the checkpoint or above)")
    p.add_argument("--base-model", default=None, help="Hub id of the backbone for the card (default: from metrics.json)")
    p.add_argument("--dataset-id", default=None,
                   help="Hub id of the evaluation dataset; the card's model-index (structured results) needs it")
    p.add_argument("--license", default=None,
                   help="Hub licence id for the card (default: the base model's, e.g. llama3.2 for Llama 3.2, gemma "
                        "for Gemma, apache-2.0 for SmolLM2 / MiniLM / OLMo 2; required for another base)")

    p = publishing("dataset", "upload a dataset_builder export (built with --for-upload)", cmd_dataset)
    p.add_argument("--dir", required=True, help="the export folder (python -m dataset_builder build --out DIR)")

    p = publishing("metric", "upload eval_suite/orca_metric as an evaluate Space", cmd_metric)
    p.add_argument("--local-dir", help="with --dry-run: write the Space folder here")

    p = publishing("leaderboard", "upload the leaderboard app (eval_suite/leaderboard/app.py) as a Gradio Space",
                   cmd_leaderboard)
    p.add_argument("--model", required=True, help="the judge: ORCA model Hub id")
    p.add_argument("--model-revision", help="the judge's Hub branch, tag or commit (pin a commit)")
    p.add_argument("--benchmark", nargs="+", default=["mmau-test-mini"], help="benchmarks that take submissions")
    p.add_argument("--data-dir", help="where the benchmarks' question files are (default: $ORCA_DATA_DIR, else ../shared/data)")
    p.add_argument("--questions", nargs="+", default=[], metavar="BENCHMARK=FILE", help="a benchmark's question file")
    p.add_argument("--results-repo", help="Hub dataset ORG/NAME that keeps the results (the Space needs an HF_TOKEN secret)")
    p.add_argument("--package-spec", help="requirements.txt line of this package (default: orca-judge[space]==VERSION; "
                                          "e.g. 'orca-judge[space] @ git+https://github.com/ORG/orca@v0.1.0')")
    p.add_argument("--title", help="the Space's title (default: ORCA leaderboard)")
    p.add_argument("--local-dir", help="with --dry-run: write the Space folder here")

    p = sub.add_parser("convert-reference", help="convert a reference-release checkpoint into this format")
    p.add_argument("--src", required=True, help="reference checkpoint: a folder holding model/ and tokenizer/, or a "
                                                 "Hub id such as BUT-FIT/orca-olmo-2-1b-multinomial")
    p.add_argument("--revision", default=None, help="with a Hub id: its branch, tag or commit (default: the default branch)")
    p.add_argument("--base-model", default=None,
                   help="base causal LM of a LoRA adapter in model/lm (Hub id or folder; default: the adapter's "
                        "adapter_config.json base_model_name_or_path)")
    p.add_argument("--out", required=True, help="output folder (must not exist or be empty)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="dtype of the saved weights")
    p.set_defaults(func=cmd_convert)

    args = parser.parse_args(argv)
    if getattr(args, "dry_run", False) and hasattr(args, "local_dir") and not args.local_dir:
        parser.error("--dry-run needs --local-dir OUT")
    if getattr(args, "local_dir", None) and not args.dry_run:
        parser.error("--local-dir is only used with --dry-run")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        args.func(args)
    except (PublishError, ConversionError) as err:
        message = str(err)
    except HfHubHTTPError as err:
        message = http_error_message(err)
    except (TransportError, ConnectionError, TimeoutError) as err:
        offline = " (HF_HUB_OFFLINE is set)" if os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0") else ""
        message = f"network failure talking to the Hub{offline}: {type(err).__name__}: {err}; nothing was committed"
    else:
        return 0
    print(f"error: {' '.join(message.split())}", file=sys.stderr)  # one line
    return 2


if __name__ == "__main__":
    sys.exit(main())
