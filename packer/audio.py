"""Audio in, int16 out: probe headers, decode (soundfile, PyAV for what libsndfile cannot read), resample
(soxr), quantise without silent clipping, and measure the statistics the loader normalises with.

Everything here is a pure function of its input, so packs are byte-identical however many processes run it.
Probing reads headers only, so a build can check every line and plan its shards before decoding anything.
"""

from __future__ import annotations

import io
import os
import stat
import threading
from dataclasses import dataclass, replace

import numpy as np
import soundfile
import soxr

from speechpack.packer.audio_file import MissingFile, NotRegularFile, by_descriptor, declared_frames_of, open_regular
from speechpack.packer.wav_header import declared_frames
from speechpack.schemas.constants import AUDIO_DTYPE, AUDIO_FULL_SCALE
from speechpack.schemas.errors import InternalError, SpeechpackError
from speechpack.schemas.limits import MAX_RESAMPLE_RATIO
from speechpack.schemas.sound_blocks import overstated, read_frames

#: Largest magnitude an int16 holds on both sides; a peak above it (after rounding) needs a scale factor.
_INT16_MAX = 32767
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


#: libsndfile major formats whose header ``packer.wav_header`` reads to detect truncation.
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


def _check_path(path: str) -> None:
    """A missing file or a directory gets its own message rather than libsndfile's; one ``stat``."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise _missing(path) from None
    except OSError as err:
        raise AudioError(path, f"cannot read the file ({err.strerror or err})") from None
    if not stat.S_ISREG(mode):
        raise AudioError(path, "not a regular file")


def _missing(path: str) -> AudioError:
    where = "" if os.path.isabs(path) else f" (a relative path, looked for at {os.path.abspath(path)})"
    return AudioError(path, "file not found" + where)


def _open_once(path: str) -> int | None:
    """``path`` opened once for libsndfile and the header check (``packer.audio_file``), or ``None``: take the
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
    """:func:`probe_audio` for an encoded file held in memory (a tar member): ``name`` picks the decoder by its
    extension and names the file in errors."""
    return _probe(io.BytesIO(data), name)


def _probe(source, name: str) -> AudioInfo:
    """``source``: a path, a descriptor of the file ``name`` (``_open_once``), or an in-memory file."""
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
    """:func:`read_audio` for an encoded file held in memory (a tar member); ``name`` as in
    :func:`probe_audio_bytes`."""
    return _read(io.BytesIO(data), name, int16_at)


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
            # in bounded blocks when the header's length is large (schemas.sound_blocks)
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
    """libsndfile's reader of a path, an in-memory file, or a descriptor (left open: its owner closes it)."""
    if isinstance(source, int):
        return soundfile.SoundFile(source, closefd=False)
    return soundfile.SoundFile(source)


def _check_not_truncated(source, name: str, frames: int) -> None:
    """Raise ``AudioError`` when the WAV header of ``source`` (a path, a descriptor or an in-memory file) declares
    more frames than the file holds: libsndfile reads such a file at its readable length without complaint
    (``packer.wav_header``)."""
    try:
        if isinstance(source, io.BytesIO):
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


def _read_pyav(source, name: str) -> Audio:
    import av  # imported lazily: most corpora are WAV/FLAC and never need FFmpeg

    planes = []
    try:
        with av.open(source) as container:
            if not container.streams.audio:
                raise AudioError(name, "no audio stream")
            stream = container.streams.audio[0]
            # swresample converts any sample format to float planar with libsndfile's scaling (s16 / 32768).
            to_float = av.AudioResampler(format="fltp")
            for frame in container.decode(stream):
                planes.extend(out.to_ndarray() for out in to_float.resample(frame))
            planes.extend(out.to_ndarray() for out in to_float.resample(None))
            rate = stream.codec_context.sample_rate
    except av.error.FFmpegError as err:
        raise AudioError(name, f"cannot decode audio ({err})") from None
    if not planes:
        raise AudioError(name, "empty audio (0 samples)")
    return Audio(np.ascontiguousarray(np.concatenate(planes, axis=1), dtype=np.float32), int(rate))


