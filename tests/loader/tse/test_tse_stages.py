"""The TSE pipeline of stages (``loader.tse.stages``): its order per configuration, a stage added by one module and
one registration (the toy ``RandomGain`` of tests/factories/gain_stage.py) that changes no other stage's output,
the stages' own streams (``loader.rng``), and the one decode path (``loader.samples``) that every path
takes, with the normaliser chosen once."""

from __future__ import annotations

import numpy as np
import pytest

from factories.cue_corpus import cue, make_cue_corpus
from factories.gain_stage import KEYS, RandomGain, gain_stage
from factories.online_mix import augment_packs, mix_config
from speechpack import loader
from speechpack.loader.normalize import NORMALIZERS, Normalizer
from speechpack.loader.rng import augment_rng, batch_rng, dither_rng, item_rng, stage_rng, stream_at
from speechpack.loader.tse.decode import Decoder
from speechpack.loader.samples import MixedChannels, check_one_channel_count
from speechpack.loader.tse.stages.pipeline import STAGES, register_stage, unregister_stage
from speechpack.loader.tse.stages.protocol import BatchState
from speechpack.loader.tse.table import TableRows

SEED = 5


@pytest.fixture
def cue_pack(tmp_path, wesep_list, real_audio):
    corpus = make_cue_corpus(tmp_path, wesep_list, real_audio)
    return corpus.build("cues", {"audio": cue(corpus.resources["by_speaker"], "random", "spk_id")}, labels=True)


@pytest.fixture
def noise_bank(tmp_path, wesep_list, real_audio):
    (tmp_path / "banks").mkdir()
    return augment_packs(real_audio, wesep_list, tmp_path / "banks")[1]


@pytest.fixture
def with_gain():
    register_stage("gain", gain_stage, after="noise", keys=KEYS)
    yield
    unregister_stage("gain")


def _premixed(pack: str, noise: str) -> dict:
    """Pre-mixed training with offline noise and a random enrollment cue: the windows', the noise's and the cues'
    draws all in play."""
    return {"packs": [{"path": pack}], "dataset_args": {
        "batch_size": 2, "shuffle": True, "chunk_len": 4000, "cues": {"audio": {"use": True}},
        "noise_prob": 0.8, "noise_banks": [{"path": noise}]}}


def _batches(config: dict, state: str = "train", epochs: int = 2) -> list[dict]:
    ld = loader.build_loader(config, state, seed=SEED)
    out = []
    for epoch in range(epochs):
        ld.set_epoch(epoch)
        out += [{k: (v.clone() if hasattr(v, "clone") else v) for k, v in batch.items()} for batch in ld]
    return out


def _same(a, b) -> bool:
    if hasattr(a, "numpy"):
        return np.array_equal(a.numpy(), b.numpy())
    return a == b if not isinstance(a, np.ndarray) else np.array_equal(a, b)


def test_the_pipeline_runs_its_stages_in_order_for_each_configuration(cue_pack, noise_bank, tmp_path, wesep_list,
                                                                      real_audio):
    premixed = loader.build_loader(_premixed(cue_pack, noise_bank), "train", seed=SEED).dataset.builder
    assert premixed.pipeline.names == ["windows", "decode", "noise", "cues", "collate"]
    val = loader.build_loader(_premixed(cue_pack, noise_bank), "val", seed=SEED).dataset.builder
    assert val.pipeline.names == ["windows", "decode", "cues", "collate"]  # no augmentation out of training
    (tmp_path / "online").mkdir()
    sources = augment_packs(real_audio, wesep_list, tmp_path / "online")[0]
    online = loader.build_loader(mix_config(sources), "train", seed=SEED).dataset.builder
    assert online.pipeline.names == ["online_mix", "cues", "collate"]


