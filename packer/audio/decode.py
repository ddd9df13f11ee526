"""Audio in: probe headers and decode (soundfile, PyAV for what libsndfile cannot read), opening each file once.

Everything here is a pure function of its input, so packs are byte-identical however many processes run it.
Probing reads headers only, so a build can check every line and plan its shards before decoding anything; what
the pack then stores (resampled, int16, measured) is ``packer.audio.store``.

**One open per file and step.**  A build reads every input file twice, probing its header to plan the shards and
then decoding it, and on a corpus of short 16-bit WAV clips the per-file overhead is most of the work (decoding is
a memcpy).  Opened by path, each of the two steps cost a ``stat`` of its own, soundfile's ``isfile`` check and
libsndfile's open, then a second open for the truncation check (``packer.audio.wav_header``).  Opened once per
step instead, the file is checked with ``fstat`` on the descriptor and the same descriptor goes to libsndfile
(``soundfile.SoundFile(fd, closefd=False)``) and to the header reader (one ``pread`` of the first 4 KiB; every
blocking call lets go of the GIL, and a build's writer and hashing threads take it each time).  Only formats
libsndfile recognises from their first bytes are opened this way (``DESCRIPTOR_EXTENSIONS``); libsndfile
recognises some headerless ones (``.raw``, ``.vox``, ``.gsm``...) by their file name, which a descriptor does not
carry.  Anything unusual goes the path's way, which says what it always said: an ``open`` that fails for another
reason than a missing file, and a file libsndfile refuses, whose message names the path.

**Bounded PyAV decodes.**  A compressed file can decode to far more audio than its size suggests; a PyAV decode
stops, naming the file, past twice its container's stated duration plus 10 s (``PYAV_DURATION_SLACK``) or
``MAX_PYAV_VALUES``, as ``media.sound_blocks`` bounds libsndfile's by what decoding produced.
"""

from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import soundfile

from speechpack.packer.audio.wav_header import declared_frames
from speechpack.media.sound_blocks import overstated, read_frames
from speechpack.schemas.units import plural

#: Extensions libsndfile reads; anything else goes to PyAV (m4a, wma, aac, g722, mp4 ...).
SOUNDFILE_EXTENSIONS = {"." + fmt.lower() for fmt in soundfile.available_formats()} | {".oga", ".opus", ".aif"}


#: What soundfile raises for a file it cannot read (libsndfile's errors, and its argument checks).
_SOUNDFILE_ERRORS = (soundfile.LibsndfileError, RuntimeError, ValueError, TypeError)


class AudioError(Exception):
    """A file could not be used as audio; the message is the reason, the caller adds line and key."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


#: libsndfile major formats whose header ``packer.audio.wav_header`` reads to detect truncation.
_WAV_FORMATS = ("WAV", "WAVEX", "RF64")
#: libsndfile subtypes that store integers: they cannot hold NaN/Inf, so decoding them needs no finiteness check.
_INTEGER_SUBTYPES = ("PCM_S8", "PCM_U8", "PCM_16", "PCM_24", "PCM_32", "ULAW", "ALAW", "DWVW_12", "DWVW_16",
                     "DWVW_24", "DPCM_8", "DPCM_16")


@dataclass(frozen=True)
class AudioInfo:
    """What a file's header says: rate, frames per channel, channels, and whether it is plain 16-bit PCM."""

    sample_rate: int
    frames: int
    channels: int
    pcm16: bool


@dataclass(frozen=True)
class Audio:
    """Decoded audio, channel-first ``[C, T]``, at ``sample_rate``: float32 in [-1, 1), or int16 when read
    directly from 16-bit PCM at the pack's rate (``read_audio(..., int16_at=rate)``)."""

    data: np.ndarray
    sample_rate: int

    @property
    def channels(self) -> int:
        return self.data.shape[0]

    @property
    def num_frames(self) -> int:
        return self.data.shape[1]

    frames = num_frames  # the name AudioInfo uses, so checks read either


# One open per file and step (see the module docstring).

#: Extensions opened through one descriptor (see the module docstring): WAV and FLAC, what corpora are stored as.
DESCRIPTOR_EXTENSIONS = frozenset({".wav", ".flac"})
#: Bytes read at once for a WAV header's chunks (:func:`declared_frames_of`); a plain header is 44.
HEADER_BYTES = 4096
#: ``O_NONBLOCK``: a FIFO named in a list must not block the build on ``open``; it is refused by ``fstat`` next,
#: and a regular file's descriptor is made blocking again (local file systems ignore the flag, FUSE ones may not).
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class MissingFile(Exception):
    """``open`` said the file does not exist; :func:`_missing` words the message (one wording for both ways)."""


