"""WeSep's augmentation in the TSE batch builders, on real recordings: noise from a make_lmdb.py LMDB (or a noise
pack) on pre-mixed and online training with WeSep's key SNR rule, same-room reverberation from ``reverb_conf``,
enrollment augmentation (``cue_processing.audio``), and the same batches for any worker count and after a resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speechpack.loader import build_loader
from speechpack.loader.tse.augment import RirSource
from speechpack.loader.tse.convolve import trim_rir
from speechpack.loader.tse.mix_args import AugmentArgs
from speechpack.loader.tse.room_sim import RoomConfig, simulate_room
from speechpack.media.noise_lmdb import ENROLL_NOISE_SNR_DB, NOISE_SNR_DB, SPEECH_SNR_DB
from factories.cue_corpus import cue
from factories import require_recording
from factories.noise_lmdb import RECORDINGS, make_lmdb
from factories.online_mix import collect, mix_config, mixtures

RATE = 16000
#: dB of slack on measured SNRs (float32 sums)
TOLERANCE = 0.05
#: A cue-less online config names its cues (unused): noise_lmdb_file without cues is the older pipeline's layout.
NO_CUES = {"audio": {"use": False}}
NOISE_KEYS = ("airplane", "dolphin", "xun", "alsa_noise")
SPEECH_KEYS = ("speech_front_center", "speech_librivox")


def _make(tmp_path, keys, name):
    entries = {key: open(require_recording(*RECORDINGS[key]), "rb").read() for key in keys}
    path = tmp_path / name
    make_lmdb(path, entries)
    return str(path)


@pytest.fixture
def lmdbs(tmp_path):
    """make_lmdb.py LMDBs of real recordings: noises only, speech keys only, and both."""
    return {"noise": _make(tmp_path, NOISE_KEYS, "noise.lmdb"), "speech": _make(tmp_path, SPEECH_KEYS, "speech.lmdb"),
            "both": _make(tmp_path, NOISE_KEYS + SPEECH_KEYS, "both.lmdb")}


def _snr(clean: np.ndarray, noisy: np.ndarray) -> float:
    clean, noise = clean.astype(np.float64), (noisy - clean).astype(np.float64)
    return 10.0 * np.log10(np.sum(clean ** 2) / np.sum(noise ** 2))


@pytest.fixture
def offline_pack(corpus):  # noqa: F811
    """A pre-mixed pack of 4 real two-speaker mixtures with a fixed audio enrollment per slot."""
    return corpus.build("fixed", {"audio": cue(corpus.resources["by_slot"])})


def _offline(pack, **args):
    dataset_args = {"batch_size": 4, "shuffle": False, "chunk_len": RATE, "cues": {"audio": {"use": True}}, **args}
    return {"packs": [{"path": pack}], "dataset_args": dataset_args}


@pytest.mark.real_data
def test_offline_noise_from_the_lmdb_changes_the_mixture_only(offline_pack, lmdbs):
    """Pre-mixed training with ``noise_prob: 1``: targets and enrollments as without noise, every mixture noisy
    at an SNR in WeSep's non-speech range, the same noise in every row of a mixture."""
    clean = collect(build_loader(_offline(offline_pack), "train", seed=2))
    noisy = collect(build_loader(_offline(offline_pack, noise_prob=1.0, noise_lmdb_file=lmdbs["noise"]), "train", seed=2))
    snrs = []
    for a, b in zip(clean, noisy):
        assert torch.equal(a["wav_target"], b["wav_target"]) and torch.equal(a["audio_aux"], b["audio_aux"])
        for rows in mixtures(b):
            for r in rows[1:]:
                assert torch.equal(b["wav_mix"][r], b["wav_mix"][rows[0]])
            snrs.append(_snr(a["wav_mix"][rows[0]].numpy(), b["wav_mix"][rows[0]].numpy()))
    assert len(snrs) == 4
    assert all(NOISE_SNR_DB[0] - TOLERANCE <= s <= NOISE_SNR_DB[1] + TOLERANCE for s in snrs), snrs
    val = collect(build_loader(_offline(offline_pack, noise_prob=1.0, noise_lmdb_file=lmdbs["noise"]), "val", seed=2))
    clean_val = collect(build_loader(_offline(offline_pack), "val", seed=2))
    assert all(torch.equal(a["wav_mix"], b["wav_mix"]) for a, b in zip(clean_val, val))  # val never augments


