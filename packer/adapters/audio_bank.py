"""Audio banks for online augmentation: a directory or list of audio files, or simulated room impulse responses,
to a ``noise`` or ``rir`` pack.

- Every file is one sample: one segment of stream ``audio`` holding all its channels (channel-major, like every
  stream), resampled with soxr to the pack's rate and quantised to int16.  Nothing is normalised: a RIR is stored as
  decoded (the mixer uses it as it is), and its level stays in the segment statistics.
- Keys are the paths relative to the directory (``/``-separated), or the paths exactly as a list file gives them.
- The index schema needs a non-empty list of speakers per sample; a bank has none, so its one "speaker" is the
  kind name (``"noise"`` or ``"rir"``).
- ``--simulate N`` (``rir`` only) makes N shoebox-room RIRs with pyroomacoustics (the optional extra ``rir``):
  room size, RT60 and source-microphone distance are drawn from ``numpy.random.default_rng(seed)`` when the build
  starts, so the pack is a pure function of the options.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass

import numpy as np

from speechpack.packer.audio import (
    SOUNDFILE_EXTENSIONS,
    Audio,
    AudioError,
    probe_audio,
    read_audio,
    resample,
    resampled_frames,
    to_stored,
)
from speechpack.packer.adapters.noise_lmdb import build_noise_lmdb
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.build.plan import PackedSample, SamplePlan
from speechpack.schemas.constants import KIND_NOISE, KIND_RIR, STREAM_AUDIO
from speechpack.schemas.errors import OptionError, SpeechpackError
from speechpack.schemas.documents import decode_line
from speechpack.schemas.units import DISTANCE, ROOM_SIZE, RT60, SEED, SIMULATE
from speechpack.schemas.names import name_problem
from speechpack.schemas.line_problems import LineProblem

BANK_KINDS = (KIND_NOISE, KIND_RIR)
#: Files a directory scan takes: what libsndfile reads, plus the containers PyAV decodes that hold audio.
AUDIO_EXTENSIONS = frozenset(SOUNDFILE_EXTENSIONS | {".mp3", ".m4a", ".aac", ".wma", ".mka", ".webm", ".mp4",
                                                       ".opus", ".ac3", ".amr"})


@dataclass(frozen=True)
class BankFile:
    """One audio file of a bank: its 1-based line (position in the sorted scan, or line of the list), key and
    the path the build opens."""

    line: int
    key: str
    path: str


@dataclass(frozen=True)
class BankInput:
    """A read bank input: the files, the problems found before decoding, and a hash of what was read."""

    items: list[BankFile]
    problems: list[LineProblem]
    sha256: str


def check_bank_kind(kind: str) -> None:
    if kind not in BANK_KINDS:
        raise SpeechpackError(f"audio bank kind must be one of {', '.join(BANK_KINDS)}, got {kind!r}")


def read_bank_input(source: str) -> BankInput:
    """Every audio file under the directory ``source`` (recursively, hidden entries left out, sorted by relative
    path), or every line of the list file ``source`` (one path per line; blank lines and ``#`` comments are
    skipped but counted, so line numbers match an editor; relative paths are opened from the current directory).
    A file name or line that cannot be a key (not UTF-8, a control character: ``schemas.names``) is a problem of
    its line."""
    if os.path.isdir(source):
        return _scan_directory(source)
    if os.path.isfile(source):
        return _read_list(source)
    raise SpeechpackError(f"{source}: no such directory or list file")


def _scan_directory(root: str) -> BankInput:
    keys = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.startswith(".")]
        for name in files:
            if not name.startswith(".") and os.path.splitext(name)[1].lower() in AUDIO_EXTENSIONS:
                keys.append(os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/"))
    keys.sort()
    if not keys:
        raise SpeechpackError(f"{root}: holds no audio files ({', '.join(sorted(AUDIO_EXTENSIONS))})")
    items, problems = [], []
    for line, key in enumerate(keys, 1):
        item = BankFile(line=line, key=key, path=os.path.join(root, *key.split("/")))
        problem = name_problem(key)
        if problem is None:
            items.append(item)
        else:  # a control character, or a name that is not UTF-8 (decoded to surrogates): not a storable key
            problems.append(LineProblem(line, key, item.path, f"file name {problem}"))
    # The input of a directory is its listing: the relative paths (their bytes) and sizes of the files, in order.
    listing = "".join(f"{key}\t{_size(os.path.join(root, *key.split('/')))}\n" for key in keys)
    return BankInput(items, problems, hashlib.sha256(listing.encode("utf-8", "surrogateescape")).hexdigest())


def _size(path: str) -> int:
    """Bytes of ``path``; -1 for an entry that cannot be read (a broken link: the build reports it)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


