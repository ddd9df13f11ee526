"""The audio codecs of a pack (format 1.4), one registry row each: ``pcm16``, ``flac``, ``opus``.

A row encodes one int16 block ``[C, T]`` to bytes and decodes bytes back to int16 ``[C, T]``; encoding and
decoding go through soundfile (libsndfile's FLAC and Ogg/Opus), never a codec of our own.  The writer
(``packer.build``) encodes a segment's blocks in its worker processes (:func:`encode_segment`); ``speechpack
validate`` decodes every block whole (:func:`decode_run`), the loader only the part of each block a window needs
(a row's ``decode`` with ``start``/``stop``: a FLAC block is sought to the frame holding the window's first
sample, and any block's decoding stops at the window's end; ``loader.pack.blocks``).  A block that does not
decode, or decodes to other frame or channel counts than its segment says, raises :class:`CorruptBlock`, which
names the block; callers add the file and the segment (:meth:`CorruptBlock.at`).

Opus through libsndfile (1.2), measured here:

- Its bitrate is set only by ``compression_level`` q: libsndfile sets ``OPUS_SET_BITRATE((int)((1 - q) * 250000 +
  6000) * channels)``, so 6 to 256 kbit/s *per channel* (``bitrate_mode`` is refused for Opus: "Error set bitrate
  mode").  :func:`opus_compression_level` inverts that exactly, so ``--opus-bitrate BPS`` is the bits per second
  per channel the encoder is given (the block's Ogg framing adds about 0.1 kB, see below).
- It writes a random Ogg serial number (a different file on every call) and an ``OpusTags`` header padded with
  about 780 zero bytes (6 kbit/s of a 1 s block).  :func:`_settle_ogg` sets the serial to a constant and drops
  the padding (RFC 7845 section 5.2 makes it optional), recomputing the page checksums, so equal input gives equal
  bytes (byte-identical packs across ``--workers`` and resumed builds) and a block costs what it encodes.
- Pre-skip and end trimming by granule position are written by libsndfile, and its decoder applies them: a block
  decodes to exactly the frames it was given (checked on every decode).

FLAC blocks are encoded by libsndfile into an in-memory file of the calling thread rather than through a
``BytesIO``: the same bytes, without a call back into Python for each of libFLAC's writes
(:func:`_encode_to_scratch`).
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import zlib
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import soundfile

from speechpack.media.sound_blocks import DIRECT_BYTES, read_frames
from speechpack.schemas.constants import (
    CODEC_FLAC,
    CODEC_OPUS,
    CODEC_PCM16,
    CODECS,
    OPUS_SAMPLE_RATES,
    block_count,
)
from speechpack.schemas.errors import OptionError, PackFormatError, SpeechpackError

#: ``--opus-bitrate`` bounds, bits per second per channel: what libsndfile's compression level can express.
OPUS_MIN_BITRATE = 6000
OPUS_MAX_BITRATE = 256000
#: The default: 24 kbit/s per channel, a little above the 16-20 kbit/s Opus's own guidance gives for wideband
#: (16 kHz) speech, since every 1 s block starts the encoder afresh; about 0.1x the pcm16 bytes with the blocks'
#: framing, 15.7 dB waveform SNR on the tests' read speech (docs/building.md, "Codecs").
DEFAULT_OPUS_BITRATE = 24000
#: Default ``--block-seconds``: the unit of random access inside an utterance (a 2 s window decodes 2-3 blocks).
DEFAULT_BLOCK_SECONDS = 1.0
#: The FLAC format's channel limit, and Ogg Opus's (RFC 7845 channel mapping family 255).
FLAC_MAX_CHANNELS = 8
OPUS_MAX_CHANNELS = 255
#: The Ogg serial number of every Opus block (libsndfile draws a random one; any constant is valid).
OGG_SERIAL = 0x73706B31  # "spk1"


class EncodeError(SpeechpackError):
    """Audio a codec cannot store (FLAC holds at most 8 channels) or that libsndfile failed to encode: a problem
    of the input's line (a build reports it, or leaves the line out with ``--skip-bad``)."""


class CorruptBlock(PackFormatError):
    """A block of a compressed stream does not decode to what its segment says.  ``block`` is its index in the
    segment and ``reason`` what went wrong; :meth:`at` names the file and the segment."""

    def __init__(self, reason: str, block: int | None = None, where: str | None = None):
        self.reason = reason
        self.block = block
        self.where = where
        place = f"{where}: " if where else ""
        which = f"block {block}: " if block is not None else ""
        super().__init__(f"{place}{which}{reason}")

    def at(self, where: str) -> "CorruptBlock":
        """The same error naming ``where`` (the stream file and segment, e.g. ``PACK/shard-000000/mix.npy segment
        3 (key 'utt1')``)."""
        return CorruptBlock(self.reason, self.block, where)


