"""``speechpack peek``: one model-ready batch of a YAML config, printed and optionally written as WAV files."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import yaml
from click.testing import CliRunner

from speechpack.cli import main
from factories import Mix
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

pytestmark = pytest.mark.real_data


@pytest.fixture
def config_path(tmp_path, wesep_list, real_audio):
    librivox = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("m1", tuple(librivox[:2])), Mix("m2", tuple(librivox[1:3]))])
    pack = tmp_path / "pack"
    build_wesep(str(case.list_path), BuildOptions(out=str(pack), progress=False))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"packs": [{"path": str(pack)}],
                                    "dataset_args": {"batch_size": 2, "chunk_len": 8000, "shuffle": False}}))
    return path


def test_peek_prints_every_field_and_writes_wavs(config_path, tmp_path):
    wavs = tmp_path / "wavs"
    result = CliRunner().invoke(main, ["peek", str(config_path), "--save-wavs", str(wavs)])
    assert result.exit_code == 0, result.output
    assert "train: 2 items, 0 filtered out, 1 batches per rank" in result.output
    assert "wav_mix        (4, 1, 8000)" in result.output and "float32" in result.output
    assert "wav_target     (4, 1, 8000)" in result.output
    assert "speaker_label  (4,)" in result.output and "range [-100, -100]" in result.output
    assert "key            list[4]" in result.output and "'m1', 'm1', 'm2', 'm2'" in result.output
    files = sorted(p.name for p in wavs.iterdir())
    assert len(files) == 8 and files[0] == "000_m1_spk-librivox0870_mix.wav"
    audio, rate = soundfile.read(wavs / files[0])
    assert rate == 16000 and audio.shape == (8000,) and np.abs(audio).max() > 0


def test_peek_val_state_reads_whole_utterances(config_path):
    result = CliRunner().invoke(main, ["peek", str(config_path), "--state", "val"])
    assert result.exit_code == 0, result.output
    assert "wav_mix        (4, 1, 24000)" in result.output  # two 1.5 s mixtures, whole


def test_peek_names_a_bad_config(tmp_path, config_path):
    config = yaml.safe_load(config_path.read_text())
    config["dataset_args"]["chunk_lenght"] = 8000
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(main, ["peek", str(bad)])
    assert result.exit_code == 1
    assert "unknown key(s) chunk_lenght" in result.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("packs: [unclosed")
    result = CliRunner().invoke(main, ["peek", str(broken)])
    assert result.exit_code == 1 and "not valid YAML" in result.output


def test_peek_seed_changes_the_training_windows(config_path):
    outputs = [CliRunner().invoke(main, ["peek", str(config_path), "--seed", str(seed)]).output for seed in (0, 0, 7)]
    ratios = [next(line for line in text.splitlines() if line.startswith("chunk_ratio")) for text in outputs]
    assert ratios[0] == ratios[1] and ratios[0] != ratios[2]


def _empty_val(tmp_path, config_path) -> tuple[dict, str]:
    """The config as a WeSep recipe whose dev set (2 mixtures) is smaller than one batch with drop_last."""
    config = yaml.safe_load(config_path.read_text())
    config["dataset_args"].pop("batch_size")
    config["dataloader_args"] = {"batch_size": 8, "drop_last": True}
    path = tmp_path / "empty-val.yaml"
    path.write_text(yaml.safe_dump(config))
    return config, str(path)


WHY = ("2 items, all 2 dropped as an incomplete round (drop_last: true / tail: drop; a round takes batch_size 8 x "
       "world size 1); lower the batch size or set drop_last: false (tail: pad)")


def test_peek_says_why_the_val_plan_holds_no_batch(tmp_path, config_path):
    _config, path = _empty_val(tmp_path, config_path)
    result = CliRunner().invoke(main, ["peek", path, "--state", "val"])
    assert result.exit_code == 1
    assert f"error: {path}: the val plan holds no batch: {WHY}" in result.output, result.output
    assert "Warning" not in result.output  # said once, as the error


def test_the_loader_warns_when_its_plan_holds_no_batch_and_reports_why(tmp_path, config_path):
    from speechpack.loader import build_loader

    config, _path = _empty_val(tmp_path, config_path)
    with pytest.warns(UserWarning, match=r"^the val plan holds no batch: 2 items, all 2 dropped"):
        loader = build_loader(config, "val")
    assert len(loader) == 0 and loader.report().no_batch == WHY
    assert build_loader({**config, "dataloader_args": {"batch_size": 1}}, "val").report().no_batch is None