def _read_list(list_path: str) -> BankInput:
    items: list[BankFile] = []
    problems: list[LineProblem] = []
    first_line: dict[str, int] = {}
    with open(list_path, "rb") as fp:
        raw = fp.read()
    for number, encoded in enumerate(raw.split(b"\n"), start=1):
        line, undecodable = decode_line(encoded)
        if undecodable is not None:
            problems.append(LineProblem(number, None, None, undecodable))
            continue
        path = line.strip()
        if not path or path.startswith("#"):
            continue
        problem = name_problem(path)
        if problem is not None:
            problems.append(LineProblem(number, None, None, f"path {path!r} {problem}"))
            continue
        if path in first_line:
            problems.append(LineProblem(number, path, path, f"duplicate path (first on line {first_line[path]})"))
            continue
        first_line[path] = number
        items.append(BankFile(line=number, key=path, path=path))
    return BankInput(items, problems, hashlib.sha256(raw).hexdigest())


def plan_bank_file(item: BankFile, sample_rate: int) -> SamplePlan:
    """Size one file's sample from its header (PyAV formats are decoded once)."""
    info = probe_audio(item.path)
    frames = resampled_frames(info.frames, info.sample_rate, sample_rate, item.path)
    return SamplePlan(line=item.line, key=item.key, num_frames=frames, elements={STREAM_AUDIO: info.channels * frames})


def load_bank_file(item: BankFile, sample_rate: int, kind: str) -> PackedSample:
    """Decode, resample (soxr) and quantise one file, all channels kept; raise ``AudioError`` for bad input."""
    audio = read_audio(item.path, int16_at=sample_rate)
    stored = to_stored(resample(audio, sample_rate))
    return PackedSample(key=item.key, speakers=(kind,), line=item.line, orig_sample_rate=audio.sample_rate,
                        num_frames=stored.length, provenance={"path": item.path}, streams={STREAM_AUDIO: [stored]})


# --- simulated room impulse responses -------------------------------------------------------------------------

#: Defaults of ``--simulate``: rooms from 3 x 3 x 2.5 m to 8 x 6 x 3.5 m, RT60 0.2-0.6 s, distance 0.5-3 m.
DEFAULT_ROOM_MIN = (3.0, 3.0, 2.5)
DEFAULT_ROOM_MAX = (8.0, 6.0, 3.5)
DEFAULT_RT60 = (0.2, 0.6)
DEFAULT_DISTANCE = (0.5, 3.0)
#: Source and microphone stay this far from every wall (metres).
WALL_MARGIN = 0.3
_PLACEMENT_TRIES = 1000


@dataclass(frozen=True)
class SimulationOptions:
    """What ``--simulate`` draws from; every field shapes the bytes of the pack (recorded in the provenance)."""

    count: int
    room_min: tuple[float, float, float] = DEFAULT_ROOM_MIN
    room_max: tuple[float, float, float] = DEFAULT_ROOM_MAX
    rt60: tuple[float, float] = DEFAULT_RT60
    distance: tuple[float, float] = DEFAULT_DISTANCE
    seed: int = 0

    def __post_init__(self) -> None:
        SIMULATE.check(self.count)
        SEED.check(self.seed)
        for name, limit in (("room_min", ROOM_SIZE), ("room_max", ROOM_SIZE), ("rt60", RT60), ("distance", DISTANCE)):
            values = getattr(self, name)
            if any(limit.problem(v) for v in values):
                raise SpeechpackError(f"--{name.replace('_', '-')} values must be numbers {limit.describe()}, got "
                                      f"{list(values)}")
        if any(lo > hi for lo, hi in zip(self.room_min, self.room_max)):
            raise SpeechpackError(f"--room-min {list(self.room_min)} exceeds --room-max {list(self.room_max)}")
        if any(v <= 2 * WALL_MARGIN for v in self.room_min):
            raise SpeechpackError(f"--room-min dimensions must exceed {2 * WALL_MARGIN} m, got {list(self.room_min)}")
        for name in ("rt60", "distance"):
            lo, hi = getattr(self, name)
            if lo > hi:
                raise SpeechpackError(f"--{name}: low {lo} exceeds high {hi}")

    def recorded(self) -> dict:
        return {"count": self.count, "room_min": list(self.room_min), "room_max": list(self.room_max),
                "rt60": list(self.rt60), "distance": list(self.distance), "seed": self.seed}

    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.recorded(), sort_keys=True).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class SimulatedRoom:
    """One RIR to simulate: a shoebox room, its RT60, and where the source and the microphone are."""

    line: int
    key: str
    room: tuple[float, float, float]
    rt60: float
    source: tuple[float, float, float]
    microphone: tuple[float, float, float]

    def describe(self) -> dict:
        return {"room": list(self.room), "rt60": self.rt60, "source": list(self.source),
                "microphone": list(self.microphone),
                "distance": math.dist(self.source, self.microphone)}