def test_a_registered_stage_runs_where_registered_and_changes_no_other_stage_output(cue_pack, noise_bank):
    config = _premixed(cue_pack, noise_bank)
    before = _batches(config)
    register_stage("gain", gain_stage, after="noise", keys=KEYS)
    try:
        ld = loader.build_loader(config, "train", seed=SEED)
        assert ld.dataset.builder.pipeline.names == ["windows", "decode", "noise", "gain", "cues", "collate"]
        after = _batches(config)
        val = loader.build_loader(config, "val", seed=SEED).dataset.builder.pipeline.names
    finally:
        unregister_stage("gain")
    assert "gain" not in val and "gain" not in [name for name, _ in STAGES]
    assert len(before) == len(after) >= 4
    for b, (old, new) in enumerate(zip(before, after)):
        assert list(old) == list(new)
        for key in old:  # every field of the other stages as it was: windows, noise, cues (their draws), labels
            if key != "wav_mix":
                assert _same(old[key], new[key]), f"batch {b}: {key} changed"
        old_mix, new_mix = old["wav_mix"].numpy(), new["wav_mix"].numpy()
        heard = old_mix != 0
        ratio = new_mix[heard] / old_mix[heard]
        assert heard.any() and not np.array_equal(old_mix, new_mix)
        assert np.all((ratio > 10 ** (-6 / 20) - 1e-5) & (ratio <= 1 + 1e-6))


def test_the_toy_stage_scales_each_mixture_by_its_own_stream_draw(cue_pack, noise_bank, with_gain):
    config = _premixed(cue_pack, noise_bank)
    ld = loader.build_loader(config, "train", seed=SEED)
    plan = ld.dataset.plan(0)
    builder = ld.dataset.builder
    units, valid = plan.batch(0)
    global_batch = int(plan.global_batch[0])
    with_stage = builder.build(units, valid, 0, global_batch)
    wav_mix = np.array(with_stage["wav_mix"])
    unregister_stage("gain")
    try:
        plain = loader.build_loader(config, "train", seed=SEED).dataset.builder.build(units, valid, 0, global_batch)
    finally:
        register_stage("gain", gain_stage, after="noise", keys=KEYS)
    factors = RandomGain(SEED).gains(BatchState(units, valid, 0, global_batch, item_ids=units))
    expected = np.array(plain["wav_mix"])
    item_of_row = [i for i, n in enumerate(_mixtures(plain)) for _ in range(n)]
    assert len(item_of_row) == len(expected) and len(set(factors.tolist())) == len(units)
    for r, item in enumerate(item_of_row):
        expected[r] *= factors[item]
    np.testing.assert_array_equal(wav_mix, expected)
    for key in plain:
        if key != "wav_mix":
            assert _same(plain[key], with_stage[key]), key


def _mixtures(batch: dict) -> list[int]:
    """Rows per mixture of a batch (rows are mixture-major; consecutive rows with one key are one mixture)."""
    counts: list[int] = []
    previous = None
    for key in batch["key"]:
        if key != previous:
            counts.append(0)
            previous = key
        counts[-1] += 1
    return counts


def test_register_stage_refuses_a_taken_name_and_an_unknown_anchor():
    with pytest.raises(ValueError, match="a new stage name"):
        register_stage("cues", gain_stage, after="noise")
    with pytest.raises(ValueError, match="no stage 'nowhere'"):
        register_stage("gain", gain_stage, after="nowhere")
    with pytest.raises(ValueError, match="built-in"):
        unregister_stage("decode")
    assert [name for name, _ in STAGES] == ["windows", "decode", "online_mix", "noise", "cues", "collate", "mainline"]


def test_a_stage_stream_is_its_own_and_keyed_by_seed_epoch_batch_and_name():
    own = stage_rng(3, "gain", 1, 4).random(64)
    np.testing.assert_array_equal(own, stage_rng(3, "gain", 1, 4).random(64))
    others = [stage_rng(3, "gain2", 1, 4), stage_rng(3, "gain", 0, 4), stage_rng(3, "gain", 1, 5),
              stage_rng(4, "gain", 1, 4), batch_rng(3, 1, 4), augment_rng(3, 1, 4), dither_rng(3, 1, 4),
              item_rng(3, 1, 4, 0)]
    for other in others:
        assert not np.intersect1d(own, other.random(4096)).size


