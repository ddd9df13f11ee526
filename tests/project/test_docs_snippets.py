"""Every code block of README.md and docs/*.md does what it shows: python blocks run, and so does each
``speechpack ...`` command of a bash block, in a workspace where the paths they name exist.

The workspace of a document is a fresh directory holding the demo's output (``demo-out/``, made once, as the
README's tour uses it) and, for the paths a document's examples read (``packs/sources``, ``train.yaml``,
``AVA/packed/train`` ...), small packs and configs made here under those names (``PLACEHOLDERS``).  A document's
python blocks run in order in one namespace, as a reader pastes them into one session; its commands run through
click's test runner, and must exit 0 unless the line's comment says otherwise (``# exits 1: ...``).

A block that cannot run as written says why in a marker on the line before it, and is counted:

- ``<!-- snippet: not run: REASON -->``: a template with placeholders (``[--workers N]``, ``ava|wasd``), a
  command for a cluster, object store or corpus a test machine has not got, a long benchmark, a formula;
- ``<!-- snippet: excerpt of PATH -->``: a quotation of the library's code, checked line by line against PATH;
- ``<!-- example: docs/examples/NAME.py -->``: a whole example file, which tests/loader/test_datamodule.py checks is the
  file and the example's own test runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from speechpack.cli import main

import factories.paths

REPO = factories.paths.REPO
DOCUMENTS = ["README.md", *sorted(f"docs/{name}" for name in os.listdir(REPO / "docs") if name.endswith(".md"))]
MARKER = re.compile(r"<!-- (snippet|example): (.+?) -->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")
#: The most ``not run`` markers the documents may hold: raise it only with a reason a reviewer accepts.
MAX_NOT_RUN = 15
#: A command's expected exit status, from its comment.
EXITS = re.compile(r"#\s*exits (\d+)")


@dataclass(frozen=True)
class Block:
    document: str
    line: int  # of the opening fence, 1-based
    language: str
    body: str
    marker: tuple[str, str] | None  # (kind, text): ("snippet", "not run: ..."), ("example", path)

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def blocks(document: str) -> list[Block]:
    lines = (REPO / document).read_text(encoding="utf-8").splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        marked = MARKER.match(lines[index - 1].strip()) if index else None
        found.append(Block(document, index + 1, opening.group(1), "\n".join(lines[index + 1:end]) + "\n",
                           (marked.group(1), marked.group(2)) if marked else None))
        index = end + 1
    return found


def commands(body: str) -> list[tuple[list[str], int, str]]:
    """The ``speechpack`` commands of a bash block (continuation lines joined): words, expected status, line."""
    joined = re.sub(r"\\\n\s*", " ", body)
    found = []
    for line in joined.splitlines():
        if line.strip().startswith("speechpack "):
            status = EXITS.search(line)
            found.append((shlex.split(line, comments=True), int(status.group(1)) if status else 0, line.strip()))
    return found


def _run_block(block: Block, namespace: dict) -> None:
    if block.language == "python":
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(block.body, block.where, "exec"), namespace)
        return
    for words, status, line in commands(block.body):
        result = CliRunner().invoke(main, words[1:])
        assert result.exit_code == status, f"{block.where}: {line}\n{result.output}{result.exception!r}"


def _code(line: str) -> str:
    """A line without indentation and without its comment (a quotation may comment differently)."""
    return re.sub(r"\s+#.*$", "", line).strip()


def _excerpt_problems(block: Block, source: str) -> list[str]:
    """The lines of an excerpt that its source does not hold (whitespace and comments aside; ``...`` stands for
    left-out code)."""
    held = {_code(line) for line in (REPO / source).read_text(encoding="utf-8").splitlines()}
    return [line for line in (_code(raw) for raw in block.body.splitlines())
            if line and line != "..." and line not in held]


# --- the workspace -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """``speechpack demo --out demo-out``, once for every document."""
    root = tmp_path_factory.mktemp("snippets-demo")
    result = CliRunner().invoke(main, ["demo", "--out", str(root / "demo-out")])
    assert result.exit_code == 0, result.output
    return root / "demo-out"


def _link(target: Path, name: Path) -> None:
    name.parent.mkdir(parents=True, exist_ok=True)
    name.symlink_to(target, target_is_directory=target.is_dir())


def _bank(demo: Path, kind: str, out: Path) -> None:
    args = ["--simulate", "3", "--seed", "1"] if kind == "rir" else [str(demo / "corpus" / "wav")]
    result = CliRunner().invoke(main, ["build", "audio-bank", "--kind", kind, *args, "--out", str(out),
                                       "--no-progress"])
    assert result.exit_code == 0, result.output


def _asd_pack(demo: Path, out: Path, first: int) -> None:
    from factories.asd_tracks import TRACKS, write_asd_pack

    speech = sorted(str(p) for p in (demo / "corpus" / "wav").rglob("*.wav"))
    write_asd_pack(str(out), [t for t in TRACKS if t.frames > 1][first:first + 4], speech)


def _train_list(demo: Path, out: Path) -> None:
    """The demo's one-microphone list with absolute paths (a list's relative paths are read from the current
    directory, and the documents run ``build`` without ``--root``)."""
    corpus = demo / "corpus"
    lines = []
    for raw in (corpus / "raw.list").read_text(encoding="utf-8").splitlines():
        line = json.loads(raw)
        line["mix"] = {name: [str(corpus / p) for p in paths] for name, paths in line["mix"].items()}
        line["src"] = {spk: [str(corpus / p) for p in paths] for spk, paths in line["src"].items()}
        lines.append(json.dumps(line))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


#: Per document, the paths its examples read and how each is made (from the demo's output).
PLACEHOLDERS = {
    "README.md": {
        "packs/sources": lambda demo, path: _link(demo / "packs" / "sources", path),
        "packs/rirs": lambda demo, path: _bank(demo, "rir", path),
        "packs/noise": lambda demo, path: _bank(demo, "noise", path),
    },
    "docs/asd.md": {
        "AVA/packed/train": lambda demo, path: _asd_pack(demo, path, 0),
        "WASD/packed/train": lambda demo, path: _asd_pack(demo, path, 3),
    },
    "docs/building.md": {"train.list": lambda demo, path: _train_list(demo, path)},
    "docs/integrations.md": {"train.yaml": lambda demo, path: shutil.copy(demo / "train.yaml", path)},
    "docs/loader.md": {"train.yaml": lambda demo, path: shutil.copy(demo / "train.yaml", path)},
}


def _workspace(demo: Path, document: str, root: Path) -> Path:
    _link(demo, root / "demo-out")
    for name, make in PLACEHOLDERS.get(document, {}).items():
        make(demo, root / name)
    return root


# --- the tests -----------------------------------------------------------------------------------------------


def _runnable(document: str) -> list[Block]:
    return [b for b in blocks(document) if b.marker is None
            and (b.language == "python" or (b.language == "bash" and commands(b.body)))]


@pytest.mark.parametrize("document", [d for d in DOCUMENTS if _runnable(d)])
def test_every_code_block_runs_as_written(document, demo, tmp_path, monkeypatch):
    monkeypatch.chdir(_workspace(demo, document, tmp_path))
    namespace: dict = {"__name__": "__snippet__"}
    for block in _runnable(document):
        _run_block(block, namespace)


def test_excerpts_are_the_code_they_quote():
    checked = 0
    for document in DOCUMENTS:
        for block in blocks(document):
            if block.marker and block.marker[0] == "snippet" and block.marker[1].startswith("excerpt of "):
                source = block.marker[1].removeprefix("excerpt of ").strip()
                assert _excerpt_problems(block, source) == [], f"{block.where}: not in {source}"
                checked += 1
    assert checked


def test_blocks_left_out_are_few_and_each_says_why():
    not_run = []
    for document in DOCUMENTS:
        for block in blocks(document):
            if block.marker is None:
                continue
            kind, text = block.marker
            if kind == "example":
                assert (REPO / text).is_file(), f"{block.where}: no {text}"
                continue
            assert text.startswith(("not run: ", "excerpt of ")), f"{block.where}: unknown marker {text!r}"
            if text.startswith("not run: "):
                assert len(text.removeprefix("not run: ").strip()) > 10, f"{block.where}: say why"
                not_run.append(block.where)
    assert len(not_run) <= MAX_NOT_RUN, not_run


def test_every_block_that_could_run_is_run_or_marked():
    """A python block, or a bash block with a ``speechpack`` command, is run unless a marker says otherwise; a
    marker on a block of another language is a mistake (it excepts nothing)."""
    for document in DOCUMENTS:
        for block in blocks(document):
            if block.marker is not None:
                assert block.language in ("python", "bash"), f"{block.where}: a marker on a {block.language} block"
