"""Config keys declared once (``loader.config_keys``): one declaration gives a key its parsing, check, default, doc
row and fingerprint; the docs' key tables are the declarations; ASD's and TSE's fingerprints are those of every
saved state (ASR's, whose task module imports torch: tests/loader/asr/test_asr_keys.py)."""

from __future__ import annotations

import ast
import hashlib
import json
import os
from dataclasses import asdict

import pytest

from speechpack.loader.asd import args as asd_args
from speechpack.loader.asr.args import DATASET_ARGS as ASR_ARGS
from speechpack.loader.asd.args import DATASET_ARGS, AsdArgs, parse_dataset_args
from speechpack.loader.asd.task import TASK as ASD_TASK
from speechpack.loader.config import LoaderConfig, loader_fingerprint
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.config_keys import (
    NEVER,
    VERSION_FIELD,
    WHEN_SET,
    Bool,
    Int,
    Key,
    KeyTable,
    Nested,
    Nullable,
    Range,
)
from speechpack.loader.resume import read_state
from speechpack.loader.tse.args import DATASET_ARGS as TSE_ARGS
from speechpack.loader.tse.args import DatasetArgs
from speechpack.loader.tse.task import TASK as TSE_TASK

import factories.paths

pytestmark = pytest.mark.fast

REPO = str(factories.paths.REPO)


def _table_under(text: str, heading: str) -> str:
    """The first markdown table after the line ``heading``."""
    lines = text.split("\n")
    at = lines.index(heading)
    start = next(i for i in range(at + 1, len(lines)) if lines[i].startswith("|"))
    stop = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:stop])


#: (docs file, the heading its key table follows, the table).
DOC_TABLES = [("docs/asd.md", "### `dataset_args`", DATASET_ARGS), ("docs/asr.md", "### `dataset_args`", ASR_ARGS),
              ("docs/loader.md", "## Config", TSE_ARGS)]


@pytest.mark.parametrize("path, heading, table", DOC_TABLES, ids=[p for p, _, _ in DOC_TABLES])
def test_docs_key_tables_are_the_declarations(path, heading, table):
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        shown = _table_under(f.read(), heading)
    assert shown == table.markdown(), f"{path}, under {heading}, paste:\n{table.markdown()}"


def test_asd_args_docstring_table_is_the_declarations():
    with open(asd_args.__file__, encoding="utf-8") as f:
        docstring = ast.get_docstring(ast.parse(f.read()), clean=False)
    shown = "\n".join(line for line in docstring.split("\n") if line.startswith("|"))
    assert shown == DATASET_ARGS.markdown(), f"loader/asd/args.py docstring, paste:\n{DATASET_ARGS.markdown()}"


# -- ASD's resume fingerprint: the same as every saved state's ---------------------------------------------------

#: ``dataset_args`` -> (train, val) fingerprints of a packless ``task: asd`` config, as the loader computed them
#: before the keys were declared (``LoaderTask.fingerprint_args`` over ``asdict``).
ASD_FINGERPRINTS = [
    ({}, ("e106b8e1bc596c2b", "bb8a2f775f62a456")),
    ({"train_window": None}, ("b05b9e62c8123c7a", "b3a7d2c95647a2bf")),
    ({"train_window": None, "hist_frames": 30}, ("b05b9e62c8123c7a", "b3a7d2c95647a2bf")),
    ({"train_window": 100, "hist_frames": 0}, ("b5339f348f9d5c9f", "ff62c426d43d6507")),
    ({"jitter": True, "normalize": "none", "audio_mix_snr": [-3, 4], "audio_mix_prob": 1, "tail": "drop"},
     ("28d9b1557747e6b0", "57f989baa19682f4")),
    ({"frame_budget": 4096, "val_frame_budget": 999, "min_batch": 2, "max_batch": 2, "substitute_audio_prob": 0.25,
      "shuffle": False, "visual_aug": False, "sort_window": 1000, "normalize": True, "val_max_batch": 8},
     ("1609b7ba576cb3df", "029182e08c9c099b")),
]


def _asd_config(dataset_args: dict) -> LoaderConfig:
    return LoaderConfig.from_dict({"task": "asd", "packs": [{"path": "x"}], "dataset_args": dataset_args})