def test_stream_at_starts_a_stream_at_its_declared_position():
    whole = batch_rng(2, 0, 3).random(20)
    np.testing.assert_array_equal(stream_at(batch_rng(2, 0, 3), 12).random(8), whole[12:])
    np.testing.assert_array_equal(stream_at(batch_rng(2, 0, 3), 0).random(20), whole)


def test_every_decode_path_applies_the_normaliser_chosen_once(cue_pack, monkeypatch):
    """A normaliser the loader does not know reaches the table path and the item-by-item path alike: neither
    decides on its own how to normalise."""
    halve = Normalizer("halve", gains=lambda rms, peak: np.full(np.shape(rms), 0.5))
    monkeypatch.setitem(NORMALIZERS, "halve", halve)
    ld = loader.build_loader({"packs": [{"path": cue_pack}], "dataset_args": {"batch_size": 2, "chunk_len": 4000}},
                             "train", seed=SEED)
    builder = ld.dataset.builder
    plan = ld.dataset.plan(0)
    units, _ = plan.batch(0)
    draws = batch_rng(SEED, 0, int(plan.global_batch[0])).random((len(units), builder.chunking.draws_per_window))
    plain = builder.table.rows(units, draws, None)
    wav_mix, wav_target = np.array(plain.wav_mix), np.array(plain.wav_target)
    table = TableRows(builder.packs, builder.items, builder.mix_stream, builder.target_stream, halve,
                      builder.chunking, None, ("max", "max"))
    halved = table.rows(units, draws, None)
    np.testing.assert_array_equal(halved.wav_mix, wav_mix * np.float32(0.5))
    np.testing.assert_array_equal(halved.wav_target, wav_target * np.float32(0.5))
    decode = builder.pipeline.stage("decode")
    monkeypatch.setattr(decode, "decoder", Decoder(builder.packs, builder.rate, "halve"))
    items = decode.item_rows(units, draws, None)
    np.testing.assert_array_equal(items.wav_mix, wav_mix * np.float32(0.5))
    np.testing.assert_array_equal(items.wav_target, wav_target * np.float32(0.5))


def test_a_batch_of_mixtures_with_different_channel_counts_is_refused_in_one_place():
    check_one_channel_count([2, 2], ["a", "b"])
    with pytest.raises(MixedChannels, match=r"different channel counts \[1, 2\] in one batch \(a, b\.\.\.\)"):
        check_one_channel_count([1, 2, 1], ["b", "a", "b"])


def test_a_builder_gives_build_or_build_block_and_the_other_follows():
    """``BatchBuilder.build`` defaults to ``build_block``'s one batch (TSE gives ``build_block`` only), and
    ``build_block`` to ``build`` each; a builder with neither says so."""
    from speechpack.loader.tasks import BatchBuilder
    from speechpack.loader.transport.batch_arrays import NUMPY

    class Blocks(BatchBuilder):
        def build_block(self, batches, arrays):
            return ({"units": units, "epoch": epoch, "arrays": arrays} for units, _valid, epoch, _batch in batches)

    class Nothing(BatchBuilder):
        pass

    units = np.arange(3)
    assert Blocks().build(units, np.ones(3, bool), 2, 0) == {"units": units, "epoch": 2, "arrays": NUMPY}
    with pytest.raises(NotImplementedError, match="neither build nor build_block"):
        Nothing().build(units, np.ones(3, bool), 0, 0)


def test_a_bank_entry_decodes_through_the_one_path_as_the_pack_reader_reads_it(noise_bank):
    """Noise and RIR bank entries (``loader.tse.augment.Bank``) are read through ``loader.samples.decoded``,
    bit for bit the floats of the pack reader's ``read_segment``."""
    from speechpack.loader.pack import open_pack
    from speechpack.loader.samples import decoded
    from speechpack.schemas.constants import STREAM_AUDIO

    pack = open_pack(noise_bank)
    segments = len(pack.streams[STREAM_AUDIO].length)
    assert segments >= 1
    for segment in range(segments):
        ours = decoded(pack, STREAM_AUDIO, segment)
        assert ours.dtype == np.float32 and ours.shape[1] > 1000
        np.testing.assert_array_equal(ours, pack.read_segment(STREAM_AUDIO, segment))


