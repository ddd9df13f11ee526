"""Mainline WeSep (github.com/wenet-e2e/wesep) drop-in: its data as its prep writes it, packed by ``build wesep``;
its recipe-shaped configs read unchanged (only ``packs`` added); its collate's batch; every refusal at once.

The splits are real speech (``factories.wesep_mainline``); packs are built once per module.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
import yaml
from click.testing import CliRunner

from factories.recordings import pack_files, require
from factories.batches import assert_batches_equal
from factories.tse import take
from factories.wesep_mainline import EMBED_DIM, librimix_split, online_split, three_speaker_split
from speechpack.cli import main as cli
from speechpack.loader import build_loader
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.tse.mainline import BATCH_KEYS, MainlineArgs
from speechpack.loader.tse.mainline import kaldi_fbank
from speechpack.packer.adapters.wesep_mainline import MainlineInputs, build_mainline, find_mainline_split
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.errors import SpeechpackError

CHUNK = 8000


@pytest.fixture(scope="module")
def packs(tmp_path_factory, real_audio_paths):
    root = tmp_path_factory.mktemp("mainline")
    out, facts = mainline_packs(root, real_audio_paths, mixtures=6)
    return out, facts, root


def mainline_packs(root: Path, recordings: list[str], mixtures: int, utts_per_speaker: int = 3) -> tuple[dict, dict]:
    """A split of ``mixtures`` as mainline's prep writes it and VoxCeleb-like sources, packed every way a recipe
    reads them (train/dev, with enrollment audio or embeddings, online sources): (pack paths by name, facts)."""
    require("kaldiio", "dev")
    data = root / "data"
    facts = librimix_split(data, recordings, mixtures=mixtures, utts_per_speaker=utts_per_speaker)
    online_split(root / "vox", recordings, utts_per_speaker=utts_per_speaker)
    fixed = (str(data / "spk1.enroll"), str(data / "spk2.enroll"))
    inputs = {
        "train": MainlineInputs(list_path=str(data / "shard.list"), enroll=str(data / "spk2enroll.json")),
        "dev": MainlineInputs(list_path=str(data / "wav.scp"), enroll=str(data / "single.wav.scp"),
                              fixed_enroll=fixed),
        "train_emb": MainlineInputs(list_path=str(data / "shard.list"), spk_embeds=str(data / "embed.scp"),
                                    utt2spk=str(data / "single.utt2spk")),
        "dev_emb": MainlineInputs(list_path=str(data / "shard.list"), spk_embeds=str(data / "embed.scp"),
                                  fixed_enroll=fixed),
        "vox": find_mainline_split(str(root / "vox")),
    }
    out = {}
    for name, found in inputs.items():
        out[name] = str(root / "packs" / name)
        build_mainline(found, BuildOptions(out=out[name], sample_rate=16000, workers=1, progress=False))
    return out, facts


@pytest.fixture(scope="module")
def real_audio_paths(real_audio):
    """Through the session fixture, so that every test of the module is marked ``real_data`` (docs/testing.md)."""
    return real_audio("pocketsphinx", 4)


def recipe(pack: str, joint: bool = True, speaker_feat: bool = False, batch_size: int = 2, multi_task: bool = False,
           **dataset_args) -> dict:
    """A config shaped like mainline's ``confs/*.yaml`` (trainer sections included), with ``packs`` added."""
    args = {"resample_rate": 16000, "sample_num_per_epoch": 0, "shuffle": True, "shuffle_args": {"shuffle_size": 2500},
            "chunk_len": CHUNK, "speaker_feat": speaker_feat,
            "fbank_args": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25, "dither": 1.0},
            "noise_lmdb_file": "./data/musan/lmdb", "noise_prob": 0, "specaug_enroll_prob": 0,
            "reverb_enroll_prob": 0, "noise_enroll_prob": 0, "SSA_enroll_prob": 0, **dataset_args}
    return {"packs": [{"path": pack}],
            "dataloader_args": {"batch_size": batch_size, "drop_last": True, "num_workers": 0, "pin_memory": False},
            "dataset_args": args, "exp_dir": "exp/x", "gpus": "0", "loss": "SISDR", "model": {"tse_model": "BSRNN"},
            "model_args": {"tse_model": {"sr": 16000, "joint_training": joint, "spk_feat": speaker_feat,
                                         "multi_task": multi_task}},
            "num_epochs": 2, "seed": 42}


#: Recipe shapes of mainline's LibriMix v2 confs: fbank enrollments (speaker_feat) or enrollment audio; spexplus
#: trains with multi_task (spk_label).
RECIPES = {"bsrnn": {"speaker_feat": True}, "bsrnn_feats": {}, "dpccn": {"speaker_feat": True},
           "spexplus": {"multi_task": True}, "tfgridnet": {"speaker_feat": True}}