def _fingerprint_before_declarations(args: dict) -> dict:
    """The rule ASD's states were hashed with: ``asdict``, later keys dropped while falsy, fetch-only keys dropped."""
    for key in ("cues", "field_collate", "mix", "augment", "batching", "train_window", "hist_frames", "mainline",
                "shard_window"):
        if key in args and not args[key]:
            del args[key]
    for key in ("npc", "num_prefetch"):
        args.pop(key, None)
    return args


@pytest.mark.parametrize("dataset_args, expected", ASD_FINGERPRINTS)
def test_asd_fingerprints_are_those_of_saved_states(dataset_args, expected):
    config = _asd_config(dataset_args)
    assert (loader_fingerprint(config, "train", []), loader_fingerprint(config, "val", [])) == expected
    old = _fingerprint_before_declarations(asdict(config.dataset_args))
    assert ASD_TASK.fingerprint_args(asdict(config.dataset_args)) == old
    for state, digest in zip(("train", "val"), expected):  # the whole hash, as it was written
        identity = json.dumps({"dataset_args": old, "state": state, "task": "asd"}, sort_keys=True, default=str)
        assert hashlib.sha256(identity.encode()).hexdigest()[:16] == digest


@pytest.mark.parametrize("version", [1, 2])
def test_asd_states_of_both_versions_still_resume(version):
    state = {"state_version": version, "epoch": 3, "batches_consumed": 5, "seed": 0, "world_size": 2,
             "fingerprint": ASD_FINGERPRINTS[0][1][0], "rank": 0}
    if version == 2:
        state["global_start"] = 1
    position = read_state(state, seed=0, fingerprint=loader_fingerprint(_asd_config({}), "train", []))
    assert (position.epoch, position.consumed, position.global_start) == (3, 5, 0 if version == 1 else 1)


def test_asd_args_come_from_the_declarations():
    assert [k.name for k in DATASET_ARGS.keys] == list(asdict(AsdArgs()))
    assert parse_dataset_args(None) == AsdArgs()
    assert asdict(AsdArgs()) == {**DATASET_ARGS.defaults(), "val_frame_budget": 4 * 2048}
    # a config's value is checked once, under its path; a derived value is not a given one
    assert parse_dataset_args({"frame_budget": 1 << 40}).val_frame_budget == 1 << 42
    with pytest.raises(ConfigError, match=r"^c\.d\.val_frame_budget: must be at least 1, got 0$"):
        parse_dataset_args({"val_frame_budget": 0}, "c.d")
    assert AsdArgs(audio_mix_prob=1, audio_mix_snr=[-1, 2]).audio_mix_snr == (-1.0, 2.0)  # the held values


# -- a new key is one declaration ---------------------------------------------------------------------------------

def _with_new_key() -> KeyTable:
    """ASD's table plus one key a stage might add (hashed only while set, as every key added later)."""
    new = Key("drop_frames", 0, Int(lo=0, hi=100), "training: frames dropped at random per chunk",
              fingerprint=WHEN_SET)
    return KeyTable(DATASET_ARGS.keys + (new,), relate=DATASET_ARGS.relate)


def test_a_new_key_is_one_declaration():
    table = _with_new_key()

    @table.args_class("dataset_args")
    class Args:
        """The extended ``dataset_args``."""

    assert table.parse(None, "d")["drop_frames"] == 0 and Args().drop_frames == 0  # default
    assert table.parse({"drop_frames": 7}, "d")["drop_frames"] == 7  # parsed
    with pytest.raises(ConfigError, match=r"^d\.drop_frames: must be at most 100, got 101$"):  # checked
        table.parse({"drop_frames": 101}, "d")
    with pytest.raises(ConfigError, match=r"^dataset_args\.drop_frames: expected int, got True$"):
        Args(drop_frames=True)  # built in code: checked too
    assert ("| `drop_frames` | int in [0, 100] | 0 | training: frames dropped at random per chunk |"
            in table.markdown().split("\n"))  # documented
    with pytest.raises(ConfigError, match="unknown key.*drop_frames"):  # the table without it refuses it
        DATASET_ARGS.parse({"drop_frames": 1}, "d")
    for given, _ in ASD_FINGERPRINTS:  # unset: every old state's fingerprint stands
        held = table.parse(given, "d")
        assert table.fingerprint(held) == DATASET_ARGS.fingerprint(DATASET_ARGS.parse(given, "d"))
    assert table.fingerprint(table.parse({"drop_frames": 3}, "d"))["drop_frames"] == 3  # set: hashed