@dataclass(frozen=True)
class Codec:
    """One row of the registry.

    ``lossless``      decoded samples equal the encoded int16 bit for bit.
    ``blocked``       stored in blocks (``dataset.json`` names it); ``pcm16`` is the flat int16 layout of every
                      older pack.
    ``sample_rates``  the only rates it encodes, or None for any.
    ``max_channels``  the most channels a block may have, or None for any.
    ``encode(block, sample_rate, bitrate)``  int16 ``[C, T]`` -> bytes (``bitrate``: bits/s per channel, opus).
    ``decode(data, sample_rate, channels, frames, start=0, stop=None)``  bytes -> int16 ``[C, frames]``, or
                      :class:`CorruptBlock`; with ``start``/``stop``, frames ``[start, stop)`` of the block only.
    ``seeks``         a decode of ``[start, stop)`` starts at ``start`` (FLAC: libFLAC seeks sample-exactly to the
                      frame holding it); False: it decodes from the block's first frame (Opus: a decoder started
                      later would give other samples than the block's stored ones, which are its whole decode).
    """

    name: str
    lossless: bool
    blocked: bool
    sample_rates: tuple[int, ...] | None
    max_channels: int | None
    encode: Callable[[np.ndarray, int, int | None], bytes]
    decode: Callable[..., np.ndarray]
    seeks: bool = False


def _encode_pcm16(block: np.ndarray, sample_rate: int, bitrate: int | None = None) -> bytes:
    return np.ascontiguousarray(block, dtype="<i2").tobytes()


def _decode_pcm16(data: bytes, sample_rate: int, channels: int, frames: int, start: int = 0,
                  stop: int | None = None) -> np.ndarray:
    if len(data) != channels * frames * 2:
        raise CorruptBlock(f"{len(data)} bytes, {channels} x {frames} int16 samples need {channels * frames * 2}")
    start, stop = _span(frames, start, stop)
    return np.frombuffer(data, dtype="<i2").reshape(channels, frames)[:, start:stop]


def _span(frames: int, start: int, stop: int | None) -> tuple[int, int]:
    """``[start, stop)`` of a block of ``frames`` (``stop`` None: its end); a span outside it is a caller's bug."""
    stop = frames if stop is None else stop
    if not 0 <= start < stop <= frames:
        raise ValueError(f"frames [{start}, {stop}) of a block of {frames}")
    return start, stop


def _encode_sound(block: np.ndarray, sample_rate: int, file_format: str, subtype: str,
                  compression_level: float | None = None) -> bytes:
    block = _int16_block(block)
    if compression_level is None and _SCRATCH_FILES:
        return _encode_to_scratch(block, sample_rate, file_format, subtype)
    out = io.BytesIO()
    with soundfile.SoundFile(out, "w", samplerate=sample_rate, channels=block.shape[0], format=file_format,
                             subtype=subtype, compression_level=compression_level) as sound:
        sound.write(np.ascontiguousarray(block.T))
    return out.getvalue()


# -- encoding into a scratch file: libsndfile's own I/O, no Python between its writes ----------------------------

#: soundfile's handle on libsndfile (``soundfile._snd``, ``_ffi``), which every soundfile release has had; None
#: where one lacks it (reads and encodes then take soundfile's public path: the same samples and bytes).
_SND, _FFI = ((soundfile._snd, soundfile._ffi) if hasattr(soundfile, "_snd") and hasattr(soundfile, "_ffi")
              else (None, None))
#: Whether blocks are encoded into a per-thread in-memory file (:func:`_encode_to_scratch`): Linux's
#: ``memfd_create`` and that handle.  Elsewhere the ``BytesIO`` path above writes the same bytes.
_SCRATCH_FILES = hasattr(os, "memfd_create") and _SND is not None and hasattr(soundfile, "_format_int")
_scratch = threading.local()


class _ScratchFile:
    """An in-memory file (``memfd``) of one thread of one process, that libsndfile writes a block into."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.fd = os.memfd_create("speechpack-encode", os.MFD_CLOEXEC)

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _scratch_file() -> _ScratchFile:
    """This thread's scratch file; a forked child (a pool worker) makes its own instead of writing into the
    parent's."""
    held = getattr(_scratch, "file", None)
    if held is None or held.pid != os.getpid():
        held = _scratch.file = _ScratchFile()
    return held


