"""What a format 1.3 reader required of ``dataset.json`` (its ``schemas/format.py``), as data: the checks by which
it refuses a 1.4 pack (a codec stream, or digests) instead of misreading it.  Exact top-level keys (plus ``cues``
and the asr keys), exact catalogue entry keys, the ``<i2`` dtype of audio streams, and exactly ``index.json`` plus
the stream files in each shard."""

from __future__ import annotations

V13_TOP = {"format", "format_version", "format_minor", "kind", "sample_rate", "streams", "shards", "totals",
           "provenance", "columns", "skipped"}
V13_OPTIONAL = {"cues", "hours_by_corpus", "char_counts"}
V13_STREAM_KEYS = {"name", "dtype", "row_shape", "file"}
V13_AUDIO_STREAMS = ("mix", "target", "source", "audio")


def v13_refusals(manifest: dict) -> list[str]:
    """Why a 1.3 reader refuses ``manifest`` (a ``dataset.json`` object); empty when it reads it."""
    found = []
    unknown = set(manifest) - V13_TOP - V13_OPTIONAL
    if unknown:
        found.append(f"unknown key(s) {sorted(unknown)}")
    for spec in manifest["streams"]:
        if set(spec) != V13_STREAM_KEYS:
            found.append(f"stream keys {sorted(spec)}")
        if spec["name"] in V13_AUDIO_STREAMS and spec["dtype"] != "<i2":
            found.append(f"dtype {spec['dtype']}")
    for shard in manifest["shards"]:
        if set(shard["files"]) != {"index.json"} | {spec["file"] for spec in manifest["streams"]}:
            found.append(f"shard files {sorted(shard['files'])}")
    return found
