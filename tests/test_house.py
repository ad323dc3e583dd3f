"""House rules of the code, checked on the source text (ast, nothing imported): no Python file over 700 lines, no
function over 80, modeling_orca.py (the file `trust_remote_code` users read) at most 500, the loader's modules
importing one way, and the foundation (orca_io) importing nothing of the packages built on it (issue 50)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 80
MAX_MODEL_FILE_LINES = 500
SKIPPED_DIRS = {"tests", "runs", "build", "dist", "out", "__pycache__"}  # and hidden ones (.venv, .git, ...)


def python_files() -> list[Path]:
    files = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts[:-1]
        if any(p in SKIPPED_DIRS or p.startswith(".") or p.endswith(".egg-info") for p in parts):
            continue
        files.append(path)
    return files


def long_functions() -> dict[tuple[str, str], int]:
    """(file, function) -> lines, for every function or method over the limit (decorators not counted)."""
    out = {}
    for path in python_files():
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    out[(rel, node.name)] = lines
    return out


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_check_sees_the_code():
    names = {p.relative_to(ROOT).as_posix() for p in python_files()}
    assert {"modeling_orca.py", "eval_suite/report/cli.py", "train.py"} <= names
    assert not any(n.startswith(("tests/", ".venv/")) for n in names)


def test_no_file_over_700_lines():
    long = {
        p.relative_to(ROOT).as_posix(): n for p in python_files() if (n := line_count(p)) > MAX_FILE_LINES
    }
    assert not long, f"files over {MAX_FILE_LINES} lines (split them by job): {long}"


def test_model_file_at_most_500_lines():
    assert line_count(ROOT / "modeling_orca.py") <= MAX_MODEL_FILE_LINES


def test_no_function_over_80_lines():
    long = long_functions()
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def imports_of(path: Path, root: Path = ROOT) -> set[str]:
    """The modules a file imports, at its top or inside functions, as dotted names (`from m import x` gives m and
    m.x; a relative import is resolved against the file's package)."""
    package = path.relative_to(root).parent.parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] if node.level else ())
            module = ".".join(p for p in (base, node.module or "") if p)
            found |= {f"{module}.{a.name}" if module else a.name for a in node.names} | ({module} - {""})
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def eval_suite_imports(rel: str) -> set[str]:
    """The eval_suite modules a file imports, without the leading `eval_suite.` (`models.loading`)."""
    return {n.removeprefix("eval_suite.") for n in imports_of(ROOT / rel) if n.startswith("eval_suite.")}


def test_loader_imports_run_one_way():
    # release (the user's entry points) -> loading (the one loader) -> reference_checkpoint (finds and converts)
    imported = eval_suite_imports("eval_suite/models/reference_checkpoint.py")
    assert not {"models.loading", "models.release"} & imported
    assert "models.release" not in eval_suite_imports("eval_suite/models/loading.py")


# what everything may import: files, the record schema, the JSONL readers, tables, the version
FOUNDATION = "orca_io"


def project_modules(root: Path = ROOT) -> set[str]:
    """The top-level packages and modules of this repository (eval_suite, training, dataset_builder, modeling_orca, ...)."""
    packages = {p.parent.name for p in root.glob("*/__init__.py")}
    return (packages | {p.stem for p in root.glob("*.py")}) - {"tests", "setup", "conftest"}


def foundation_problems(root: Path = ROOT) -> dict[str, set[str]]:
    """file -> the modules of the rest of the project it imports, for each file of the foundation that imports any."""
    others = project_modules(root) - {FOUNDATION}
    out = {}
    for path in sorted((root / FOUNDATION).rglob("*.py")):
        bad = {m for m in imports_of(path, root) if m.split(".")[0] in others}
        if bad:
            out[path.relative_to(root).as_posix()] = bad
    return out


def test_the_foundation_imports_nothing_built_on_it():
    assert {"eval_suite", "training", "dataset_builder", "modeling_orca", FOUNDATION} <= project_modules()
    assert len(list((ROOT / FOUNDATION).rglob("*.py"))) >= 5  # the check reads the package's files
    problems = foundation_problems()
    assert not problems, f"{FOUNDATION} must import nothing of the packages built on it: {problems}"


def test_the_foundation_check_sees_imports_anywhere_in_a_file(tmp_path):
    for name in ("eval_suite", "training", FOUNDATION):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / FOUNDATION / "good.py").write_text("import json\nfrom . import good\nfrom .good import x\n")
    (tmp_path / FOUNDATION / "bad.py").write_text(
        "import training.config\n\ndef f():\n    from eval_suite.models import loading\n    from .. import train\n"
    )
    (tmp_path / "train.py").write_text("")
    assert foundation_problems(tmp_path) == {
        f"{FOUNDATION}/bad.py": {"training.config", "eval_suite.models", "eval_suite.models.loading", "train"}
    }