def draw_rooms(options: SimulationOptions) -> list[SimulatedRoom]:
    """The rooms of a simulation, a pure function of ``options`` (values rounded to 1 mm / 1 ms so the
    provenance reads well and stays exact)."""
    rng = np.random.default_rng(options.seed)
    rooms = []
    for i in range(options.count):
        room = tuple(round(float(rng.uniform(lo, hi)), 3) for lo, hi in zip(options.room_min, options.room_max))
        rt60 = round(float(rng.uniform(*options.rt60)), 3)
        wanted = float(rng.uniform(*options.distance))
        microphone, source = _place(rng, room, wanted)
        rooms.append(SimulatedRoom(line=i + 1, key=f"sim-{i:06d}", room=room, rt60=rt60,
                                   source=source, microphone=microphone))
    return rooms


def _place(rng: np.random.Generator, room: tuple, distance: float) -> tuple[tuple, tuple]:
    """A microphone anywhere in the room (off the walls) and a source ``distance`` from it in a random direction;
    if no draw fits, the last direction with the distance shortened to what fits."""
    low = np.full(3, WALL_MARGIN)
    high = np.asarray(room) - WALL_MARGIN
    for _ in range(_PLACEMENT_TRIES):
        mic = rng.uniform(low, high)
        direction = rng.normal(size=3)
        direction /= np.linalg.norm(direction) or 1.0
        source = mic + distance * direction
        if np.all(source >= low) and np.all(source <= high):
            break
    else:
        # Largest step along ``direction`` that stays inside [low, high].
        with np.errstate(divide="ignore", invalid="ignore"):
            limits = np.where(direction > 0, (high - mic) / direction, (low - mic) / direction)
        step = float(np.min(limits[np.isfinite(limits) & (limits >= 0)], initial=distance))
        source = mic + min(distance, step) * direction
    return tuple(round(float(v), 3) for v in mic), tuple(round(float(v), 3) for v in source)


def _pyroomacoustics():
    try:
        import pyroomacoustics
    except ImportError:
        raise SpeechpackError("--simulate needs pyroomacoustics: pip install 'speechpack[rir]' "
                              "(or pip install pyroomacoustics)") from None
    return pyroomacoustics


def simulate_rir(room: SimulatedRoom, sample_rate: int) -> np.ndarray:
    """The image-source RIR of ``room`` at ``sample_rate``, float32 ``[1, T]``; raise ``AudioError`` when the room
    cannot have the requested RT60 (pyroomacoustics' inverse Sabine formula refuses it)."""
    pra = _pyroomacoustics()
    where = f"<simulated {room.key}>"
    try:
        absorption, max_order = pra.inverse_sabine(room.rt60, list(room.room))
        shoebox = pra.ShoeBox(list(room.room), fs=sample_rate, materials=pra.Material(absorption),
                              max_order=max_order)
        shoebox.add_source(list(room.source))
        shoebox.add_microphone(np.asarray(room.microphone, dtype=float).reshape(3, 1))
        shoebox.compute_rir()
        rir = np.asarray(shoebox.rir[0][0], dtype=np.float64)
    except ValueError as err:
        raise AudioError(where, f"cannot simulate room {list(room.room)} m with RT60 {room.rt60} s ({err})") from None
    if rir.size == 0 or not np.all(np.isfinite(rir)):
        raise AudioError(where, "simulation gave an empty or non-finite RIR")
    return np.ascontiguousarray(rir[np.newaxis, :], dtype=np.float32)


@dataclass(frozen=True)
class SimulatedRir:
    """A room and its simulated RIR (float32 ``[1, T]``): what sizing a simulated sample leaves for packing it."""

    room: SimulatedRoom
    rir: np.ndarray

    @property
    def line(self) -> int:
        return self.room.line

    @property
    def key(self) -> str:
        return self.room.key


def plan_simulated(room: SimulatedRoom, sample_rate: int) -> SamplePlan:
    """Size a simulated RIR by simulating it (its length depends on the room); the RIR travels on in the plan's
    ``prepared``, so each room is simulated once (the simulation is most of the build's time)."""
    rir = simulate_rir(room, sample_rate)
    frames = rir.shape[1]
    return SamplePlan(line=room.line, key=room.key, num_frames=frames, elements={STREAM_AUDIO: frames},
                      prepared=SimulatedRir(room, rir))


