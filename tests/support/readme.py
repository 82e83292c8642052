"""README.md and the pages under docs/ as the tests read them: their fenced code blocks with the
`readme-test` marker before each, the benchmarks docs/performance.md lists, the folders README.md's
Layout tree names, and their links. A marker is an HTML comment on the line just before the fence,
invisible on GitHub but plain in the file:

    <!-- readme-test: run -->                       run this block (a shell block needs it to run)
    <!-- readme-test: skip REASON -->               never run it; the test report shows REASON

Python blocks run unless marked skip; shell blocks are skipped unless marked run, and every shell
block must carry one of the two markers, so a new one is a decision, not an accident. The same rules
hold in README.md and in every docs/*.md."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PERFORMANCE = DOCS / "performance.md"
"""where the benchmark list lives (its "## The benchmarks" section)"""
CODE_DIRS = ("namesrv", "actors", "clients")
"""the packages whose every folder README.md's Layout tree names"""
SHELL = frozenset({"bash", "sh", "shell", "console"})
PYTHON = frozenset({"python", "py"})
MARKER = re.compile(r"^<!--\s*readme-test:\s*(?P<action>run|skip)\b\s*(?P<reason>.*?)\s*-->$")
BENCH = re.compile(r"`(?:bash run\.sh bench )?(bench_[a-z_]+)\b[^`]*`")
TREE_ENTRY = re.compile(r"(?P<name>[\w.-]+)/(?=\s|$)")
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.*?)\s*#*\s*$")


@dataclass(frozen=True, slots=True)
class Block:
    lang: str
    code: str
    line: int
    """1-based line of the opening fence in its file"""
    action: str | None
    """"run", "skip" or None (no marker)"""
    reason: str
    file: str = "README.md"
    """the Markdown file it is in, relative to the repository root"""

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}:{self.lang}"

    @property
    def where(self) -> str:
        return f"{self.file} line {self.line}"


def markdown_files() -> list[Path]:
    """README.md, then every page under docs/ by name."""
    return [README, *sorted(DOCS.glob("*.md"))]


def relative(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def readme_text() -> str:
    return README.read_text(encoding="utf-8")


def code_blocks(text: str | None = None, file: str = "README.md") -> list[Block]:
    """Every fenced block with a language in `text` (default: README.md's), in order, with the
    marker on the line before it (if any); `file` names where the text comes from."""
    text = readme_text() if text is None else text
    lines = text.splitlines()
    blocks: list[Block] = []
    for token in MarkdownIt("commonmark").parse(text):
        if token.type != "fence" or token.map is None or not token.info.strip():
            continue
        start = token.map[0]
        marker = MARKER.match(lines[start - 1].strip()) if start > 0 else None
        blocks.append(Block(
            lang=token.info.split()[0].lower(), code=token.content, line=start + 1,
            action=marker["action"] if marker else None, reason=marker["reason"] if marker else "",
            file=file,
        ))
    return blocks


def all_code_blocks() -> list[Block]:
    """The blocks of README.md and of every docs/*.md, file by file."""
    return [b for path in markdown_files()
            for b in code_blocks(path.read_text(encoding="utf-8"), relative(path))]


def section(text: str, heading: str, file: str) -> str:
    """The body of the `## heading` section of `text` (up to the next `## `)."""
    found = re.search(rf"^## {re.escape(heading)}\n(?P<body>.*?)(?=^## |\Z)", text, re.M | re.S)
    assert found, f"{file} has no '## {heading}' section"
    return found["body"]


def benchmark_names(text: str | None = None) -> list[str]:
    """The benchmarks docs/performance.md's "The benchmarks" section lists, one a bullet, in its order."""
    text = PERFORMANCE.read_text(encoding="utf-8") if text is None else text
    body = section(text, "The benchmarks", relative(PERFORMANCE))
    bullets = [line for line in body.splitlines() if line.startswith("- ")]
    assert bullets, "the list of benchmarks is gone from docs/performance.md"
    return list(dict.fromkeys(name for line in bullets for name in BENCH.findall(line.split(":")[0])))


def layout_folders(text: str | None = None) -> set[str]:
    """The folders README.md's Layout tree names, as paths: a top-level entry starts a path, an
    entry under it (after `├── ` / `└── `, 4 columns a level) names a folder inside its parent."""
    text = readme_text() if text is None else text
    body = section(text, "Layout", "README.md")
    fence = re.search(r"^```\n(?P<tree>.*?)^```", body, re.M | re.S)
    assert fence, "README.md's Layout section has no tree (a fenced block with no language)"
    folders: set[str] = set()
    parents: list[str] = []
    for line in fence["tree"].splitlines():
        entry = TREE_ENTRY.search(line)
        if entry is None or line[:entry.start()].strip(" │├└─") != "":
            continue  # no folder on this line, or the name sits in its description
        depth = entry.start() // 4
        parents = [*parents[:depth], entry["name"]]
        folders.add("/".join(parents))
    return folders


def package_folders() -> set[str]:
    """Every folder of the code packages that holds Python modules (templates and caches left out)."""
    return {relative(d) for top in CODE_DIRS for d in [ROOT / top, *(ROOT / top).rglob("*")]
            if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))}


def _outside_fences(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    kept, in_fence = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif not in_fence:
            kept.append((number, line))
    return kept


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every inline Markdown link outside code blocks and code spans."""
    return [(number, m["target"]) for number, line in _outside_fences(text)
            for m in LINK.finditer(re.sub(r"`[^`]*`", "", line))]


def headings(text: str) -> list[tuple[int, str]]:
    """(line, title) of every heading outside code blocks."""
    return [(number, m["title"]) for number, line in _outside_fences(text) if (m := HEADING.match(line))]


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of `text` (lower case, punctuation out, spaces to -)."""
    return {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for _, title in headings(text)}


def run_in_session(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float,
                   stdin: str | None = None) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run `argv` in a session of its own and return its result and what it left running there
    (a description per process, after those were killed). Whatever happens, nothing of it survives:
    on a timeout the whole session is killed and TimeoutExpired propagates."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, text=True, start_new_session=True,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sid = proc.pid
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_session(sid)
        proc.kill()
        proc.communicate()
        raise
    finally:
        leftovers = _kill_session(sid)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), leftovers


def _session_procs(sid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != sid and os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return found


def _kill_session(sid: int, grace: float = 15.0) -> list[str]:
    """Processes still in session `sid` `grace` s after its leader ended (Ray's own processes take
    a moment to follow their driver out): their descriptions, after they are killed."""
    procs = _session_procs(sid)
    _, alive = psutil.wait_procs(procs, timeout=grace)
    described = []
    for p in alive:
        try:
            described.append(f"{p.pid} {' '.join(a.strip() for a in p.cmdline())[:200]}")
            p.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=5)
    return described
