"""Every task trains from FLAC packs as from their pcm16 packs, bit for bit: the configurations of
tests/project/test_golden_batches.py (real recordings), with every pack they read (sources, noise and RIR banks,
cue packs, ASD and ASR packs) re-encoded, give the same batches over two epochs, for train and val, with 0 and 2
workers.  Opus packs train too: same batch shapes, same keys, audio within the codec's loss."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from factories.asr import librivox_span_pack
from factories.batch_digests import batches_digest as digest_of_batches
from factories.compressed import recode
from factories.cue_corpus import cue, make_cue_corpus
from factories.online_mix import augment_packs
from factories.tse import real_mixtures_config
from speechpack.loader import build_loader

EPOCHS = 2
SEED = 7


def batches_digest(config: dict, state: str, workers: int) -> str:
    return digest_of_batches(config, state, workers, SEED, EPOCHS)


def recoded(config: dict, codec: str, root: Path, **kwargs) -> dict:
    """``config`` with every pack it reads (``packs``, noise and RIR banks) re-encoded with ``codec``."""
    config = copy.deepcopy(config)
    made: dict[str, str] = {}

    def swap(entry: dict) -> None:
        path = str(entry["path"])
        if path not in made:
            made[path] = recode(path, root / f"{codec}-{len(made)}", codec, **kwargs)
        entry["path"] = made[path]
    for entry in config["packs"]:
        swap(entry)
    for bank in ("noise_banks", "rir_banks"):
        for entry in config.get("dataset_args", {}).get(bank) or ():
            swap(entry)
    return config


def same_batches(config: dict, root: Path, states=("train", "val"), **kwargs) -> None:
    """The FLAC copy's batches equal the pcm16 config's, every state, 0 and 2 workers (the pcm16 config's own
    independence of the worker count is tests/project/test_golden_batches.py's)."""
    flac = recoded(config, "flac", root, **kwargs)
    for state in states:
        want = batches_digest(config, state, 0)
        for workers in (0, 2):
            assert batches_digest(flac, state, workers) == want, f"{state}, {workers} workers: batches differ"


def test_tse_premixed_flac_batches_equal_pcm16(real_audio, wesep_list, tmp_path):
    config = real_mixtures_config(real_audio, wesep_list, tmp_path / "tse", count=9, seconds=0.8, seconds_step=0.3,
                                  seconds_cycle=3, start_step=0.1, partner=1)
    same_batches(config, tmp_path, block_frames=3000)  # 8000-sample chunks across blocks
    config["dataset_args"].update(chunk_short_policy="keep", chunk_len=12000, batch_size=3)
    same_batches(config, tmp_path / "keep", states=("train",))


def test_tse_resampled_at_load_time_flac_batches_equal_pcm16(real_audio, wesep_list, tmp_path):
    config = real_mixtures_config(real_audio, wesep_list, tmp_path / "tse", count=5, seconds=0.8, seconds_step=0.3,
                                  seconds_cycle=3, start_step=0.1, partner=1)
    config["dataset_args"].update(resample_rate=8000, chunk_len=4000)  # the item-by-item path, soxr on decoded audio
    same_batches(config, tmp_path, states=("train",), block_frames=3000)


def test_tse_cue_flac_batches_equal_pcm16(tmp_path, wesep_list, real_audio):
    corpus = make_cue_corpus(tmp_path, wesep_list, real_audio)
    pack = corpus.build("cues", {"audio": cue(corpus.resources["by_speaker"], "random", "spk_id"),
                                 "spatial": cue(corpus.resources["track"], fields=["azimuth", "elevation"])},
                       labels=True)
    config = {"packs": [{"path": pack}], "dataset_args": {
        "batch_size": 2, "shuffle": True, "chunk_len": 4000,
        "cues": {"audio": {"use": True}, "spatial": {"use": True}}}}
    same_batches(config, tmp_path)


def test_online_mix_from_compressed_sources_and_banks_equals_pcm16(real_audio, wesep_list, tmp_path):
    src, noise, rirs = augment_packs(real_audio, wesep_list, tmp_path, rirs=True)
    config = {"packs": [{"path": src}], "dataset_args": {
        "online_mix": True, "num_speakers": {"distribution": [0.2, 0.5, 0.3], "max_speakers": 3}, "chunk_len": 8000,
        "batch_size": 3, "shuffle": True, "reverb_prob": 0.5, "rir_banks": [{"path": rirs}], "noise_prob": 0.7,
        "noise_banks": [{"path": noise}]}}
    same_batches(config, tmp_path, states=("train",), block_frames=5000)


def test_mainline_recipe_flac_batches_equal_pcm16(tmp_path):
    from factories.recordings import REAL_CORPORA, require_recording
    from factories.wesep_mainline import librimix_split
    from speechpack.packer.adapters.wesep_mainline import MainlineInputs, build_mainline
    from speechpack.packer.build.run import BuildOptions

    package, _, paths = REAL_CORPORA["pocketsphinx"]
    data = tmp_path / "data"
    librimix_split(data, [require_recording(package, path) for path in paths[:4]], mixtures=6)
    train = str(tmp_path / "train")
    build_mainline(MainlineInputs(list_path=str(data / "shard.list"), enroll=str(data / "spk2enroll.json")),
                   BuildOptions(out=train, sample_rate=16000, workers=1, progress=False))
    recipe = {"packs": [{"path": train}],
              "dataloader_args": {"batch_size": 2, "drop_last": True, "num_workers": 0, "pin_memory": False},
              "dataset_args": {"resample_rate": 16000, "sample_num_per_epoch": 0, "shuffle": True,
                               "shuffle_args": {"shuffle_size": 2500}, "chunk_len": 8000, "speaker_feat": True,
                               "fbank_args": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25,
                                              "dither": 1.0}},
              "model_args": {"tse_model": {"sr": 16000, "joint_training": True, "spk_feat": True}},
              "seed": 42}
    same_batches(recipe, tmp_path, states=("train",), block_frames=3000)