@pytest.mark.real_data
@pytest.mark.parametrize("family, low, high", [("speech", *SPEECH_SNR_DB), ("noise", *NOISE_SNR_DB)])
def test_online_noise_snr_follows_the_key_rule(sources_pack, lmdbs, family, low, high):  # noqa: F811
    """Online mixtures with LMDB noise: the mixture minus the sum of its targets is the noise, at an SNR in the
    key family's range (``speech*``: [10, 30] dB, others [-5, 25]); non-speech noise also reaches below 10 dB."""
    path, _case = sources_pack()
    config = mix_config(path, noise_prob=1.0, noise_lmdb_file=lmdbs[family], cues=NO_CUES)
    snrs = []
    for epoch in range(2):
        ld = build_loader(config, "train", seed=epoch)
        for batch in ld:
            mix, tgt = batch["wav_mix"].numpy(), batch["wav_target"].numpy()
            for rows in mixtures(batch):
                snrs.append(_snr(tgt[rows].sum(axis=0)[0], mix[rows[0], 0]))
    assert len(snrs) >= 40
    assert all(low - TOLERANCE <= s <= high + TOLERANCE for s in snrs), (min(snrs), max(snrs))
    if family == "noise":
        assert min(snrs) < SPEECH_SNR_DB[0]


@pytest.mark.real_data
def test_lmdb_and_its_converted_pack_give_the_same_snr_rule(sources_pack, lmdbs, tmp_path):  # noqa: F811
    """``build audio-bank --kind noise --lmdb`` keeps the keys, so a pack of speech entries draws speech SNRs."""
    from click.testing import CliRunner

    from speechpack.cli import main

    out = tmp_path / "speech-pack"
    result = CliRunner().invoke(main, ["build", "audio-bank", "--kind", "noise", "--lmdb", lmdbs["speech"],
                                       "--out", str(out), "--sample-rate", str(RATE)])
    assert result.exit_code == 0, result.output
    path, _case = sources_pack()
    ld = build_loader(mix_config(path, noise_prob=1.0, noise_banks=[{"path": str(out)}]), "train", seed=0)
    snrs = [_snr(b["wav_target"].numpy()[rows].sum(axis=0)[0], b["wav_mix"].numpy()[rows[0], 0])
            for b in ld for rows in mixtures(b)]
    assert all(SPEECH_SNR_DB[0] - TOLERANCE <= s <= SPEECH_SNR_DB[1] + TOLERANCE for s in snrs)


@pytest.mark.real_data
def test_same_room_reverb_replaces_the_dry_targets(sources_pack):  # noqa: F811
    """``reverb_prob: 1`` with ``reverb_conf``: the same groups and windows as dry, the mixture the sum of its
    reverberant targets (they replace the dry ones, as WeSep), each target not a scaled copy of its dry source.
    The room's physics (RT60, direct-path delay, one room per mixture) is tests/loader/tse/test_room_sim.py's."""
    path, _case = sources_pack()
    conf = {"min_max_room": [[3, 3, 2.5], [10, 6, 4]], "rt60": [0.3, 0.6], "mic_dist": [0.5, 3.0]}
    dry = collect(build_loader(mix_config(path), "train", seed=4))
    wet = collect(build_loader(mix_config(path, reverb_prob=1.0, reverb_conf=conf), "train", seed=4))
    for a, b in zip(dry, wet):
        assert a["key"] == b["key"]
        mix, tgt = b["wav_mix"].numpy(), b["wav_target"].numpy()
        for rows in mixtures(b):
            np.testing.assert_allclose(mix[rows[0], 0], tgt[rows].sum(axis=0)[0], atol=1e-6)
        for r in range(len(b["key"])):  # not a scaled copy of the dry target: the room changed the waveform
            x, y = a["wav_target"][r, 0].numpy().astype(np.float64), tgt[r, 0].astype(np.float64)
            assert abs(np.dot(x, y)) / np.sqrt(np.dot(x, x) * np.dot(y, y)) < 0.99


