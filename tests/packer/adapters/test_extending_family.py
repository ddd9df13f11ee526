"""docs/extending.md, "Adding an input family", followed to the letter: a toy family is a build function (with its
read, plan and load) and one row in ``ADAPTERS``, nothing else; ``speechpack build toy-tsv`` then exists, packs,
and the pack validates.

The toy input is a tab-separated list ``key<TAB>wav<TAB>transcript``, packed as an ``asr`` pack.  Its functions are
module-level so that the build's worker processes can receive them, as an adapter module's would be.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.loader.pack import open_pack
from speechpack.packer.adapters import ADAPTERS, Adapter
from speechpack.packer.adapters.asr_common import asr_plan, asr_sample
from speechpack.packer.adapters.option_spec import Path, option
from speechpack.packer.audio import probe_audio, read_audio
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.schemas.constants import KIND_ASR
from speechpack.schemas.line_problems import LineProblem

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")


# -- the adapter module (docs/extending.md, point 1) ---------------------------------------------------------------

@dataclass(frozen=True)
class ToyLine:
    line: int
    key: str
    path: str
    text: str


def read_toy_list(list_path: str) -> tuple[list[ToyLine], list[LineProblem]]:
    base = os.path.dirname(os.path.abspath(list_path))
    items, problems = [], []
    with open(list_path, encoding="utf-8") as fp:
        for number, raw in enumerate(fp, start=1):
            fields = raw.rstrip("\n").split("\t")
            if len(fields) != 3:
                problems.append(LineProblem(number, None, None, f"expected 3 tab-separated fields, got {len(fields)}"))
                continue
            key, path, text = fields
            items.append(ToyLine(number, key, os.path.join(base, path), text))
    return items, problems


def plan_toy_line(item: ToyLine, sample_rate: int):
    info = probe_audio(item.path)
    return asr_plan(item.line, item.key, info.channels, info.frames, info.sample_rate, sample_rate, item.text,
                    item.path)


def load_toy_line(item: ToyLine, sample_rate: int, language: str):
    return asr_sample(line=item.line, key=item.key, audio=read_audio(item.path, int16_at=sample_rate),
                      sample_rate=sample_rate, text=item.text, language=language, corpus="toy", speaker=None,
                      provenance={"path": item.path})


def build_toy_tsv(list_path: str, options: BuildOptions, language: str = "en") -> BuildSummary:
    items, problems = read_toy_list(list_path)
    return run_build(items=items, problems=problems,
                     plan=functools.partial(plan_toy_line, sample_rate=options.sample_rate),
                     load=functools.partial(load_toy_line, sample_rate=options.sample_rate, language=language),
                     kind=KIND_ASR, input_path=list_path, command="build toy-tsv",
                     recorded_options={**options.recorded(), "language": language}, options=options)


# -- its row in ADAPTERS (docs/extending.md, point 2) --------------------------------------------------------------

TOY = Adapter(
    name="toy-tsv",
    build=build_toy_tsv,
    help="Pack a tab-separated list (key, WAV path, transcript) into an `asr` pack.",
    params=(
        option("--list", "list_path", required=True, type=Path(dir_okay=False), help="The toy list."),
        option("--language", default="en", show_default=True, help="Language of every line."),
    ),
)


@pytest.fixture
def toy_family(monkeypatch):
    monkeypatch.setitem(ADAPTERS, TOY.name, TOY)


def _write_toy_corpus(root) -> str:
    rng = np.random.default_rng(7)
    lines = []
    for number, seconds in enumerate((0.5, 1.25, 0.75)):
        name = f"utt{number}.wav"
        tone = 0.3 * np.sin(2 * np.pi * (220 + 110 * number) * np.arange(int(seconds * 16000)) / 16000)
        soundfile.write(root / name, tone + 0.01 * rng.standard_normal(tone.size), 16000, subtype="PCM_16")
        lines.append(f"utt{number}\t{name}\tline number {number}\n")
    list_path = root / "toy.tsv"
    list_path.write_text("".join(lines), encoding="utf-8")
    return str(list_path)


def test_a_toy_family_is_a_build_function_and_one_registry_row(toy_family, tmp_path):
    list_path = _write_toy_corpus(tmp_path)
    out = str(tmp_path / "pack")

    shown = CliRunner().invoke(main, ["build", "--help"])
    assert shown.exit_code == 0 and "  toy-tsv " in shown.output
    options = CliRunner().invoke(main, ["build", "toy-tsv", "--help"])
    assert "--language" in options.output and "--shard-size" in options.output  # its own and the shared ones

    built = CliRunner().invoke(main, ["build", "toy-tsv", "--list", list_path, "--language", "fr", "--out", out,
                                      "--no-progress"])
    assert built.exit_code == 0, built.output
    checked = CliRunner().invoke(main, ["validate", out])
    assert checked.exit_code == 0, checked.output

    pack = open_pack(out)
    assert pack.kind == KIND_ASR and list(pack.keys) == ["utt0", "utt1", "utt2"]
    assert pack.manifest.provenance["command"] == "build toy-tsv"


def test_the_toy_family_reports_bad_lines_like_every_family(toy_family, tmp_path):
    list_path = _write_toy_corpus(tmp_path)
    with open(list_path, "a", encoding="utf-8") as fp:
        fp.write("no tabs here\n")
    result = CliRunner().invoke(main, ["build", "toy-tsv", "--list", list_path, "--out", str(tmp_path / "pack"),
                                       "--no-progress"])
    assert result.exit_code == 1
    assert "line 4" in result.output and "expected 3 tab-separated fields" in result.output