def test_every_built_in_stage_has_its_stream_written_in_the_rng_table():
    """``loader.rng``'s table of TSE stages names every built-in stage, and each stage declares the streams it
    draws from by the names of ``loader.rng``'s generators."""
    from speechpack.loader import rng
    from speechpack.loader.tse.stages import collate, cues, decode, mainline, noise, online_mix, windows

    classes = [windows.WindowDraws, decode.DecodeRows, online_mix.OnlineMix, noise.OfflineNoise, cues.Cues,
               collate.Collate, mainline.MainlineCollate]
    assert [cls.name for cls in classes] == [name for name, _ in STAGES]
    for cls in classes:
        assert f"``{cls.name}``" in rng.__doc__
        for stream in filter(None, (part.strip() for part in cls.stream.split(","))):
            assert callable(getattr(rng, f"{stream}_rng")), f"{cls.name}: no stream {stream}"
    assert "``stage_rng(s, name, e, b)``" in rng.__doc__


def test_a_batch_is_built_into_the_arrays_the_loader_gives_and_equals_one_built_with_numpy(cue_pack, noise_bank):
    """The arrays a worker's slot carves (``BatchArrays`` over an arena) reach every stage that makes an output
    array as an argument (no module global): the batch's audio and collated fields live in the arena, and equal
    the batch built with plain numpy."""
    from speechpack.loader.transport.batch_arrays import Arena, BatchArrays

    builder = loader.build_loader(_premixed(cue_pack, noise_bank), "train", seed=SEED).dataset.builder
    units, valid = np.arange(2), np.ones(2, bool)
    arena = Arena(np.zeros(8 << 20, dtype=np.uint8))
    carved = builder.build(units, valid, 0, 0, BatchArrays(arena))
    for name in ("wav_mix", "wav_target", "speaker_label", "spk_embed"):
        if name in carved:
            assert arena.offset_of(carved[name]) is not None, name
    plain = builder.build(units, valid, 0, 0)
    assert arena.offset_of(plain["wav_mix"]) is None
    assert carved.keys() == plain.keys()
    for name, value in plain.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(carved[name], value, err_msg=name)


def test_a_stage_key_is_one_declaration_parsed_checked_defaulted_documented_and_fingerprinted(cue_pack, noise_bank):
    """The toy gain stage's ``gain_db`` (``KEYS`` in tests/factories/gain_stage.py, one ``Key``) is, while the stage
    is registered, a ``dataset_args`` key like any other: read from a config, checked naming its path, defaulted,
    a row of the docs' table, hashed by the resume fingerprint; unregistered, it is an unknown key again and every
    config's fingerprint is what it was."""
    from dataclasses import asdict

    from speechpack.loader.config import ConfigError, LoaderConfig, loader_fingerprint
    from speechpack.loader.tse.args import DATASET_ARGS, DatasetArgs

    config = _premixed(cue_pack, noise_bank)
    quieter = {**config, "dataset_args": {**config["dataset_args"], "gain_db": [-12, -6]}}
    plain_fingerprint = DATASET_ARGS.fingerprint(asdict(DatasetArgs.from_dict(config["dataset_args"])))
    with pytest.raises(ConfigError, match="gain_db"):
        LoaderConfig.from_dict(quieter)
    register_stage("gain", gain_stage, after="noise", keys=KEYS)
    try:
        default = DatasetArgs.from_dict(config["dataset_args"], "config.dataset_args")
        assert default.stage_arg("gain_db") == (-6.0, 0.0) and DatasetArgs().stage_arg("gain_db") == (-6.0, 0.0)
        set_ = DatasetArgs.from_dict(quieter["dataset_args"], "config.dataset_args")
        assert set_.stage_arg("gain_db") == (-12.0, -6.0)
        with pytest.raises(ConfigError, match=r"config\.dataset_args\.gain_db: .*within"):
            LoaderConfig.from_dict({**config, "dataset_args": {**config["dataset_args"], "gain_db": [-90, 0]}})
        with pytest.raises(ConfigError, match=r"dataset_args\.gain_db"):
            DatasetArgs(stage_args=(("gain_db", (0, 90)),))
        assert ("| `gain_db` | [low, high] dB within [-40, 40] | [-6, 0] | the toy gain stage's range of gains |"
                in DATASET_ARGS.markdown())
        hashed = [DATASET_ARGS.fingerprint(asdict(args)) for args in (default, set_)]
        assert hashed[0]["stage_args"] == {"gain_db": (-6.0, 0.0)}
        assert hashed[0] != hashed[1] != plain_fingerprint
        builder = loader.build_loader(quieter, "train", seed=SEED).dataset.builder
        assert builder.pipeline.stage("gain").gain_db == (-12.0, -6.0)
        with pytest.raises(ValueError, match="declared already"):
            register_stage("louder", gain_stage, after="gain", keys=KEYS)
        with pytest.raises(ValueError, match="declared already"):
            from speechpack.loader.config_keys import Bool, Key

            register_stage("louder", gain_stage, after="gain", keys=(Key("shuffle", True, Bool(), "taken"),))
    finally:
        unregister_stage("gain")
    assert DATASET_ARGS.fingerprint(asdict(DatasetArgs.from_dict(config["dataset_args"]))) == plain_fingerprint
    assert "stage_args" not in plain_fingerprint and "gain_db" not in DATASET_ARGS.markdown()


