"""``schemas/``: the manifest contract, units and the WeSep line parser, tested without audio."""

from __future__ import annotations

import copy
import json

import pytest

from factories.manifest_edits import delete_at, set_at
from speechpack.schemas.constants import FORMAT_MINOR, FORMAT_VERSION, SUPPORTED_MAJOR_VERSIONS
from speechpack.schemas.errors import PackFormatError, SpeechpackError
from speechpack.schemas.format import FileEntry, Manifest, ShardEntry, StreamSpec, check_shard_index
from speechpack.schemas.kinds import column_files
from speechpack.schemas.units import format_bytes, parse_size, seconds_to_samples
from speechpack.schemas.line_problems import LineProblem
from speechpack.schemas.wesep_list import best_effort_key, parse_wesep_line

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

DIGEST = "ab" * 32


def make_manifest(kind: str = "tse", shards: int = 2, skipped: int = 0) -> Manifest:
    streams = ("mix", "target") if kind == "tse" else ("source",)
    return Manifest(
        kind=kind,
        sample_rate=16000,
        streams=tuple(StreamSpec(name) for name in streams),
        shards=tuple(
            ShardEntry(directory=f"shard-{i:06d}", samples=3,
                       files={name: FileEntry(size=100 + i, sha256=DIGEST)
                              for name in ("index.json", *(f"{s}.npy" for s in streams))})
            for i in range(shards)
        ),
        totals={"samples": 3 * shards, "hours": 0.01, "speakers": 4, "bytes": 1234},
        provenance={"input": {"path": "/data/raw.list", "sha256": DIGEST}, "tool": "speechpack",
                    "tool_version": "0.1.0", "command": "build wesep",
                    "options": {"sample_rate": 16000, "shard_bytes": 10**9, "skip_bad": False}},
        columns={name: FileEntry(size=200, sha256=DIGEST) for name in column_files(kind)},
        skipped={"count": skipped, **({"file": {"name": "skipped.json", "size": 10, "sha256": DIGEST}}
                                      if skipped else {})},
    )


# ---------------------------------------------------------------------------------------------------------------
# Manifest
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,skipped", [("tse", 0), ("sources", 0), ("tse", 2)])
def test_manifest_round_trips_through_json(kind, skipped):
    manifest = make_manifest(kind, skipped=skipped)
    obj = manifest.to_dict()
    assert obj["format"] == "speechpack"
    assert obj["format_version"] == FORMAT_VERSION == 1 and obj["format_minor"] == FORMAT_MINOR == 0
    assert obj["streams"][0] == {"name": obj["streams"][0]["name"], "dtype": "<i2", "row_shape": [],
                                 "file": f"{obj['streams'][0]['name']}.npy"}
    assert obj["shards"][1]["files"]["index.json"] == {"size": 101, "sha256": DIGEST}
    again = Manifest.from_dict(json.loads(json.dumps(obj)))
    assert again == manifest
    assert again.to_dict() == obj
    assert again.num_samples == 6
    assert again.stream(obj["streams"][0]["name"]).file == obj["streams"][0]["file"]


def test_manifest_stream_lookup_names_the_streams():
    with pytest.raises(PackFormatError, match=r"no stream 'source' \(streams: mix, target\)"):
        make_manifest("tse").stream("source")


def test_a_newer_minor_version_is_read():
    obj = make_manifest().to_dict()
    obj["format_minor"] = 7
    assert Manifest.from_dict(obj).format_minor == 7


@pytest.mark.parametrize("version", [0, 2, 99, "1", None])
def test_unknown_major_version_refused(version):
    obj = make_manifest().to_dict()
    obj["format_version"] = version
    readable = ", ".join(str(v) for v in SUPPORTED_MAJOR_VERSIONS)
    with pytest.raises(PackFormatError, match=rf"format_version {version!r} is not supported; this speechpack "
                                              rf"reads format_version {readable}"):
        Manifest.from_dict(obj, "PACK/dataset.json")


