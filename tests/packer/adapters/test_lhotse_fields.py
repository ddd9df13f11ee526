"""``speechpack build lhotse`` on manifests whose fields have the wrong type or an impossible value (cuts of the
real librivox clips made with Lhotse's API, then one field edited in the JSON): each a line problem naming the
manifest, line, key and field, skippable with ``--skip-bad``, never a traceback; supervision spans are checked
against the audio they transcribe."""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner
from lhotse import Recording, RecordingSet, SupervisionSegment

from factories.lhotse_cuts import transcribed_cut
from speechpack.cli import main
from speechpack.loader import open_pack


def run(*args: str):
    return CliRunner().invoke(main, ["build", "lhotse", *args, "--corpus", "c", "--no-progress"])


def _set(path: tuple, value):
    def edit(cut: dict) -> None:
        target = cut
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    return edit


SUPERVISION = ("supervisions", 0)
#: (name, edit of the cut's dict, what the problem says)
MISTYPED_CUTS = [
    ("id-int", _set(("id",), 5), "cut.id: expected a non-empty string, got 5"),
    ("id-null", _set(("id",), None), "cut.id: expected a non-empty string, got None"),
    ("id-list", _set(("id",), ["a"]), "cut.id: expected a non-empty string, got ['a']"),
    ("rate-fast", _set(("recording", "sampling_rate"), "fast"),
     "cut.recording.sampling_rate: expected a positive integer, got 'fast'"),
    ("duration-nan", _set(("duration",), float("nan")), "cut.duration: expected a finite number, got nan"),
    ("duration-inf", _set(("duration",), float("inf")), "cut.duration: expected a finite number, got inf"),
    ("supervision-recording-list", _set(SUPERVISION + ("recording_id",), ["r"]),
     "cut.supervisions[0].recording_id: expected a non-empty string, got ['r']"),
    ("supervision-start-zero", _set(SUPERVISION + ("start",), "zero"),
     "cut.supervisions[0].start: expected a finite number, got 'zero'"),
    ("supervision-duration-nan", _set(SUPERVISION + ("duration",), float("nan")),
     "cut.supervisions[0].duration: expected a finite number, got nan"),
    ("missing-duration", lambda cut: cut.pop("duration"),
     "cut.duration: expected a finite number, got nothing (the field is missing)"),
    ("past-recording", _set(("duration",), 1e6), "lies past the end of its recording"),
]


@pytest.mark.parametrize("name, edit, message", MISTYPED_CUTS, ids=[case[0] for case in MISTYPED_CUTS])
def test_a_mistyped_cut_field_is_a_named_line_problem_and_skip_bad_packs_the_rest(tmp_path, real_audio, name, edit,
                                                                                message):
    clips = real_audio("pocketsphinx", 2)
    good = transcribed_cut(clips[0], "fine").to_dict()
    bad = transcribed_cut(clips[1], "broken").to_dict()
    edit(bad)
    manifest = tmp_path / "cuts.jsonl"
    manifest.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    result = run("--cuts", str(manifest), "--out", str(tmp_path / "pack"))
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "line 2: " in result.output and f"file {manifest}" in result.output  # a cut without a usable id names no key
    assert message in result.output
    assert not (tmp_path / "pack").exists()
    skipped = run("--cuts", str(manifest), "--out", str(tmp_path / "pack"), "--skip-bad")
    assert skipped.exit_code == 0, skipped.output
    assert open_pack(str(tmp_path / "pack")).keys.tolist() == [good["id"]]


@pytest.mark.parametrize("start, duration, shown", [(-1.0, 2.0, "[-1, 1)"), (1e6, 1.0, "[1e+06, 1e+06)"),
                                                    (6.0, 5.0, "[6, 11)")])
def test_a_transcribing_supervision_outside_its_cut_is_named(tmp_path, real_audio, start, duration, shown):
    cut = transcribed_cut(real_audio("pocketsphinx", 1)[0], "fine").to_dict()
    cut["supervisions"][0].update(start=start, duration=duration)
    manifest = tmp_path / "cuts.jsonl"
    manifest.write_text(json.dumps(cut) + "\n")
    result = run("--cuts", str(manifest), "--out", str(tmp_path / "pack"))
    assert result.exit_code == 1
    assert f"supervisions[0]: span {shown} s is outside the cut" in result.output


def test_mistyped_recordings_and_supervisions_are_named_line_problems(tmp_path, real_audio):
    clips = real_audio("pocketsphinx", 1)
    RecordingSet.from_recordings([Recording.from_file(clips[0], recording_id="r")]).to_file(
        str(tmp_path / "recordings.jsonl"))
    good = SupervisionSegment("a", "r", 0.5, 1.0, text="first", speaker="m", language="en").to_dict()
    lines = [good]
    for field, value in (("recording_id", ["r"]), ("start", "zero"), ("duration", float("nan")), ("start", -1.0),
                         ("start", 1e6)):
        lines.append(dict(copy.deepcopy(good), id=f"bad-{len(lines)}", **{field: value}))
    (tmp_path / "supervisions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ("--recordings", str(tmp_path / "recordings.jsonl"), "--supervisions", str(tmp_path / "supervisions.jsonl"),
            "--out", str(tmp_path / "pack"))
    result = run(*args)
    assert result.exit_code == 1
    out = result.output
    assert "line 2: key 'bad-1'" in out and "supervision.recording_id: expected a non-empty string, got ['r']" in out
    assert "line 3: key 'bad-2'" in out and "supervision.start: expected a finite number, got 'zero'" in out
    assert "line 4: key 'bad-3'" in out and "supervision.duration: expected a finite number, got nan" in out
    assert "line 5: key 'bad-4'" in out and "span [-1, 0) s is outside recording 'r'" in out
    assert "line 6: key 'bad-5'" in out and "span [1e+06, 1e+06) s is outside recording 'r'" in out
    assert run(*args, "--skip-bad").exit_code == 0
    assert open_pack(str(tmp_path / "pack")).keys.tolist() == ["a"]


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_source_is_not_a_regular_file_not_a_missing_one(tmp_path, real_audio, special):
    import os

    path = special
    if special == "fifo":
        path = str(tmp_path / "pipe.wav")
        os.mkfifo(path)
    cut = transcribed_cut(real_audio("pocketsphinx", 1)[0], "fine").to_dict()
    cut["recording"]["sources"][0]["source"] = path
    manifest = tmp_path / "cuts.jsonl"
    manifest.write_text(json.dumps(cut) + "\n")
    result = run("--cuts", str(manifest), "--out", str(tmp_path / "pack"))
    assert result.exit_code == 1
    kind = "a device" if special == "/dev/zero" else "a FIFO"
    assert f"file {path}: not a regular file ({kind})" in result.output
    assert "file not found" not in result.output