class NotRegularFile(Exception):
    """The path names a directory, a FIFO, a device: not an audio file."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a plain file"


#: What :func:`path_problem` says when nothing is at the path.
NOT_FOUND = "file not found"


def path_problem(path: str) -> str | None:
    """Why ``path`` cannot be read as an input file, or ``None``: "file not found" only when nothing is there; a
    directory, FIFO or device (``/dev/zero``) is "not a regular file", which is what is wrong with it.  One
    ``stat``, following links as ``open`` would."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return NOT_FOUND
    except OSError as err:
        return f"cannot read the file ({err.strerror or err})"
    return None if stat.S_ISREG(mode) else f"not a regular file ({_kind(mode)})"


def by_descriptor(path: str) -> bool:
    """Whether :func:`open_regular` should open ``path`` (its extension is one of ``DESCRIPTOR_EXTENSIONS``)."""
    return os.path.splitext(path)[1].lower() in DESCRIPTOR_EXTENSIONS


def open_regular(path: str) -> int | None:
    """A read-only descriptor of the regular file ``path`` (the caller closes it); ``None`` when opening
    failed for another reason than a missing file (no permission, a loop of links...): the caller then takes the
    path's way, whose messages for those cases are the ones speechpack has always given.

    Raises ``MissingFile`` or ``NotRegularFile``."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise MissingFile(path) from None
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(path)
        if _OPEN_FLAGS & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def declared_frames_of(fd: int) -> int | None:
    """``packer.audio.wav_header.declared_frames`` of the file open as ``fd``, from one ``pread`` of its first
    ``HEADER_BYTES``; a header whose chunks run on beyond them is read again through a file object, as a path is."""
    head = os.pread(fd, HEADER_BYTES, 0)
    declared = declared_frames(io.BytesIO(head))
    if declared is None and len(head) == HEADER_BYTES:  # maybe cut short by the read, not by the file
        with open(fd, "rb", closefd=False) as fp:
            fp.seek(0)
            declared = declared_frames(fp)
    return declared


def _check_path(path: str) -> None:
    """A missing file or a directory gets its own message rather than libsndfile's (``path_problem``)."""
    problem = path_problem(path)
    if problem == NOT_FOUND:
        raise _missing(path)
    if problem is not None:
        raise AudioError(path, problem)


def _missing(path: str) -> AudioError:
    where = "" if os.path.isabs(path) else f" (a relative path, looked for at {os.path.abspath(path)})"
    return AudioError(path, NOT_FOUND + where)


def _open_once(path: str) -> int | None:
    """``path`` opened once for libsndfile and the header check (see the module docstring), or ``None``: take the
    path's way (``_check_path``, then libsndfile opens the path)."""
    if not by_descriptor(path):
        return None
    try:
        return open_regular(path)
    except MissingFile:
        raise _missing(path) from None
    except NotRegularFile:
        raise AudioError(path, "not a regular file") from None


def _uses_soundfile(path: str) -> bool:
    return os.path.splitext(path)[1].lower() in SOUNDFILE_EXTENSIONS


def probe_audio(path: str) -> AudioInfo:
    """Read ``path``'s header (libsndfile), or decode it once (PyAV formats, whose headers may not say the exact
    length); raise ``AudioError`` for a missing, unreadable or empty file."""
    fd = _open_once(path)
    if fd is None:
        _check_path(path)
        return _probe(path, path)
    try:
        return _probe(fd, path)
    finally:
        os.close(fd)


def probe_audio_bytes(data: bytes, name: str) -> AudioInfo:
    """:func:`probe_audio` for an encoded file held in memory: ``name`` picks the decoder by its extension and
    names the file in errors."""
    return _probe(io.BytesIO(data), name)


def probe_audio_file(fp: BinaryIO, name: str) -> AudioInfo:
    """:func:`probe_audio` for an open, seekable binary file (a tar member's reader): only the header is read
    (PyAV formats excepted, as for paths); ``name`` as in :func:`probe_audio_bytes`."""
    return _probe(fp, name)


