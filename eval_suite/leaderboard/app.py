"""The leaderboard as a web app (a Gradio Space): a ranking tab and a submit tab.

    python -m eval_suite.leaderboard.app --model runs/quickstart/final --results results/
    python -m eval_suite.leaderboard.app --model ORG/orca --revision v1 --results-repo ORG/orca-results  # HF_TOKEN set

A submission is validated first (every problem shown as `line N: problem`; nothing scored or stored), then judged
by the model's own `predict`, stored (ResultStore: a local folder, or a Hub dataset repository in one commit) and
the ranking is rebuilt from the stored scores (nothing is scored twice). One submission is processed at a time.
On a Space, submitting needs a Hub sign-in (access.py: owners, admins, a daily limit); a local run does not.
A stored record that cannot be read is listed as not ranked, with the reason, and everything else is served.
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

from eval_suite.models.loading import UsageError, load_model, resolve_revision
from eval_suite.scoring.cli_args import add_model_arguments, set_quiet
from orca_io.files import replace_dir
from orca_io.version import package_version

from . import add_ranking_arguments, board_meta, build_leaderboard, judge_meta, score_answers
from .access import DEFAULT_DAILY_LIMIT, Access, admins_from_env, log_path, login_wanted
from .data import (
    BENCHMARKS,
    Submission,
    SubmissionError,
    default_data_dir,
    load_questions,
    name_key,
    read_submission,
    shown_errors,
)
from .render import (
    MAX_PLOTTED,
    TABLE_CSS,
    breakdown_table_html,
    doubtful_table_html,
    header_lines,
    ranking_table_html,
    write_outputs,
)
from .store import ResultStore, StoreConflict, StoreError, submission_key, submitted_file_name

SAVE_TRIES = 3  # a commit refused because another replica committed first is decided again on the new state

APP_HINT = ("In the Submit tab, choose the benchmark, give the model's name (and a link), and upload a JSONL file with one "
            "line {\"question_id\": ..., \"answer\": ...} per question; `orca-leaderboard export-submission` converts "
            "an audio-LM answer file. A question without a line counts as missing (scored as an empty answer).")


class Leaderboard:
    """The state behind the app: the judge, the benchmarks' questions, the store and the current rankings."""

    def __init__(self, model, tokenizer, judge: dict, store: ResultStore, questions: dict, settings: argparse.Namespace,
                 access: Access | None = None):
        self.model, self.tokenizer, self.judge, self.store = model, tokenizer, judge, store
        self.questions = questions  # benchmark -> list[Question]
        self.settings = settings
        self.access = access or Access(login=False)
        for leftover in [*store.folder.glob(".board-*"), *store.folder.glob(".staging-*")]:  # a killed run's temp
            shutil.rmtree(leftover, ignore_errors=True)
        self.lock = threading.Lock()  # one submission at a time, whatever calls submit()
        self.results: dict[str, dict] = {}  # benchmark -> leaderboard.json content
        self.plots: dict[str, list[tuple[str, bytes]]] = {}  # benchmark -> (name, PNG), read once per change
        self.excluded: dict[str, list[str]] = {}  # benchmark -> stored submissions not shown, and why
        for benchmark in questions:
            self.results[benchmark] = self._publish(benchmark, self._build(benchmark))

    # ---------------------------------------------------------------------------------------- ranking

    def _stored(self, benchmark: str, without: str | None = None):
        """Submissions and their scores from the store. Scores of another judge or question set are not mixed in;
        of records that are one entry by `name_key` (stored before names were compared so), the newest is ranked."""
        ids = [q.id for q in self.questions[benchmark]]
        records, unreadable = self.store.load(benchmark)
        excluded = [f"{line}; kept as it is" for line in unreadable]
        newest = {name_key(rec["model_name"]): rec for rec in records}  # records are oldest first
        subs, scored = [], []
        for rec in records:
            key = name_key(rec["model_name"])
            if without is not None and key == name_key(without):
                continue
            if newest[key] is not rec:
                excluded.append(f"{rec['model_name']}: an older record of the entry {newest[key]['model_name']!r} "
                                "(names are compared ignoring case and spacing)")
                continue
            if (rec["judge"].get("id"), rec["judge"].get("revision")) != (self.judge["id"], self.judge["revision"]):
                excluded.append(f"{rec['model_name']}: scored by another judge ({rec['judge'].get('id')} "
                                f"{rec['judge'].get('revision')}); resubmit to rank it")
                continue
            if rec["question_ids"] != ids:
                excluded.append(f"{rec['model_name']}: scored on another version of the question file")
                continue
            file = rec.get("submission_file") or rec["_file"].removesuffix(".json") + ".jsonl"
            subs.append(Submission(self.store.folder / benchmark / "submissions" / file, rec["model_name"],
                                   rec["link"], rec["answers"]))
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
        replace_dir(staged, target)
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

    def submit(self, benchmark: str, model_name: str, link: str, path, replace: bool = False, progress=None,
               profile=None) -> dict:
        """Validate, judge, store, re-rank. `profile`: the signed-in Hub user (gr.OAuthProfile) or None. Returns the
        new leaderboard.json content; raises SubmissionError (invalid or not allowed, nothing done) or StoreError
        (could not be saved, nothing kept)."""
        user = self.access.user(profile)
        sub = self.validate(benchmark, model_name, link, path)
        content = Path(path).read_bytes()
        scored = None
        with self.lock:
            for _ in range(SAVE_TRIES):
                # decided on the store as it is now; after a conflict, on the state the other replica left
                old = self.store.find(benchmark, sub.model_name)
                self.access.check_replace(old, user, replace)
                now = datetime.now(UTC)
                log = self.store.read_log(log_path(user, now)) if user else {}
                self.access.check_daily_limit(user, log)
                if scored is None:
                    if progress is not None:
                        progress(0, desc="scoring")
                    scored = score_answers(self.model, self.tokenizer, self.questions[benchmark], [sub],
                                           max_batch_tokens=self.settings.max_batch_tokens, progress=progress is not None)[0]
                try:
                    return self._store(benchmark, sub, scored, content, old, user, log, now)
                except StoreConflict:
                    continue
        raise StoreError(f"the {self.store.where()} changed {SAVE_TRIES} times while this submission was saved; "
                         "nothing was stored")

    def _store(self, benchmark, sub: Submission, scored: dict, content: bytes, old: dict | None, user: str | None,
               log: dict, now: datetime) -> dict:
        # a replacement keeps the record's file (an entry stored before names were compared by name_key has another)
        key = old["_file"].removesuffix(".json") if old else submission_key(sub.model_name)
        folder = f"{benchmark}/submissions"
        sub.path = self.store.folder / folder / submitted_file_name(key, content)
        record = {
            "model_name": sub.model_name, "owner": user, "link": sub.link, "benchmark": benchmark,
            "submitted_at": now.isoformat(timespec="seconds"), "judge": self.judge, "package_version": package_version(),
            "submission_sha256": hashlib.sha256(content).hexdigest(), "submission_file": sub.path.name,
            "question_ids": [q.id for q in self.questions[benchmark]], "answers": sub.answers, "scores": scored,
        }
        staged = self._build(benchmark, extra=(sub, scored))
        try:
            files = {f"{folder}/{sub.path.name}": content,
                     f"{folder}/{key}.json": json.dumps(record, ensure_ascii=False).encode("utf-8"),
                     f"{benchmark}/leaderboard.json": (staged / "leaderboard.json").read_bytes()}
            if user is not None:
                entries = [*log.get("submissions", []), {"at": record["submitted_at"], "benchmark": benchmark,
                                                         "model_name": sub.model_name}]
                files[log_path(user, now)] = json.dumps({"username": user, "submissions": entries}).encode("utf-8")
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
    n = len(result["entries"])
    plotted = (f'<p class="note" id="plots-note">The plots show the top {MAX_PLOTTED} of {n} entries; every entry is '
               'in the <a href="#board">ranking table</a>.</p>' if n > MAX_PLOTTED else "")
    parts.append("<h3>Plots</h3>" + plotted + "".join(
        f'<img class="plot" alt="{html.escape(name)}" style="max-width: 100%; display: block; margin: .5rem 0" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode()}">' for name, png in lb.plots[benchmark])
        if lb.plots[benchmark] else "")
    parts.append("<h3>Doubtful items</h3>" + doubtful_table_html(result["doubtful"]))
    if lb.excluded.get(benchmark):
        parts.append('<div class="note" id="not-ranked"><p>Not ranked:</p><ul>'
                     + "".join(f"<li>{html.escape(x)}</li>" for x in lb.excluded[benchmark]) + "</ul></div>")
    return "\n".join(parts)