def test_fetch_only_keys_and_the_version_enter_the_fingerprint_as_declared():
    keys = (Key("batch", 8, Int(), "rows"), Key("workers", 4, Int(lo=0), "processes", fingerprint=NEVER))
    assert KeyTable(keys).fingerprint({"batch": 8, "workers": 2}) == {"batch": 8}
    assert KeyTable(keys, fingerprint_version=2).fingerprint({"batch": 8, "workers": 2}) == {
        "batch": 8, VERSION_FIELD: 2}


def test_cross_key_checks_run_after_each_keys_own():
    with pytest.raises(ConfigError, match=r"^d\.frame_budget: must be at least 1, got 0$"):
        parse_dataset_args({"hist_frames": 300, "frame_budget": 0}, "d")
    with pytest.raises(ConfigError, match=r"^d\.max_batch: 2 is below min_batch 3$"):
        parse_dataset_args({"min_batch": 3, "max_batch": 2}, "d")


# -- nested mappings and dialect names ----------------------------------------------------------------------------

def _filter_len_table() -> KeyTable:
    """TSE's ``filter_len_args: {min_num_seconds, max_num_seconds}`` as a nested table, with WeSep's name."""

    def ordered(v, where):
        if v["min_num_seconds"] > v["max_num_seconds"]:
            raise ConfigError(f"{where}: min_num_seconds {v['min_num_seconds']} > max_num_seconds "
                              f"{v['max_num_seconds']}")

    bounds = KeyTable((Key("min_num_seconds", 1.0, _Seconds(), "shortest item kept"),
                       Key("max_num_seconds", 1000.0, _Seconds(), "longest item kept")), relate=ordered)
    return KeyTable((
        Key("filter_len", False, Bool(), "leave out items outside the bounds", fingerprint=WHEN_SET),
        Key("filter_len_args", None, Nested(bounds), "the bounds", default_doc="1-1000 s"),
        Key("train_window", None, Nullable(Int()), "samples per chunk", fingerprint=WHEN_SET,
            dialects={"muvap": "window"}),
    ))


class _Seconds:
    """A finite number of seconds in [0, 3e7], held as a float (the shape of any scalar check)."""

    annotation = float
    doc = "seconds in [0, 3e7]"

    def __call__(self, value, where):
        return Range(0.0, 3e7)([value, value], where)[0]


def test_a_nested_mapping_is_a_key_whose_check_is_a_table():
    table = _filter_len_table()
    held = table.parse({"filter_len_args": {"max_num_seconds": 20}}, "c.dataset_args")
    assert held["filter_len_args"] == {"min_num_seconds": 1.0, "max_num_seconds": 20.0}
    assert table.parse(None, "d")["filter_len_args"] == {"min_num_seconds": 1.0, "max_num_seconds": 1000.0}
    with pytest.raises(ConfigError, match=r"^d\.filter_len_args: unknown key\(s\) min \(known: max_num_seconds, "
                                          r"min_num_seconds\)$"):
        table.parse({"filter_len_args": {"min": 2}}, "d")
    with pytest.raises(ConfigError, match=r"^d\.filter_len_args: min_num_seconds 5.0 > max_num_seconds 2.0$"):
        table.parse({"filter_len_args": {"min_num_seconds": 5, "max_num_seconds": 2}}, "d")
    with pytest.raises(ConfigError, match=r"^d\.filter_len_args\.max_num_seconds: expected int/float"):
        table.parse({"filter_len_args": {"max_num_seconds": "20"}}, "d")
    rows = table.markdown().split("\n")
    assert "| `filter_len_args.max_num_seconds` | seconds in [0, 3e7] | 1000 | longest item kept |  |" in rows
    assert "| `filter_len_args` | mapping | 1-1000 s | the bounds |  |" in rows
    assert table.fingerprint(held) == {"filter_len_args": {"min_num_seconds": 1.0, "max_num_seconds": 20.0}}


def test_a_dialect_spelling_is_declared_with_the_key():
    table = _filter_len_table()
    assert table.markdown().split("\n")[0] == "| key | type | default | meaning | muvap name |"
    assert "| `train_window` | int in [1, 2^40], or null | null | samples per chunk | `window` |" in table.markdown()
    assert table.parse(table.translate({"window": 50}, "muvap", "d"), "d")["train_window"] == 50
    assert table.translate({"window": 50}, "wesep", "d") == {"window": 50}  # another tool's names are its own
    with pytest.raises(ConfigError, match=r"^d: window \(muvap\) and train_window are one key: give one$"):
        table.translate({"window": 50, "train_window": 50}, "muvap", "d")


