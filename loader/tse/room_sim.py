"""Same-room reverberation: one simulated shoebox room per mixture, one room impulse response (RIR) per source.

WeSep's online ``add_reverb`` simulates one room per mixture and gives every source its own RIR in it (same room,
same microphone, different source positions), with FRA-RIR: Y. Luo and J. Yu, "FRA-RIR: Fast Random Approximation
of the Image-source Method", Interspeech 2023, and its multi-channel form, Y. Luo and R. Gu, "Fast Random
Approximation of Multi-channel Room Impulse Response", arXiv:2304.08052 (2023).  The method keeps the image-source
picture of a RIR (a direct path plus virtual sources, each delayed by its distance and attenuated by ``1/d`` and by
the walls it reflected off) but draws the virtual sources at random instead of enumerating them: their distances
from a distribution that grows with distance, their reflection counts from their distance with a random
perturbation, the wall reflection coefficient from the room's RT60.

This module implements that method with numpy, vectorised over every source and virtual source of a whole batch of
rooms (:func:`rooms_rirs`: only the draws are made room by room, from each room's own generator), and calibrates
the random draws so that the result has the physical properties a test can check:

- **Virtual-source density.** A shoebox room has about ``4 pi d^2 / V`` image sources per metre of distance ``d``
  (image sources fill space at one per room volume ``V``).  They are drawn with exactly that density while it is
  below one per output sample (the sparse early reflections: every drawn one is a real one on average), and at one
  per sample beyond (the dense tail), each weighted by the square root of the number of images it stands for, so
  the energy per unit time is the room's (the direct-to-reverberant ratio follows volume, RT60 and distance, as
  diffuse-field theory says: Kuttruff, *Room Acoustics*, ch. 5).  Distances start at the nearest first-order image
  (the first wall reflection), never before it.
- **Reflections.** A path of length ``d`` meets on average ``d / l`` walls, ``l = 4V / S`` being the mean free path
  (``S``: wall area).  The reflection coefficient ``beta`` is Eyring's: the energy ``beta^(2 d / l)`` falls by
  60 dB over ``d = c * RT60``, so the drawn RT60 is the RIR's decay time by construction.  As in FRA-RIR, each
  virtual source's count is perturbed by ``U(-2, 2) * (d / d0)^0.25`` (narrowed so it never goes below one
  reflection); its amplitude is divided by the perturbation's mean energy gain, so the random counts leave the
  expected decay alone.
- **Fractional delays** are two linear-interpolation taps at the output rate (FRA-RIR places impulses at 64 times
  the rate and resamples down, which costs most of its time; linear taps are a mild low-pass, like air absorption).
- **Low cut.** Every impulse is positive (rigid-wall images), which builds up a DC offset; like FRA-RIR the RIR is
  high-passed at 80 Hz (a second-order Butterworth biquad, run as a recursive filter, or without scipy applied as
  its frequency response with enough zero padding that its tail cannot wrap around).
- Each RIR is scaled so its direct path has gain 1: the dry source keeps its level and the room adds to it.

Every draw comes from the generator passed in (the mixture's counter-based stream, ``loader.rng.item_rng``),
in a fixed order, so a room and its RIRs are a pure function of the generator's state.  WeSep's ``reverb_conf``
keys and defaults are read by :meth:`RoomConfig.from_wesep`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Mapping, NamedTuple

import numpy as np

from speechpack.loader.config_checks import ConfigError
from speechpack.loader.tse.convolve import convolve_rows, fast_fft_size, real_fft

#: Speed of sound, m/s (dry air at about 20 degrees C).
SPEED_OF_SOUND = 343.0
#: WeSep's ``reverb_conf`` defaults: rooms from 3 x 3 x 2.5 m to 10 x 6 x 4 m, RT60 0.1-0.7 s, source-microphone
#: distance 0.2-5 m.
DEFAULT_ROOM_MIN = (3.0, 3.0, 2.5)
DEFAULT_ROOM_MAX = (10.0, 6.0, 4.0)
DEFAULT_RT60 = (0.1, 0.7)
DEFAULT_MIC_DIST = (0.2, 5.0)
#: The keys of WeSep's ``reverb_conf``.
WESEP_KEYS = ("min_max_room", "rt60", "mic_dist")
#: The microphone and every source stay this far from each wall (metres).
WALL_MARGIN = 0.3
#: FRA-RIR's reflection-count perturbation: ``U(-PERTURB_HIGH, PERTURB_HIGH) * (d / d0) ** PERTURB_EXPONENT``.
PERTURB_HIGH, PERTURB_EXPONENT = 2.0, 0.25
#: FRA-RIR's low cut (Hz) and the zero padding (s) its frequency response is applied with when scipy is missing
#: (the filter's poles have radius 0.978 at 16 kHz: its tail is 1e-15 down after 0.1 s).
HIGHPASS_HZ = 80.0
_HIGHPASS_PADDING_S = 0.1
#: Virtual sources computed per block (float64 temporaries of 128 kB: a block's dozen passes stay in L2).
_IMAGE_BLOCK = 1 << 14
#: Random directions tried per source (each both ways) for one that holds the drawn distance.
_DIRECTIONS = 4


@dataclass(frozen=True)
class RoomConfig:
    """What rooms are drawn from (WeSep's ``reverb_conf``): room size per axis in ``[room_min, room_max]`` metres,
    RT60 in ``rt60`` seconds, each source's distance to the microphone in ``mic_dist`` metres (a distance the
    room cannot hold in the drawn direction is shortened to what fits)."""

    room_min: tuple[float, float, float] = DEFAULT_ROOM_MIN
    room_max: tuple[float, float, float] = DEFAULT_ROOM_MAX
    rt60: tuple[float, float] = DEFAULT_RT60
    mic_dist: tuple[float, float] = DEFAULT_MIC_DIST

    def __post_init__(self) -> None:
        for name, size in (("room_min", 3), ("room_max", 3), ("rt60", 2), ("mic_dist", 2)):
            values = getattr(self, name)
            if len(values) != size or not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0
                                               for v in values):
                raise ConfigError(f"reverb_conf.{name} must be {size} positive numbers, got {list(values)}")
        if any(lo > hi for lo, hi in zip(self.room_min, self.room_max)):
            raise ConfigError(f"reverb_conf.min_max_room: smallest room {list(self.room_min)} exceeds the largest "
                              f"{list(self.room_max)}")
        if any(v <= 2 * WALL_MARGIN for v in self.room_min):
            raise ConfigError(f"reverb_conf.min_max_room: every dimension of the smallest room must exceed "
                              f"{2 * WALL_MARGIN} m, got {list(self.room_min)}")
        for name in ("rt60", "mic_dist"):
            lo, hi = getattr(self, name)
            if lo > hi:
                raise ConfigError(f"reverb_conf.{name}: low {lo} exceeds high {hi}")

    @classmethod
    def from_wesep(cls, conf: Mapping | None) -> RoomConfig:
        """A ``reverb_conf`` block as WeSep recipes write it (``min_max_room: [[x, y, z], [x, y, z]]``,
        ``rt60: [lo, hi]``, ``mic_dist: [lo, hi]``); a missing key keeps WeSep's default, an unknown one is an
        error naming it."""
        conf = {} if conf is None else conf
        if not isinstance(conf, Mapping):
            raise ConfigError(f"reverb_conf must be a mapping, got {conf!r}")
        unknown = sorted(set(conf) - set(WESEP_KEYS))
        if unknown:
            raise ConfigError(f"reverb_conf: unknown key(s) {', '.join(map(str, unknown))} "
                              f"(known: {', '.join(WESEP_KEYS)})")
        values = {}
        if "min_max_room" in conf:
            rooms = conf["min_max_room"]
            if not (isinstance(rooms, (list, tuple)) and len(rooms) == 2
                    and all(isinstance(r, (list, tuple)) for r in rooms)):
                raise ConfigError(f"reverb_conf.min_max_room must be [[x, y, z], [x, y, z]], got {rooms!r}")
            values["room_min"], values["room_max"] = tuple(rooms[0]), tuple(rooms[1])
        for key in ("rt60", "mic_dist"):
            if key in conf:
                if not isinstance(conf[key], (list, tuple)):
                    raise ConfigError(f"reverb_conf.{key} must be [lo, hi], got {conf[key]!r}")
                values[key] = tuple(conf[key])
        return cls(**values)


@dataclass(frozen=True)
class Room:
    """One drawn room: its size (metres), RT60 (s), the microphone and the ``n`` source positions ``[n, 3]``;
    ``distances`` are the source-microphone distances ``[n]``."""

    size: np.ndarray
    rt60: float
    mic: np.ndarray
    sources: np.ndarray
    distances: np.ndarray

    def direct_delays(self, sample_rate: int) -> np.ndarray:
        """Where each source's direct path arrives, in (fractional) samples."""
        return self.distances / SPEED_OF_SOUND * sample_rate

    def first_reflections(self) -> np.ndarray:
        """Each source's shortest first-order reflection path ``[n]`` (its image in the nearest-by-path wall)."""
        mirrored = np.repeat(self.sources[None, None], 2, axis=1).repeat(3, axis=0)  # [axis, wall, n, 3]
        for axis in range(3):
            walls = np.array([0.0, float(self.size[axis])])
            mirrored[axis, :, :, axis] = 2.0 * walls[:, None] - self.sources[None, :, axis]
        return np.linalg.norm(mirrored - self.mic, axis=-1).min(axis=(0, 1))