def _encode_to_scratch(block: np.ndarray, sample_rate: int, file_format: str, subtype: str) -> bytes:
    """What ``_encode_sound`` writes through soundfile into a ``BytesIO`` (the same libsndfile calls: open for
    writing, clipping on, ``sf_writef_short``, close), but with libsndfile writing to a file descriptor itself.

    Why: through a ``BytesIO`` every write libFLAC makes (a dozen per 1 s block) calls back into Python, and each
    ``SoundFile`` opened that way makes its five callbacks afresh: about a fifth of a 1 s block's encode on this
    machine, all of it under the GIL that the build's reader and writer threads need too.  Here the encode runs in
    C from open to close without the GIL, and the bytes are read back with one ``pread``
    (``tests/media/test_codecs_encode.py`` checks they equal the ``BytesIO`` path's)."""
    snd, ffi = _SND, _FFI
    frames = np.ascontiguousarray(block.T)  # [T, C] interleaved, as libsndfile takes it
    scratch = _scratch_file()
    os.ftruncate(scratch.fd, 0)
    info = ffi.new("SF_INFO*")
    info.samplerate = sample_rate
    info.channels = block.shape[0]
    info.format = soundfile._format_int(file_format, subtype, None)
    handle = snd.sf_open_fd(scratch.fd, snd.SFM_WRITE, info, snd.SF_FALSE)
    if handle == ffi.NULL:
        raise RuntimeError(ffi.string(snd.sf_strerror(ffi.NULL)).decode("utf-8", "replace"))
    try:
        snd.sf_command(handle, snd.SFC_SET_CLIPPING, ffi.NULL, snd.SF_TRUE)
        written = snd.sf_writef_short(handle, ffi.from_buffer("short[]", frames), frames.shape[0])
        if written != frames.shape[0]:
            raise RuntimeError(f"wrote {written} of {frames.shape[0]} frames: "
                               f"{ffi.string(snd.sf_strerror(handle)).decode('utf-8', 'replace')}")
    finally:
        closed = snd.sf_close(handle)
    if closed != 0:
        raise RuntimeError(ffi.string(snd.sf_error_number(closed)).decode("utf-8", "replace"))
    size = os.fstat(scratch.fd).st_size
    data = os.pread(scratch.fd, size, 0)
    if len(data) != size:
        raise RuntimeError(f"read back {len(data)} of the {size} bytes encoded")
    return data


def _encode_flac(block: np.ndarray, sample_rate: int, bitrate: int | None = None) -> bytes:
    return _encode_sound(block, sample_rate, "FLAC", "PCM_16")


def _encode_opus(block: np.ndarray, sample_rate: int, bitrate: int | None = None) -> bytes:
    check_opus_rate(sample_rate)
    level = opus_compression_level(DEFAULT_OPUS_BITRATE if bitrate is None else bitrate)
    return _settle_ogg(_encode_sound(block, sample_rate, "OGG", "OPUS", level))


def _decoder(file_format: str, subtype: str, title: str, seeks: bool) -> Callable[..., np.ndarray]:
    def decode(data: bytes, sample_rate: int, channels: int, frames: int, start: int = 0,
               stop: int | None = None) -> np.ndarray:
        whole = start == 0 and stop is None
        start, stop = _span(frames, start, stop)
        try:
            with soundfile.SoundFile(io.BytesIO(data)) as sound:
                if sound.format != file_format or sound.subtype != subtype:
                    raise CorruptBlock(f"a {sound.format}/{sound.subtype} file, expected {file_format}/{subtype}")
                if sound.samplerate != sample_rate or sound.channels != channels:
                    raise CorruptBlock(f"{sound.channels} channel(s) at {sound.samplerate} Hz, the segment has "
                                       f"{channels} at {sample_rate} Hz")
                if whole:
                    # One frame more than expected is read, so a block holding more is seen.
                    decoded = read_int16(sound, channels, frames + 1)
                else:
                    # Part of a block (a window's first or last): the header's length must be the block's (libsndfile
                    # stops every read there), then only the frames asked for are decoded, from the FLAC frame
                    # holding ``start`` where the codec seeks.
                    if sound.frames != frames:
                        raise CorruptBlock(f"its header declares {sound.frames} frames, the segment says {frames}")
                    first = start if seeks else 0
                    if first:
                        sound.seek(first)
                    decoded = read_int16(sound, channels, stop - first)
                    if decoded.shape[0] < stop - first:
                        raise CorruptBlock(f"decodes to {first + decoded.shape[0]} frames, the segment says {frames}")
                    return np.ascontiguousarray(decoded[start - first:].T)
        except CorruptBlock:
            raise
        except (RuntimeError, ValueError, TypeError, EOFError) as err:  # LibsndfileError is a RuntimeError
            reason = getattr(err, "error_string", None) or str(err)  # libsndfile's words, without the buffer's repr
            raise CorruptBlock(f"does not decode as {title} ({reason.strip()})") from None
        if decoded.shape[0] > frames:
            raise CorruptBlock(f"decodes to more than the {frames} frames the segment says")
        if decoded.shape[0] < frames:
            raise CorruptBlock(f"decodes to {decoded.shape[0]} frames, the segment says {frames}")
        return np.ascontiguousarray(decoded.T)
    return decode