def test_asr_flac_batches_equal_pcm16(tmp_path):
    pack = librivox_span_pack(tmp_path, count=24, seed=3, seconds=(0.6, 2.5), words=4)
    base = {"task": "asr", "packs": [{"path": pack}]}
    same_batches({**base, "dataset_args": {
        "max_num_elements": 120_000, "num_seqs_multiple_of": 2, "use_fbank": True, "spec_aug_p": 0.8,
        "spec_aug_freq_mask_param": 20, "spec_aug_time_mask_param": 10}}, tmp_path / "fbank")
    same_batches({**base, "dataset_args": {
        "batching_strategy": "STATIC", "batch_size": 5, "normalize_audio": True, "drop_remainder": False}},
        tmp_path / "waveform")


def test_asd_flac_batches_equal_pcm16(tmp_path, real_video):
    from factories.asd_inputs import make_asd_pack

    pack = make_asd_pack(tmp_path / "asd")
    same_batches({"task": "asd", "packs": [{"path": pack}], "dataset_args": {
        "train_window": 40, "hist_frames": 10, "frame_budget": 80, "min_batch": 1, "jitter": True}}, tmp_path)


def test_opus_batches_keep_shapes_and_keys_within_the_codec_loss(real_audio, wesep_list, tmp_path):
    config = real_mixtures_config(real_audio, wesep_list, tmp_path / "tse", count=6, seconds=1.5, seconds_step=0.3,
                                  seconds_cycle=3, start_step=0.1, partner=1)
    config["dataset_args"].update(shuffle=False, chunk_len=16000)
    opus = recoded(config, "opus", tmp_path, block_frames=16000)
    pcm_batches = list(build_loader(config, "val", seed=SEED, num_workers=0))
    opus_batches = list(build_loader(opus, "val", seed=SEED, num_workers=2))
    assert len(pcm_batches) == len(opus_batches)
    for want, got in zip(pcm_batches, opus_batches):
        assert got["key"] == want["key"] and got["spk"] == want["spk"]
        for field in ("wav_mix", "wav_target"):
            a, b = want[field].numpy(), got[field].numpy()
            assert a.shape == b.shape
            snr = 10 * np.log10((a ** 2).sum() / ((a - b) ** 2).sum())
            assert snr >= 10.0, f"{field}: {snr:.1f} dB"


def test_workers_decode_and_the_training_process_does_not(real_audio, wesep_list, tmp_path, monkeypatch):
    from speechpack.loader.pack import blocks as block_codec

    config = recoded(real_mixtures_config(real_audio, wesep_list, tmp_path / "tse", count=4, seconds=0.8,
                                          seconds_step=0.3, seconds_cycle=3, start_step=0.1, partner=1),
                     "flac", tmp_path)
    decoded = []
    real = block_codec.decode_block
    monkeypatch.setattr(block_codec, "decode_block", lambda *args: decoded.append(args[3]) or real(*args))
    assert list(build_loader(config, "train", seed=SEED, num_workers=2))
    assert decoded == []  # every block was decoded in a worker (their counts stay in their processes)
    assert list(build_loader(config, "train", seed=SEED, num_workers=0))
    assert sum(decoded) > 0


@pytest.mark.parametrize("codec", ["flac", "opus"])
def test_a_pack_built_with_a_codec_trains_as_its_pcm16_build(real_audio, wesep_list, tmp_path, codec):
    from factories.wesep_lists import Mix
    from speechpack.loader.pack import open_pack
    from speechpack.packer.adapters.wesep import build_wesep
    from speechpack.packer.build.run import BuildOptions

    p = real_audio("pocketsphinx", 4)
    case = wesep_list([Mix(f"m{i}", (p[i % 4], p[(i + 1) % 4]), seconds=1.0 + 0.4 * i, start=0.1 * i)
                       for i in range(5)])
    built = {}
    for name, options in (("pcm16", {}), (codec, {"codec": codec, "block_seconds": 0.25})):
        built[name] = str(tmp_path / name)
        build_wesep(str(case.list_path), BuildOptions(out=built[name], sample_rate=16000, progress=False, **options))
    assert open_pack(built[codec]).blocks["mix"].codec == codec
    config = {"packs": [{"path": built["pcm16"]}], "dataset_args": {"batch_size": 2, "chunk_len": 8000,
                                                                    "shuffle": True}}
    coded = {**config, "packs": [{"path": built[codec]}]}
    if codec == "flac":
        for state in ("train", "val"):
            want = batches_digest(config, state, 0)
            assert batches_digest(coded, state, 0) == want and batches_digest(coded, state, 2) == want
        return
    for want, got in zip(build_loader(config, "val", seed=SEED), build_loader(coded, "val", seed=SEED)):
        assert got["key"] == want["key"] and got["wav_mix"].shape == want["wav_mix"].shape
        a, b = want["wav_target"].numpy(), got["wav_target"].numpy()
        assert 10 * np.log10((a ** 2).sum() / ((a - b) ** 2).sum()) >= 10.0
