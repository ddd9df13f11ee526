"""ASR's ``dataset_args`` declared once (``loader.asr.args.DATASET_ARGS`` on ``loader.config_keys``): its
fingerprints those of every saved state, its docstring table the declarations, each key read where an Omnilingual
recipe sets it.  Apart from tests/loader/test_config_keys.py because the ASR task module imports torch."""

from __future__ import annotations

import ast
from dataclasses import asdict

import pytest

from speechpack.loader.asr import args as asr_args
from speechpack.loader.asr.args import DATASET_ARGS as ASR_ARGS
from speechpack.loader.asr.args import AsrArgs
from speechpack.loader.asr.args import parse_dataset_args as parse_asr
from speechpack.loader.asr.task import TASK as ASR_TASK
from speechpack.loader.config import LoaderConfig, loader_fingerprint
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.config_keys import NEVER, WHEN_SET
from speechpack.loader.resume import read_state


# -- ASR: its keys on the table, its fingerprints those of every saved state ------------------------------------

#: (name, loader config) -> (train, val) fingerprints of the packless config, as the loader computed them before
#: ASR's keys were declared (``LoaderTask.fingerprint_args`` over ``asdict``: every key but npc and num_prefetch).
ASR_FINGERPRINTS = [
    ("length", {"dataset_args": {}}, ("06cb9d0c75a68a92", "e12719c8dcb350b4")),
    ("static", {"dataset_args": {"batching_strategy": "static", "batch_size": 4, "drop_remainder": True,
                                 "shuffle": False}}, ("4309f1c801d9986c", "ad30cb665dd481ac")),
    ("fbank", {"dataset_args": {"use_fbank": True, "normalize": "utterance"}},
     ("28ca2878870477e8", "48b491d08167a65c")),
    ("specaugment", {"dataset_args": {"spec_aug_p": 1, "spec_aug_freq_mask_param": 27, "spec_aug_time_mask_param": 10,
                                      "normalize_audio": True}}, ("1981e122e9d4f967", "f61a858b1fd041ce")),
    ("char tokenizer of named packs", {"dataset_args": {"tokenizer": {"char": ["a", "b"]}}},
     ("f69e8094e8d155b5", "749d6027bbccf167")),
    ("sentencepiece", {"dataset_args": {"tokenizer": {"sentencepiece": "m.model"}, "remove_unknown": True,
                                        "filter_long_text_threshold": 50}}, ("e1562fcdb2d90d14", "de0c95db2d54f0bc")),
    ("weighting", {"packs": [{"path": "x", "hours_beta": True}, {"path": "y", "hours_beta": True}],
                   "weighting": {"beta_corpus": 0.3, "beta_language": 0.7},
                   "dataset_args": {"dataset_summary_path": "stats.tsv", "dataset_summary_split": "dev"}},
     ("14259232a0c99009", "e1f08c655abdba72")),
    ("splits, filters, windows, ranks", {"dataset_args": {
        "train_split": "train", "valid_split": "dev", "partition_filters": ["pc.field('corpus') == 'a'"],
        "fragment_shuffle_window": 0, "example_shuffle_window": 1, "batch_shuffle_window": 0,
        "sync_mode": "SyncMode.until_first", "min_audio_len": 0, "max_audio_len": 160000,
        "max_num_elements": 1000000, "num_seqs_multiple_of": 2, "min_samples_per_char": 0}},
     ("0a27110d32cd8a62", "0f201bb257c01bda")),
    ("workers and prefetch: not hashed", {"dataset_args": {"npc": 4, "num_prefetch": 8}},
     ("06cb9d0c75a68a92", "e12719c8dcb350b4")),
    ("omnilingual recipe", {"packs": [{"path": "x"}, {"path": "y"}], "model": {"name": "m"}, "dataset": {
        "name": "d", "train_split": "train", "valid_split": "dev", "storage_mode": "MIXTURE_PARQUET",
        "task_mode": "ASR", "mixture_parquet_storage_config": {
            "beta_corpus": 0.5, "beta_language": 0.5, "sync_mode": "UNTIL_LAST",
            "fragment_streaming": {"fragment_shuffle_window": 10, "seed": 2,
                                   "partition_filters": "pc.field('language') == 'x'"},
            "fragment_loading": {"nb_prefetch": 2}},
        "asr_task_config": {"min_audio_len": 32000, "max_audio_len": 960000, "max_num_elements": 3840000,
                            "normalize_audio": True, "batching_strategy": "LENGTH", "example_shuffle_window": 1000,
                            "batch_shuffle_window": 10, "num_prefetch": 4, "npc": 2, "spec_aug_p": 0.5}}},
     ("e92491893650b6ca", "4f7f97dc444f378d")),
]


def _asr_config(config: dict) -> LoaderConfig:
    if "dataset" not in config:
        config = {"task": "asr", "packs": [{"path": "x"}], **config}
    return LoaderConfig.from_dict(config)


@pytest.mark.parametrize("name, config, expected", ASR_FINGERPRINTS, ids=[n for n, _, _ in ASR_FINGERPRINTS])
def test_asr_fingerprints_are_those_of_saved_states(name, config, expected):
    loader = _asr_config(config)
    assert (loader_fingerprint(loader, "train", []), loader_fingerprint(loader, "val", [])) == expected
    args = asdict(loader.dataset_args)
    old = {k: v for k, v in args.items() if k not in ("npc", "num_prefetch")}  # the rule the states were hashed by
    if old["shard_window"] is None:  # a key added later: hashed only while set
        del old["shard_window"]
    assert ASR_TASK.fingerprint_args(dict(args)) == old