def load_simulated(item: SimulatedRir | SimulatedRoom, sample_rate: int) -> PackedSample:
    """The packed sample of a room simulated while planning (``SimulatedRir``), or of a room (simulated now)."""
    room, rir = (item.room, item.rir) if isinstance(item, SimulatedRir) else (item, simulate_rir(item, sample_rate))
    stored = to_stored(Audio(rir, sample_rate))
    return PackedSample(key=room.key, speakers=(KIND_RIR,), line=room.line, orig_sample_rate=sample_rate,
                        num_frames=stored.length, provenance={"simulated": room.describe()},
                        streams={STREAM_AUDIO: [stored]})


def build_audio_bank(source: str, kind: str, options: BuildOptions) -> BuildSummary:
    """``speechpack build audio-bank``: every audio file of a directory (recursively, sorted) or of a list file
    (one path per line) to a ``noise`` or ``rir`` pack, one sample per file (``packer.adapters.audio_bank``)."""
    check_bank_kind(kind)
    bank = read_bank_input(source)
    recorded = {**options.recorded(), "kind": kind}
    is_dir = os.path.isdir(source)
    return run_build(
        items=bank.items,
        problems=bank.problems,
        plan=functools.partial(plan_bank_file, sample_rate=options.sample_rate),
        load=functools.partial(load_bank_file, sample_rate=options.sample_rate, kind=kind),
        kind=kind,
        input_path=os.path.abspath(source) if is_dir else source,
        command="build audio-bank",
        recorded_options=recorded,
        options=options,
        input_sha256=bank.sha256 if is_dir else None,
    )


def build_simulated_rirs(simulation: SimulationOptions, options: BuildOptions) -> BuildSummary:
    """``speechpack build audio-bank --kind rir --simulate N``: N shoebox-room RIRs simulated with
    pyroomacoustics, drawn deterministically from the seed."""
    _pyroomacoustics()  # fail before planning when the optional dependency is missing
    recorded = {**options.recorded(), "kind": KIND_RIR, "simulate": simulation.recorded()}
    return run_build(
        items=draw_rooms(simulation),
        problems=[],
        plan=functools.partial(plan_simulated, sample_rate=options.sample_rate),
        load=functools.partial(load_simulated, sample_rate=options.sample_rate),
        kind=KIND_RIR,
        input_path=f"<simulate {simulation.count}>",
        command="build audio-bank",
        recorded_options=recorded,
        options=options,
        input_sha256=simulation.sha256(),
    )


def build_bank(options: BuildOptions, kind: str, source: str | None = None, simulate: int | None = None,
               lmdb: str | None = None, room_min: tuple | None = None, room_max: tuple | None = None,
               rt60: tuple | None = None, distance: tuple | None = None, seed: int = 0) -> BuildSummary:
    """``speechpack build audio-bank``: the files of ``source`` (``build_audio_bank``), the entries of a WeSep noise
    LMDB (``packer.adapters.noise_lmdb.build_noise_lmdb``), or ``simulate`` RIRs (``build_simulated_rirs``) drawn
    from ``seed`` within the given ranges (``None``: ``SimulationOptions``' defaults).  Raise ``OptionError`` for
    options that do not go together."""
    ranges = {"room_min": room_min, "room_max": room_max, "rt60": rt60, "distance": distance}
    if lmdb is not None:
        if source is not None or simulate is not None:
            raise OptionError("give one of DIR_OR_LIST, --simulate N or --lmdb PATH")
        if kind != KIND_NOISE:
            raise OptionError("--lmdb reads a WeSep noise LMDB: use --kind noise")
    if simulate is None:
        if source is None and lmdb is None:
            raise OptionError("give DIR_OR_LIST, or --simulate N (with --kind rir)")
        given = [f"--{name.replace('_', '-')}" for name, value in ranges.items() if value is not None]
        if given:
            raise OptionError(f"{', '.join(given)} only apply with --simulate")
        return build_noise_lmdb(lmdb, options) if lmdb is not None else build_audio_bank(source, kind, options)
    if source is not None:
        raise OptionError("give DIR_OR_LIST or --simulate N, not both")
    if kind != KIND_RIR:
        raise OptionError("--simulate makes RIRs: use --kind rir")
    given = {name: tuple(value) for name, value in ranges.items() if value is not None}
    return build_simulated_rirs(SimulationOptions(count=simulate, seed=seed, **given), options)


__all__ = ["BANK_KINDS", "BankFile", "BankInput", "SimulatedRir", "SimulatedRoom", "SimulationOptions",
           "build_audio_bank", "build_bank", "build_simulated_rirs", "check_bank_kind", "draw_rooms", "load_bank_file",
           "load_simulated", "plan_bank_file", "plan_simulated", "read_bank_input", "simulate_rir"]