def read_int16(sound: "soundfile.SoundFile", channels: int, count: int) -> np.ndarray:
    """Up to ``count`` frames of ``sound`` from its position, int16 ``[T, C]`` (``T`` what it held).

    Why not ``sound.read``: soundfile seeks back to the position a read has just reached after every read, to
    keep its own count, and for FLAC that is a real libFLAC seek (a search and a frame decoded again: measured
    here, as much as decoding a frame); a block is read once and closed, so the read calls libsndfile's
    ``sf_readf_short`` on the open handle directly (the same function ``sound.read`` calls: the same samples).
    A count past ``DIRECT_BYTES`` (a length the index or header claims) is read in bounded pieces
    (``media.sound_blocks``), so memory follows what the block holds."""
    handle = getattr(sound, "_file", None)
    if _SND is None or _FFI is None or handle is None or count * channels * 2 > DIRECT_BYTES:
        return read_frames(sound, "int16", count)
    out = np.empty((count, channels), dtype=np.int16)
    got = _SND.sf_readf_short(handle, _FFI.cast("short *", _FFI.from_buffer(out)), count)
    error = _SND.sf_error(handle)
    if error:
        raise RuntimeError(_FFI.string(_SND.sf_error_number(error)).decode("utf-8", "replace"))
    return out[:got]


def _int16_block(block: np.ndarray) -> np.ndarray:
    if block.ndim != 2 or block.dtype != np.int16:
        raise TypeError(f"a block is int16 [channels, frames], got {block.dtype} {block.shape}")
    return block


def _sound_codec(name: str, lossless: bool, sample_rates, max_channels, encode, file_format: str, subtype: str,
                 title: str, seeks: bool) -> Codec:
    """A row stored in blocks of a libsndfile format, its decoder and its ``seeks`` from one declaration."""
    return Codec(name, lossless=lossless, blocked=True, sample_rates=sample_rates, max_channels=max_channels,
                 encode=encode, decode=_decoder(file_format, subtype, title, seeks), seeks=seeks)


#: The registry, in ``schemas.constants.CODECS`` order.
REGISTRY: dict[str, Codec] = {
    CODEC_PCM16: Codec(CODEC_PCM16, lossless=True, blocked=False, sample_rates=None, max_channels=None,
                       encode=_encode_pcm16, decode=_decode_pcm16, seeks=True),
    CODEC_FLAC: _sound_codec(CODEC_FLAC, lossless=True, sample_rates=None, max_channels=FLAC_MAX_CHANNELS,
                             encode=_encode_flac, file_format="FLAC", subtype="PCM_16", title="FLAC", seeks=True),
    CODEC_OPUS: _sound_codec(CODEC_OPUS, lossless=False, sample_rates=OPUS_SAMPLE_RATES,
                             max_channels=OPUS_MAX_CHANNELS, encode=_encode_opus, file_format="OGG", subtype="OPUS",
                             title="Ogg Opus", seeks=False),
}
if tuple(REGISTRY) != CODECS:  # pragma: no cover - a codec added to one list and not the other
    raise ImportError(f"codec registry {tuple(REGISTRY)} and CODECS {CODECS} differ")