@pytest.mark.parametrize("version", [True, 1.0])
def test_major_version_must_be_an_integer(version):
    obj = make_manifest().to_dict()
    obj["format_version"] = version
    with pytest.raises(PackFormatError, match="format_version"):
        Manifest.from_dict(obj)


def test_not_a_speechpack_manifest():
    obj = make_manifest().to_dict()
    obj["format"] = "mds"
    with pytest.raises(PackFormatError, match=r"not a speechpack manifest \(format is 'mds'"):
        Manifest.from_dict(obj)
    with pytest.raises(PackFormatError, match="not a speechpack manifest"):
        Manifest.from_dict([1, 2])


def _without(key):
    def edit(obj):
        del obj[key]
    return edit


# (edit, message): each malformed manifest is refused with a message naming the key or the value.
MALFORMED = {
    "missing totals": (_without("totals"), r"dataset.json: missing key\(s\) totals"),
    "missing two keys": (lambda o: (o.pop("kind"), o.pop("shards")), r"missing key\(s\) kind, shards"),
    "unknown key": (set_at(("compression",), "zstd"), r"dataset.json: unknown key\(s\) compression"),
    "missing totals.hours": (delete_at(("totals", "hours")), r"dataset.json.totals: missing key\(s\) hours"),
    "unknown totals key": (set_at(("totals", "minutes"), 1), r"dataset.json.totals: unknown key\(s\) minutes"),
    "unknown provenance key": (set_at(("provenance", "user"), "me"), r"provenance: unknown key\(s\) user"),
    "missing provenance.options": (delete_at(("provenance", "options")), r"provenance: missing key\(s\) options"),
    "unknown skipped key": (set_at(("skipped", "why"), []), r"skipped: unknown key\(s\) why"),
    "unknown stream key": (set_at(("streams", 0, "codecs"), "pcm"), r"streams\[0\]: unknown key\(s\) codecs"),
    "missing shard files": (delete_at(("shards", 1, "files")), r"shards\[1\]: missing key\(s\) files"),
    "unknown file-entry key": (set_at(("shards", 0, "files", "mix.npy", "md5"), "x"),
                               r"shards\[0\].files\['mix.npy'\]: unknown key\(s\) md5"),
    "bad kind": (set_at(("kind",), "video"), r"kind: 'video' is not one of tse, sources"),
    "zero rate": (set_at(("sample_rate",), 0), r"sample_rate: must be positive, got 0"),
    "bool rate": (set_at(("sample_rate",), True), r"sample_rate: expected int, got True"),
    "string rate": (set_at(("sample_rate",), "16000"), r"sample_rate: expected int, got '16000'"),
    "streams of another kind": (set_at(("streams",), [StreamSpec("source").to_dict()]),
                                r"kind 'tse' has streams \['mix', 'target'\], got \['source'\]"),
    "wrong dtype": (set_at(("streams", 1, "dtype"), "<f4"), r"stream 'target' must be dtype '<i2'"),
    "wrong file name": (set_at(("streams", 0, "file"), "mix.bin"), r"streams\[0\].file: expected 'mix.npy'"),
    "short digest": (set_at(("shards", 0, "files", "index.json", "sha256"), "abc"), r"bad size 100 or sha256 'abc'"),
    "negative size": (set_at(("shards", 0, "files", "index.json", "size"), -1), r"bad size -1"),
    "totals disagree": (set_at(("totals", "samples"), 7), r"shards hold 6 samples but totals.samples is 7"),
    "shards not a list": (set_at(("shards",), {}), r"shards: expected list, got \{\}"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_manifest_is_refused_naming_the_field(name):
    edit, message = MALFORMED[name]
    obj = copy.deepcopy(make_manifest().to_dict())
    edit(obj)
    with pytest.raises(PackFormatError, match=message):
        Manifest.from_dict(obj)


def test_shard_index_checks():
    record = {"key": "k", "speakers": ["a"], "num_frames": 4, "duration": 0.00025, "orig_sample_rate": 16000,
              "line": 1, "provenance": {}, "streams": {"source": [
                  {"offset": 0, "channels": 1, "length": 4, "scale": 1.0, "mean": 0.0, "rms": 0.0, "peak": 0.0}]}}
    good = {"format_version": 1, "shard": "shard-000000", "samples": [record]}
    assert check_shard_index(good, "sources", "index.json") == [record]
    bad_cases = [
        (dict(good, format_version=2), r"index.json.format_version: 2 is not supported"),
        (dict(good, extra=1), r"unknown key\(s\) extra"),
        (dict(good, samples=[dict(record, speakers=[])]), r"speakers: expected a non-empty list of strings"),
        (dict(good, samples=[dict(record, streams={"mix": []})]), r"streams: expected \['source'\], got \['mix'\]"),
        (dict(good, samples=[dict(record, streams={"source": []})]), r"expected a non-empty list of segments"),
        (dict(good, samples=[dict(record, streams={"source": [dict(record["streams"]["source"][0], offset=-8)]})]),
         r"streams.source\[0\].offset: negative value -8"),
        (dict(good, samples=[{k: v for k, v in record.items() if k != "line"}]),
         r"samples\[0\]: missing key\(s\) line"),
    ]
    for obj, message in bad_cases:
        with pytest.raises(PackFormatError, match=message):
            check_shard_index(obj, "sources", "index.json")


# ---------------------------------------------------------------------------------------------------------------
# Units
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,size", [
    ("1GB", 10**9), ("1 GB", 10**9), ("1gb", 10**9), ("250MB", 250 * 10**6), ("1.5KB", 1500), ("2TB", 2 * 10**12),
    ("512MiB", 512 * 2**20), ("1GiB", 2**30), ("4KiB", 4096), ("1TiB", 2**40),
    ("100", 100), ("100B", 100), (" 7 mb ", 7 * 10**6), (4096, 4096),
    ("0.5", 1), ("1.0000004KB", 1000),  # half up
])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text,message", [
    ("", "cannot read size ''"), ("GB", "cannot read size"), ("1XB", "cannot read size '1XB'"),
    ("-1GB", "cannot read size"), ("1e9", "cannot read size"), ("1,000", "cannot read size"),
    ("0", "size must be positive"), ("0.4", "size must be positive"), (0, "size must be positive"),
])
def test_parse_size_refuses(text, message):
    with pytest.raises(SpeechpackError, match=message) as caught:
        parse_size(text)
    if "cannot read" in message:
        assert "KB, MB, GB" in str(caught.value) and "MIB" in str(caught.value)  # says what it accepts


