"""WeSep's noise LMDB, read as it is: the noise source of WeSep recipes (``dataset_args.noise_lmdb_file``).

WeSep's ``tools/make_lmdb.py`` writes an LMDB environment (a directory holding ``data.mdb``) in which every key (a
UTF-8 utterance id) maps to the raw bytes of one audio file (WAV, FLAC, Ogg ...), plus one entry ``__keys__`` that
holds the list of keys as a Python pickle.  Unpickling runs arbitrary code chosen by whoever wrote the file, so this
reader never does: it enumerates the keys with a cursor and skips ``__keys__``.

WeSep mixes a noise whose key starts with ``speech`` (babble, competing talkers) at an SNR drawn from U[10, 30] dB
and every other noise at U[-5, 25] dB: :func:`noise_snr_range` is that rule, in one place, for the LMDB read as it
is and for a noise pack converted from it (``speechpack build audio-bank --kind noise --lmdb``, which keeps the keys).

The environment is opened read-only without a lock file (``readonly=True, lock=False``: the reader never writes,
and the LMDB may sit on a read-only file system).  An open environment must not cross a ``fork``: a
:class:`NoiseLmdb` opens it on first use and pickles as its path, so each worker process opens its own.

Why in ``media/``: both sides read it (the packer converts it, the loader draws from it while training), and it
decodes, which no contract in ``schemas/`` does; the loader may import nothing of the packer (``media``'s package
docstring).
"""

from __future__ import annotations

import io
import os

import numpy as np
import soundfile
import soxr

from speechpack.schemas.errors import SpeechpackError
from speechpack.media.sound_blocks import overstated, read_frames
from speechpack.schemas.units import resample_ratio_problem

#: The entry make_lmdb.py writes the pickled key list under; never read.
KEYS_ENTRY = b"__keys__"
#: Keys starting with this are speech-like noise, mixed at :data:`SPEECH_SNR_DB`; the others at :data:`NOISE_SNR_DB`.
SPEECH_KEY_PREFIX = "speech"
SPEECH_SNR_DB = (10.0, 30.0)
NOISE_SNR_DB = (-5.0, 25.0)
#: Enrollment noise (WeSep's ``noise_enroll_prob``): speech keys at :data:`SPEECH_SNR_DB`, the others at this.
ENROLL_NOISE_SNR_DB = (0.0, 25.0)


class NoiseLmdbError(SpeechpackError):
    """A noise LMDB cannot be opened, or one of its entries cannot be used (the message names the key)."""


def noise_snr_range(key: str) -> tuple[float, float]:
    """The SNR range (dB, mixture over noise) WeSep draws from for the noise stored under ``key``."""
    return SPEECH_SNR_DB if key.startswith(SPEECH_KEY_PREFIX) else NOISE_SNR_DB


def enroll_noise_snr_range(key: str) -> tuple[float, float]:
    """The SNR range (dB, enrollment over noise) for enrollment noise stored under ``key``."""
    return SPEECH_SNR_DB if key.startswith(SPEECH_KEY_PREFIX) else ENROLL_NOISE_SNR_DB


_SOUNDFILE_ERRORS = (soundfile.LibsndfileError, RuntimeError, ValueError, TypeError)


def _undecodable(key: str, err: Exception) -> NoiseLmdbError:
    # libsndfile's message starts "Error opening <_io.BytesIO object at 0x...>: ": only the reason is kept
    reason = str(err).split(">: ", 1)[-1]
    return NoiseLmdbError(f"noise {key!r}: cannot decode audio ({reason})")


def probe_noise(data: bytes, key: str) -> tuple[int, int, int]:
    """One entry's header: ``(sample_rate, frames, channels)``; :class:`NoiseLmdbError` naming ``key`` when the
    bytes are not audio libsndfile reads, or hold no samples."""
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as sound:
            header = int(sound.samplerate), int(sound.frames), int(sound.channels)
    except _SOUNDFILE_ERRORS as err:
        raise _undecodable(key, err) from None
    if header[1] == 0:
        raise NoiseLmdbError(f"noise {key!r}: empty audio (0 samples)")
    return header


