"""The leaderboard as a web app (a Gradio Space): a ranking tab and a submit tab.

    python -m eval_suite.leaderboard.app --model runs/quickstart/final --results results/
    python -m eval_suite.leaderboard.app --model ORG/orca --revision v1 --results-repo ORG/orca-results  # HF_TOKEN set

A submission is validated first (every problem shown as `line N: problem`; nothing scored or stored), then judged
by the model's own `predict`, stored (ResultStore: a local folder, or a Hub dataset repository in one commit) and
the ranking is rebuilt from the stored scores (nothing is scored twice). One submission is processed at a time.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import os
import shutil
import sys
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path

from eval_suite.cli import (
    UsageError,
    add_model_arguments,
    load_model,
    package_version,
    resolve_revision,
    set_quiet,
)

from . import add_ranking_arguments, board_meta, build_leaderboard, judge_meta, score_answers
from .data import BENCHMARKS, Submission, SubmissionError, default_data_dir, load_questions, read_submission
from .render import (
    TABLE_CSS,
    breakdown_table_html,
    doubtful_table_html,
    header_lines,
    ranking_table_html,
    write_outputs,
)
from .store import ResultStore, StoreError, submission_key

APP_HINT = ("In the Submit tab, choose the benchmark, give the model's name (and a link), and upload a JSONL file with one "
            "line {\"question_id\": ..., \"answer\": ...} per question; `orca-leaderboard export-submission` converts "
            "an audio-LM answer file. A question without a line counts as missing (scored as an empty answer).")


class Leaderboard:
    """The state behind the app: the judge, the benchmarks' questions, the store and the current rankings."""

    def __init__(self, model, tokenizer, judge: dict, store: ResultStore, questions: dict, settings: argparse.Namespace):
        self.model, self.tokenizer, self.judge, self.store = model, tokenizer, judge, store
        self.questions = questions  # benchmark -> list[Question]
        self.settings = settings
        self.lock = threading.Lock()  # one submission at a time, whatever calls submit()
        self.results: dict[str, dict] = {}  # benchmark -> leaderboard.json content
        self.plots: dict[str, list[tuple[str, bytes]]] = {}  # benchmark -> (name, PNG), read once per change
        self.excluded: dict[str, list[str]] = {}  # benchmark -> stored submissions not shown, and why
        for benchmark in questions:
            self.results[benchmark] = self._publish(benchmark, self._build(benchmark))

    # ---------------------------------------------------------------------------------------- ranking

    def _stored(self, benchmark: str, without: str | None = None):
        """Submissions and their scores from the store. Scores of another judge or question set are not mixed in."""
        ids = [q.id for q in self.questions[benchmark]]
        subs, scored, excluded = [], [], []
        for rec in self.store.records(benchmark):
            if rec["model_name"] == without:
                continue
            if (rec["judge"]["id"], rec["judge"]["revision"]) != (self.judge["id"], self.judge["revision"]):
                excluded.append(f"{rec['model_name']}: scored by another judge ({rec['judge']['id']} "
                                f"{rec['judge']['revision']}); resubmit to rank it")
                continue
            if rec["question_ids"] != ids:
                excluded.append(f"{rec['model_name']}: scored on another version of the question file")
                continue
            path = self.store.folder / benchmark / "submissions" / f"{submission_key(rec['model_name'])}.jsonl"
            subs.append(Submission(path, rec["model_name"], rec["link"], rec["answers"]))
            scored.append(rec["scores"])
        return subs, scored, excluded

    def _build(self, benchmark: str, extra: tuple[Submission, dict] | None = None):
        subs, scored, excluded = self._stored(benchmark, without=extra[0].model_name if extra else None)
        if extra:
            subs.append(extra[0])
            scored.append(extra[1])
        s, cfg = self.settings, self.model.config
        board = build_leaderboard(self.questions[benchmark], subs, scored, scale=(cfg.rating_min, cfg.rating_max),
                                  threshold=s.uncertainty_threshold, doubtful_threshold=s.doubtful_threshold,
                                  doubtful_top=s.doubtful_top, resamples=s.bootstrap, seed=s.seed, alpha=s.alpha)
        meta = board_meta(benchmark, len(self.questions[benchmark]), self.judge, cfg, resamples=s.bootstrap,
                          seed=s.seed, threshold=s.uncertainty_threshold,
                          doubtful_threshold=board["doubtful"]["threshold"], alpha=s.alpha, how_to_submit=APP_HINT)
        staged = Path(tempfile.mkdtemp(dir=self.store.folder, prefix=".board-"))
        write_outputs(staged, meta, board, self.questions[benchmark])
        self.excluded[benchmark] = excluded
        return staged

    def _publish(self, benchmark: str, staged: Path) -> dict:
        """Put a built board folder in place of the old one (local files only: derived, rebuilt at start)."""
        target = self.store.folder / benchmark / "board"
        target.parent.mkdir(parents=True, exist_ok=True)
        old = target.with_name(f".old-board-{os.getpid()}-{threading.get_ident()}")
        if target.exists():
            os.replace(target, old)
        os.replace(staged, target)
        shutil.rmtree(old, ignore_errors=True)
        result = json.loads((target / "leaderboard.json").read_text(encoding="utf-8"))
        self.plots[benchmark] = [(p, (target / p).read_bytes()) for p in result["plots"]]
        return result

    def board_dir(self, benchmark: str) -> Path:
        return self.store.folder / benchmark / "board"

    # ---------------------------------------------------------------------------------------- submitting

    def validate(self, benchmark: str, model_name: str, link: str, path) -> Submission:
        """The submission, or SubmissionError listing every problem as `line N: problem`."""
        if benchmark not in self.questions:
            raise SubmissionError([f"unknown benchmark {benchmark!r}; this leaderboard ranks {', '.join(self.questions)}"])
        if not path:
            raise SubmissionError(["no file uploaded"])
        return read_submission(Path(path), self.questions[benchmark], model_name=model_name or "", link=link or "",
                               benchmark=benchmark, max_bytes=self.settings.max_submission_bytes, where="")

    def submit(self, benchmark: str, model_name: str, link: str, path, replace: bool = False, progress=None) -> dict:
        """Validate, judge, store, re-rank. Returns the new leaderboard.json content; raises SubmissionError (invalid,
        nothing done) or StoreError (could not be saved, nothing kept)."""
        sub = self.validate(benchmark, model_name, link, path)
        with self.lock:
            old = self.store.find(benchmark, sub.model_name)
            if old is not None and not replace:
                raise SubmissionError([f"a submission named {sub.model_name!r} exists (submitted {old['submitted_at']}); "
                                       "tick \"replace\" to replace it"])
            if progress is not None:
                progress(0, desc="scoring")
            questions = self.questions[benchmark]
            scored = score_answers(self.model, self.tokenizer, questions, [sub], batch_size=self.settings.batch_size,
                                   progress=progress is not None)[0]
            content = Path(path).read_bytes()
            key = submission_key(sub.model_name)
            sub.path = self.store.folder / benchmark / "submissions" / f"{key}.jsonl"
            record = {
                "model_name": sub.model_name, "link": sub.link, "benchmark": benchmark,
                "submitted_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "judge": self.judge, "package_version": package_version(),
                "submission_sha256": hashlib.sha256(content).hexdigest(),
                "question_ids": [q.id for q in questions], "answers": sub.answers, "scores": scored,
            }
            staged = self._build(benchmark, extra=(sub, scored))
            try:
                files = {f"{benchmark}/submissions/{key}.jsonl": content,
                         f"{benchmark}/submissions/{key}.json": json.dumps(record, ensure_ascii=False).encode("utf-8"),
                         f"{benchmark}/leaderboard.json": (staged / "leaderboard.json").read_bytes()}
                verb = "Replace" if old else "Add"
                self.store.save(files, message=f"{verb} {sub.model_name} on {benchmark}")
            except BaseException:
                shutil.rmtree(staged, ignore_errors=True)
                raise
            self.results[benchmark] = self._publish(benchmark, staged)
            return self.results[benchmark]