def resampled_length(frames: int, rate: int, new_rate: int) -> int:
    """Frames soxr returns when resampling ``frames`` from ``rate`` to ``new_rate``: ``frames * new_rate /
    rate`` rounded half up, in exact integer arithmetic (checked against soxr for many lengths and rate pairs)."""
    if rate == new_rate:
        return frames
    return (2 * frames * new_rate + rate) // (2 * rate)


def resampled_frames(frames: int, rate: int, new_rate: int, name: str) -> int:
    """:func:`resampled_length` of the file ``name``, which the pack can hold: ``AudioError`` when resampling
    would leave no frame at all (one sample at 48 kHz is none at 16 kHz), or when the two rates are too far apart
    for soxr (:func:`resample_ratio_problem`).  The one check every adapter's plan makes."""
    reason = resample_ratio_problem(rate, new_rate)
    if reason is not None:
        raise AudioError(name, reason)
    length = resampled_length(frames, rate, new_rate)
    if length == 0:
        raise AudioError(name, f"empty after resampling: {frames} sample(s) at {rate} Hz are 0 at {new_rate} Hz")
    return length


def resample_ratio_problem(rate: int, new_rate: int) -> str | None:
    """Why soxr should not resample from ``rate`` to ``new_rate`` Hz, or ``None``: both must be positive and
    within ``MAX_RESAMPLE_RATIO`` of each other (far beyond any real pair of rates; a huge ratio allocates the
    output at once and has crashed soxr, issue 13, item 8)."""
    if rate <= 0 or new_rate <= 0:
        return f"cannot resample from {rate} Hz to {new_rate} Hz: rates must be positive"
    if max(rate, new_rate) > MAX_RESAMPLE_RATIO * min(rate, new_rate):
        return (f"cannot resample from {rate} Hz to {new_rate} Hz: the ratio is beyond 1:{MAX_RESAMPLE_RATIO} "
                f"(a file header with a wrong rate?)")
    return None


def resample(audio: Audio, sample_rate: int) -> Audio:
    """Resample float audio with soxr (HQ) to ``sample_rate``; a no-op when the rate already matches.  Raise
    ``SpeechpackError`` for a pair of rates soxr must not be given (:func:`resample_ratio_problem`)."""
    if audio.sample_rate == sample_rate:
        return audio
    if audio.data.dtype != np.float32:
        raise InternalError(f"resample expects float32 audio, got {audio.data.dtype}")
    reason = resample_ratio_problem(audio.sample_rate, sample_rate)
    if reason is not None:
        raise SpeechpackError(reason)
    resampled = soxr.resample(audio.data.T, audio.sample_rate, sample_rate)
    return Audio(np.ascontiguousarray(resampled.T, dtype=np.float32), sample_rate)


@dataclass(frozen=True)
class StoredAudio:
    """Audio as it will be stored: int16 ``[C, T]`` and the scale that decodes it (``v / 32768 * scale``).

    ``stats`` is :func:`int16_statistics` of it once measured (:func:`measured`): a build measures each segment
    where it was decoded, so that the work runs in the decoding processes, beside decoding, rather than in the
    one thread that writes; the writer measures a segment that comes without."""

    data: np.ndarray
    scale: float
    stats: tuple[float, float, float] | None = None

    @property
    def channels(self) -> int:
        return self.data.shape[0]

    @property
    def length(self) -> int:
        return self.data.shape[1]


def measured(stored: StoredAudio) -> StoredAudio:
    """``stored`` with its :func:`int16_statistics` (the same object when it has them already)."""
    if stored.stats is not None:
        return stored
    return replace(stored, stats=int16_statistics(stored.data, stored.scale))