def test_simulated_rirs_are_trimmed_where_their_energy_is_spent():
    """One room per key (the same RIRs again for the same draw), each RIR cut where less than 60 dB of its energy
    is left: the cut keeps all but 1e-6 of the energy."""
    conf = RoomConfig.from_wesep({"rt60": [0.5, 0.5]})
    source = RirSource(AugmentArgs(reverb_prob=1.0, reverb_conf=conf))
    rirs = source.room_rirs(0.25, 3, RATE)
    assert len(rirs) == 3
    assert all(np.array_equal(x, y) for x, y in zip(rirs, source.room_rirs(0.25, 3, RATE)))
    assert not all(np.array_equal(x[:100], y[:100]) for x, y in zip(rirs, source.room_rirs(0.5, 3, RATE)))
    rng = np.random.default_rng(0)
    full = simulate_room(rng, conf, 3, RATE).rirs
    for rir in full:
        cut = trim_rir(rir)
        energy = np.sum(rir.astype(np.float64) ** 2)
        assert len(cut) < len(rir)
        assert np.sum(cut.astype(np.float64) ** 2) >= energy * (1 - 1.01e-6)


@pytest.mark.real_data
def test_enrollment_augmentation(offline_pack, lmdbs):
    """``cue_processing.audio``: reverberated enrollments peak at 0.9 (WeSep) before the batch's prefix crop;
    noisy ones at an SNR in the enrollment ranges; mixtures and targets untouched; val never augments."""
    base = {"collate": {"audio_aux": {"align": "max"}}}
    clean = collect(build_loader(_offline(offline_pack, **base), "train", seed=1))
    reverb = collect(build_loader(_offline(offline_pack, **base, reverb_conf={}, cue_processing={
        "audio": {"reverb_enroll_prob": 1.0, "noise_enroll_prob": 0}, "visual": None}), "train", seed=1))
    noisy = collect(build_loader(_offline(offline_pack, **base, noise_lmdb_file=lmdbs["noise"], cue_processing={
        "audio": {"noise_enroll_prob": 1.0}, "spatial": None}), "train", seed=1))
    for a, r, n in zip(clean, reverb, noisy):
        assert torch.equal(a["wav_mix"], r["wav_mix"]) and torch.equal(a["wav_target"], n["wav_target"])
        for row in range(len(a["key"])):
            enrolled = a["audio_aux"][row, 0].numpy()
            length = int(np.flatnonzero(enrolled)[-1]) + 1  # the enrollment before the batch's zero padding
            assert abs(float(np.abs(r["audio_aux"][row, 0].numpy()).max()) - 0.9) < 1e-5
            snr = _snr(enrolled[:length], n["audio_aux"][row, 0].numpy()[:length])
            assert ENROLL_NOISE_SNR_DB[0] - 0.5 <= snr <= ENROLL_NOISE_SNR_DB[1] + 0.5, snr


@pytest.mark.real_data
def test_augmented_batches_same_for_any_workers_and_resume(sources_pack, lmdbs, tmp_path):  # noqa: F811
    """Reverb (simulated rooms), LMDB noise and enrollment noise all on: the same batches with 0 and 2 workers,
    and a loader resumed mid-epoch from its state continues with the same batches."""
    path, _case = sources_pack()
    config = mix_config(path, reverb_prob=0.7, reverb_conf={"rt60": [0.2, 0.4]}, noise_prob=0.8,
                        noise_lmdb_file=lmdbs["both"], cues=NO_CUES)
    one = collect(build_loader(config, "train", seed=9))
    two = collect(build_loader(config, "train", seed=9, num_workers=2))
    assert len(one) == len(two) > 2
    for x, y in zip(one, two):
        for name in x:
            assert torch.equal(x[name], y[name]) if isinstance(x[name], torch.Tensor) else x[name] == y[name], name
    first = build_loader(config, "train", seed=9)
    it = iter(first)
    next(it), next(it)
    state = first.state_dict()
    resumed = build_loader(config, "train", seed=9)
    resumed.load_state_dict(state)
    rest = collect(resumed)
    assert len(rest) == len(one) - 2
    for x, y in zip(one[2:], rest):
        assert torch.equal(x["wav_mix"], y["wav_mix"]) and torch.equal(x["wav_target"], y["wav_target"])