# ------------------------------------------------------------------------------------------------ page


def ranking_html(lb: Leaderboard, benchmark: str) -> str:
    result = lb.results[benchmark]
    parts = ['<div class="header" id="board-header">' + "".join(f"<p>{html.escape(x)}</p>" for x in header_lines(result))
             + f"<p>Results are kept in the {html.escape(lb.store.where())}.</p></div>"]
    if not result["entries"]:
        parts.append('<p class="note" id="empty-board">No submissions yet: be the first (Submit tab).</p>')
    parts.append("<h3>Ranking</h3>" + ranking_table_html(result, result["entries"]))
    parts.append("<h3>Correct % per modality and category</h3>" + breakdown_table_html(result, result["entries"]))
    parts.append("<h3>Plots</h3>" + "".join(
        f'<img class="plot" alt="{html.escape(name)}" style="max-width: 100%; display: block; margin: .5rem 0" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode()}">' for name, png in lb.plots[benchmark])
        if lb.plots[benchmark] else "")
    parts.append("<h3>Doubtful items</h3>" + doubtful_table_html(result["doubtful"]))
    if lb.excluded.get(benchmark):
        parts.append('<p class="note">Not ranked: ' + html.escape("; ".join(lb.excluded[benchmark])) + "</p>")
    return "\n".join(parts)