def test_a_key_declared_twice_is_refused():
    with pytest.raises(ValueError, match="declared twice"):
        KeyTable((Key("a", 1, Int(), "x"), Key("a", 2, Int(), "y")))
    with pytest.raises(ValueError, match="fingerprint must be one of"):
        Key("a", 1, Int(), "x", fingerprint="sometimes")


# -- TSE: the table of a task whose args hold a config in another shape -------------------------------------------

_ONLINE = {"online_mix": True, "num_speakers": {"distribution": [0, 1, 0], "max_speakers": 2}}
#: A packless TSE config -> (train, val) fingerprints as the loader computed them before the keys were declared
#: (``TseTask.fingerprint_args``' patches over ``asdict`` and the generic lists of ``loader.tasks``).
TSE_FINGERPRINTS = [
    ({"dataset_args": {}}, ("6ae98fcfa29bfbea", "b64ffc7c1bed28ae")),
    ({"dataset_args": {"normalize": "muvap", "tail": "drop", "chunk_len": 32000, "shuffle": False}},
     ("27f086544f3828c3", "5a1c707144816e0d")),
    ({"dataset_args": {**_ONLINE, "mix_snr": {"range": [-5, 5], "gain": [-6, 0]},
                       "timeline": {"two_speaker": {"overlap_ratio": [0.2, 0.8]}}}},
     ("4138e032b5db36fc", "cffae1cb8838a676")),
    ({"dataset_args": {**_ONLINE, "augment_on": "batch"}}, ("d8069c4ac5a3fd8f", "e8b0af4a70377062")),
    ({"dataset_args": {**_ONLINE, "reverb_prob": 0.5, "reverb_conf": {}, "noise_prob": 0.3,
                       "noise_lmdb_file": "n.lmdb", "cues": {"audio": {"use": True}},
                       "cue_processing": {"audio": {"reverb_enroll_prob": 0.2}}}},
     ("dc4873821b2b60b5", "64bd2223c5f031ae")),
    ({"dataset_args": {"cues": {"audio": {"use": True}, "spatial": {"use": False}},
                       "collate": {"audio_aux": {"align": "max", "pad_mode": "edge"}, "wav_mix": {"align": "min"}}}},
     ("25d618d34c61dad9", "f3c0ee00f1844b86")),
    ({"dataset_args": {"batching": {"type": "budget", "max_frames": 64000, "min_batch": 2, "max_batch": 16}}},
     ("2802932a4fa2ed6e", "a8383b5d6d7ce765")),
    ({"dataset_args": {"batching": {"type": "static", "batch_size": 6}}}, ("43bf73437a021fc4", "ead7379eaf972521")),
    ({"dataset_args": {"train_window": 32000, "hist_frames": 8000}}, ("272a6df76935f7dd", "aa0b25379f8f858d")),
    ({"dataset_args": {"whole_utt": True, "filter_len": True, "filter_len_args": {"min_num_seconds": 2}}},
     ("e273e69cdcef4ed4", "cbbe33e122734870")),
    ({"model_args": {"tse_model": {"joint_training": True, "multi_task": True}},  # a mainline WeSep recipe
      "dataset_args": {"chunk_len": 48000, "num_speakers": 2, "online_mix": True, "use_random_snr": True,
                       "speaker_feat": True, "fbank_args": {"num_mel_bins": 40}, "filter_len": True,
                       "filter_args": {"min_num_seconds": 1, "max_num_seconds": 30}}},
     ("2d67a674ee393f20", "c4e93ae01b5568ab")),
    ({"whole_utt": False, "model_args": {"tse_model": {"joint_training": False}}, "dataset_args": {"shuffle": True}},
     ("a9b00ee7698f54d4", "1bf1837603d484b4")),
]


@pytest.mark.parametrize("config, expected", TSE_FINGERPRINTS)
def test_tse_fingerprints_are_those_of_saved_states(config, expected):
    got = tuple(loader_fingerprint(LoaderConfig.from_dict({**config, "packs": [{"path": "x"}]}, state=state),
                                   state, []) for state in ("train", "val"))
    assert got == expected