def test_seconds_to_samples_rounds_half_up_and_format_bytes():
    assert seconds_to_samples(1.0, 16000) == 16000
    assert seconds_to_samples(0.5 / 16000, 16000) == 1
    assert seconds_to_samples(0.49 / 16000, 16000) == 0
    assert format_bytes(999) == "999 B"
    assert format_bytes(1500) == "1.50 KB"
    assert format_bytes(2 * 10**9) == "2.00 GB"


# ---------------------------------------------------------------------------------------------------------------
# WeSep lines
# ---------------------------------------------------------------------------------------------------------------


def test_parse_mixture_line():
    text = json.dumps({"key": "m", "spk": ["b", "a"], "mix": {"default": ["/m0.wav", "/m1.wav"]},
                       "src": {"a": ["/a.wav", "/a2.wav"], "b": ["/b.wav"], "c": ["/c.wav"]}})
    parsed = parse_wesep_line(text, 3)
    assert parsed.line == 3 and parsed.key == "m" and parsed.kind == "tse"
    assert parsed.speakers == ("b", "a")
    assert parsed.mix_paths == ("/m0.wav", "/m1.wav")
    assert parsed.target_paths == ("/b.wav", "/a.wav")  # first file of src[spk], in spk order
    assert parsed.provenance == {"src": {"b": ["/b.wav"], "a": ["/a.wav", "/a2.wav"]},
                                 "mix": ["/m0.wav", "/m1.wav"]}


