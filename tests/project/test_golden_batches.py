"""Every field of every batch, pinned: a digest per loader configuration and state over two epochs, equal with 0 and
2 workers, against ``tests/data/golden_batches.json``.

A refactor must leave what training sees bit-identical; these digests say so for each task's main configurations
(TSE pre-mixed, with cues, online mixing with reverb and noise, mainline WeSep recipes; ASR length-budget and
static batching with fbank and SpecAugment; ASD with jitter), all on packs built here from real recordings.  A
digest that changes is a change in what a model sees: if it is meant, record the new value deliberately with
``SPEECHPACK_RECORD_GOLDEN_BATCHES=1 python -m pytest tests/project/test_golden_batches.py`` and say why in the commit.

The float features are the same bits on every machine only with the same numeric kernels: the suite runs the AVX2
ones of OpenBLAS, MKL, ATen, NumPy and OpenCV on every x86-64 CPU (``factories.kernels``), and each test first
checks that this process does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import factories.paths
from factories.batch_digests import batches_digest as digest_of_batches
from factories.asr import librivox_span_pack
from factories.cue_corpus import cue, make_cue_corpus
from factories.kernels import unpinned
from factories.online_mix import augment_packs
from factories.recordings import REAL_CORPORA, require_recording
from factories.tse import real_mixtures_config
from factories.wesep_mainline import librimix_split
from speechpack.packer.adapters.wesep_mainline import MainlineInputs, build_mainline
from speechpack.packer.build.run import BuildOptions

GOLDEN = factories.paths.DATA / "golden_batches.json"
RECORD = os.environ.get("SPEECHPACK_RECORD_GOLDEN_BATCHES") == "1"
EPOCHS = 2
WORKERS = (0, 2)
SEED = 7


def batches_digest(config: dict, state: str, workers: int) -> str:
    return digest_of_batches(config, state, workers, SEED, EPOCHS)


def check(name: str, config: dict, states=("train", "val")) -> None:
    """Each state's digest, the same with every worker count, equals the recorded one (or is recorded)."""
    other_kernels = unpinned()
    assert not other_kernels, (f"{name}: the digests are recorded with the AVX2 kernels (factories.kernels), and this "
                               f"process runs others: {'; '.join(other_kernels)}")
    golden = json.loads(GOLDEN.read_text(encoding="utf-8")) if GOLDEN.exists() else {}
    for state in states:
        digests = {workers: batches_digest(config, state, workers) for workers in WORKERS}
        assert len(set(digests.values())) == 1, f"{name}/{state}: batches differ with the worker count: {digests}"
        key = f"{name}/{state}"
        if RECORD:
            golden[key] = digests[0]
            GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        else:
            assert key in golden, f"{key}: no recorded digest (record it: see this module's docstring)"
            assert digests[0] == golden[key], f"{key}: the batches changed ({digests[0]} != {golden[key]})"


def test_tse_premixed_batches_are_unchanged(real_audio, wesep_list, tmp_path):
    config = real_mixtures_config(real_audio, wesep_list, tmp_path / "tse", count=9, seconds=0.8, seconds_step=0.3,
                                  seconds_cycle=3, start_step=0.1, partner=1)
    check("tse-premixed", config)
    config["dataset_args"].update(chunk_short_policy="keep", chunk_len=12000, batch_size=3)
    check("tse-premixed-keep", config, states=("train",))


def test_tse_cue_batches_are_unchanged(tmp_path, wesep_list, real_audio):
    corpus = make_cue_corpus(tmp_path, wesep_list, real_audio)
    pack = corpus.build("cues", {"audio": cue(corpus.resources["by_speaker"], "random", "spk_id"),
                                 "spatial": cue(corpus.resources["track"], fields=["azimuth", "elevation"])},
                       labels=True)
    config = {"packs": [{"path": pack}], "dataset_args": {
        "batch_size": 2, "shuffle": True, "chunk_len": 4000,
        "cues": {"audio": {"use": True}, "spatial": {"use": True}}}}
    check("tse-cues", config)


