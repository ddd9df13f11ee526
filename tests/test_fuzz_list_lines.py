"""Fuzzing list lines (issue 13): whatever bytes or JSON value a line of a WeSep raw list or an ASR JSON-lines
manifest holds, ``speechpack build`` never ends in a traceback.  It either packs cleanly (exit 0, a pack that
opens) or fails with exit 1, naming every bad line by number.

Each example is one list: a good line made from a real recording, then the fuzzed line.  ``max_examples`` is
kept small (each example is a whole build through the CLI) so the module stays within a few seconds on CI.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
import soundfile
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speechpack.cli import main
from speechpack.loader import open_pack

_SETTINGS = settings(max_examples=50, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

#: Any JSON value, nested a little.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
#: Strings that are often names the pack must refuse (control characters, lone surrogates) or paths.
tricky_text = st.text(alphabet=st.sampled_from(["a", "/", "\x00", "\x1b", "\n", "\ud800", "é", " ", "."]),
                      min_size=0, max_size=5)


def _near_wesep(good_path: str):
    """Objects shaped like WeSep lines, with every field drawn from tricky values."""
    value = tricky_text | json_values
    return st.fixed_dictionaries({"key": value}, optional={
        "spk": st.lists(tricky_text, max_size=2) | value,
        "src": st.dictionaries(tricky_text, st.lists(st.sampled_from([good_path, "/missing.wav"]) | tricky_text,
                                                     max_size=2), max_size=2) | value,
        "mix": st.fixed_dictionaries({"default": st.lists(st.sampled_from([good_path]) | tricky_text, max_size=2)})
        | value,
    })


def _near_asr(good_path: str):
    value = tricky_text | json_values
    return st.fixed_dictionaries({"audio_filepath": st.sampled_from([good_path, "/missing.wav"]) | value,
                                  "text": st.sampled_from(["hello"]) | value}, optional={
        "key": value, "language": st.sampled_from(["en"]) | value, "corpus": value, "speaker": value,
        "offset": st.floats() | value, "duration": st.floats() | value})


def _line(obj) -> bytes:
    """A JSON value as one line (``\\u`` escapes keep surrogates and newlines inside the line)."""
    return json.dumps(obj).encode("ascii")


def lines(good_path: str, near):
    raw = st.binary(max_size=40)
    return st.one_of(raw, json_values.map(_line), near(good_path).map(_line))


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """A 0.25 s crop of real speech (pocketsphinx librivox), at 16 kHz."""
    from factories import REAL_CORPORA, missing_recording

    package, _rate, paths = REAL_CORPORA["pocketsphinx"]
    if not Path(paths[0]).is_file():
        missing_recording(paths[0], package)
    data, rate = soundfile.read(paths[0], dtype="int16")
    path = tmp_path_factory.mktemp("fuzz") / "speech.wav"
    soundfile.write(path, data[8000:12000], rate, subtype="PCM_16")
    return str(path)


def _check_build(command: str, first: dict, fuzzed: bytes) -> None:
    """Build ``[first, fuzzed]``; assert a clean pack or a failure that names the bad lines."""
    with tempfile.TemporaryDirectory() as work:
        listed = Path(work) / "input.list"
        listed.write_bytes(_line(first) + b"\n" + fuzzed + b"\n")
        out = Path(work) / "pack"
        result = CliRunner().invoke(main, ["build", command, "--list", str(listed), "--out", str(out),
                                           "--no-progress"])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"traceback for line {fuzzed!r}:\n{result.output}") from result.exception
        assert "Traceback" not in result.output
        if result.exit_code == 0:
            assert (out / "dataset.json").is_file()
            assert len(open_pack(str(out))) >= 1
        else:
            assert result.exit_code == 1, result.output
            assert not (out / "dataset.json").exists()
            numbers = [int(n) for n in re.findall(r"^  line (\d+):", result.output, flags=re.M)]
            assert numbers and all(n >= 2 for n in numbers), result.output


def test_fuzzed_wesep_lines_are_named_line_problems_or_pack(speech):
    good = {"key": "good", "spk": ["s"], "src": {"s": [speech]}}

    @_SETTINGS
    @given(fuzzed=lines(speech, _near_wesep))
    def run(fuzzed):
        _check_build("wesep", good, fuzzed)

    run()


def test_fuzzed_asr_jsonl_lines_are_named_line_problems_or_pack(speech):
    good = {"key": "good", "audio_filepath": speech, "text": "hello", "language": "en", "corpus": "c"}

    @_SETTINGS
    @given(fuzzed=lines(speech, _near_asr))
    def run(fuzzed):
        _check_build("asr-jsonl", good, fuzzed)

    run()
