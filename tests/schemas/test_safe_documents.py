"""The JSON/YAML reading layer (``schemas/documents.py``, ``schemas/yaml_document.py``) and the readers that go
through it: an integer past Python's int-string limit, nesting 100,000 deep, a billion-laughs alias tree or a
recursive alias is a named problem (file, line, key) within seconds, never a traceback, a hang or a memory
blow-up; messages never show more than a bounded part of a value (``schemas/documents.py``)."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.schemas.documents import MAX_DEPTH, MAX_SHOWN, DocumentError, bounded_repr, parse_json
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.manifest_file import parse_manifest
from speechpack.schemas.yaml_document import MAX_ALIAS_NODES, parse_yaml

FAST_MODULE = True  # imports without torch: its tests marked fast join the tier (docs/testing.md)

LONG = "9" * 5000
DEEP_JSON = "[" * 100_000 + "]" * 100_000


def laughs(levels: int, key: str = "chunk_len", under: str = "dataset_args") -> str:
    """A billion-laughs YAML: ``levels`` anchors of ten aliases each, the last one the value of ``under.key``."""
    names = [f"l{i}" for i in range(levels + 1)]
    lines = [f"{names[0]}: &{names[0]} [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]" for p, n in zip(names, names[1:])]
    return "\n".join(lines) + f"\n{under}:\n  {key}: *{names[-1]}\n"


# ------------------------------------------------------------------------------------------------- the layer


@pytest.mark.fast
def test_json_integer_past_the_digit_limit_names_file_line_and_key():
    with pytest.raises(DocumentError) as err:
        parse_json(f'{{"samples": [\n{{"duration": 1}},\n{{"duration": {LONG}}}]}}', "x.json")
    assert err.value.line == 3 and err.value.key == "samples[1].duration"
    assert str(err.value).startswith("x.json: an integer of 5000 digits (at most 4300")


@pytest.mark.fast
def test_json_nested_100000_deep_is_refused_before_parsing_with_its_line():
    started = time.monotonic()
    with pytest.raises(PackFormatError, match=rf"d.json: nested more than {MAX_DEPTH} levels deep \(line 2\)"):
        parse_json('{"a":\n' + DEEP_JSON + "}", "d.json", error=PackFormatError)
    assert time.monotonic() - started < 5


@pytest.mark.fast
def test_json_brackets_and_escaped_quotes_inside_strings_do_not_nest():
    text = json.dumps({"a\"[": "[" * 500, "b": [[["\\", "]]"]]]})
    assert parse_json(text, "s.json") == json.loads(text)


@pytest.mark.fast
def test_json_decoding_failures_are_named():
    for raw, reason in [(b'{"a": 1,}', "not valid JSON"), (b"\xff{}", "not UTF-8 text"), (b"", "not valid JSON")]:
        with pytest.raises(DocumentError, match=f"^f.json: {reason}"):
            parse_json(raw, "f.json")


@pytest.mark.fast
def test_yaml_billion_laughs_is_refused_while_loading():
    started = time.monotonic()
    with pytest.raises(DocumentError, match=rf"aliases expand to more than {MAX_ALIAS_NODES} nodes"):
        parse_yaml(laughs(9), "r.yaml")
    assert time.monotonic() - started < 5


@pytest.mark.fast
def test_yaml_aliases_that_real_configs_use_still_load():
    text = "base: &b {x: 1, y: [1, 2]}\nuse: *b\nmerged: {<<: *b, z: 3}\n"
    assert parse_yaml(text, "r.yaml") == {"base": {"x": 1, "y": [1, 2]}, "use": {"x": 1, "y": [1, 2]},
                                          "merged": {"x": 1, "y": [1, 2], "z": 3}}


@pytest.mark.fast
def test_yaml_recursive_alias_is_refused():
    with pytest.raises(DocumentError, match=r"alias \*x refers to a node that contains it .*\(line 1\)"):
        parse_yaml("dataset_args: &x {chunk_len: 4, again: *x}\n", "r.yaml")


@pytest.mark.fast
@pytest.mark.parametrize("text, key, lines", [
    ("packs: [{path: a}]\ndataset_args: {chunk_len: 4}\ntask: tse\ndataset_args: {batch_size: 2}\n",
     "dataset_args", (2, 4)),
    ("dataset_args:\n  chunk_len: 4000\n  batch_size: 2\n  chunk_len: 8000\n", "dataset_args.chunk_len", (2, 4)),
    ("packs:\n  - {path: a, weight: 1, weight: 2}\n", "packs[0].weight", (2, 2)),
    ("a:\n  b:\n    c: {d: 1}\n    c: {d: 2}\n", "a.b.c", (3, 4)),
    ("1: one\n0x1: also one\n", "0x1", (1, 2)),
])
def test_yaml_duplicate_key_at_any_level_names_the_key_and_both_lines(text, key, lines):
    with pytest.raises(DocumentError) as err:
        parse_yaml(text, "r.yaml")
    assert err.value.key == key and err.value.line == lines[1]
    assert f"appears twice in one mapping (lines {lines[0]} and {lines[1]})" in err.value.reason


@pytest.mark.parametrize("text, line", [
    ("dataset_args:\n  <<: {chunk_len: 4000, chunk_len: 8000}\n  batch_size: 2\n", 2),
    ("dataset_args:\n  <<: [{batch_size: 2}, {chunk_len: 4000, chunk_len: 8000}]\n", 2),
    ("dataset_args:\n  <<: &base\n    chunk_len: 4000\n    chunk_len: 8000\n", 4),
    ("dataset_args:\n  <<: {<<: {chunk_len: 4000, chunk_len: 8000}}\n", 2),
])
def test_yaml_duplicate_key_inside_a_merged_mapping_is_refused(text, line):
    """A mapping written only as a merge's value (``<<: {...}``, in a list of them, anchored there) is never
    built on its own, yet YAML drops one of its twice-written keys just as silently."""
    with pytest.raises(DocumentError) as err:
        parse_yaml(text, "r.yaml")
    assert err.value.line == line and "key 'chunk_len' appears twice in one mapping" in err.value.reason


@pytest.mark.fast
def test_yaml_keys_a_merge_brings_in_may_be_overridden():
    text = "base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  x: 3\n"
    assert parse_yaml(text, "r.yaml") == {"base": {"x": 1, "y": 2}, "other": {"x": 3, "y": 2}}


def test_plan_refuses_a_config_with_a_duplicate_top_level_key(real_pack, tmp_path):
    result, _, cfg = _plan(tmp_path, f"packs:\n  - path: {real_pack}\ndataset_args: {{chunk_len: 8000}}\n"
                                     f"dataset_args: {{chunk_len: 16000}}\n")
    assert result.exit_code == 1
    assert (f"error: {cfg}: key 'dataset_args' appears twice in one mapping (lines 3 and 4)" in result.output
            and "(line 4, key dataset_args)" in result.output), result.output


@pytest.mark.fast
@pytest.mark.parametrize("value", [LONG, "0x" + "f" * 4000, ":".join(["59"] * 3000)])
def test_yaml_long_integer_in_any_notation_names_line_and_key(value):
    with pytest.raises(DocumentError) as err:
        parse_yaml(f"dataset_args:\n  batch_size: 4\n  chunk_len: {value}\n", "r.yaml")
    assert (err.value.line, err.value.key) == (3, "dataset_args.chunk_len")
    assert "digits (at most 4300" in err.value.reason


def test_yaml_nested_100000_deep_is_refused():
    with pytest.raises(DocumentError, match=rf"nested more than {MAX_DEPTH} levels deep"):
        parse_yaml(DEEP_JSON, "r.yaml")


@pytest.mark.fast
@pytest.mark.parametrize("text, message", [
    ("x: 2001-13-01\n", r"cannot read timestamp value '2001-13-01'.*\(line 1, key x\)"),
    ("x: !!float abc\n", r"cannot read float value 'abc'"),
    ("x: !!python/object/apply:os.system [ls]\n", r"could not determine a constructor"),
    ("x: \x0b\n", r"unacceptable character"),
    ("packs: [unclosed", r"not valid YAML .*\(line 1\)"),
])
def test_yaml_decoding_failures_are_named(text, message):
    with pytest.raises(DocumentError, match=message):
        parse_yaml(text, "r.yaml")


@pytest.mark.fast
def test_bounded_repr_never_exceeds_its_limit():
    shared = ["lol"] * 10
    for _ in range(8):
        shared = [shared] * 10  # 10**9 leaves, shared
    cyclic: list = [1]
    cyclic.append(cyclic)
    for value in (shared, cyclic, 10 ** 5000, "x" * 10**6, {i: i for i in range(10**5)}):
        started = time.monotonic()
        assert len(bounded_repr(value)) <= MAX_SHOWN
        assert time.monotonic() - started < 1
    assert bounded_repr([0.5, 0.5]) == "[0.5, 0.5]" and bounded_repr("abc") == "'abc'"
    assert "integer of about 5001 digits" in bounded_repr(10 ** 5000)


# ------------------------------------------------------------------------------------------------ the readers


def _plan(tmp_path, text: str):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(text)
    started = time.monotonic()
    result = CliRunner().invoke(main, ["plan", str(cfg)])
    return result, time.monotonic() - started, str(cfg)


def test_plan_refuses_billion_laughs_in_chunk_len_within_seconds(real_pack, tmp_path):
    result, seconds, cfg = _plan(tmp_path, f"packs:\n  - path: {real_pack}\n" + laughs(9))
    assert result.exit_code == 1 and isinstance(result.exception, (SystemExit, type(None)))
    assert f"{cfg}: its aliases expand to more than" in result.output
    assert seconds < 10 and len(result.output) < 1000


@pytest.mark.parametrize("text", [
    "packs:\n  - path: {pack}\n    weight: *l3\n",
    "dataset_args:\n  online_mix: true\n  num_speakers: {{distribution: *l3, max_speakers: 3}}\npacks:\n"
    "  - path: {pack}\n",
])
def test_aliased_values_under_the_budget_give_short_messages(real_pack, tmp_path, text):
    """10**4 leaves load (under the alias budget); the config error shows a bounded part of them."""
    result, seconds, _ = _plan(tmp_path, laughs(3).split("dataset_args:")[0] + text.format(pack=real_pack))
    assert result.exit_code == 1, result.output
    assert "error:" in result.output and len(result.output) < 1000 and seconds < 10


def test_recipe_integer_past_the_digit_limit_is_a_named_problem(real_pack, tmp_path):
    result, _, cfg = _plan(tmp_path, f"packs:\n  - path: {real_pack}\ndataset_args:\n  chunk_len: {LONG}\n")
    assert result.exit_code == 1
    assert f"{cfg}: an integer of 5000 digits" in result.output and "line 4, key dataset_args.chunk_len" in result.output


def test_recursive_aliases_in_dataset_args_and_val_dataset_args_are_named(real_pack, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"packs:\n  - path: {real_pack}\ndataset_args: &d {{chunk_len: 8000, more: *d}}\n"
                   f"val_dataset_args: *d\n")
    result = CliRunner().invoke(main, ["plan", str(cfg), "--state", "val"])
    assert result.exit_code == 1 and "refers to a node that contains it" in result.output


@pytest.mark.fast
def test_deep_merge_of_a_mapping_that_contains_itself_is_refused():
    from speechpack.loader.config_checks import ConfigError
    from speechpack.loader.recipe import deep_merge

    looped: dict = {"a": 1}
    looped["b"] = looped
    with pytest.raises(ConfigError, match="nested more than"):
        deep_merge(looped, looped)


@pytest.mark.parametrize("command", [["validate", "--no-hash"], ["inspect"], ["copy"]])
def test_dataset_json_with_a_long_integer_is_named_by_every_command(real_pack, tmp_path, command):
    manifest = real_pack / "dataset.json"
    manifest.write_text(manifest.read_text().replace("{", f'{{"huge": {LONG},', 1))
    args = [*command, str(real_pack)] + ([str(tmp_path / "copy")] if command == ["copy"] else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and isinstance(result.exception, (SystemExit, type(None))), result.output
    assert "dataset.json: an integer of 5000 digits" in result.output and "key huge" in result.output


@pytest.mark.fast
def test_object_store_manifest_reader_names_deep_nesting_and_long_integers():
    """``parse_manifest`` is what ``copy`` and ``validate`` use on ``s3://`` bytes."""
    with pytest.raises(PackFormatError, match=r"s3://b/p/dataset.json: nested more than"):
        parse_manifest(DEEP_JSON.encode(), "s3://b/p/dataset.json")
    with pytest.raises(PackFormatError, match=r"an integer of 5000 digits.*key version"):
        parse_manifest(f'{{"version": {LONG}}}'.encode(), "s3://b/p/dataset.json")