def _probe(source, name: str) -> AudioInfo:
    """``source``: a path, a descriptor of the file ``name`` (``_open_once``), or a binary file object."""
    if _uses_soundfile(name):
        try:
            with _sound_file(source) as sound:  # cheaper than soundfile.info, which formats descriptions
                result = AudioInfo(int(sound.samplerate), int(sound.frames), int(sound.channels),
                                   sound.subtype == "PCM_16")
                wav = sound.format in _WAV_FORMATS
        except _SOUNDFILE_ERRORS as err:
            if isinstance(source, int):
                return _probe(name, name)  # libsndfile's message names the path, as it always did
            raise AudioError(name, f"cannot decode audio ({err})") from None
        if wav:
            _check_not_truncated(source, name, result.frames)
    else:
        audio = _read_pyav(source, name)
        result = AudioInfo(audio.sample_rate, audio.num_frames, audio.channels, False)
    if result.frames == 0:
        raise AudioError(name, "empty audio (0 samples)")
    return result


def read_audio(path: str, int16_at: int | None = None) -> Audio:
    """Decode ``path`` to ``[C, T]``: float32, or int16 when the file is 16-bit PCM at the rate ``int16_at``
    (nothing to resample: the stored values pass through untouched).  Raise ``AudioError`` for a missing,
    unreadable or unusable file."""
    fd = _open_once(path)
    if fd is None:
        _check_path(path)
        return _read(path, path, int16_at)
    try:
        return _read(fd, path, int16_at)
    finally:
        os.close(fd)


def read_audio_bytes(data: bytes, name: str, int16_at: int | None = None) -> Audio:
    """:func:`read_audio` for an encoded file held in memory; ``name`` as in :func:`probe_audio_bytes`."""
    return _read(io.BytesIO(data), name, int16_at)


def read_audio_file(fp: BinaryIO, name: str, int16_at: int | None = None) -> Audio:
    """:func:`read_audio` for an open, seekable binary file (a tar member's reader), decoded in bounded blocks
    as a path is (``media.sound_blocks``); ``name`` as in :func:`probe_audio_bytes`."""
    return _read(fp, name, int16_at)


def _read(source, name: str, int16_at: int | None) -> Audio:
    if _uses_soundfile(name):
        audio, integer_coded = _read_soundfile(source, name, int16_at)
    else:
        audio, integer_coded = _read_pyav(source, name), False
    if audio.num_frames == 0:
        raise AudioError(name, "empty audio (0 samples)")
    if not integer_coded:
        finite = np.isfinite(audio.data)
        if not finite.all():
            raise AudioError(name, f"audio holds {int(finite.size - np.count_nonzero(finite))} NaN/Inf value(s)")
    return audio


def _read_soundfile(source, name: str, int16_at: int | None) -> tuple[Audio, bool]:
    try:
        with _sound_file(source) as sound:
            subtype = sound.subtype
            rate = sound.samplerate
            integer_coded = subtype in _INTEGER_SUBTYPES
            dtype = "int16" if subtype == "PCM_16" and rate == int16_at else "float32"
            # what sound.read(dtype=dtype, always_2d=True) returns, without its per-call checks and copies, and
            # in bounded blocks when the header's length is large (media.sound_blocks)
            data = read_frames(sound, dtype)
            wav = sound.format in _WAV_FORMATS
            problem = overstated(sound, data.shape[0])
    except _SOUNDFILE_ERRORS as err:
        if isinstance(source, int):
            return _read_soundfile(name, name, int16_at)  # libsndfile's message names the path, as it always did
        raise AudioError(name, f"cannot decode audio ({err})") from None
    if problem is not None:
        raise AudioError(name, problem)
    if wav:
        _check_not_truncated(source, name, data.shape[0])
    return Audio(np.ascontiguousarray(data.T), int(rate)), integer_coded


def _sound_file(source) -> soundfile.SoundFile:
    """libsndfile's reader of a path, a binary file object, or a descriptor (left open: its owner closes it)."""
    if isinstance(source, int):
        return soundfile.SoundFile(source, closefd=False)
    return soundfile.SoundFile(source)