def test_build_reads_every_mainline_layout_into_cues(packs):
    out, facts, root = packs
    kinds = {}
    for name, path in out.items():
        meta = json.loads((Path(path) / "cues" / "audio" / "meta.json").read_text())
        kinds[name] = meta["format"]
        assert CliRunner().invoke(cli, ["validate", path]).exit_code == 0
    assert kinds == {"train": "waveform", "dev": "waveform", "train_emb": "spk_embedding",
                     "dev_emb": "spk_embedding", "vox": "waveform"}
    labels = np.load(Path(out["train"]) / "cues" / "labels" / "labels.npy")
    assert sorted(labels.tolist()) == list(range(len(facts["spk2enroll"])))


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_librimix_recipes_give_mainline_batches_in_train_and_val(packs, name):
    out, _, root = packs
    for state, pack in (("train", out["train"]), ("val", out["dev"])):
        cfg = recipe(pack, **RECIPES[name])
        loader = build_loader(cfg, state, seed=3)
        assert loader.report().dialect == "wesep-mainline"
        batch = next(iter(loader))
        rows = 4  # 2 mixtures x 2 targets
        assert tuple(batch) == BATCH_KEYS  # mainline's keys only, in its collate's order
        assert batch["wav_mix"].shape == (rows, CHUNK)  # val is cut to chunk_len too
        assert batch["wav_targets"].shape == batch["wav_mix"].shape
        assert len(batch["spk"]) == len(batch["key"]) == len(batch["length_spk_embeds"]) == rows
        embeds = batch["spk_embeds"]
        if RECIPES[name].get("speaker_feat"):
            assert embeds.shape[0] == rows and embeds.shape[2] == 80
            assert embeds.shape[1] == min(batch["length_spk_embeds"])
            assert torch.allclose(embeds.mean(dim=1), torch.zeros(rows, 80), atol=1e-3)  # mean CMVN
        else:
            assert embeds.shape == (rows, min(batch["length_spk_embeds"]))
        if RECIPES[name].get("multi_task") and state == "train":  # index of the speaker in spk2enroll.json
            order = list(json.loads((root / "data" / "spk2enroll.json").read_text()))
            assert batch["spk_label"].tolist() == [order.index(spk) for spk in batch["spk"]]
        else:
            assert batch["spk_label"].numel() == 0


def test_v1_embeddings_are_drawn_from_the_speakers_list_and_fixed_in_val(packs):
    out, facts, root = packs
    embeds = facts["embeds"]
    utt2spk = dict(line.split() for line in (root / "data" / "single.utt2spk").read_text().splitlines())
    loader = build_loader(recipe(out["train_emb"], joint=False), "train", seed=5)
    for batch in loader:
        assert batch["spk_embeds"].shape[1] == EMBED_DIM
        for row, spk in enumerate(batch["spk"]):
            candidates = [v for k, v in embeds.items() if utt2spk[k] == spk]
            assert any(np.array_equal(batch["spk_embeds"][row].numpy(), v) for v in candidates)
    val = build_loader(recipe(out["dev_emb"], joint=False), "val", seed=5)
    epochs = []
    for epoch in range(2):
        val.set_epoch(epoch)
        epochs.append({(k, s): e.numpy() for b in val for k, s, e in zip(b["key"], b["spk"], b["spk_embeds"])})
    assert epochs[0].keys() == epochs[1].keys()
    for (key, spk), vector in epochs[0].items():
        slot = 1 if facts["utt2spk"][key][0] == spk else 2
        assert np.array_equal(vector, embeds[facts["enroll"][slot][key]])
        assert np.array_equal(vector, epochs[1][(key, spk)])


def test_train_enrollments_are_utterances_of_the_target_speaker(packs):
    out, facts, _ = packs
    loader = build_loader(recipe(out["train"], batch_size=3), "train", seed=11)
    for batch in loader:
        for row, spk in enumerate(batch["spk"]):
            length = batch["length_spk_embeds"][row]
            audio = batch["spk_embeds"][row].numpy()
            pool = [soundfile.read(path, dtype="float32")[0] for _, path in facts["spk2enroll"][spk]]
            assert any(len(p) == length and np.allclose(p[:len(audio)], audio, atol=1e-4) for p in pool)


def test_voxceleb_online_recipe(packs):
    out, _, _ = packs
    cfg = recipe(out["vox"], speaker_feat=True, online_mix=True, num_speakers=2, use_random_snr=True,
                 filter_len=True, filter_len_args={"min_num_seconds": 1.0, "max_num_seconds": 100.0})
    batch = next(iter(build_loader(cfg, "train", seed=2)))
    assert batch["wav_mix"].shape == (4, CHUNK) and batch["spk_embeds"].shape[2] == 80


def test_batches_are_the_same_with_workers_and_resume(packs):
    out, _, _ = packs
    cfg = recipe(out["train"], speaker_feat=True)
    full = list(build_loader(cfg, "train", seed=4, num_workers=0))
    assert_batches_equal(list(build_loader(cfg, "train", seed=4, num_workers=2)), full)
    first = build_loader(cfg, "train", seed=4)
    take(first, 1)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = build_loader(cfg, "train", seed=4, num_workers=2)
    resumed.load_state_dict(state)
    assert_batches_equal(list(resumed), full[1:])


def test_every_refusal_at_once_mainline(packs):
    out, _, _ = packs
    cfg = recipe(out["train"], speaker_feat=True, specaug_enroll_prob=0.5, noise_prob=0.3, nosie_prob=0.1)
    cfg["dataset_args"].pop("noise_lmdb_file")
    with pytest.raises(ConfigError) as err:
        build_loader(cfg, "train", seed=0)
    text = str(err.value)
    for key in ("dataset_args.specaug_enroll_prob", "dataset_args.noise_prob", "dataset_args.nosie_prob"):
        assert key in text
    assert "3 key(s)" in text