def errors_html(errors: list[str], limit: int = 50) -> str:
    shown = "".join(f"<li>{html.escape(e)}</li>" for e in errors[:limit])
    more = f"<li>... and {len(errors) - limit} more</li>" if len(errors) > limit else ""
    return (f'<div id="submit-errors"><p><b>Not accepted ({len(errors)} problem{"s" * (len(errors) != 1)}); nothing '
            f"was scored or stored.</b></p><ul>{shown}{more}</ul></div>")


def build_demo(lb: Leaderboard):
    import gradio as gr

    benchmarks = list(lb.questions)
    first = benchmarks[0]

    def show(benchmark):
        return ranking_html(lb, benchmark)

    def on_submit(benchmark, model_name, link, upload, replace, progress=gr.Progress(track_tqdm=True)):  # noqa: B008 - gradio injects it
        path = upload if isinstance(upload, str) or upload is None else upload.name
        try:
            if path and os.path.getsize(path) > lb.settings.max_submission_bytes:  # before anything is read
                raise SubmissionError([f"{os.path.getsize(path)} bytes, over the limit of "
                                       f"{lb.settings.max_submission_bytes} bytes"])
            result = lb.submit(benchmark, model_name, link, path, replace=bool(replace), progress=progress)
        except SubmissionError as e:
            message = errors_html(e.errors)
        except StoreError as e:
            message = f'<div id="submit-errors"><p><b>Not saved:</b> {html.escape(str(e))}. Nothing was stored; try again.</p></div>'
        else:
            entry = next(e for e in result["entries"] if e["model_name"] == (model_name or "").strip())
            message = (f'<div id="submit-ok"><p><b>Accepted:</b> {html.escape(entry["model_name"])} is ranked '
                       f'{entry["rank"]} of {len(result["entries"])} with {entry["percent"]:.1f} % '
                       f'[{entry["percent_ci"][0]:.1f}, {entry["percent_ci"][1]:.1f}] ({entry["n_missing"]} missing '
                       "answers).</p></div>")
        return message, show(benchmark if benchmark in lb.questions else first)

    with gr.Blocks(title="ORCA leaderboard", analytics_enabled=False) as demo:
        gr.Markdown("# ORCA leaderboard\nAudio-LM answers ranked by ORCA's predicted correctness "
                    f"(orca-judge {package_version()}).")
        with gr.Tab("Ranking", id="ranking-tab"):
            board_choice = gr.Dropdown(benchmarks, value=first, label="Benchmark", elem_id="board-benchmark",
                                       visible=len(benchmarks) > 1)
            board = gr.HTML(ranking_html(lb, first), elem_id="ranking")  # tables and plots (PNG, inline)
        with gr.Tab("Submit", id="submit-tab"):
            gr.Markdown(APP_HINT + f" Size limit: {lb.settings.max_submission_bytes} bytes.")
            bench = gr.Dropdown(benchmarks, value=first, label="Benchmark", elem_id="submit-benchmark")
            name = gr.Textbox(label="Model name", elem_id="submit-name", max_lines=1)
            link = gr.Textbox(label="Link (paper or code, optional)", elem_id="submit-link", max_lines=1)
            upload = gr.File(label="Answers (JSONL)", file_types=[".jsonl"], type="filepath", elem_id="submit-file")
            replace = gr.Checkbox(label="replace my earlier submission under this name", elem_id="submit-replace")
            button = gr.Button("Submit", variant="primary", elem_id="submit-button")
            result = gr.HTML("", elem_id="submit-result")
        board_choice.change(show, board_choice, board)
        button.click(on_submit, [bench, name, link, upload, replace], [result, board])
        demo.load(show, board_choice, board)  # a fresh visit sees the latest ranking
    # one worker: two submissions are queued, never interleaved (Leaderboard.submit also holds a lock)
    demo.queue(default_concurrency_limit=1)
    return demo