def decode_noise(data: bytes, key: str, sample_rate: int | None = None) -> tuple[np.ndarray, int]:
    """One entry's bytes decoded by libsndfile (the format is read from the bytes, as keys carry no extension):
    float32 ``[C, T]`` and its rate, resampled with soxr (HQ) to ``sample_rate`` when given.  Raise
    :class:`NoiseLmdbError` naming ``key`` for bytes that are not audio, empty audio or NaN/Inf samples."""
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as sound:
            samples, rate = read_frames(sound, "float32"), int(sound.samplerate)
            problem = overstated(sound, samples.shape[0])
    except _SOUNDFILE_ERRORS as err:
        raise _undecodable(key, err) from None
    if problem is not None:
        raise NoiseLmdbError(f"noise {key!r}: {problem}")
    if samples.shape[0] == 0:
        raise NoiseLmdbError(f"noise {key!r}: empty audio (0 samples)")
    if not np.isfinite(samples).all():
        raise NoiseLmdbError(f"noise {key!r}: audio holds NaN/Inf values")
    if sample_rate is not None and sample_rate != rate:
        # refused before soxr sees it: a 1 Hz entry resampled to 16 kHz on every draw took seconds and gigabytes
        reason = resample_ratio_problem(rate, sample_rate)
        if reason is not None:
            raise NoiseLmdbError(f"noise {key!r}: {reason}")
        samples = soxr.resample(samples, rate, sample_rate)
        rate = sample_rate
    return np.ascontiguousarray(samples.T, dtype=np.float32), int(rate)


#: Open environments of this process by real path: LMDB allows one per file and process, shared by every reader.
_ENVIRONMENTS: dict[str, tuple[int, object]] = {}


def _environment(path: str):
    """The read-only environment of ``path`` in this process (opened on first use, again after a fork)."""
    real = os.path.realpath(path)
    held = _ENVIRONMENTS.get(real)
    if held is not None and held[0] == os.getpid():
        return held[1]
    if held is not None:  # inherited through fork: py-lmdb refuses a second open of a path its process holds, and
        held[1].close()   # the parent's handle must not be used here; closing unmaps it in this process only
        del _ENVIRONMENTS[real]
    try:
        import lmdb
    except ImportError:
        raise NoiseLmdbError("reading a WeSep noise LMDB needs the lmdb package: pip install 'speechpack[wesep]' "
                             "(or pip install lmdb)") from None
    if not os.path.exists(path):
        raise NoiseLmdbError(f"{path}: no such noise LMDB")
    try:
        env = lmdb.open(path, readonly=True, lock=False, readahead=False, subdir=os.path.isdir(path),
                        max_readers=2048)
    except lmdb.Error as err:
        raise NoiseLmdbError(f"{path}: cannot open as an LMDB ({err})") from None
    _ENVIRONMENTS[real] = (os.getpid(), env)
    return env


class NoiseLmdb:
    """A make_lmdb.py noise LMDB at ``path`` (the environment directory, or its ``data.mdb``), opened read-only on
    first use.  ``keys()`` lists the noise keys in the LMDB's (byte) order without ``__keys__``; ``raw(key)`` is
    an entry's bytes, ``read(key, sample_rate)`` the decoded audio.  Readers of one path share the process's
    environment; pickled, a reader is its path."""

    def __init__(self, path: str):
        self.path = os.fspath(path)

    def _open(self):
        return _environment(self.path)

    def close(self) -> None:
        """Close this process's environment of the path (any reader of it reopens on next use)."""
        held = _ENVIRONMENTS.pop(os.path.realpath(self.path), None)
        if held is not None and held[0] == os.getpid():
            held[1].close()

    def __enter__(self) -> NoiseLmdb:
        self._open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def keys(self) -> list[str]:
        """Every noise key, in the LMDB's order, from a cursor walk (``__keys__`` left out, never unpickled)."""
        keys = []
        with self._open().begin(buffers=True) as txn:
            for raw in txn.cursor().iternext(keys=True, values=False):
                raw = bytes(raw)
                if raw == KEYS_ENTRY:
                    continue
                try:
                    keys.append(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    raise NoiseLmdbError(f"{self.path}: key {raw!r} is not UTF-8") from None
        if not keys:
            raise NoiseLmdbError(f"{self.path}: holds no noise entries")
        return keys

    def raw(self, key: str) -> bytes:
        """The stored bytes of ``key`` (one encoded audio file)."""
        with self._open().begin() as txn:
            data = txn.get(key.encode("utf-8"))
        if data is None:
            raise NoiseLmdbError(f"{self.path}: no noise {key!r}")
        return data

    def read(self, key: str, sample_rate: int | None = None) -> tuple[np.ndarray, int]:
        """``key``'s noise decoded (:func:`decode_noise`)."""
        return decode_noise(self.raw(key), key, sample_rate)


__all__ = ["ENROLL_NOISE_SNR_DB", "KEYS_ENTRY", "NOISE_SNR_DB", "SPEECH_KEY_PREFIX", "SPEECH_SNR_DB", "NoiseLmdb", "NoiseLmdbError",
           "decode_noise", "enroll_noise_snr_range", "noise_snr_range", "probe_noise"]