def to_stored(audio: Audio) -> StoredAudio:
    """int16 audio passes through (bit-exact, scale 1); float audio is quantised with :func:`quantise`."""
    if audio.data.dtype == AUDIO_DTYPE:
        return StoredAudio(np.ascontiguousarray(audio.data), 1.0)
    return StoredAudio(*quantise(audio.data))


def quantise(data: np.ndarray) -> tuple[np.ndarray, float]:
    """Round ``data * 32768`` to int16.  If the peak would not fit, divide by the smallest scale that fits it.

    int16 input read by soundfile round-trips bit-exactly (scale 1.0).  Audio that a resampler pushed past full
    scale, or float audio above 1.0, keeps its shape: the returned ``scale`` undoes the division on read.
    """
    high = float(data.max()) if data.size else 0.0
    low = float(data.min()) if data.size else 0.0
    scale = 1.0
    # int16 is asymmetric: -32768 fits, +32768 does not; rescale only when a side would really clip.
    if round(high * AUDIO_FULL_SCALE) > _INT16_MAX or round(low * AUDIO_FULL_SCALE) < -AUDIO_FULL_SCALE:
        scale = max(high * AUDIO_FULL_SCALE / _INT16_MAX, -low)
        scaled = data.astype(np.float64) * (AUDIO_FULL_SCALE / scale)
        quantised = np.clip(np.rint(scaled), -AUDIO_FULL_SCALE, _INT16_MAX).astype(AUDIO_DTYPE)
        return np.ascontiguousarray(quantised), scale
    # The range test above guarantees every rounded value fits: no clip pass, one rounding pass into int16.
    quantised = np.empty(data.shape, dtype=AUDIO_DTYPE)
    np.rint(data * np.float32(AUDIO_FULL_SCALE), out=quantised, casting="unsafe")
    return quantised, scale


#: Samples per chunk in :func:`int16_statistics`.  At most 2**22 squares of int16 values (each at most 2**30)
#: sum to at most 2**52, so every partial sum of a float64 reduction over a chunk is an exact integer, in any
#: summation order; 2**20 keeps the scratch buffer (8 MB) in cache.
_EXACT_CHUNK = 1 << 20
_scratch = threading.local()


def _scratch_buffer() -> np.ndarray:
    """A float64 buffer reused by each thread: a fresh 8 MB array per call costs more in page faults (and in
    contention for the process's memory map, with the writer thread and the decoder faulting at once) than the
    arithmetic does."""
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None:
        buffer = _scratch.buffer = np.empty(_EXACT_CHUNK, dtype=np.float64)
    return buffer


def int16_statistics(stored: np.ndarray, scale: float) -> tuple[float, float, float]:
    """``(mean, rms, peak)`` of the decoded audio ``stored / 32768 * scale``; rms and peak after DC removal.

    The sums are exact integers (float64 reductions over chunks small enough that no partial sum can round), so
    the result does not depend on summation order or the machine: the validator recomputes it and must get the
    same floats.  ``einsum`` rather than ``dot``: BLAS would start threads that compete with the decoder.
    """
    n = int(stored.size)
    if n == 0:
        return 0.0, 0.0, 0.0
    flat = stored.reshape(-1)
    buffer = _scratch_buffer()
    total = 0
    total_sq = 0
    for start in range(0, n, _EXACT_CHUNK):
        piece = flat[start:start + _EXACT_CHUNK]
        chunk = buffer[:piece.size]
        np.copyto(chunk, piece, casting="safe")
        total += int(chunk.sum())
        total_sq += int(np.einsum("i,i->", chunk, chunk))
    unit = scale / AUDIO_FULL_SCALE
    mean_int = total / n
    variance_int = (n * total_sq - total * total) / (n * n)  # exact numerator, one rounding
    peak_int = max(float(flat.max()) - mean_int, mean_int - float(flat.min()))
    return mean_int * unit, float(np.sqrt(max(variance_int, 0.0))) * unit, peak_int * unit
