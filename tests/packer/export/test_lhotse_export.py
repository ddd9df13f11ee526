"""``speechpack export lhotse``: packs of real recordings back to a Lhotse CutSet that Lhotse loads to the same
samples (within int16 rounding), and that ``build lhotse`` packs again to the same bytes."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner
from lhotse import CutSet, MultiCut

from speechpack.cli import main
from factories.lhotse_export import asr_export_manifest
from speechpack.loader import open_pack
from speechpack.packer.export.lhotse import export_lhotse
from speechpack.schemas.constants import STREAM_TEXT
from speechpack.schemas.errors import SpeechpackError

#: One step of the pack's int16 storage: what "the same sample within int16 rounding" allows.
INT16_STEP = 1 / 32768


def build(*args: str) -> None:
    result = CliRunner().invoke(main, ["build", *args, "--no-progress"])
    assert result.exit_code == 0, result.output


def export(pack, out):
    result = CliRunner().invoke(main, ["export", "lhotse", str(pack), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return CutSet.from_file(str(out / "cuts.jsonl.gz")).to_eager()


def test_export_loads_in_lhotse_with_the_same_samples(tmp_path, real_audio):
    build("asr-jsonl", "--list", asr_export_manifest(tmp_path, real_audio), "--out", str(tmp_path / "pack"))
    pack = open_pack(str(tmp_path / "pack"))
    cuts = export(tmp_path / "pack", tmp_path / "export")
    assert [c.id for c in cuts] == pack.keys.tolist()
    assert isinstance(cuts["stereo"], MultiCut) and cuts["stereo"].num_channels == 2
    for i, cut in enumerate(cuts):
        sample = pack.sample(i)
        audio = cut.load_audio()
        assert audio.shape == sample.targets.shape
        np.testing.assert_allclose(audio, sample.targets, rtol=0, atol=INT16_STEP * 4.0 / 2)
        supervision, = cut.supervisions
        assert supervision.text == bytes(sample.data[STREAM_TEXT]).decode()
        assert supervision.language == pack.attrs["language"][i]
        assert supervision.custom["corpus"] == pack.attrs["corpus"][i]
    assert cuts["clip"].supervisions[0].speaker == "narrator"
    assert cuts["alsa"].supervisions[0].speaker is None  # "unknown" in the pack
    # stored at scale 1: FLAC, exact; the rescaled one: float WAV of its decoded values
    assert cuts["clip"].recording.sources[0].source.endswith(".flac")
    np.testing.assert_array_equal(cuts["clip"].load_audio(), pack.sample(0).targets)
    assert cuts["loud"].recording.sources[0].source.endswith(".wav")
    assert np.abs(cuts["loud"].load_audio()).max() > 1.0
    assert os.path.isabs(cuts["clip"].recording.sources[0].source)


def test_build_lhotse_of_an_export_round_trips(tmp_path, real_audio):
    build("asr-jsonl", "--list", asr_export_manifest(tmp_path, real_audio), "--out", str(tmp_path / "pack"))
    export(tmp_path / "pack", tmp_path / "export")
    build("lhotse", "--cuts", str(tmp_path / "export" / "cuts.jsonl.gz"), "--out", str(tmp_path / "again"))
    first, again = open_pack(str(tmp_path / "pack")), open_pack(str(tmp_path / "again"))
    assert again.keys.tolist() == first.keys.tolist()
    assert again.speakers.tolist() == first.speakers.tolist()
    for name in ("language", "corpus"):
        assert again.attrs[name].tolist() == first.attrs[name].tolist()
    for i in range(len(first)):
        a, b = first.sample(i), again.sample(i)
        assert bytes(a.data[STREAM_TEXT]) == bytes(b.data[STREAM_TEXT])
        np.testing.assert_allclose(b.targets, a.targets, rtol=0, atol=INT16_STEP * 4.0)
    np.testing.assert_array_equal(again.sample(0).targets, first.sample(0).targets)  # FLAC: bit-exact
    # the manifest line's extra field, kept in provenance by asr-jsonl, travels as the cut's custom field
    records = json.loads((tmp_path / "again/shard-000000/index.json").read_text())["samples"]
    assert records[0]["provenance"]["extra"] == {"cut": {"session": 3}}


def test_sources_pack_exports_speakers_without_text(tmp_path, real_audio):
    paths = real_audio("alsa", 2)
    (tmp_path / "raw.list").write_text("".join(json.dumps({"key": f"s{i}", "spk": ["voice"], "src": {"voice": [p]}})
                                               + "\n" for i, p in enumerate(paths)))
    build("wesep", "--list", str(tmp_path / "raw.list"), "--out", str(tmp_path / "pack"))
    cuts = export(tmp_path / "pack", tmp_path / "export")
    assert [(c.id, c.supervisions[0].speaker, c.supervisions[0].text) for c in cuts] == [("s0", "voice", None),
                                                                                         ("s1", "voice", None)]
    build("lhotse", "--cuts", str(tmp_path / "export" / "cuts.jsonl.gz"), "--out", str(tmp_path / "again"))
    again = open_pack(str(tmp_path / "again"))
    assert again.kind == "sources"
    np.testing.assert_array_equal(again.sample(1).targets, open_pack(str(tmp_path / "pack")).sample(1).targets)


def test_export_refusals(tmp_path, real_audio):
    paths = real_audio("pocketsphinx", 2)
    (tmp_path / "raw.list").write_text(json.dumps({"key": "m", "spk": ["a", "b"], "mix": {"default": [paths[0]]},
                                                   "src": {"a": [paths[0]], "b": [paths[0]]}}) + "\n")
    build("wesep", "--list", str(tmp_path / "raw.list"), "--out", str(tmp_path / "tse"))
    with pytest.raises(SpeechpackError, match="a tse pack cannot be exported"):
        export_lhotse(str(tmp_path / "tse"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()  # a directory holding a user's files: test_lhotse_export_resume.py


def test_noise_bank_exports_cuts_without_supervisions(tmp_path, real_audio):
    noise = real_audio("alsa")[4]  # Noise.wav, 48 kHz
    (tmp_path / "bank.list").write_text(noise + "\n")
    build("audio-bank", "--kind", "noise", str(tmp_path / "bank.list"), "--out", str(tmp_path / "pack"))
    cut, = export(tmp_path / "pack", tmp_path / "export")
    assert cut.id == noise and cut.supervisions == [] and cut.sampling_rate == 16000
    np.testing.assert_array_equal(cut.load_audio(), open_pack(str(tmp_path / "pack")).sample(0).targets)