def test_every_refusal_at_once_contract(packs):
    out, _, _ = packs
    cfg = {"packs": [{"path": out["train"]}], "dataloader_args": {"batch_size": 2},
           "dataset_args": {"speaker_feat": True, "fbank_args": {}, "use_random_snr": True, "cues": {"audio": {}}}}
    with pytest.raises(ConfigError) as err:
        build_loader(cfg, "train", seed=0)
    for key in ("speaker_feat", "fbank_args", "use_random_snr"):
        assert f"dataset_args.{key}" in str(err.value)


def test_build_command_data_dir_finds_mainline_files(packs, tmp_path):
    _, _, root = packs
    result = CliRunner().invoke(cli, ["build", "wesep", "--data-dir", str(root / "data"), "--out",
                                      str(tmp_path / "p"), "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "spk1.enroll" in result.output and "single.wav.scp" in result.output
    yaml_text = (tmp_path / "p" / "cues" / "cues.yaml").read_text()
    assert "mix_spk_id" in yaml_text and "fixed" in yaml_text


def test_gan_recipe_without_joint_training_is_mainline_and_reads_embeddings(packs):
    out, _, _ = packs
    cfg = recipe(out["train_emb"])
    del cfg["model_args"]["tse_model"]["joint_training"], cfg["model_args"]["tse_model"]["spk_feat"]
    cfg["model_args"]["discriminator"] = {}  # train_gan.py's recipes: joint_training defaults to false
    loader = build_loader(cfg, "train", seed=1)
    assert loader.report().dialect == "wesep-mainline"
    assert next(iter(loader))["spk_embeds"].shape == (4, EMBED_DIM)


def test_enrollment_fbank_matches_kaldi_native_fbank(real_audio_paths):
    knf = require("kaldi_native_fbank", "dev")
    audio = soundfile.read(real_audio_paths[0], dtype="float32")[0][:16000] * 32768
    opts = knf.FbankOptions()
    opts.frame_opts.dither, opts.frame_opts.window_type = 0.0, "hamming"
    opts.mel_opts.num_bins, opts.use_energy = 80, False
    online = knf.OnlineFbank(opts)
    online.accept_waveform(16000, audio.tolist())
    online.input_finished()
    reference = np.stack([online.get_frame(i) for i in range(online.num_frames_ready)])
    ours = kaldi_fbank(audio, 16000, MainlineArgs(dither=0.0), None)
    assert ours.shape == reference.shape
    np.testing.assert_allclose(ours, reference, atol=1e-3)


def test_peek_says_which_dialect(packs, tmp_path):
    out, _, _ = packs
    path = tmp_path / "bsrnn.yaml"
    cfg = recipe(out["train"], speaker_feat=True)
    del cfg["packs"]
    path.write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(cli, ["peek", str(path), "--pack", out["train"]])
    assert result.exit_code == 0, result.output
    assert "read as a wesep-mainline recipe" in result.output and "spk_embeds" in result.output


def test_missing_fixed_enrollments_are_reported_at_once(packs, tmp_path):
    _, facts, root = packs
    data = root / "data"
    broken = tmp_path / "spk1.enroll"
    lines = (data / "spk1.enroll").read_text().splitlines()
    broken.write_text("\n".join([lines[0].split()[0] + " nowhere/a.wav", lines[1].split()[0] + " nowhere/b.wav",
                                 *lines[2:]]) + "\n")
    inputs = MainlineInputs(list_path=str(data / "shard.list"), enroll=str(data / "single.wav.scp"),
                            fixed_enroll=(str(broken), str(data / "spk2.enroll")))
    with pytest.raises(SpeechpackError) as err:
        build_mainline(inputs, BuildOptions(out=str(tmp_path / "p"), workers=1, progress=False))
    assert "2 enrollment problem(s)" in str(err.value)
    assert "nowhere/a.wav" in str(err.value) and "nowhere/b.wav" in str(err.value)


def test_single_wav_scp_paths_keep_their_spaces(packs, tmp_path):
    """single.wav.scp's path is the rest of its line, as written: a folder named with two spaces resolves."""
    _, _, root = packs
    data = root / "data"
    spaced = tmp_path / "enroll  audio"
    spaced.mkdir()
    lines = []
    for n, line in enumerate((data / "single.wav.scp").read_text().splitlines()):
        key, path = line.split(maxsplit=1)
        copy = spaced / f"{n}.wav"
        copy.write_bytes(Path(path if Path(path).is_absolute() else data / path).read_bytes())
        lines.append(f"{key} {copy}")
    scp = tmp_path / "single.wav.scp"
    scp.write_text("\n".join(lines) + "\n")
    inputs = MainlineInputs(list_path=str(data / "wav.scp"), enroll=str(scp),
                            fixed_enroll=(str(data / "spk1.enroll"), str(data / "spk2.enroll")))
    summary = build_mainline(inputs, BuildOptions(out=str(tmp_path / "p"), workers=1, progress=False))
    assert summary.manifest is not None and summary.manifest.totals["samples"] > 0 and not summary.skipped


def _build(*args: str):
    return CliRunner().invoke(cli, ["build", "wesep", *map(str, args), "--workers", "1", "--no-progress"],
                              input="s1/x.wav ark:/dev/null:0\n")


def _split_copy(root: Path, out: Path, names=("wav.scp", "utt2spk", "single.wav.scp", "single.utt2spk",
                                            "spk1.enroll", "spk2.enroll", "embed.scp", "spk2enroll.json")) -> Path:
    """The split's text files in ``out`` (their audio and ark paths are absolute: they still resolve)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        (out / name).write_bytes((root / "data" / name).read_bytes())
    return out


@pytest.mark.parametrize("form", ["{key} touch {marker} |", "{key} | touch {marker}", "{key} ark:touch {marker} |",
                                  "{key} ark,t:-", "{key} -", "{key} ark:{ark}:31"])
def test_embed_scp_lines_never_run_a_command_nor_read_stdin(packs, tmp_path, form):
    _, _, root = packs
    data = root / "data"
    marker = tmp_path / "MARKER"
    lines = (data / "embed.scp").read_text().splitlines()
    key = lines[3].split()[0]
    lines[3] = form.format(key=key, marker=marker, ark=data / "embed.ark")
    scp = tmp_path / "embed.scp"
    scp.write_text("\n".join(lines) + "\n")
    result = _build("--list", data / "shard.list", "--spk-embeds", scp, "--utt2spk", data / "single.utt2spk",
                    "--out", tmp_path / "p")
    assert not marker.exists()
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{scp}: 1 bad line(s)" in result.output and f"{scp}:4: " in result.output


@pytest.mark.parametrize("name", ["wav.scp", "utt2spk", "spk1.enroll", "single.wav.scp", "single.utt2spk",
                                  "embed.scp"])
def test_bytes_that_are_not_utf8_are_named_by_file_and_line(packs, tmp_path, name):
    _, _, root = packs
    split = _split_copy(root, tmp_path / "dev")
    if name in ("single.utt2spk", "embed.scp"):  # the embeddings' files: training draws by speaker
        (split / "spk1.enroll").unlink(), (split / "spk2.enroll").unlink(), (split / "single.wav.scp").unlink()
        (split / "spk2enroll.json").unlink()
    lines = (split / name).read_bytes().split(b"\n")
    lines[1] = lines[1][:3] + b"\xe9" + lines[1][3:]
    (split / name).write_bytes(b"\n".join(lines))
    result = _build("--data-dir", split, "--out", tmp_path / "p")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{split / name}:2: not UTF-8 text (byte 0xe9 at byte 4 of the line)" in result.output


def test_a_speaker_listed_twice_in_spk2enroll_is_refused_naming_both_places(packs, tmp_path):
    out, facts, root = packs
    pool = list(facts["spk2enroll"].items())
    first, second = pool[0], pool[1]
    entries = [first, second, (first[0], first[1][:1]), *pool[2:]]
    text = "{\n" + ",\n".join(f" {json.dumps(spk)}: {json.dumps(utts)}" for spk, utts in entries) + "\n}\n"
    path = tmp_path / "spk2enroll.json"
    path.write_text(text)
    result = _build("--list", root / "data" / "shard.list", "--enroll", path, "--out", tmp_path / "p")
    assert result.exit_code == 1
    assert f"{path}: speaker {first[0]!r} appears 2 times (lines 2, 4)" in result.output


@pytest.mark.parametrize("extra", [(), ("--enroll", "spk2enroll.json")])
def test_utt2spk_without_spk_embeds_is_a_usage_error(packs, tmp_path, extra):
    _, _, root = packs
    data = root / "data"
    extra = [str(data / value) if value.endswith(".json") else value for value in extra]
    result = _build("--list", data / "shard.list", "--utt2spk", data / "single.utt2spk", *extra,
                    "--out", tmp_path / "p")
    assert result.exit_code == 2 and "--utt2spk" in result.output and "--spk-embeds" in result.output
    assert not (tmp_path / "p").exists()


def test_utt2spk_with_fixed_enrollment_embeddings_is_a_usage_error(packs, tmp_path):
    """Fixed enrollments name each mixture's embedding: a --utt2spk would be read by nothing, so it is refused."""
    _, _, root = packs
    data = root / "data"
    result = _build("--list", data / "shard.list", "--spk-embeds", data / "embed.scp", "--fixed-enroll",
                    data / "spk1.enroll", "--fixed-enroll", data / "spk2.enroll", "--utt2spk",
                    data / "single.utt2spk", "--out", tmp_path / "p")
    assert result.exit_code == 2, result.output
    assert "--utt2spk" in result.output and "--fixed-enroll" in result.output
    assert not (tmp_path / "p").exists()


def test_enrollment_and_embedding_problems_name_the_users_file_and_line(packs, tmp_path):
    import kaldiio

    _, facts, root = packs
    data = root / "data"
    vectors = dict(facts["embeds"])
    keys = list(vectors)
    vectors[keys[2]] = np.full(EMBED_DIM, np.nan, np.float32)
    vectors[keys[5]] = np.ones(EMBED_DIM - 3, np.float32)
    scp = tmp_path / "embed.scp"
    kaldiio.save_ark(str(tmp_path / "embed.ark"), vectors, scp=str(scp))
    for how in (("--utt2spk", data / "single.utt2spk"),
                ("--fixed-enroll", data / "spk1.enroll", "--fixed-enroll", data / "spk2.enroll")):
        result = _build("--list", data / "shard.list", "--spk-embeds", scp, *how, "--out", tmp_path / "p")
        assert result.exit_code == 1
        assert "speechpack-wesep-mainline" not in result.output
        assert f"{scp}:3: " in result.output and "NaN" in result.output  # read by kaldi_vectors, both at once
        assert f"{scp}:6: " in result.output and f"dimension {EMBED_DIM - 3}, line 1's has {EMBED_DIM}" in result.output
    # a speaker the pool lacks: the user's spk2enroll.json, not the staged resource
    pool = dict(facts["spk2enroll"])
    absent = next(iter(pool))
    del pool[absent]
    path = tmp_path / "spk2enroll.json"
    path.write_text(json.dumps(pool))
    result = _build("--list", data / "shard.list", "--enroll", path, "--out", tmp_path / "p")
    assert result.exit_code == 1 and "speechpack-wesep-mainline" not in result.output
    assert f"key {absent!r}, file {path}" in result.output and "has no enrollment there" in result.output
    # fixed enrollment audio that does not decode: the wav, and the single.wav.scp and spk1.enroll lines naming it
    single = (data / "single.wav.scp").read_text().splitlines()
    enroll_id = (data / "spk1.enroll").read_text().splitlines()[0].split()[1]
    number = next(n for n, line in enumerate(single, start=1) if line.split()[0] == enroll_id)
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunkjunk")
    single[number - 1] = f"{enroll_id} {broken}"
    (tmp_path / "single.wav.scp").write_text("\n".join(single) + "\n")
    result = _build("--list", data / "wav.scp", "--enroll", tmp_path / "single.wav.scp", "--fixed-enroll",
                    data / "spk1.enroll", "--fixed-enroll", data / "spk2.enroll", "--out", tmp_path / "p")
    assert result.exit_code == 1 and "speechpack-wesep-mainline" not in result.output
    assert f"file {broken} ({tmp_path / 'single.wav.scp'}:{number}, fixed by {data / 'spk1.enroll'}:1)" \
        in result.output


@pytest.mark.parametrize("cue", ["embeddings", "audio"])
@pytest.mark.parametrize("own_third_file", [False, True])
def test_later_fixed_slots_read_spk2_enroll_as_mainline_does(packs, tmp_path, own_third_file, cue):
    """mainline's ``sample_fix_spk_enrollment``: slot 1 from spk1.enroll, every later slot from spk2.enroll; a slot
    with a file of its own (spk3.enroll) reads that."""
    _, facts, root = packs
    split = tmp_path / "dev3"
    third = three_speaker_split(split, root / "data", own_third_file=own_third_file)
    embeddings = ("--spk-embeds", split / "embed.scp") if cue == "embeddings" else ()
    result = _build("--data-dir", split, *embeddings, "--out", tmp_path / "p")
    assert result.exit_code == 0, result.output
    loader = build_loader(recipe(str(tmp_path / "p"), joint=cue == "audio"), "val", seed=5)
    seen = 0
    for batch in loader:
        for key, spk, value in zip(batch["key"], batch["spk"], batch["spk_embeds"].numpy()):
            slot = facts["utt2spk"][key].index(spk) + 1 if spk in facts["utt2spk"][key] else 3
            assert slot != 3 or spk == third[key][0]
            if slot == 3 and own_third_file:
                enroll = third[key][1]
            else:
                enroll = facts["enroll"][min(slot, 2)][key]
            if cue == "embeddings":
                np.testing.assert_array_equal(value, facts["embeds"][enroll])
            else:
                audio = soundfile.read(facts["single"][enroll], dtype="float32")[0]
                np.testing.assert_allclose(value, audio[:len(value)], atol=1e-4)
            seen += slot == 3
    assert seen == len(third)


def test_a_gap_in_the_fixed_enrollment_files_is_refused(packs, tmp_path):
    _, _, root = packs
    split = tmp_path / "dev3"
    three_speaker_split(split, root / "data", own_third_file=True)
    (split / "spk2.enroll").unlink()
    result = _build("--data-dir", split, "--spk-embeds", split / "embed.scp", "--out", tmp_path / "p")
    assert result.exit_code == 1 and "spk1.enroll, spk3.enroll without spk2.enroll" in result.output


def test_embedding_packs_are_reproducible_and_name_their_kaldi_sources(packs, tmp_path):
    """The embeddings are staged in a temporary directory while packing; the pack names each one's ark:offset, so
    two builds of the same files are byte-identical."""
    _, _, root = packs
    data = root / "data"
    for name in ("a", "b"):
        result = _build("--list", data / "shard.list", "--spk-embeds", data / "embed.scp", "--utt2spk",
                        data / "single.utt2spk", "--out", tmp_path / name)
        assert result.exit_code == 0, result.output
    assert pack_files(tmp_path / "a") == pack_files(tmp_path / "b")
    sources = json.loads((tmp_path / "a" / "cues" / "audio" / "sources.json").read_text())["items"]
    listed = {line.split()[1] for line in (data / "embed.scp").read_text().splitlines()}
    assert sources and {item["path"] for item in sources} <= listed


@pytest.mark.parametrize("name", ["wav.scp", "single.wav.scp"])
def test_a_nul_byte_in_a_mainline_table_is_named_by_file_and_line(packs, tmp_path, name):
    _, _, root = packs
    split = _split_copy(root, tmp_path / "dev")
    lines = (split / name).read_bytes().split(b"\n")
    lines[2] = lines[2][:-4] + b"\0" + lines[2][-4:]
    (split / name).write_bytes(b"\n".join(lines))
    result = _build("--data-dir", split, "--out", tmp_path / "p")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{split / name}:3: a NUL byte at byte {len(lines[2]) - 4} of the line" in result.output


def test_a_nul_byte_in_spk2enroll_is_named_by_speaker(packs, tmp_path):
    _, facts, root = packs
    pool = json.loads(json.dumps(facts["spk2enroll"]))
    speaker = list(pool)[1]
    pool[speaker][0][1] += "\0.wav"
    path = tmp_path / "spk2enroll.json"
    path.write_text(json.dumps(pool))
    result = _build("--list", root / "data" / "shard.list", "--enroll", path, "--out", tmp_path / "p")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{path}: speaker {speaker!r}: an utterance id or path holds a NUL byte" in result.output


@pytest.mark.parametrize("name", ["wav.scp", "single.wav.scp"])
def test_wav_scp_pipe_lines_are_refused_by_line(packs, tmp_path, name):
    _, _, root = packs
    split = _split_copy(root, tmp_path / "dev")
    marker = tmp_path / "MARKER"
    lines = (split / name).read_text().splitlines()
    lines[1] = f"{lines[1].split()[0]} touch {marker} |"
    (split / name).write_text("\n".join(lines) + "\n")
    result = _build("--data-dir", split, "--out", tmp_path / "p")
    assert result.exit_code == 1 and not marker.exists()
    # the line's value is quoted whole, or elided in its middle when long (a deep temporary directory)
    assert f"{split / name}:2: 'touch " in result.output and "MARKER |' is a shell command" in result.output


def _whole_rows(cfg: dict, state: str) -> dict:
    """``(key, spk)`` -> (mixture, target) rows of whole utterances (the recipe with top-level ``whole_utt``)."""
    whole = dict(cfg, whole_utt=True)
    rows = {}
    for batch in build_loader(whole, state, seed=1):
        for key, spk, mix, target in zip(batch["key"], batch["spk"], batch["wav_mix"], batch["wav_targets"]):
            rows[(key, spk)] = (mix.numpy(), target.numpy())
    return rows


def _start_in(whole: np.ndarray, window: np.ndarray) -> list[int]:
    """Every start at which ``window`` is ``whole``'s samples."""
    return [s for s in range(len(whole) - len(window) + 1) if np.array_equal(whole[s:s + len(window)], window)]


def test_val_is_cut_to_chunk_len_in_windows_the_same_every_epoch(packs):
    out, _, _ = packs
    cfg = recipe(out["dev"])
    whole = _whole_rows(cfg, "val")
    loader = build_loader(cfg, "val", seed=9)
    epochs = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        epochs.append(list(loader))
    assert_batches_equal(epochs[0], epochs[1])
    assert_batches_equal(list(build_loader(cfg, "val", seed=9, num_workers=2)), epochs[0])
    starts = set()
    for batch in epochs[0]:
        assert batch["wav_mix"].shape == (4, CHUNK)
        for key, spk, mix, target in zip(batch["key"], batch["spk"], batch["wav_mix"], batch["wav_targets"]):
            full_mix, full_target = whole[(key, spk)]
            at = _start_in(full_mix, mix.numpy())
            assert at and at == _start_in(full_target, target.numpy())[:len(at)]  # one window for both
            starts.add(at[0])
    assert len(starts) > 1  # drawn per mixture, not always 0
    # a mixture's window is its own: the same in batches of another size
    other = {(k, s): m.numpy() for b in build_loader(recipe(out["dev"], batch_size=3), "val", seed=9)
             for k, s, m in zip(b["key"], b["spk"], b["wav_mix"])}
    mine = {(k, s): m.numpy() for b in epochs[0] for k, s, m in zip(b["key"], b["spk"], b["wav_mix"])}
    assert all(np.array_equal(other[key], row) for key, row in mine.items() if key in other)


@pytest.mark.parametrize("world_size,batch_size", [(1, 2), (1, 4), (2, 2), (3, 2)])
def test_val_runs_mainlines_val_iter_full_batches(packs, world_size, batch_size):
    out, facts, _ = packs
    mixtures = len(facts["keys"])
    val_iter = 2 * mixtures // 2 // world_size // batch_size  # train.py: single.wav.scp lines // 2 // world // batch
    seen = set()
    for rank in range(world_size):
        # sample_num_per_epoch sizes training epochs only, as in train.py
        loader = build_loader(recipe(out["dev"], batch_size=batch_size, sample_num_per_epoch=4), "val", seed=2,
                              rank=rank, world_size=world_size)
        batches = list(loader)
        assert len(loader) == len(batches) == val_iter
        assert all(b["wav_mix"].shape == (2 * batch_size, CHUNK) for b in batches)
        seen |= {key for b in batches for key in b["key"]}
    assert len(seen) == val_iter * batch_size * world_size  # full batches of distinct mixtures


def test_a_dev_set_too_small_for_one_val_batch_is_refused_at_start(packs):
    out, facts, _ = packs
    with pytest.raises(ConfigError) as err:
        build_loader(recipe(out["dev"], batch_size=4), "val", seed=0, world_size=2)
    text = str(err.value)
    assert f"{len(facts['keys'])} dev mixture(s)" in text and "world_size 2" in text and "batch_size 4" in text
    assert "8 mixtures" in text
    build_loader(recipe(out["train"], batch_size=4), "train", seed=0, world_size=2)  # train is not refused


@pytest.mark.parametrize("state", ["train", "val"])
def test_short_chunks_are_tiled_as_mainline_does(packs, state):
    out, _, _ = packs
    long_chunk = 24000  # the mixtures are 16000 samples
    cfg = recipe(out["train" if state == "train" else "dev"], chunk_len=long_chunk)
    whole = _whole_rows(cfg, state)
    rows = 0
    for batch in build_loader(cfg, state, seed=4):
        assert batch["wav_mix"].shape[1] == long_chunk
        for key, spk, mix, target in zip(batch["key"], batch["spk"], batch["wav_mix"], batch["wav_targets"]):
            full_mix, full_target = whole[(key, spk)]
            assert len(full_mix) < long_chunk
            np.testing.assert_array_equal(mix.numpy(), np.resize(full_mix, long_chunk))  # repeated from the start
            np.testing.assert_array_equal(target.numpy(), np.resize(full_target, long_chunk))
            rows += 1
    assert rows


def test_windows_are_redrawn_while_a_target_is_silent(tmp_path, real_audio_paths):
    require("kaldiio", "dev")
    data = tmp_path / "data"
    librimix_split(data, real_audio_paths, mixtures=6, seconds=1.0, silent_tail=0.8)  # s2 ends in 0.8 s of zeros
    pack = str(tmp_path / "pack")
    build_mainline(MainlineInputs(list_path=str(data / "shard.list"), enroll=str(data / "spk2enroll.json")),
                   BuildOptions(out=pack, sample_rate=16000, workers=1, progress=False))
    loader = build_loader(recipe(pack), "train", seed=1)
    rows = 0
    for epoch in range(12):
        loader.set_epoch(epoch)
        for batch in loader:
            targets = batch["wav_targets"]
            assert (targets.abs().amax(dim=1) > 0).all()  # no silent target row
            for m in range(0, len(targets), 2):  # one window for a mixture and its targets: mix = (s1 + s2) / 2
                mix = batch["wav_mix"][m]
                assert torch.allclose(mix, (targets[m] + targets[m + 1]) / 2, atol=1e-3)
            rows += len(targets)
    contract = {"packs": [{"path": pack}], "dataset_args": {"chunk_len": CHUNK, "batch_size": 2, "shuffle": True,
                                                              "cues": {"audio": {"use": True}}}}
    silent = 0
    ld = build_loader(contract, "train", seed=1)
    for epoch in range(12):
        ld.set_epoch(epoch)
        silent += sum(int((b["wav_target"].abs().amax(dim=(1, 2)) == 0).sum()) for b in ld)
    assert rows and silent  # the contract dialect keeps a window where only the mixture sounds


def test_sounding_start_is_bounded_and_falls_back_to_an_exact_choice():
    from speechpack.loader.tse.windows import MAINLINE_WINDOW_DRAWS, sounding_start

    length, total = 100, 1000
    mix = np.ones((1, total), dtype=np.int16)
    target = np.zeros((1, total), dtype=np.int16)
    target[0, 900:905] = 7  # sounds only in windows starting in [801, 900]
    late = np.full(MAINLINE_WINDOW_DRAWS, 0.01)  # every uniform draw misses
    picks = set()
    for last in np.linspace(0, 0.999, 50):
        late[-1] = last
        start = sounding_start([mix, target], length, late)
        assert 801 <= start <= 900 and target[0, start:start + length].any()
        picks.add(start)
    assert len(picks) > 40  # uniform over the sounding starts
    silent = np.zeros((1, total), dtype=np.int16)  # a target silent throughout: where the mixture sounds
    assert sounding_start([mix, silent], length, late) == int(late[-1] * (total - length + 1))
    assert sounding_start([silent, silent], length, late) == int(late[0] * (total - length + 1))  # nothing sounds


def test_online_mixes_are_at_mainlines_levels_with_tiled_sources(packs):
    out, _, _ = packs
    for use_random_snr, chunk in ((False, CHUNK), (True, CHUNK), (False, 24000)):  # 24000: longer than the sources
        cfg = recipe(out["vox"], online_mix=True, num_speakers=2, use_random_snr=use_random_snr, chunk_len=chunk)
        loader = build_loader(cfg, "train", seed=2)
        snrs = []
        for epoch in range(8):
            loader.set_epoch(epoch)
            for batch in loader:
                mix, targets = batch["wav_mix"], batch["wav_targets"]
                assert mix.shape[1] == chunk
                for g in range(0, len(targets), 2):
                    target, interferer = targets[g].double(), targets[g + 1].double()
                    snrs.append(float(10 * torch.log10((target ** 2).sum() / (interferer ** 2).sum())))
                    peak = max(float(mix[g].abs().max()), float(target.abs().max()), float(interferer.abs().max()))
                    assert abs(peak - 1.0) < 1e-6  # mixture and sources scaled by one factor to a peak of 1
                    torch.testing.assert_close(mix[g].double(), target + interferer, atol=1e-5, rtol=0)
                    if chunk == 24000:  # each 19200-sample source tiled from its start
                        for row in (target, interferer):
                            assert torch.equal(row[19200:], row[:24000 - 19200])
        if use_random_snr:
            assert min(snrs) >= -10.001 and max(snrs) <= 10.001 and max(snrs) - min(snrs) > 5
        else:
            assert max(abs(s) for s in snrs) < 1e-3  # interferers at the target's energy


def test_batches_hold_mainlines_keys_only_unless_contract_keys_is_set(packs):
    out, _, _ = packs
    for state, pack in (("train", out["train"]), ("val", out["dev"])):
        batch = next(iter(build_loader(recipe(pack, contract_keys=True), state, seed=1)))
        assert tuple(batch)[:2] == ("wav_mix", "wav_target") and set(BATCH_KEYS) <= set(batch)
        assert {"audio_aux", "valid", "lengths", "speaker_label"} <= set(batch)
        assert torch.equal(batch["wav_targets"], batch["wav_target"][:, 0])
        plain = next(iter(build_loader(recipe(pack), state, seed=1)))
        assert tuple(plain) == BATCH_KEYS
        for key in BATCH_KEYS:
            assert str(plain[key]) == str(batch[key])
    with pytest.raises(ConfigError, match="contract_keys: expected true or false"):
        build_loader(recipe(out["train"], contract_keys="yes"), "train", seed=1)


def test_peek_refuses_a_val_too_small_and_saves_a_mainline_batchs_wavs(packs, tmp_path):
    out, facts, _ = packs
    path = tmp_path / "bsrnn.yaml"
    cfg = recipe(out["dev"], batch_size=8)
    del cfg["packs"]
    path.write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(cli, ["peek", str(path), "--pack", out["dev"], "--state", "val"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"val_iter = {len(facts['keys'])} dev mixture(s) // world_size 1 // batch_size 8 = 0" in result.output
    cfg["dataloader_args"]["batch_size"] = 2
    path.write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(cli, ["peek", str(path), "--pack", out["dev"], "--state", "val", "--save-wavs",
                                      str(tmp_path / "wavs")])
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in (tmp_path / "wavs").iterdir())
    assert len(written) == 8 and all(name.endswith(("_mix.wav", "_target.wav")) for name in written)
    audio, rate = soundfile.read(tmp_path / "wavs" / written[0])
    assert rate == 16000 and len(audio) == CHUNK


#: The data settings of mainline's 12 recipe configs at cf8ee7f (``examples/*/confs/*.yaml``): batch_size,
#: chunk_len, model_args.tse_model.joint_training (None: not given, a GAN recipe), speaker_feat, multi_task,
#: online_mix.
MAINLINE_CONFS = {
    "v1/bsrnn": (16, 48000, False, None, None, False), "v1/dpcc_init_gan": (4, 48000, None, None, None, False),
    "v1/dpccn": (4, 48000, False, None, None, False), "v1/tfgridnet": (4, 16000, False, None, None, False),
    "v2/bsrnn": (8, 48000, True, True, False, False), "v2/bsrnn_feats": (4, 48000, True, False, False, False),
    "v2/bsrnn_multi_optim": (8, 48000, True, False, False, False),
    "v2/dpcc_init_gan": (4, 48000, None, None, None, False), "v2/dpccn": (6, 48000, True, True, False, False),
    "v2/spexplus": (8, 48000, True, None, True, False), "v2/tfgridnet": (1, 48000, True, True, False, False),
    "voxceleb1/bsrnn_online": (8, 48000, True, True, False, True),
}


@pytest.fixture(scope="module")
def sixteen(tmp_path_factory, real_audio_paths):
    """Packs of a 16-mixture split (enough for the largest recipe batch) and VoxCeleb-like sources."""
    return mainline_packs(tmp_path_factory.mktemp("sixteen"), real_audio_paths, mixtures=16, utts_per_speaker=4)[0]


@pytest.mark.parametrize("name", sorted(MAINLINE_CONFS))
def test_mainlines_recipe_configs_give_its_batch_shapes_in_train_and_val(sixteen, name):
    batch_size, chunk, joint, speaker_feat, multi_task, online = MAINLINE_CONFS[name]
    extra = {"online_mix": True, "num_speakers": 2, "use_random_snr": True} if online else {}
    for state in ("train", "val"):
        pack = sixteen["vox"] if online and state == "train" else sixteen[
            ("train" if state == "train" else "dev") + ("" if joint else "_emb")]
        cfg = recipe(pack, joint=bool(joint), speaker_feat=bool(speaker_feat), batch_size=batch_size,
                     multi_task=bool(multi_task), chunk_len=chunk, **extra)
        if joint is None:  # a GAN recipe: no joint_training, a discriminator
            del cfg["model_args"]["tse_model"]["joint_training"], cfg["model_args"]["tse_model"]["spk_feat"]
            cfg["model_args"]["discriminator"] = {}
        loader = build_loader(cfg, state, seed=1)
        batches = list(loader)
        assert batches
        if state == "val":
            assert len(batches) == 16 // batch_size  # val_iter: 32 single.wav.scp lines // 2 // 1 // batch_size
        for batch in batches:
            assert tuple(batch) == BATCH_KEYS
            assert batch["wav_mix"].shape == batch["wav_targets"].shape == (2 * batch_size, chunk)
            assert batch["spk_embeds"].shape[0] == 2 * batch_size


def test_a_raw_list_without_enrollments_is_left_to_the_raw_list_build(tmp_path):
    """``build_mainline`` packs mainline's inputs; a JSON-lines list naming no enrollment file is a plain raw list,
    which the ``wesep`` command packs with ``build_wesep`` (so ``build_mainline`` refuses it, naming the list)."""
    listed = tmp_path / "raw.list"
    listed.write_text(json.dumps({"key": "u1", "wav": "u1.wav", "spk": "s1"}) + "\n")
    with pytest.raises(SpeechpackError, match="without mainline's enrollments: build_wesep packs it") as err:
        build_mainline(MainlineInputs(list_path=str(listed)), BuildOptions(out=str(tmp_path / "p"), progress=False))
    assert str(listed) in str(err.value)
    assert not (tmp_path / "p").exists()