def draw_room(rng: np.random.Generator, config: RoomConfig, n_sources: int) -> Room:
    """A room, its RT60, a microphone and ``n_sources`` source positions, drawn from ``rng`` in a fixed order
    (size, RT60, microphone, distances, candidate directions) so the number of draws never depends on the
    values.  A distance no candidate direction holds is shortened to the most any of them does."""
    if n_sources < 1:
        raise ConfigError(f"a room needs at least one source, got {n_sources}")
    size = rng.uniform(config.room_min, config.room_max)
    rt60 = float(rng.uniform(*config.rt60))
    low, high = np.full(3, WALL_MARGIN), size - WALL_MARGIN
    mic = rng.uniform(low, high)
    wanted = rng.uniform(*config.mic_dist, size=n_sources)
    # Candidate directions (each also reversed): the first with room for the drawn distance, else the roomiest,
    # with the distance cut to what fits there.
    candidates = rng.normal(size=(n_sources, _DIRECTIONS, 3))
    candidates /= np.maximum(np.linalg.norm(candidates, axis=2, keepdims=True), 1e-12)
    candidates = np.concatenate([candidates, -candidates], axis=1)
    room_left = _room_along(mic, candidates, low, high)
    fits = room_left >= wanted[:, None]
    choice = np.where(fits.any(axis=1), fits.argmax(axis=1), room_left.argmax(axis=1))
    rows = np.arange(n_sources)
    direction = candidates[rows, choice]
    distances = np.minimum(wanted, room_left[rows, choice])
    sources = mic + distances[:, None] * direction
    return Room(size=size, rt60=rt60, mic=mic, sources=sources, distances=distances)