def test_parse_single_speaker_line():
    parsed = parse_wesep_line('{"key": "u1", "spk": ["s"], "src": {"s": ["rel/u1.wav"]}}\n', 1)
    assert parsed.kind == "sources"
    assert parsed.mix_paths == () and parsed.target_paths == ("rel/u1.wav",)
    assert parsed.provenance == {"src": {"s": ["rel/u1.wav"]}}


def test_other_keys_are_kept_as_provenance():
    parsed = parse_wesep_line('{"key": "u1", "spk": ["s"], "src": {"s": ["/u.wav"]}, "text": "hello"}', 1)
    assert parsed.provenance["extra"] == {"text": "hello"}


LINE_ERRORS = [
    ('{"key": "x", "spk": ["a"]', "not valid JSON"),
    ("", "not valid JSON"),
    ('["key", "x"]', "expected a JSON object, got list"),
    ('{"spk": ["a"], "src": {"a": ["/a.wav"]}}', "key 'key' must be a non-empty string, got None"),
    ('{"key": "", "spk": ["a"], "src": {"a": ["/a.wav"]}}', "key 'key' must be a non-empty string, got ''"),
    ('{"key": 7, "spk": ["a"], "src": {"a": ["/a.wav"]}}', "key 'key' must be a non-empty string, got 7"),
    ('{"key": "x", "src": {"a": ["/a.wav"]}}', "missing key 'spk'"),
    ('{"key": "x", "spk": "a", "src": {"a": ["/a.wav"]}}', "key 'spk' must be a non-empty list"),
    ('{"key": "x", "spk": [], "src": {}}', "key 'spk' must be a non-empty list"),
    ('{"key": "x", "spk": ["a", "a"], "src": {"a": ["/a.wav"]}}', "lists a speaker twice"),
    ('{"key": "x", "spk": ["a"]}', "key 'src' must be an object mapping speaker to files, got None"),
    ('{"key": "x", "spk": ["a", "b"], "src": {"a": ["/a.wav"]}}', "speaker 'b' in 'spk' has no entry in 'src'"),
    ('{"key": "x", "spk": ["a"], "src": {"a": []}}', "key 'src.a' must be a non-empty list"),
    ('{"key": "x", "spk": ["a"], "src": {"a": [""]}}', "key 'src.a' must be a non-empty list"),
    ('{"key": "x", "spk": ["a"], "src": {"a": ["/a.wav"]}, "mix": ["/m.wav"]}',
     "key 'mix' must be an object with a 'default' list"),
    ('{"key": "x", "spk": ["a"], "src": {"a": ["/a.wav"]}, "mix": {"default": []}}',
     "key 'mix.default' must be a non-empty list"),
    ('{"key": "x", "spk": ["a", "b"], "src": {"a": ["/a.wav"], "b": ["/b.wav"]}}',
     "needs exactly one speaker, got 2"),
    ('{"key": "x", "spk": ["a"], "src": {"a": ["/a.wav", "/b.wav"]}}', "needs exactly one file in 'src.a', got 2"),
]


@pytest.mark.parametrize("text,reason", LINE_ERRORS)
def test_parse_wesep_line_errors(text, reason):
    with pytest.raises(ValueError) as caught:
        parse_wesep_line(text, 1)
    assert reason in str(caught.value)


def test_best_effort_key_and_line_problem():
    assert best_effort_key('{"key": "k", "spk": 3}') == "k"
    assert best_effort_key('{"key": "k"') is None
    assert best_effort_key('["k"]') is None
    assert best_effort_key('{"key": 5}') is None
    problem = LineProblem(line=4, key="k", path="/a.wav", reason="file not found")
    assert problem.to_dict() == {"line": 4, "key": "k", "path": "/a.wav", "reason": "file not found"}
    assert problem.describe("raw.list") == "raw.list:4 key 'k' file /a.wav: file not found"
    assert LineProblem(2, None, None, "not valid JSON").describe("raw.list") == "raw.list:2: not valid JSON"