def errors_html(errors: list[str], limit: int = 50) -> str:
    shown = "".join(f"<li>{html.escape(e)}</li>" for e in shown_errors(errors, limit))
    return (f'<div id="submit-errors"><p><b>Not accepted ({len(errors)} problem{"s" * (len(errors) != 1)}); nothing '
            f"was scored or stored.</b></p><ul>{shown}</ul></div>")


def build_demo(lb: Leaderboard):
    import gradio as gr

    benchmarks = list(lb.questions)
    first = benchmarks[0]

    def show(benchmark):
        return ranking_html(lb, benchmark)

    def on_submit(benchmark, model_name, link, upload, replace, profile, progress=gr.Progress(track_tqdm=True)):  # noqa: B008 - gradio injects it
        path = upload if isinstance(upload, str) or upload is None else upload.name
        try:
            if path and os.path.getsize(path) > lb.settings.max_submission_bytes:  # before anything is read
                raise SubmissionError([f"{os.path.getsize(path)} bytes, over the limit of "
                                       f"{lb.settings.max_submission_bytes} bytes"])
            result = lb.submit(benchmark, model_name, link, path, replace=bool(replace), progress=progress,
                               profile=profile)
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

    # gradio injects the signed-in user (None when nobody is) into a parameter typed so; the string annotation of
    # `from __future__ import annotations` cannot be resolved here (gradio is imported in this function)
    on_submit.__annotations__ = {"profile": gr.OAuthProfile | None}

    with gr.Blocks(title="ORCA leaderboard", analytics_enabled=False) as demo:
        gr.Markdown("# ORCA leaderboard\nAudio-LM answers ranked by ORCA's predicted correctness "
                    f"(orca-judge {package_version()}).")
        with gr.Tab("Ranking", id="ranking-tab"):
            board_choice = gr.Dropdown(benchmarks, value=first, label="Benchmark", elem_id="board-benchmark",
                                       visible=len(benchmarks) > 1)
            board = gr.HTML(ranking_html(lb, first), elem_id="ranking")  # tables and plots (PNG, inline)
        with gr.Tab("Submit", id="submit-tab"):
            gr.Markdown(APP_HINT + f" Size limit: {lb.settings.max_submission_bytes} bytes.")
            gr.Markdown(lb.access.note(), elem_id="submit-access")
            if lb.access.login:  # only then: a LoginButton makes gradio add the OAuth routes
                gr.LoginButton()
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
    p.add_argument("--login", choices=["auto", "on", "off"], default="auto",
                   help="Hub sign-in to submit (OAuth; the Space needs `hf_oauth: true`); auto: on in a Space; "
                        "on outside a Space is refused (gradio would mock sign-in as this machine's Hub account), "
                        "but on 127.0.0.1 for development (default: %(default)s)")
    p.add_argument("--admin", nargs="+", default=admins_from_env(), metavar="USERNAME",
                   help="Hub usernames that may replace any entry and submit without limit (default: "
                        "$ORCA_LEADERBOARD_ADMINS, comma-separated)")
    p.add_argument("--daily-limit", type=int, default=DEFAULT_DAILY_LIMIT,
                   help="submissions per signed-in user per UTC day, 0 for none (default: %(default)s)")
    add_ranking_arguments(p)
    return p


def from_args(args) -> Leaderboard:
    # checked first, like the token: refuse before minutes of loading
    login = login_wanted(args.login, args.host, warn=lambda text: print(text, file=sys.stderr))
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
    access = Access.from_settings(login, args.admin, args.daily_limit)
    return Leaderboard(model, tokenizer, judge_meta(model, args.model, revision_id), store, questions, args, access)


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