def _room_along(start: np.ndarray, direction: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """How far from ``start`` one can go along each unit ``direction`` ``[..., 3]`` and stay in ``[low, high]``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        steps = np.where(direction > 0, (high - start) / direction,
                         np.where(direction < 0, (low - start) / direction, np.inf))
    return steps.min(axis=-1)


class _Images(NamedTuple):
    """The virtual sources of a batch's sources, flat: ``source`` (row of the batch) per image, its uniform draws
    ``quota`` (where it falls in the cumulative count) and ``jitter`` (its reflection-count perturbation)."""

    source: np.ndarray
    quota: np.ndarray
    jitter: np.ndarray


class _Sources(NamedTuple):
    """Per source of the batch ``[M]``: each a property of the source's room or of its distance in it."""

    d0: np.ndarray
    start: np.ndarray
    count_a: np.ndarray
    b_start: np.ndarray
    expected: np.ndarray
    counts: np.ndarray
    volume: np.ndarray
    free_path: np.ndarray
    log_beta: np.ndarray
    length: np.ndarray


def _room_sources(room: Room, per_metre: float) -> tuple[_Sources, int]:
    """One room's per-source quantities (the image-count segments, the reflection coefficient, the RIR length)
    and the width of its draws (the most images any of its sources needs)."""
    n = len(room.distances)
    volume = float(np.prod(room.size))
    area = 2.0 * float(room.size[0] * room.size[1] + room.size[1] * room.size[2] + room.size[0] * room.size[2])
    free_path = 4.0 * volume / area
    d0 = room.distances
    d_end = float(d0.max()) + SPEED_OF_SOUND * room.rt60
    length = int(math.ceil(d_end * per_metre)) + 2  # + 2: the second tap of the latest impulse fits
    # Segment A (true image density 4 pi d^2 / V, below one per sample): [start, min(crossover, d_end)];
    # segment B (one per sample): [max(start, crossover), d_end].
    start = np.minimum(room.first_reflections(), d_end)
    crossover = math.sqrt(volume * per_metre / (4.0 * math.pi))
    a_end = np.minimum(np.maximum(start, crossover), d_end)
    count_a = 4.0 * math.pi / (3.0 * volume) * (a_end ** 3 - start ** 3)
    b_start = np.maximum(start, crossover)
    count_b = per_metre * np.maximum(d_end - b_start, 0.0)
    expected = count_a + count_b
    counts = np.maximum(np.ceil(expected).astype(np.int64), 1)
    log_beta = -3.0 * math.log(10.0) * free_path / (SPEED_OF_SOUND * room.rt60)  # ln beta per reflection
    full = np.full(n, 1.0)
    return _Sources(d0, start, count_a, b_start, expected, counts, volume * full, free_path * full, log_beta * full,
                    np.full(n, length, dtype=np.int64)), int(counts.max())


def rooms_rirs(rooms: list[Room], rngs: list[np.random.Generator], sample_rate: int) -> tuple[np.ndarray, np.ndarray]:
    """The RIR of every source of every room, one room per generator: float32 ``[M, L]`` (``M`` the sources of all
    rooms in order, ``L`` the longest RIR) and each row's length ``[M]`` (the row is zero after it): a room's
    latest direct path plus its RT60 (the tail is 60 dB down there), direct path of gain 1 at
    :meth:`Room.direct_delays`.

    Each room's draws come from its own generator, in the order and number a room simulated alone takes (so a
    room's RIRs do not depend on the batch it is in); the per-image arithmetic, the taps and the high-pass then
    run once over every image of the batch, flat, each image knowing its source."""
    per_metre = sample_rate / SPEED_OF_SOUND  # one virtual source per output sample, as a density per metre
    parts, images, first = [], [], 0
    for room, rng in zip(rooms, rngs):
        sources, width = _room_sources(room, per_metre)
        n = len(sources.d0)
        keep = np.arange(width)[None, :] < sources.counts[:, None]  # a source's images past its count weigh 0
        quota, jitter = rng.random((n, width)), rng.uniform(-1.0, 1.0, size=(n, width))
        images.append(_Images(np.repeat(np.arange(first, first + n), sources.counts), quota[keep], jitter[keep]))
        parts.append(sources)
        first += n
    src = _Sources(*(np.concatenate(column) for column in zip(*parts)))
    flat = _Images(*(np.concatenate(column) for column in zip(*images)))
    # In blocks that stay in cache: each image takes a dozen passes, and a batch holds a few hundred thousand.
    paths = [_image_paths(src, _Images(*(column[at:at + _IMAGE_BLOCK] for column in flat)), per_metre)
             for at in range(0, len(flat.source), _IMAGE_BLOCK)]
    dist, amplitude = (np.concatenate(column) for column in zip(*paths))

    # Direct paths (gain 1/d0) and virtual sources, each as two linear-interpolation taps, summed per row.
    rows, longest = len(src.d0), int(src.length.max())
    delays = np.concatenate([src.d0, dist]) * per_metre
    gains = np.concatenate([1.0 / src.d0, amplitude])
    whole = np.floor(delays).astype(np.int64)
    later = gains * (delays - whole)  # the second tap's share; the first tap gets the rest
    index = np.concatenate([np.arange(rows, dtype=np.int64), flat.source]) * longest + whole
    taps = np.bincount(index, weights=gains - later, minlength=rows * longest)
    taps[1:] += np.bincount(index, weights=later, minlength=rows * longest)[:-1]  # never past a row: see length
    rirs = highpass(taps.reshape(rows, longest), sample_rate)
    rirs *= src.d0[:, None]  # direct path gain 1
    rirs = rirs.astype(np.float32)
    for row, end in zip(rirs, src.length.tolist()):  # each room's RIR ends at its own length
        row[end:] = 0.0
    return rirs, src.length


def _image_paths(src: _Sources, images: _Images, per_metre: float) -> tuple[np.ndarray, np.ndarray]:
    """Each image's path length and amplitude: distances by the inverse of the piecewise cumulative count (``quota``
    of a source's expected images lie before it), energy weights, perturbed reflection counts."""
    s = images.source
    quota = images.quota * src.expected[s]
    count_a = src.count_a[s]
    in_a = np.flatnonzero(quota < count_a)
    dist = src.b_start[s] + (quota - count_a) / per_metre
    volume_a = src.volume[s[in_a]]
    dist[in_a] = np.cbrt(src.start[s[in_a]] ** 3 + 3.0 * volume_a / (4.0 * math.pi) * quota[in_a])
    # Energy weight: images each drawn one stands for (1 in A, density ratio in B), times expected / drawn count.
    share = 4.0 * math.pi * dist ** 2 / (src.volume[s] * per_metre)
    share[in_a] = 1.0
    share *= (src.expected / src.counts)[s]
    # Reflection counts: the mean d / l, perturbed as FRA-RIR does, at least one wall.  The spread is narrowed where
    # it would reach below one reflection, so no count needs clamping (a clamp would bias the early energy down and
    # lengthen short decays).
    log_beta = src.log_beta[s]
    mean = dist / src.free_path[s]
    ratio = dist / src.d0[s]
    spread = np.sqrt(np.sqrt(ratio)) if PERTURB_EXPONENT == 0.25 else ratio ** PERTURB_EXPONENT  # roots: 10x faster
    spread *= PERTURB_HIGH
    np.minimum(spread, np.maximum(mean - 1.0, 0.0), out=spread)
    reflections = np.maximum(mean + images.jitter * spread, 1.0)
    # E[beta^(2 delta)] for delta ~ U(-w, w) is sinh(w k) / (w k), k = -2 ln beta: divided out (in amplitude), as
    # sqrt(w k / sinh(w k)) = sqrt(2 w k e / (1 - e^2)), e = exp(-w k): one exp instead of sinh, a third of the
    # time; at the smallest w k (1e-9) the cancellation in 1 - e^2 costs 1e-7 of the amplitude, float32's epsilon.
    wk = np.maximum(spread * (-2.0 * log_beta), 1e-9)
    decay = np.exp(-wk)
    compensation = np.sqrt(2.0 * wk * decay / (1.0 - decay * decay))
    return dist, np.exp(reflections * log_beta) / dist * np.sqrt(share) * compensation


def room_rirs(room: Room, sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    """The RIR of every source of ``room``: float32 ``[n, L]`` (:func:`rooms_rirs` of one room)."""
    rirs, lengths = rooms_rirs([room], [rng], sample_rate)
    return rirs[:, :int(lengths.max())]


@functools.lru_cache(maxsize=8)
def _biquad(sample_rate: int, cutoff: float) -> tuple[np.ndarray, np.ndarray]:
    """The second-order Butterworth high-pass's ``(b, a)``: the bilinear-transform biquad of R. Bristow-Johnson's
    "Audio EQ Cookbook", Q = 1/sqrt(2)."""
    w0 = 2.0 * math.pi * cutoff / sample_rate
    alpha = math.sin(w0) / math.sqrt(2.0)  # sin(w0) / (2 Q), Q = 1 / sqrt(2)
    cos_w0 = math.cos(w0)
    b = np.array([(1.0 + cos_w0) / 2.0, -(1.0 + cos_w0), (1.0 + cos_w0) / 2.0])
    a = np.array([1.0 + alpha, -2.0 * cos_w0, 1.0 - alpha])
    return b, a


@functools.lru_cache(maxsize=32)
def _highpass_response(size: int, sample_rate: int, cutoff: float) -> np.ndarray:
    """The biquad's frequency response on the ``size``-point rfft bins (made once per size, read-only)."""
    b, a = _biquad(sample_rate, cutoff)
    # z^-1 on the rfft bins, 2 pi k / size (an odd size's last bin is below pi: linspace(0, pi) would be off by
    # one bin spacing over the band, which shows as a ringing of 1e-4 of the RIR wrapped around its start)
    z = np.exp(-2j * math.pi * np.arange(size // 2 + 1) / size)
    response = (b[0] + b[1] * z + b[2] * z * z) / (a[0] + a[1] * z + a[2] * z * z)
    response.flags.writeable = False
    return response


def highpass(rows: np.ndarray, sample_rate: int, cutoff: float = HIGHPASS_HZ, recursive: bool | None = None
             ) -> np.ndarray:
    """``rows`` ``[n, L]`` (float64) through a second-order Butterworth high-pass at ``cutoff`` Hz, cropped to ``L``.

    ``recursive`` (the default when scipy is installed): the filter run as itself (``scipy.signal.lfilter``, three
    times faster here); else applied as its frequency response on an FFT zero-padded by ``_HIGHPASS_PADDING_S``,
    the same to 1e-13 since the filter's tail dies out within the padding."""
    b, a = _biquad(sample_rate, float(cutoff))
    if recursive is None or recursive:
        try:
            from scipy.signal import lfilter
        except ImportError:  # pragma: no cover - scipy comes with the wesep extra
            if recursive:
                raise
        else:
            return lfilter(b, a, rows, axis=-1)
    length = rows.shape[-1]
    size = fast_fft_size(length + int(_HIGHPASS_PADDING_S * sample_rate))
    spectra = real_fft(rows, size)  # float64 stays double: the RIR is exact before its float32 cast
    spectra *= _highpass_response(size, sample_rate, float(cutoff))
    return real_fft(spectra, size, inverse=True)[..., :length]


@dataclass(frozen=True)
class SimulatedRoom:
    """A drawn room and its sources' RIRs ``[n, L]`` (float32) at ``sample_rate``."""

    room: Room
    rirs: np.ndarray
    sample_rate: int


def simulate_room(rng: np.random.Generator, config: RoomConfig, n_sources: int, sample_rate: int) -> SimulatedRoom:
    """One room per mixture, one RIR per source (same room, same microphone, different positions): the draws of
    :func:`draw_room` then :func:`room_rirs`, all from ``rng``."""
    if sample_rate <= 0:
        raise ConfigError(f"sample rate must be positive, got {sample_rate}")
    room = draw_room(rng, config, n_sources)
    return SimulatedRoom(room=room, rirs=room_rirs(room, sample_rate, rng), sample_rate=sample_rate)


def reverberate_room(rng: np.random.Generator, config: RoomConfig, sources: np.ndarray,
                     sample_rate: int) -> tuple[np.ndarray, SimulatedRoom]:
    """WeSep's ``add_reverb`` for one mixture: a room drawn for its ``[n, T]`` sources, each convolved with its
    own RIR; returns the reverberant sources (which replace the dry ones) and the simulation."""
    simulated = simulate_room(rng, config, sources.shape[0], sample_rate)
    return convolve_rows(sources, simulated.rirs), simulated


__all__ = ["DEFAULT_MIC_DIST", "DEFAULT_ROOM_MAX", "DEFAULT_ROOM_MIN", "DEFAULT_RT60", "HIGHPASS_HZ", "SPEED_OF_SOUND",
           "WALL_MARGIN", "WESEP_KEYS", "Room", "RoomConfig", "SimulatedRoom", "convolve_rows", "draw_room",
           "highpass", "reverberate_room", "room_rirs", "rooms_rirs", "simulate_room"]
