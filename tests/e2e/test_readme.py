"""README.md and every page under docs/ run as written: their Python examples, and the shell blocks
marked `readme-test: run`, run as a new user would run them (the venv's bin first on PATH, this
checkout's code, a local Ray), each in a session of its own that must end with nothing left running.
What they print is read the way a user would see it: no deprecation warning, and every
`print(...)  # claim` prints its claim. Test ids name the file and the line of the block's fence.

Each block gets a private local Ray: RAY_ADDRESS=local makes `ray.init()` start one instead of
joining a Ray that may already run on this machine (someone's `namesrv up`).

The pages are checked as a whole too: the README stays a front door (at most 250 lines) that links
every page under docs/, its Layout tree names every folder of the code, every relative link lands on
a file and heading that exist, and headings name subjects, not the history of the work."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.support.readme import (
    DOCS,
    PYTHON,
    ROOT,
    SHELL,
    Block,
    all_code_blocks,
    anchors,
    headings,
    layout_folders,
    links,
    markdown_files,
    package_folders,
    readme_text,
    relative,
    run_in_session,
)

VENV_BIN = Path(sys.executable).parent
BLOCKS = all_code_blocks()
PRINT_CLAIM = re.compile(r"^\s*print\(.*\)\s*#\s*(?P<claim>\S.*?)\s*$", re.M)
WARNING = re.compile(r"deprecat", re.I)
README_MAX_LINES = 250
HISTORY = re.compile(r"\bissue\s*#?\d+|\b(?:this|that|a later|the last|the previous|an earlier)\s+stop\b"
                     r"|\bstop before\b", re.I)


def user_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RAY_"))}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(VENV_BIN.parent)
    env["NAMESRV_VENV"] = str(VENV_BIN.parent)  # run.sh's venv is the one these tests run in
    # this checkout's code, also when the venv's editable install points at another one (a worktree)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["RAY_ADDRESS"] = "local"
    env.pop("PYTHONWARNINGS", None)  # the filters a user has: Python's and Ray's defaults
    return env


def check_run(block: Block, argv: list[str], cwd: Path, timeout: float, **env: str) -> str:
    result, leftovers = run_in_session(argv, cwd=cwd, env=user_env() | env, timeout=timeout)
    shown = f"{block.where}:\n--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
    assert result.returncode == 0, shown
    assert not leftovers, f"left running after it ended: {leftovers}\n{shown}"
    printed = result.stdout + result.stderr
    warned = [line for line in printed.splitlines() if WARNING.search(line)]
    assert not warned, f"a deprecation warning reaches the user: {warned}\n{shown}"
    return result.stdout


def test_the_readme_has_a_python_example_that_runs() -> None:
    assert any(b.file == "README.md" and b.lang in PYTHON and b.action != "skip" for b in BLOCKS)


def test_every_shell_block_says_whether_it_runs() -> None:
    unmarked = [b.id for b in BLOCKS if b.lang in SHELL and b.action is None]
    assert not unmarked, ("each shell block in README.md and docs/*.md needs `<!-- readme-test: run -->` or "
                          f"`<!-- readme-test: skip REASON -->` on the line before it: {unmarked}")
    assert all(b.reason for b in BLOCKS if b.action == "skip"), "a skip marker must say why"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang in PYTHON], ids=lambda b: b.id)
def test_python_example_runs_as_written(block: Block, tmp_path: Path) -> None:
    if block.action == "skip":
        pytest.skip(f"{block.where}: {block.reason}")
    script = tmp_path / f"{Path(block.file).stem}_l{block.line}.py"
    script.write_text(block.code)
    # what the example makes with tempfile lands in tmp_path (Ray keeps its own /tmp/ray: socket paths are short)
    stdout = check_run(block, [sys.executable, str(script)], cwd=tmp_path, timeout=240,
                       TMPDIR=str(tmp_path), RAY_TMPDIR="/tmp")
    for claim in PRINT_CLAIM.findall(block.code):
        assert claim in stdout, f"{block.where} claims it prints {claim!r}; it printed:\n{stdout}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang in SHELL], ids=lambda b: b.id)
def test_shell_block_runs_as_written(block: Block) -> None:
    if block.action != "run":
        pytest.skip(f"{block.where}: {block.reason or 'not marked readme-test: run'}")
    check_run(block, ["bash", "-euo", "pipefail", "-c", block.code], cwd=ROOT, timeout=240)


def test_the_readme_stays_a_front_door() -> None:
    lines = len(readme_text().splitlines())
    assert lines <= README_MAX_LINES, (f"README.md has {lines} lines (at most {README_MAX_LINES}): "
                                       "move the detail to the page under docs/ it belongs to")


def test_the_readme_links_every_docs_page() -> None:
    linked = {target.split("#")[0] for _, target in links(readme_text())}
    missing = [relative(p) for p in sorted(DOCS.glob("*.md")) if relative(p) not in linked]
    assert not missing, f"README.md links no line to these pages: {missing}"


def test_the_layout_names_every_folder_of_the_code() -> None:
    missing = sorted(package_folders() - layout_folders())
    assert not missing, f"README.md's Layout tree does not name these folders: {missing}"
    assert {"tests", "benchmarks", "docs"} <= layout_folders()


@pytest.mark.parametrize("page", markdown_files(), ids=relative)
def test_relative_links_land(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    broken = []
    for line, target in links(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"line {line}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
            broken.append(f"line {line}: {target} (no such heading in {relative(dest)})")
    assert not broken, f"{relative(page)}: {broken}"


@pytest.mark.parametrize("page", markdown_files(), ids=relative)
def test_headings_name_subjects_not_history(page: Path) -> None:
    dated = [f"line {line}: {title}" for line, title in headings(page.read_text(encoding="utf-8"))
             if HISTORY.search(title)]
    assert not dated, f"{relative(page)}: a heading names an issue or a stop of the work: {dated}"
