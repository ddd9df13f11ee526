"""Fuzzing MuVAP index records and Lhotse manifest lines: whatever a record of a MuVAP pack's ``index.json`` or a
line of a Lhotse cuts manifest holds, ``speechpack import muvap`` and ``speechpack build lhotse`` answer with a
clean result or named problems, within a time bound, never a traceback.

Each example starts from real input (the MuVAP pack written from the talking-face video; a cut of a real librivox
clip made with Lhotse's API) and replaces fields of one record or line with values that broke them before:
integers beyond a double or 64 bits, tiny and non-finite floats, strings where numbers go, lists where ids go,
missing keys.  ``max_examples`` stays small (each example is a whole import or build)."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import example, given
from hypothesis import strategies as st

from factories.fuzz import any_json, check_build_outcome, fuzz_settings, json_line
from factories.muvap_packs import muvap_avcc_corpus
from speechpack.cli import main
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.importers.muvap import import_muvap
from speechpack.schemas.errors import BuildError, SpeechpackError

_SETTINGS = fuzz_settings(max_examples=40)
#: What one example may take, import or build included, on a loaded 2-core machine (the defects took 30 s+).
EXAMPLE_SECONDS = 20.0

#: Values that broke records before, and any JSON value a little nested.
hostile = st.sampled_from([10 ** 400, -10 ** 400, 2 ** 63, -1, 0, 1e-300, 1e308, float("nan"), float("inf"),
                           -float("inf"), True, None, "zero", "", "\x00", ["a"], {}, [[]]])
json_values = any_json(max_text=6, max_key=4, max_leaves=6)
weird = st.one_of(hostile, hostile, json_values)  # the known-hostile values drawn twice as often
_DROP = object()


def _apply(obj: dict, changes: list) -> dict:
    changed = dict(obj)
    for key, value in changes:
        if value is _DROP:
            changed.pop(key, None)
        else:
            changed[key] = value
    return changed


def near(obj: dict):
    """``obj`` with one to three of its fields replaced by a weird value or dropped: a record that is right but for
    a field or two, so that each check is reached (a record wrong everywhere stops at its first field)."""
    changes = st.lists(st.tuples(st.sampled_from(sorted(obj)), weird | st.just(_DROP)), min_size=1, max_size=3)
    return changes.map(lambda drawn: _apply(obj, drawn))


@pytest.fixture(scope="module")
def muvap(tmp_path_factory, real_video):
    """The MuVAP pack made from the real video (which ``real_video`` checks is there, and marks these tests
    ``real_data``)."""
    return muvap_avcc_corpus(tmp_path_factory.mktemp("muvap")).muvap


def test_fuzzed_muvap_records_import_cleanly_or_as_named_problems(muvap, tmp_path):
    pack = tmp_path / "muvap"
    shutil.copytree(muvap, pack)
    index = pack / "shard-000001" / "index.json"
    (record,) = json.loads(index.read_text())

    @_SETTINGS
    @given(fuzzed=near(record) | weird)
    @example(fuzzed=dict(record, source_fps=10 ** 400))  # the defects the fuzz found, always tried
    @example(fuzzed=dict(record, source_fps=1e-300))
    def run(fuzzed):
        index.write_text(json.dumps([fuzzed]))
        with tempfile.TemporaryDirectory() as work:
            started = time.monotonic()
            try:
                summary = import_muvap(str(pack), BuildOptions(out=str(Path(work) / "out"), sample_rate=16000,
                                                               progress=False))
            except BuildError as err:
                assert [p.line for p in err.problems] == [2], err.problems
                assert not (Path(work) / "out").exists()
            except SpeechpackError:
                assert not (Path(work) / "out").exists()
            else:
                assert summary.build.manifest.totals["samples"] == 3
            assert time.monotonic() - started < EXAMPLE_SECONDS

    run()


@pytest.fixture(scope="module")
def cut(real_audio_paths):
    from factories.lhotse_cuts import transcribed_cut

    return transcribed_cut(real_audio_paths[0], "fine").to_dict()


@pytest.fixture(scope="module")
def real_audio_paths(real_audio):
    return real_audio("pocketsphinx", 2)


def _near_cut(cut: dict):
    """The cut with a field or two of it, of its supervision, its recording or its audio source fuzzed."""
    supervision, recording = cut["supervisions"][0], cut["recording"]
    return st.one_of(
        near(cut),
        near(supervision).map(lambda s: dict(cut, supervisions=[s])),
        near(recording).map(lambda r: dict(cut, recording=r)),
        near(recording["sources"][0]).map(lambda s: dict(cut, recording=dict(recording, sources=[s]))),
        st.tuples(near(supervision), near(recording)).map(lambda d: dict(cut, supervisions=[d[0]], recording=d[1])),
    )


def test_fuzzed_lhotse_cut_lines_are_named_line_problems_or_pack(cut, real_audio_paths):
    from factories.lhotse_cuts import transcribed_cut

    good = transcribed_cut(real_audio_paths[1], "good").to_dict()

    @_SETTINGS
    @given(fuzzed=st.one_of(st.binary(max_size=30), weird.map(json_line), _near_cut(cut).map(json_line)))
    @example(fuzzed=json_line(dict(cut, duration=10 ** 400)))  # the defects the fuzz found, always tried
    @example(fuzzed=json_line(dict(cut, recording=dict(cut["recording"], num_samples=10 ** 400))))
    @example(fuzzed=json_line(dict(cut, id=5)))
    def run(fuzzed):
        with tempfile.TemporaryDirectory() as work:
            manifest = Path(work) / "cuts.jsonl"
            manifest.write_bytes(json_line(good) + b"\n" + fuzzed + b"\n")
            out = Path(work) / "pack"
            started = time.monotonic()
            result = CliRunner().invoke(main, ["build", "lhotse", "--cuts", str(manifest), "--out", str(out),
                                               "--corpus", "c", "--no-progress"])
            assert time.monotonic() - started < EXAMPLE_SECONDS
            check_build_outcome(result, out, fuzzed)

    run()