def _check_not_truncated(source, name: str, frames: int) -> None:
    """Raise ``AudioError`` when the WAV header of ``source`` (a path, a descriptor or a file object) declares
    more frames than the file holds: libsndfile reads such a file at its readable length without complaint
    (``packer.audio.wav_header``)."""
    try:
        if not isinstance(source, (str, int)):
            source.seek(0)
            declared = declared_frames(source)
        elif isinstance(source, int):
            declared = declared_frames_of(source)
        else:
            with open(source, "rb") as fp:
                declared = declared_frames(fp)
    except OSError as err:
        raise AudioError(name, f"cannot read the WAV header ({err.strerror or err})") from None
    if declared is not None and declared > frames:
        raise AudioError(name, f"truncated WAV: the header declares {declared} frames, the file holds {frames}")


#: How far PyAV's decode may run past the duration its container states (a factor, plus seconds: codec priming
#: and padding, and a duration FFmpeg estimated from the bitrate of a VBR file's first frames).  A container that
#: states 1 s and decodes to an hour is refused as it decodes, before the hour is held.
PYAV_DURATION_SLACK = (2.0, 10.0)
#: Most values (frames times channels) a PyAV decode yields when its container states no duration, or a longer
#: one: 2^30 float32 values (4 GiB; 9 hours of 16 kHz stereo, 3 hours of 48 kHz stereo).
MAX_PYAV_VALUES = 1 << 30


def _pyav_limit(container, stream) -> int:
    """The most frames ``stream`` may decode to (``PYAV_DURATION_SLACK``, ``MAX_PYAV_VALUES``)."""
    rate, channels = int(stream.codec_context.sample_rate or 0), max(1, int(stream.codec_context.channels or 1))
    limit = MAX_PYAV_VALUES // channels
    stated = container.duration  # microseconds, or None when the container says nothing
    if stated is not None and stated > 0 and rate > 0:
        factor, seconds = PYAV_DURATION_SLACK
        limit = min(limit, int((stated / 1e6 * factor + seconds) * rate))
    return limit


def _read_pyav(source, name: str) -> Audio:
    import av  # imported lazily: most corpora are WAV/FLAC and never need FFmpeg

    planes = []
    if isinstance(source, str):  # FFmpeg reads "cache:x", "pipe:0", "http:..." as protocols: a path is a file
        source = os.path.abspath(source)
    try:
        with av.open(source) as container:
            if not container.streams.audio:
                raise AudioError(name, "no audio stream")
            stream = container.streams.audio[0]
            limit, decoded = _pyav_limit(container, stream), 0
            # swresample converts any sample format to float planar with libsndfile's scaling (s16 / 32768).
            to_float = av.AudioResampler(format="fltp")
            first = None  # (rate, channels) of the first frame: a stream that changes them is refused
            for frame in container.decode(stream):
                shape = (int(frame.sample_rate), len(frame.layout.channels))
                if first is None:
                    first = shape
                elif shape != first:
                    raise AudioError(name, f"the audio changes from {first[0]} Hz, {plural(first[1], 'channel')} to "
                                           f"{shape[0]} Hz, {plural(shape[1], 'channel')} after {decoded} frames "
                                           f"(streams joined end to end): one file holds one rate and channel count")
                planes.extend(out.to_ndarray() for out in to_float.resample(frame))
                decoded += frame.samples
                if decoded > limit:
                    stated = container.duration
                    said = (f"its container states {stated / 1e6:.3f} s" if stated and stated > 0
                            else "its container states no duration")
                    raise AudioError(name, f"decodes to more than {limit} frames ({said}; a file decodes to at "
                                           f"most twice its stated duration plus 10 s, and to at most "
                                           f"{MAX_PYAV_VALUES} values)")
            planes.extend(out.to_ndarray() for out in to_float.resample(None))
            rate = first[0] if first is not None else stream.codec_context.sample_rate
    except av.error.FFmpegError as err:
        raise AudioError(name, f"cannot decode audio ({err})") from None
    if not planes:
        raise AudioError(name, "empty audio (0 samples)")
    return Audio(np.ascontiguousarray(np.concatenate(planes, axis=1), dtype=np.float32), int(rate))


__all__ = ["DESCRIPTOR_EXTENSIONS", "HEADER_BYTES", "NOT_FOUND", "SOUNDFILE_EXTENSIONS", "Audio", "AudioError",
           "AudioInfo", "MissingFile", "NotRegularFile", "by_descriptor", "declared_frames_of", "open_regular",
           "path_problem", "probe_audio", "probe_audio_bytes", "probe_audio_file", "read_audio", "read_audio_bytes",
           "read_audio_file"]