@pytest.mark.parametrize("version", [1, 2])
def test_tse_states_of_both_versions_still_resume(version):
    state = {"state_version": version, "epoch": 1, "batches_consumed": 2, "seed": 0, "world_size": 1,
             "fingerprint": TSE_FINGERPRINTS[3][1][0], "rank": 0}
    if version == 2:
        state["global_start"] = 0
    config = LoaderConfig.from_dict({**TSE_FINGERPRINTS[3][0], "packs": [{"path": "x"}]})
    assert read_state(state, seed=0, fingerprint=loader_fingerprint(config, "train", [])).consumed == 2


def test_tse_fingerprint_roles_are_declared_with_the_fields():
    held = asdict(DatasetArgs.from_dict({**_ONLINE, "augment_on": "batch"}))
    hashed = TSE_TASK.fingerprint_args(held)
    assert "augment" not in hashed and "cues" not in hashed and hashed["normalize"] is None  # unset / older spelling
    assert hashed["mix"]["max_speakers"] == 2  # set: hashed
    roles = {k.name: k.fingerprint for k in TSE_ARGS.field_keys}
    assert {name for name, role in roles.items() if role == WHEN_SET} == {
        "cues", "field_collate", "mix", "augment", "batching", "train_window", "hist_frames", "mainline",
        "shard_window", "stage_args"}


def test_tse_args_are_the_declarations_fields():
    assert [k.name for k in TSE_ARGS.field_keys] == list(asdict(DatasetArgs()))
    assert DatasetArgs.from_dict(None) == DatasetArgs()
    config_only = [k.name for k in TSE_ARGS.config_keys if not k.field]
    assert "filter_len_args" in config_only and "online_mix" in config_only  # a config's shape, not a field
    held = DatasetArgs.from_dict({"filter_len_args": {"min_num_seconds": 2}, "batching": {"type": "static",
                                                                                          "batch_size": 6}})
    assert (held.min_num_seconds, held.max_num_seconds, held.batch_size, held.batching) == (2.0, 1000.0, 6, None)
    with pytest.raises(ConfigError, match=r"^c\.filter_len_args\.min_num_seconds: must be a number in \[0\.0, "
                                          r"31536000\.0\], got -1\.0$"):
        DatasetArgs.from_dict({"filter_len_args": {"min_num_seconds": -1}}, "c")
    with pytest.raises(ConfigError, match=r"^dataset_args\.filter_len_args\.min_num_seconds: must be a number"):
        DatasetArgs(min_num_seconds=-1)  # built in code: the field's check, named by the config's path
    with pytest.raises(ConfigError, match=r"^dataset_args\.batch_size: must be in \[1, 1048576\], got 0$"):
        DatasetArgs(batch_size=0)


def _shaped_table() -> KeyTable:
    """A config in another shape than its args: a nested mapping held as two fields, a field made of two of the
    parent's keys (``Flat``), a key whose config check is a parser's and whose field check is not."""
    bounds = KeyTable((Key("lo", 0, Int(lo=0), "low"), Key("hi", 9, Int(lo=0), "high")))
    pair = KeyTable((Key("on", False, Bool(), "mixing on", field=False),
                     Key("level", 1, Int(), "mixing level", field=False),
                     Key("mix", None, Int(), "", build=lambda v: v["level"] if v["on"] else None)))

    def mix(values: dict, where: str, held: dict) -> int | None:
        return pair.hold(pair.check_config(values, where), where)["mix"]

    def ordered(v: dict, where: str) -> None:
        if v["lo"] > v["hi"]:
            raise ConfigError(f"{where}.span: lo {v['lo']} > hi {v['hi']}")

    from speechpack.loader.config_keys import Flat, Parsed, Within
    return KeyTable((
        Key("span", None, Nested(bounds), "the bounds", field=False),
        Key("lo", 0, Int(lo=0), "", build=lambda v: v["span"]["lo"], path="span.lo"),
        Key("hi", 9, Int(lo=0), "", build=lambda v: v["span"]["hi"], path="span.hi"),
        Key("mix", None, Flat(pair, mix), "", fingerprint=WHEN_SET),
        Key("rows", 2, Parsed(lambda v, w: int(str(v)), "int as text"), "rows", field_check=Within(1, 8)),
    ), relate=ordered)


