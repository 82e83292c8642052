"""README.md as the tests read it: its fenced code blocks with the `readme-test` marker before each,
and the benchmarks it lists. A marker is an HTML comment on the line just before the fence, invisible
on GitHub but plain in the file:

    <!-- readme-test: run -->                       run this block (a shell block needs it to run)
    <!-- readme-test: skip REASON -->               never run it; the test report shows REASON

Python blocks run unless marked skip; shell blocks are skipped unless marked run, and every shell
block must carry one of the two markers, so a new one is a decision, not an accident."""

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
SHELL = frozenset({"bash", "sh", "shell", "console"})
PYTHON = frozenset({"python", "py"})
MARKER = re.compile(r"^<!--\s*readme-test:\s*(?P<action>run|skip)\b\s*(?P<reason>.*?)\s*-->$")
BENCH = re.compile(r"`(?:bash run\.sh bench )?(bench_[a-z_]+)\b[^`]*`")


@dataclass(frozen=True, slots=True)
class Block:
    lang: str
    code: str
    line: int
    """1-based line of the opening fence in README.md"""
    action: str | None
    """"run", "skip" or None (no marker)"""
    reason: str

    @property
    def id(self) -> str:
        return f"{self.lang}@L{self.line}"


def readme_text() -> str:
    return README.read_text(encoding="utf-8")


def code_blocks(text: str | None = None) -> list[Block]:
    """Every fenced block with a language, in order, with the marker on the line before it (if any)."""
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
        ))
    return blocks


def benchmark_names(text: str | None = None) -> list[str]:
    """The benchmarks the README's "Tests and benchmarks" section lists, in its order."""
    text = readme_text() if text is None else text
    section = re.search(r"^## Tests and benchmarks\n(?P<body>.*?)(?=^## )", text, re.M | re.S)
    assert section, "README.md has no '## Tests and benchmarks' section"
    sentence = re.search(r"^Benchmarks print.*?(?:\n\n|\n\|)", section["body"], re.M | re.S)
    assert sentence, "the 'Benchmarks print ...' sentence is gone from README.md"
    return list(dict.fromkeys(BENCH.findall(sentence.group(0))))


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
