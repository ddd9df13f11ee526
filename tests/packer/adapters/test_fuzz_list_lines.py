"""Fuzzing list lines: whatever bytes or JSON value a line of a WeSep raw list or an ASR JSON-lines
manifest holds, ``speechpack build`` never ends in a traceback.  It either packs cleanly (exit 0, a pack that
opens) or fails with exit 1, naming every bad line by number.

Each example is one list: a good line made from a real recording, then the fuzzed line.  ``max_examples`` is
kept small (each example is a whole build through the CLI) so the module stays within a few seconds on CI.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import soundfile
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from factories.fuzz import any_json, check_build_outcome, fuzz_settings, json_line
from speechpack.cli import main

_SETTINGS = fuzz_settings(max_examples=50)

#: Any JSON value, nested a little.
json_values = any_json(max_text=8, max_key=6, max_leaves=8)
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


def lines(good_path: str, near):
    raw = st.binary(max_size=40)
    return st.one_of(raw, json_values.map(json_line), near(good_path).map(json_line))


@pytest.fixture(scope="module")
def speech(tmp_path_factory, real_audio):
    """A 0.25 s crop of real speech (pocketsphinx librivox), at 16 kHz."""
    (recording,) = real_audio("pocketsphinx", 1)
    data, rate = soundfile.read(recording, dtype="int16")
    path = tmp_path_factory.mktemp("fuzz") / "speech.wav"
    soundfile.write(path, data[8000:12000], rate, subtype="PCM_16")
    return str(path)


def _check_build(command: str, first: dict, fuzzed: bytes) -> None:
    """Build ``[first, fuzzed]``; assert a clean pack or a failure that names the bad lines."""
    with tempfile.TemporaryDirectory() as work:
        listed = Path(work) / "input.list"
        listed.write_bytes(json_line(first) + b"\n" + fuzzed + b"\n")
        out = Path(work) / "pack"
        result = CliRunner().invoke(main, ["build", command, "--list", str(listed), "--out", str(out),
                                           "--no-progress"])
        check_build_outcome(result, out, fuzzed)


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


# ------------------------------------------------------------------------------------------ recipe YAML (plan)

#: Pieces a hostile recipe is made of: YAML syntax, aliases, tags, long integers, deep nesting.
_YAML_PIECES = st.sampled_from([
    "[", "]", "{", "}", ": ", ", ", "\n", "\n  ", "- ", "&a ", "*a", "&b ", "*b", "<<: ", "!!int ", "!!float ",
    "!!binary ", "!!timestamp ", "!!set ", "!!python/object/apply:os.system ", "? ", "'", '"', "#", "|", ">",
    "9" * 4400, "0x" + "f" * 4000, ":".join(["59"] * 2000), "1e400", ".nan", "2001-13-01", "~", "null", "yes",
    "[" * 200, "]" * 200, "chunk_len", "batch_size", "dataset_args", "val_dataset_args", "packs", "weight",
    "num_speakers", "distribution", "partition_filters", "-1", "0", "8000", "\x0b", "\ud800", "\t",
])


def _laughs(levels: int, key: str) -> str:
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + f"\ndataset_args:\n  {key}: *l{levels}\n"


def recipes(pack: str):
    """YAML texts: a valid recipe with one value fuzzed, hostile fragments, alias trees, or any JSON value."""
    head = f"packs:\n  - path: {pack}\n"
    fragment = st.lists(_YAML_PIECES, min_size=1, max_size=12).map("".join)
    return st.one_of(
        fragment.map(lambda text: head + "dataset_args:\n  chunk_len: " + text + "\n"),
        fragment.map(lambda text: head + text),
        fragment,
        st.builds(_laughs, st.integers(1, 9), st.sampled_from(["chunk_len", "batch_size", "weight"]))
        .map(lambda text: head + text),
        st.dictionaries(st.sampled_from(["dataset_args", "val_dataset_args", "dataloader_args", "weighting",
                                         "task", "model"]), json_values, max_size=3)
        .map(lambda obj: head + json.dumps(obj)[1:-1].replace(", \"", "\n\"") if obj else head),
    )


@pytest.fixture(scope="module")
def speech_pack(speech, tmp_path_factory):
    out = tmp_path_factory.mktemp("recipe-fuzz") / "pack"
    listed = out.parent / "input.list"
    listed.write_bytes(json_line({"key": "good", "spk": ["s"], "src": {"s": [speech]}}) + b"\n")
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(listed), "--out", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    return str(out)


def test_fuzzed_recipe_yaml_is_a_named_problem_or_a_plan(speech_pack, tmp_path):
    """``speechpack plan`` on a crafted recipe: exit 0 (a plan) or 1 (``error:`` naming the config), never a
    traceback, in seconds, with a message of bounded size."""
    import time

    cfg = tmp_path / "recipe.yaml"

    @_SETTINGS
    @given(text=recipes(speech_pack))
    def run(text):
        cfg.write_bytes(text.encode("utf-8", "surrogatepass"))
        started = time.monotonic()
        result = CliRunner().invoke(main, ["plan", str(cfg)])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"traceback for {text[:300]!r}:\n{result.output}") from result.exception
        assert "Traceback" not in result.output
        assert result.exit_code in (0, 1), result.output
        if result.exit_code == 1:
            assert "error:" in result.output and len(result.output) < 4000, result.output[:2000]
        assert time.monotonic() - started < 10

    run()
