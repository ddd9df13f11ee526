"""A compressed copy of a pcm16 pack, written straight from FORMAT 1.4's text (docs/format.md, "Compressed audio
streams", "Digests") with soundfile and hashlib alone: the loader's tests read FLAC and Opus packs whose bytes no
speechpack writer made, so they also check that the format says enough for a reader.

``recode(pack, out, codec)`` keeps every sample, key, speaker and data stream; each audio segment is cut into
blocks of ``block_frames`` frames, each block one FLAC (16-bit) or Ogg Opus file.  FLAC's statistics are the pcm16
pack's (lossless); Opus's are recomputed on the decoded blocks, as the format defines them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import soundfile

from speechpack.packer.audio.store import int16_statistics
from speechpack.schemas.constants import STREAM_TYPES

_FORMATS = {"flac": ("FLAC", "PCM_16")}


def encode_block(codec: str, block: np.ndarray, rate: int) -> bytes:
    """``block`` int16 ``[C, n]`` as one complete file of ``codec`` (Opus at the writer's default bitrate, through
    its registry row: libsndfile sets Opus's bitrate only through a compression level, ``media.codecs``)."""
    if codec == "opus":
        from speechpack.media.codecs import codec as codec_row

        return codec_row("opus").encode(np.ascontiguousarray(block), rate, None)
    fmt, subtype = _FORMATS[codec]
    buffer = io.BytesIO()
    soundfile.write(buffer, np.ascontiguousarray(block.T), rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def decode_block(data: bytes) -> np.ndarray:
    """One block file decoded to int16 ``[C, n]`` (``sf_readf_short``)."""
    return np.ascontiguousarray(soundfile.read(io.BytesIO(data), dtype="int16", always_2d=True)[0].T)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _entry(path: Path) -> dict:
    return {"sha256": _sha256(path), "size": path.stat().st_size}


def recode(pack: str | os.PathLike, out: str | os.PathLike, codec: str, block_frames: int = 4000) -> str:
    """Write ``pack`` (pcm16) re-encoded with ``codec`` (``flac`` or ``opus``) to ``out``; returns ``out``."""
    src, dst = Path(pack), Path(out)
    manifest = json.loads((src / "dataset.json").read_text())
    rate = int(manifest["sample_rate"])
    audio = [s["name"] for s in manifest["streams"] if STREAM_TYPES[s["name"]].audio]
    if dst.exists():
        shutil.rmtree(dst)
    (dst / "columns").mkdir(parents=True)
    block_sizes: dict[str, list[int]] = {name: [] for name in audio}
    segment_rows: dict[str, list[dict]] = {name: [] for name in audio}
    total_bytes = 0
    for shard in manifest["shards"]:
        directory = shard["directory"]
        (dst / directory).mkdir()
        records = json.loads((src / directory / "index.json").read_text())["samples"]
        header = json.loads((src / directory / "index.json").read_text())
        pieces: list[bytes] = []
        blocks_of: dict[tuple[str, int, int], list[bytes]] = {}
        for stream in manifest["streams"]:
            name = stream["name"]
            array = np.load(src / directory / stream["file"], mmap_mode="r")
            if name not in audio:
                shutil.copyfile(src / directory / stream["file"], dst / directory / stream["file"])
                row_bytes = array[:1].nbytes if len(array) else 0
                for record in records:
                    for seg in record["streams"][name]:
                        piece = array[seg["offset"]:seg["offset"] + seg["length"]]
                        pieces.append(np.ascontiguousarray(piece).tobytes() if row_bytes else b"")
                continue
            data = bytearray()
            for r, record in enumerate(records):
                for s, seg in enumerate(record["streams"][name]):
                    channels, length = seg["channels"], seg["length"]
                    stored = np.asarray(array[seg["offset"]:seg["offset"] + channels * length]).reshape(channels,
                                                                                                         length)
                    encoded, decoded = [], []
                    for start in range(0, length, block_frames):
                        block = encode_block(codec, stored[:, start:start + block_frames], rate)
                        encoded.append(block)
                        decoded.append(decode_block(block))
                    seg["offset"] = len(data)
                    seg["blocks"] = [len(b) for b in encoded]
                    if codec == "opus" and length:
                        got = np.concatenate(decoded, axis=1)
                        assert got.shape == stored.shape, (got.shape, stored.shape)
                        seg["mean"], seg["rms"], seg["peak"] = int16_statistics(got, seg["scale"])
                    for b in encoded:
                        data += b
                        pieces.append(b)
                    block_sizes[name].extend(seg["blocks"])
                    blocks_of[(name, r, s)] = encoded
            np.save(dst / directory / stream["file"], np.frombuffer(bytes(data), dtype=np.uint8))
        digests = np.frombuffer(b"".join(hashlib.blake2b(p, digest_size=16).digest() for p in pieces),
                                dtype=np.uint8).reshape(len(pieces), 16)
        np.save(dst / directory / "digests.npy", digests)
        header["samples"] = records
        (dst / directory / "index.json").write_text(
            '{"format_version":1,"shard":' + json.dumps(directory) + ',"samples":[\n'
            + ",\n".join(json.dumps(r, sort_keys=True, separators=(",", ":")) for r in records) + "\n]}\n")
        for record in records:
            for name in audio:
                segment_rows[name].extend(record["streams"][name])
        files = {}
        for path in sorted((dst / directory).iterdir()):
            files[path.name] = _entry(path)
            total_bytes += path.stat().st_size
        shard["files"] = files
    for path in sorted((src / "columns").iterdir()):
        shutil.copyfile(path, dst / "columns" / path.name)
    for name in audio:
        table = np.load(src / "columns" / f"{name}.npy")
        for row, seg in zip(table, segment_rows[name]):
            row["offset"] = seg["offset"]
            for key in ("mean", "rms", "peak"):
                row[key] = seg[key]
        np.save(dst / "columns" / f"{name}.npy", table)
        np.save(dst / "columns" / f"{name}_blocks.npy", np.asarray(block_sizes[name], dtype="<i8"))
    manifest["columns"]["files"] = {p.name: _entry(p) for p in sorted((dst / "columns").iterdir())}
    for stream in manifest["streams"]:
        if stream["name"] in audio:
            stream.update(dtype="|u1", codec=codec, block_frames=block_frames)
    manifest["digests"] = "blake2b-128"
    manifest["format_minor"] = 4
    manifest["totals"]["bytes"] = total_bytes
    for name in ("cues",):
        if name in manifest and (src / name).exists():
            shutil.copytree(src / name, dst / name)
    (dst / "dataset.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return str(dst)


__all__ = ["decode_block", "encode_block", "recode"]