def test_asr_states_of_both_versions_still_resume():
    for version in (1, 2):
        state = {"state_version": version, "epoch": 1, "batches_consumed": 2, "seed": 0, "world_size": 2,
                 "fingerprint": ASR_FINGERPRINTS[0][2][0], "rank": 0, **({"global_start": 1} if version == 2 else {})}
        position = read_state(state, seed=0, fingerprint=loader_fingerprint(_asr_config({}), "train", []))
        assert (position.epoch, position.consumed, position.global_start) == (1, 2, version - 1)


def test_asr_args_docstring_table_is_the_declarations():
    with open(asr_args.__file__, encoding="utf-8") as f:
        docstring = ast.get_docstring(ast.parse(f.read()), clean=False)
    shown = "\n".join(line for line in docstring.split("\n") if line.startswith("|"))
    assert shown == ASR_ARGS.markdown(), f"loader/asr/args.py docstring, paste:\n{ASR_ARGS.markdown()}"


def test_asr_args_come_from_the_declarations():
    assert [k.name for k in ASR_ARGS.keys] == list(asdict(AsrArgs()))
    assert parse_asr(None, "d") == AsrArgs()
    assert {k.name: k.fingerprint for k in ASR_ARGS.keys if k.fingerprint != "always"} == {
        "npc": NEVER, "num_prefetch": NEVER, "shard_window": WHEN_SET}
    # a config is read into the held values (any case, fairseq2's enum, a list as a tuple, a probability as a float)
    held = parse_asr({"batching_strategy": "static", "sync_mode": "SyncMode.until_last", "spec_aug_p": 1,
                      "partition_filters": ["pc.field('corpus') == 'a'"], "normalize": True}, "d")
    assert (held.batching_strategy, held.sync_mode, held.spec_aug_p, held.partition_filters, held.normalize_audio) == (
        "STATIC", "UNTIL_LAST", 1.0, ("pc.field('corpus') == 'a'",), True)
    with pytest.raises(ConfigError, match=r"^d: unknown key\(s\) nope \(known: .*max_num_elements, min_audio_len, "
                                          r"min_samples_per_char, normalize, normalize_audio, npc, "):
        parse_asr({"nope": 1}, "d")  # normalize is a known spelling, though no field
    with pytest.raises(ConfigError, match=r"^d\.max_audio_len: 5 is below min_audio_len 10$"):  # across keys
        parse_asr({"min_audio_len": 10, "max_audio_len": 5}, "d")
    with pytest.raises(ConfigError, match=r"^dataset_args\.tokenizer: expected a TokenizerSpec, got 'char'$"):
        AsrArgs(tokenizer="char")  # built in code: the held form only


def _recipe_with(path: str, value) -> dict:
    """An Omnilingual recipe giving ``value`` at ``path`` (dotted, from the recipe's top)."""
    recipe: dict = {"packs": [{"path": "p"}], "dataset": {}}
    *sections, leaf = path.split(".")
    at = recipe
    for section in sections:
        at = at.setdefault(section, {})
    at[leaf] = value
    return recipe


#: A value other than the default for every key an Omnilingual recipe sets (by our name).
_RECIPE_VALUES = {"min_audio_len": 7, "max_audio_len": 9000, "min_samples_per_char": 3, "filter_long_text_threshold": 5,
                  "remove_unknown": True, "normalize_audio": True, "use_fbank": True, "spec_aug_p": 0.25,
                  "spec_aug_freq_mask_param": 3, "spec_aug_time_mask_param": 4, "batching_strategy": "STATIC",
                  "max_num_elements": 99999, "num_seqs_multiple_of": 2, "batch_size": 3, "drop_remainder": True,
                  "dataset_summary_path": "s.tsv", "train_split": "t", "valid_split": "v",
                  "partition_filters": "pc.field('corpus') == 'a'", "fragment_shuffle_window": 5,
                  "example_shuffle_window": 6, "batch_shuffle_window": 7, "num_prefetch": 2, "npc": 3,
                  "sync_mode": "UNTIL_FIRST"}


def test_asr_keys_are_read_where_omnilingual_recipes_set_them():
    from speechpack.loader.asr.args import OMNILINGUAL, from_recipe

    declared = {k.name: k.dialects[OMNILINGUAL] for k in ASR_ARGS.keys if OMNILINGUAL in k.dialects}
    assert set(declared) - {"tokenizer", "sync_batches"} == set(_RECIPE_VALUES)
    for name, path in declared.items():
        if name in _RECIPE_VALUES:
            config = LoaderConfig.from_dict(_recipe_with(path, _RECIPE_VALUES[name]))
            assert getattr(config.dataset_args, name) == _RECIPE_VALUES[name], path
    assert declared["tokenizer"] == "tokenizer.name"  # a model file, read as {sentencepiece: FILE}
    tokenizer = from_recipe({"packs": [], "dataset": {}, "tokenizer": {"name": __file__}})["dataset_args"]["tokenizer"]
    assert tokenizer == {"sentencepiece": __file__}
    with pytest.raises(ConfigError, match=r"sync_batches: speechpack always gives every rank"):
        LoaderConfig.from_dict(_recipe_with(declared["sync_batches"], False))
    assert "| `npc` | int in [1, 2^10], or null | null |" in ASR_ARGS.markdown()
    assert ASR_ARGS.markdown().split("\n")[0] == "| key | type | default | meaning | omnilingual name |"