def test_validate_reports_a_shard_index_nested_100000_deep(real_pack):
    index = sorted(real_pack.glob("shard-*/index.json"))[0]
    index.write_text(DEEP_JSON)
    result = CliRunner().invoke(main, ["validate", "--no-hash", str(real_pack)])
    assert result.exit_code == 1 and isinstance(result.exception, (SystemExit, type(None)))
    assert "index.json" in result.output and f"nested more than {MAX_DEPTH} levels deep" in result.output


@pytest.mark.fast
def test_cues_yaml_with_a_long_integer_is_named(tmp_path):
    from speechpack.packer.cues.banks import _read_config

    cues = tmp_path / "cues.yaml"
    cues.write_text(f"cues:\n  audio:\n    policy: {{type: random, key: spk_id, resource: {LONG}}}\n")
    with pytest.raises(DocumentError, match=r"cues.yaml: an integer of 5000 digits .*\(line 3, key cues.audio"):
        _read_config(str(cues))


def test_muvap_index_and_manifest_deep_or_long_are_named(tmp_path):
    from factories.muvap_packs import muvap_avcc_corpus
    from speechpack.packer.build.run import BuildOptions
    from speechpack.packer.importers.muvap import import_muvap

    corpus = muvap_avcc_corpus(tmp_path / "muvap")
    index = corpus.muvap / "shard-000000" / "index.json"
    good = index.read_text()
    for text, message in [(DEEP_JSON, "nested more than"), (good.replace("[", f"[{LONG}, ", 1), "5000 digits")]:
        index.write_text(text)
        with pytest.raises(PackFormatError, match=f"index.json: .*{message}"):
            import_muvap(str(corpus.muvap), BuildOptions(out=str(tmp_path / "out"), progress=False))
    index.write_text(good)
    (corpus.muvap / "dataset.json").write_text(DEEP_JSON)
    with pytest.raises(PackFormatError, match="dataset.json: nested more than"):
        import_muvap(str(corpus.muvap), BuildOptions(out=str(tmp_path / "out"), progress=False))