def codec(name: str) -> Codec:
    """The registry row of ``name``; an unknown name is an ``OptionError`` naming the codecs."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise OptionError(f"unknown codec {name!r}; the codecs are {', '.join(CODECS)}") from None


def check_opus_rate(sample_rate: int) -> None:
    """Opus encodes 8, 12, 16, 24 and 48 kHz only: another pack rate is a usage error naming them."""
    if sample_rate not in OPUS_SAMPLE_RATES:
        rates = ", ".join(str(r) for r in OPUS_SAMPLE_RATES)
        raise OptionError(f"--codec opus cannot encode {sample_rate} Hz; Opus encodes sample rates {rates} only "
                          f"(choose one with --sample-rate, or use --codec flac)")


def check_opus_bitrate(bitrate: int) -> None:
    if not OPUS_MIN_BITRATE <= bitrate <= OPUS_MAX_BITRATE:
        raise OptionError(f"--opus-bitrate {bitrate}: Opus through libsndfile encodes {OPUS_MIN_BITRATE} to "
                          f"{OPUS_MAX_BITRATE} bits per second per channel")


def opus_compression_level(bitrate: int) -> float:
    """The libsndfile compression level that makes its Opus encoder target ``bitrate`` bits/s per channel
    exactly: it computes ``(int)((1 - q) * 250000 + 6000)``, so q is taken half a bit per second inside the
    truncation (exact in doubles over the whole range; the top rate is level 0)."""
    check_opus_bitrate(bitrate)
    return max(0.0, 1.0 - (bitrate - OPUS_MIN_BITRATE + 0.5) / (OPUS_MAX_BITRATE - OPUS_MIN_BITRATE))


def check_encoding(name: str, sample_rate: int, block_frames: int, bitrate: int | None) -> None:
    """Refuse, as usage errors, a build's codec options that cannot work (before any input is read)."""
    row = codec(name)
    if row.name == CODEC_OPUS:
        check_opus_rate(sample_rate)
        check_opus_bitrate(DEFAULT_OPUS_BITRATE if bitrate is None else bitrate)
    if row.blocked and block_frames < 1:
        raise OptionError(f"--block-seconds gives {block_frames} frames per block at {sample_rate} Hz; a block "
                          f"holds at least one frame")


def block_frames_of(block_seconds: float, sample_rate: int) -> int:
    """``--block-seconds`` in frames: ``round(S * rate)``."""
    return int(round(block_seconds * sample_rate))


@dataclass(frozen=True)
class EncodedSegment:
    """A segment's blocks and the int16 ``[C, T]`` a reader will decode from them (the input itself for a
    lossless codec; for opus what the blocks decode to, whose statistics the pack records)."""

    blocks: list[bytes]
    decoded: np.ndarray


def encode_segment(name: str, audio: np.ndarray, sample_rate: int, block_frames: int,
                   bitrate: int | None = None) -> EncodedSegment:
    """Cut int16 ``[C, T]`` into ``ceil(T / block_frames)`` blocks and encode each (in the calling process: the
    build's workers).  A lossy codec decodes every block again, so the pack's statistics describe what a reader
    gets."""
    row = codec(name)
    audio = _int16_block(audio)
    channels, length = audio.shape
    if row.max_channels is not None and channels > row.max_channels:
        raise EncodeError(f"--codec {row.name} stores at most {row.max_channels} channels, this audio has {channels}")
    try:
        blocks = [row.encode(audio[:, start:start + block_frames], sample_rate, bitrate)
                  for start in range(0, length, block_frames)]
    except (RuntimeError, ValueError) as err:  # libsndfile's own failures (LibsndfileError is a RuntimeError)
        reason = getattr(err, "error_string", None) or str(err)
        raise EncodeError(f"libsndfile could not encode it as {row.name} ({reason.strip()})") from None
    if row.lossless:
        return EncodedSegment(blocks, audio)
    decoded = np.empty_like(audio)
    for i, data in enumerate(blocks):
        start = i * block_frames
        stop = min(start + block_frames, length)
        decoded[:, start:stop] = row.decode(data, sample_rate, channels, stop - start)
    return EncodedSegment(blocks, decoded)


def block_range(length: int, block_frames: int, start: int, stop: int) -> tuple[int, int]:
    """The blocks ``[first, last)`` of a segment of ``length`` frames that hold frames ``[start, stop)``."""
    if not 0 <= start <= stop <= length:
        raise ValueError(f"frames [{start}, {stop}) are not inside a segment of {length}")
    if start == stop:
        return start // block_frames, start // block_frames
    return start // block_frames, block_count(stop, block_frames)