def test_a_config_shape_is_declared_with_its_keys():
    table = _shaped_table()

    @table.args_class("d")
    class Args:
        """The held shape."""

    assert [k.name for k in table.config_keys] == ["span", "on", "level", "rows"]
    assert [k.name for k in table.field_keys] == ["lo", "hi", "mix", "rows"]
    held = table.held(Args, table.parse({"span": {"hi": 5}, "on": True, "level": 3, "rows": "4"}, "c"))
    assert (held.lo, held.hi, held.mix, held.rows) == (0, 5, 3, 4)
    assert table.parse(None, "c")["mix"] is None and table.fingerprint(table.parse(None, "c")) == {
        "lo": 0, "hi": 9, "rows": 2}
    with pytest.raises(ConfigError, match=r"^c\.span: lo 6 > hi 5$"):  # relate, on the fields
        table.parse({"span": {"lo": 6, "hi": 5}}, "c")
    with pytest.raises(ConfigError, match=r"^c\.level: expected int, got 'x'$"):  # a Flat field's keys, checked
        table.parse({"on": True, "level": "x"}, "c")
    with pytest.raises(ConfigError, match=r"^d\.span\.lo: must be at least 0, got -1$"):  # built in code: its path
        Args(lo=-1)
    with pytest.raises(ConfigError, match=r"^d\.rows: must be in \[1, 8\], got 9$"):  # the field's own check
        Args(rows=9)
    names = [line.split(" | ")[0] for line in table.markdown().split("\n")[2:]]
    assert names == ["| `span`", "| `span.lo`", "| `span.hi`", "| `on`", "| `level`", "| `rows`"]


def test_tse_mainline_spellings_are_declared_and_read():
    from speechpack.loader.tse import mainline
    renamed = {k.dialects[mainline.MAINLINE]: k.name for k in TSE_ARGS.config_keys if mainline.MAINLINE in k.dialects}
    assert renamed == {"filter_args": "filter_len_args"}
    recipe = {"whole_utt": False, "dataset_args": {"filter_len": True, "filter_args": {"max_num_seconds": 20}}}
    for theirs, ours in renamed.items():
        assert theirs in mainline.KNOWN_KEYS
        translated = mainline.translate(recipe, "train")["dataset_args"]
        assert theirs not in translated and translated[ours] == {"max_num_seconds": 20}
    held = DatasetArgs.from_dict(mainline.translate(recipe, "train")["dataset_args"])
    assert (held.min_num_seconds, held.max_num_seconds) == (1.0, 20.0)


def test_a_variant_mapping_picks_its_table_by_its_tag():
    from speechpack.loader.config_keys import Variant
    small = KeyTable((Key("rows", None, Nullable(Int(hi=8)), "rows"),))
    large = KeyTable((Key("budget", 100, Int(), "budget"), Key("cap", 2, Int(), "cap")))
    table = KeyTable((Key("batching", None, Nullable(Variant("type", {"small": small, "large": large})), "how"),))
    assert table.parse({"batching": {"type": "large", "cap": 3}}, "d")["batching"] == {
        "type": "large", "budget": 100, "cap": 3}
    with pytest.raises(ConfigError, match=r"^d\.batching\.type: 'huge' is not one of small, large$"):
        table.parse({"batching": {"type": "huge"}}, "d")
    with pytest.raises(ConfigError, match=r"^d\.batching: unknown key\(s\) cap \(known: rows, type\)$"):
        table.parse({"batching": {"type": "small", "cap": 1}}, "d")
    with pytest.raises(ConfigError, match=r"^d\.batching: expected a mapping with type: small or large, got int$"):
        table.parse({"batching": 3}, "d")
    rows = [line.split(" | ")[0] for line in table.markdown().split("\n")[2:]]
    assert rows == ["| `batching`", "| `batching.rows`", "| `batching.budget`", "| `batching.cap`"]
    assert "`type: large`: cap" in table.markdown()


def test_tse_choices_are_checked_once_per_key(monkeypatch):
    from speechpack.loader import config_keys
    from speechpack.loader.tse.cues import request
    seen: list[str] = []

    def counted(check):
        def wrapper(value, choices, where):
            seen.append(where)
            return check(value, choices, where)
        return wrapper

    monkeypatch.setattr(config_keys, "check_choice", counted(config_keys.check_choice))
    monkeypatch.setattr(request, "check_choice", counted(request.check_choice))
    DatasetArgs.from_dict({**_ONLINE, "chunk_short_policy": "keep", "tail": "drop", "augment_on": "batch",
                           "reverb_prob": 0.5, "collate": {"wav_mix": {"align": "min"}},
                           "batching": {"type": "budget", "max_frames": 100, "cost": "quadratic"}}, "c")
    assert "c.chunk_short_policy" in seen and "c.batching.cost" in seen
    assert sorted(seen) == sorted(set(seen)), seen