def test_online_mix_with_reverb_and_noise_batches_are_unchanged(real_audio, wesep_list, tmp_path):
    src, noise, rirs = augment_packs(real_audio, wesep_list, tmp_path, rirs=True)
    config = {"packs": [{"path": src}], "dataset_args": {
        "online_mix": True, "num_speakers": {"distribution": [0.2, 0.5, 0.3], "max_speakers": 3}, "chunk_len": 8000, "batch_size": 3, "shuffle": True,
        "reverb_prob": 0.5, "rir_banks": [{"path": rirs}], "noise_prob": 0.7, "noise_banks": [{"path": noise}]}}
    check("tse-online-augment", config, states=("train",))
    config["dataset_args"].update(rir_banks=None, reverb_conf={"rt60": [0.2, 0.6]}, reverb_prob=1.0)
    check("tse-online-simulated-rooms", config, states=("train",))


def test_mainline_recipe_batches_are_unchanged(tmp_path):
    package, _, paths = REAL_CORPORA["pocketsphinx"]
    recordings = [require_recording(package, path) for path in paths[:4]]
    data = tmp_path / "data"
    librimix_split(data, recordings, mixtures=6)
    train, dev = str(tmp_path / "train"), str(tmp_path / "dev")
    build_mainline(MainlineInputs(list_path=str(data / "shard.list"), enroll=str(data / "spk2enroll.json")),
                   BuildOptions(out=train, sample_rate=16000, workers=1, progress=False))
    build_mainline(MainlineInputs(list_path=str(data / "wav.scp"), enroll=str(data / "single.wav.scp"),
                                  fixed_enroll=(str(data / "spk1.enroll"), str(data / "spk2.enroll"))),
                   BuildOptions(out=dev, sample_rate=16000, workers=1, progress=False))
    for name, speaker_feat in (("mainline-fbank", True), ("mainline-audio", False)):
        for state, pack in (("train", train), ("val", dev)):
            recipe = {"packs": [{"path": pack}],
                      "dataloader_args": {"batch_size": 2, "drop_last": True, "num_workers": 0, "pin_memory": False},
                      "dataset_args": {"resample_rate": 16000, "sample_num_per_epoch": 0, "shuffle": True,
                                       "shuffle_args": {"shuffle_size": 2500}, "chunk_len": 8000,
                                       "speaker_feat": speaker_feat,
                                       "fbank_args": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25,
                                                      "dither": 1.0}},
                      "model_args": {"tse_model": {"sr": 16000, "joint_training": True, "spk_feat": speaker_feat}},
                      "seed": 42}
            check(name, recipe, states=(state,))


def test_asr_batches_are_unchanged(tmp_path):
    pack = librivox_span_pack(tmp_path, count=24, seed=3, seconds=(0.6, 2.5), words=4)
    base = {"task": "asr", "packs": [{"path": pack}]}
    check("asr-length-fbank-specaugment", {**base, "dataset_args": {
        "max_num_elements": 120_000, "num_seqs_multiple_of": 2, "use_fbank": True, "spec_aug_p": 0.8,
        "spec_aug_freq_mask_param": 20, "spec_aug_time_mask_param": 10}})
    check("asr-static-waveform", {**base, "dataset_args": {
        "batching_strategy": "STATIC", "batch_size": 5, "normalize_audio": True, "drop_remainder": False}})


def test_asd_jitter_batches_are_unchanged(tmp_path, real_video):
    from factories.asd_inputs import make_asd_pack

    pack = make_asd_pack(tmp_path / "asd")
    check("asd-jitter", {"task": "asd", "packs": [{"path": pack}], "dataset_args": {
        "train_window": 40, "hist_frames": 10, "frame_budget": 80, "min_batch": 1, "jitter": True}})


def test_a_process_with_other_numeric_kernels_is_named():
    """The check the golden tests start with names a library that runs other kernels (here OpenBLAS told to use its
    Sandybridge ones, which any AVX2 CPU runs) rather than letting the digests fail without a reason."""
    probe = "from factories.kernels import unpinned; print(unpinned())"
    env = {**os.environ, "OPENBLAS_CORETYPE": "Sandybridge"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=factories.paths.TESTS, env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert "OPENBLAS_CORETYPE='Sandybridge', not 'Haswell'" in out and "runs its Sandybridge kernels" in out, out
    assert unpinned() == [], "this process, pinned by conftest, runs other kernels too"