def launch(demo, lb: Leaderboard, *, host: str = "127.0.0.1", port: int | None = None, block: bool = True):
    import gradio as gr

    theme = gr.themes.Default(font=["system-ui", "sans-serif"], font_mono=["monospace"])  # no web fonts fetched
    return demo.launch(server_name=host, server_port=port, max_file_size=lb.settings.max_submission_bytes,
                       prevent_thread_lock=not block, css=TABLE_CSS, theme=theme, ssr_mode=False, quiet=not block)


# ------------------------------------------------------------------------------------------------ CLI


def benchmark_file(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or name not in BENCHMARKS:
        raise argparse.ArgumentTypeError(f"expected BENCHMARK=FILE with BENCHMARK one of {', '.join(BENCHMARKS)}")
    return name, Path(path)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval_suite.leaderboard.app", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    p.add_argument("--benchmark", nargs="+", default=["mmau-test-mini"], choices=sorted(BENCHMARKS),
                   help="benchmarks that take submissions (default: %(default)s)")
    p.add_argument("--data-dir", type=Path, help="benchmark data (default: $ORCA_DATA_DIR, else ../shared/data)")
    p.add_argument("--questions", nargs="+", default=[], metavar="BENCHMARK=FILE", type=benchmark_file,
                   help="a benchmark's question file")
    p.add_argument("--results", type=Path, default=Path("leaderboard-results"),
                   help="local results folder (default: %(default)s); with --results-repo, its local copy")
    p.add_argument("--results-repo", help="Hub dataset repository ORG/NAME that keeps the results (needs a token: "
                                          "HF_TOKEN or `hf auth login`)")
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="address to serve on (default: %(default)s; 0.0.0.0 in a Space)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)),
                   help="port (default: %(default)s)")
    add_ranking_arguments(p)
    return p


def from_args(args) -> Leaderboard:
    token = None
    if args.results_repo:  # checked first: refuse before minutes of loading
        from huggingface_hub import get_token

        token = get_token()
        if not token:
            raise UsageError("--results-repo needs a Hugging Face token with write access (HF_TOKEN or `hf auth login`)")
    data_dir = args.data_dir or default_data_dir()
    files = dict(args.questions)
    questions = {b: load_questions(b, data_dir, files.get(b)) for b in args.benchmark}
    load_revision, revision_id = resolve_revision(args.model, args.revision)
    model, tokenizer = load_model(args.model, revision=load_revision, device=args.device, dtype=args.dtype)
    store = ResultStore(args.results, args.results_repo, token=token)
    return Leaderboard(model, tokenizer, judge_meta(model, args.model, revision_id), store, questions, args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    set_quiet(args.quiet)
    try:
        lb = from_args(args)
    except (SubmissionError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    launch(build_demo(lb), lb, host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