def decode_run(name: str, pieces: Sequence[bytes], sample_rate: int, channels: int, length: int, block_frames: int,
               first_block: int = 0) -> np.ndarray:
    """Decode consecutive blocks ``first_block, first_block + 1, ...`` of one segment (``channels`` x ``length``
    frames) into int16 ``[C, frames]``, the frames they hold; ``pieces`` are their bytes, e.g. slices of the
    stream file at the offsets the block sizes give.  A block that does not decode to exactly its frames raises
    :class:`CorruptBlock` naming its index in the segment."""
    row = codec(name)
    count = block_count(length, block_frames)
    if first_block < 0 or first_block + len(pieces) > count:
        raise ValueError(f"blocks [{first_block}, {first_block + len(pieces)}) of a segment that has {count}")
    decoded = []  # joined at the end: memory follows what the blocks decoded to, never a claimed length
    for i, data in enumerate(pieces):
        block = first_block + i
        begin = block * block_frames
        end = min(begin + block_frames, length)
        try:
            decoded.append(row.decode(bytes(data), sample_rate, channels, end - begin))
        except CorruptBlock as err:
            raise CorruptBlock(err.reason, block) from None
    if len(decoded) == 1:
        return decoded[0]
    return np.concatenate(decoded, axis=1) if decoded else np.empty((channels, 0), dtype=np.int16)


# -- Ogg framing ---------------------------------------------------------------------------------------------------

#: Ogg's CRC-32 is the non-reflected polynomial 0x04C11DB7 with zero initial value and no final xor; zlib's crc32
#: is the reflected one with inversions, so bytes are bit-reversed in, the raw register taken, and reversed out.
_REVERSE_BITS = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def _ogg_crc(page: bytes) -> int:
    raw = ~zlib.crc32(page.translate(_REVERSE_BITS), 0xFFFFFFFF) & 0xFFFFFFFF
    return int(f"{raw:032b}"[::-1], 2)


def _settle_ogg(data: bytes) -> bytes:
    """libsndfile's Ogg Opus file with the serial number set to :data:`OGG_SERIAL` and the zero padding of its
    ``OpusTags`` header dropped, every page's checksum recomputed (module docstring: why)."""
    pages = []
    pos = 0
    while pos < len(data):
        if data[pos:pos + 4] != b"OggS" or pos + 27 > len(data):
            raise ValueError(f"libsndfile wrote an Ogg stream without a page at byte {pos}")
        count = data[pos + 26]
        lacing = data[pos + 27:pos + 27 + count]
        body_start = pos + 27 + count
        body = data[body_start:body_start + sum(lacing)]
        header = bytearray(data[pos:pos + 27])
        one_packet = count > 0 and lacing[-1] < 255 and all(v == 255 for v in lacing[:-1])
        if body.startswith(b"OpusTags") and one_packet:
            body = _tags_without_padding(body)
            lacing = _lacing(len(body))
            header[26] = len(lacing)
        header[14:18] = OGG_SERIAL.to_bytes(4, "little")
        header[22:26] = b"\0\0\0\0"
        page = bytes(header) + bytes(lacing) + body
        page = page[:22] + _ogg_crc(page).to_bytes(4, "little") + page[26:]
        pages.append(page)
        pos = body_start + sum(data[pos + 27:pos + 27 + count])
    return b"".join(pages)


def _tags_without_padding(body: bytes) -> bytes:
    """An ``OpusTags`` packet cut after its last comment (RFC 7845 5.2: what follows is optional padding)."""
    end = 8
    vendor = int.from_bytes(body[end:end + 4], "little")
    end += 4 + vendor
    comments = int.from_bytes(body[end:end + 4], "little")
    end += 4
    for _ in range(comments):
        end += 4 + int.from_bytes(body[end:end + 4], "little")
    if end > len(body):
        raise ValueError("libsndfile wrote an OpusTags header shorter than its comments")
    return body[:end]


def _lacing(size: int) -> bytes:
    """The segment table of one packet of ``size`` bytes that ends on this page."""
    return bytes([255] * (size // 255) + [size % 255])


__all__ = ["DEFAULT_BLOCK_SECONDS", "DEFAULT_OPUS_BITRATE", "OPUS_MAX_BITRATE", "OPUS_MIN_BITRATE", "REGISTRY",
           "Codec", "CorruptBlock", "EncodeError", "EncodedSegment", "block_frames_of", "block_range", "check_encoding",
           "check_opus_bitrate", "check_opus_rate", "codec", "decode_run", "encode_segment", "read_int16",
           "opus_compression_level"]
