"""``speechpack peek`` on asr and asd configs: the batch is described and ``--save-wavs`` writes each row's audio
(an ASR row up to its length; an ASD row's track audio), at the packs' rate."""

from __future__ import annotations

import soundfile
import yaml
from click.testing import CliRunner

from factories.asd_inputs import make_asd_pack
from speechpack.cli import main
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.adapters.asr_parquet import build_parquet
from speechpack.schemas.constants import ASD_SAMPLE_RATE
from factories import require
from factories.asr import librivox_clips, write_parquet_dataset


def _peek(tmp_path, config: dict, *extra: str):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return CliRunner().invoke(main, ["peek", str(path), *extra])


def test_peek_saves_asr_rows_up_to_their_length(tmp_path):
    require("pyarrow", "parquet")
    clips = librivox_clips()
    data = write_parquet_dataset(tmp_path / "data", clips)
    pack = build_parquet(str(data), BuildOptions(out=str(tmp_path / "pq"), progress=False), split="train").out
    config = {"task": "asr", "packs": [{"path": pack}],
              "dataset_args": {"batching_strategy": "STATIC", "batch_size": 2, "shuffle": False}}
    result = _peek(tmp_path, config, "--state", "val", "--save-wavs", str(tmp_path / "wavs"))
    assert result.exit_code == 0, result.output
    assert "source_seqs" in result.output and "target_seqs" in result.output
    wavs = sorted((tmp_path / "wavs").glob("*.wav"))
    assert len(wavs) == 2
    lengths = {clip.frames for clip in clips}
    for wav in wavs:
        info = soundfile.info(str(wav))
        assert info.samplerate == 16000 and info.frames in lengths  # no padding written


def test_peek_saves_asd_track_audio(tmp_path):
    pack = make_asd_pack(tmp_path / "asd")
    result = _peek(tmp_path, {"task": "asd", "packs": [{"path": pack}]}, "--state", "val", "--save-wavs",
                   str(tmp_path / "wavs"))
    assert result.exit_code == 0, result.output
    assert "faces" in result.output and "scored" in result.output
    wavs = sorted((tmp_path / "wavs").glob("*.wav"))
    assert wavs and all(soundfile.info(str(w)).samplerate == ASD_SAMPLE_RATE for w in wavs)