def _stage_classes():
    from speechpack.loader.tse.stages.collate import Collate
    from speechpack.loader.tse.stages.cues import Cues
    from speechpack.loader.tse.stages.decode import DecodeRows
    from speechpack.loader.tse.stages.mainline import MainlineCollate
    from speechpack.loader.tse.stages.noise import OfflineNoise
    from speechpack.loader.tse.stages.online_mix import OnlineMix
    from speechpack.loader.tse.stages.windows import WindowDraws

    return (WindowDraws, DecodeRows, OnlineMix, OfflineNoise, Cues, Collate, MainlineCollate)


@pytest.mark.parametrize("dataset_args", [
    {}, {"batch_size": 4, "chunk_len": 800, "cues": {"audio": {"use": True}}, "noise_prob": 0.5,
         "noise_banks": [{"path": "/nowhere/noise"}], "normalize": True},
    {"online_mix": True, "num_speakers": {"distribution": [0, 1, 0], "max_speakers": 2}, "reverb_prob": 0.3},
    {"train_window": 1000, "hist_frames": 100, "batching": {"type": "budget", "max_frames": 5000}},
    {"mainline": {"joint_training": True}},
])
def test_every_key_has_a_reader_and_the_stages_fingerprints_make_up_the_whole(dataset_args):
    """Every ``dataset_args`` field is read by a stage (``Stage.keys``) or by the plan (``PLAN_KEYS``), each declared
    in ``DATASET_ARGS``; the fields each contributes to the resume fingerprint (``stage_fingerprint``), with the
    plan's, are the whole fingerprint."""
    from dataclasses import asdict

    from speechpack.loader.tse.args import DATASET_ARGS, DatasetArgs
    from speechpack.loader.tse.stages.pipeline import PLAN_KEYS, stage_fingerprint

    classes = _stage_classes()
    assert {cls.name for cls in classes} == {name for name, _ in STAGES}
    fields = {k.name for k in DATASET_ARGS.field_keys}
    read = set(PLAN_KEYS).union(*(cls.keys for cls in classes))
    assert read <= fields and fields - read == {"stage_args"}  # stage_args: the added stages' own keys
    args = DatasetArgs.from_dict(dataset_args)
    whole = DATASET_ARGS.fingerprint(asdict(args))
    parts = {}
    for cls in classes:
        parts.update(stage_fingerprint(cls, args))
    parts.update({name: whole[name] for name in PLAN_KEYS if name in whole})
    assert parts == whole
