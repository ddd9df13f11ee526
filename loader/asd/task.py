"""The ASD loader task (``task: asd``): MuVAP-style active speaker detection batches from ``asd`` packs.

``loader.torch.SpeechLoader`` plans and deals the batches; this module supplies what is ASD-specific
(``TASK``, a ``loader.tasks.LoaderTask``): ``parse_dataset_args`` (``loader.asd.args``) and ``prepare``, which
indexes the packs' face tracks (``asd_tracks``, below), reports the tracks that have no model frame (``asd_tracks``
sets them apart), and returns the batch builder (``AsdBatchBuilder``, below).

ASD batches on the 25 Hz model timeline, built straight from the mapped shards.

``AsdBatchBuilder.build`` turns one planned batch into numpy arrays:

- ``audio`` ``[B, 1, T * 640]`` float32: normalised (MuVAP's whole-recording gain) in the same pass that decodes
  the int16 mapping (``loader.samples.read_window``), zero past the stored audio;
- ``faces`` ``[B, T, 112, 112]`` **uint8**: faces stay bytes until the model, which scales them on the GPU
  (``faces.float() / 255`` after the transfer): 4x less memory, copying and worker-to-trainer traffic than
  MuVAP's float32 widening in the workers;
- ``labels`` ``[B, T]`` uint8 (0/1) and ``scored`` ``[B, T]`` bool: the frames a loss counts;
- ``key`` (list of str), ``model_frames`` ``[B]`` (the whole track's ``M``), ``start`` ``[B]`` (the first fed
  model frame), ``source_frames`` and ``source_fps`` ``[B]`` (to score native frames), ``valid`` ``[B]``.

Train (the plan's units are chunks, ``loader.asd.timeline``): every row is cropped to the batch's shortest fed
chunk, because the model has no padding mask; ``scored`` is False on the history prefix.  Augmentation draws from
``loader.rng.item_rng(seed, epoch, batch, row)``.  With ``jitter`` the epoch's chunks are
``loader.asd.timeline.jitter_windows(..., seed, epoch)``: the planner batches their lengths (``unit_lengths(epoch)``)
and the rows are read from them, so what was planned is what is fed.  Val/test (units are whole tracks): rows are right-padded to
the longest track with zeros and ``scored`` False on the padding, so every model frame of every track is scored
exactly once per pass; ``loader.asd.timeline.native_frame_scores`` maps them to every native frame.

Rows flagged ``valid = False`` (the plan's tail padding, repeats of real rows) have ``scored`` all False too, so a
loss weighted by ``scored`` counts each frame at most once per epoch even across ranks (once, unless its batch
cropped it to the shortest row: ``speechpack plan`` prints the share kept); a loss that divides by
``scored.sum()`` must guard against a batch of only such rows.

The ASD item universe: one item per face track of every pack, as numpy columns.

Each track's native frame count is its faces segment's length, its rate the ``source_fps`` attribute, and its
model frame count follows from both (``loader.asd.timeline``).  Tracks without a single model frame cannot be fed
to a model; ``asd_tracks`` sets them apart so the task reports them (count and keys), instead of dropping them the
way MuVAP's chunker does.  Nothing here holds a Python object per track (cheap to fork into workers).
"""

from __future__ import annotations

from dataclasses import dataclass
import warnings

import numpy as np

from speechpack.loader.asd.args import DATASET_ARGS, AsdArgs, parse_dataset_args
from speechpack.loader.asd.augment import (AugmentError, DonorIndex, apply_visual, donor_start, draw_visual, fit_donor,
                                           mix_at_snr)
from speechpack.loader.asd.timeline import jitter_windows, muvap_windows, source_frame_index
from speechpack.loader.normalize import normalizer
from speechpack.loader.pack import Pack
from speechpack.loader.plan.train_windows import TrainWindows
from speechpack.loader.rng import item_rng
from speechpack.loader.samples import normalization, read_window
from speechpack.loader.tasks import BatchBuilder, DryRunView, index_samples, LoaderTask, PlanUnits, Prepared
from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays
from speechpack.schemas.constants import (
    FACE_SHAPE,
    STREAM_AUDIO,
    STREAM_FACES,
    STREAM_LABELS,
    ASD_SAMPLE_RATE,
    KIND_ASD,
)
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.timebase import SAMPLES_PER_MODEL_FRAME, model_frame_count


#: Uniform draws each training row takes from its generator (a fixed count keeps rows independent of each other's
#: choices): mix or not, donor, donor start, SNR; the visual draw follows, then the substitution's draws.
_AUDIO_DRAWS = 4
#: Substitute or not, donor, donor start: drawn after the others, so adding them changed no earlier stream.
_SUBSTITUTE_DRAWS = 3


class AsdBatchBuilder(BatchBuilder):
    """Builds collated ASD batches from planned unit ids (chunks in train, tracks otherwise).  Holds numpy columns
    and the opened packs only (cheap to fork)."""

    def __init__(self, packs: list[Pack], tracks: TrackIndex, args: AsdArgs, state: str, seed: int):
        self.packs = packs
        self.tracks = tracks
        self.asd_args = args
        self.args = args.plan_args(state)
        self.state = state
        self.seed = seed
        self.train = state == "train"
        self.train_windows: TrainWindows | None = None
        if self.train and args.train_window is not None and len(tracks):
            self.train_windows = muvap_windows(tracks.model_frames, args.train_window, args.hist_frames)
        # Per-track normalisation from the packs' whole-recording statistics (``loader.samples.normalization``,
        # under the normaliser chosen once): the float64 gain and the float32 ``mean * gain`` subtracted.
        self.gain = np.ones(len(tracks), dtype=np.float64)
        self.shift = np.zeros(len(tracks), dtype=np.float32)
        chosen = normalizer(args.normalize)
        for pack_id, pack in enumerate(packs):
            mine = np.flatnonzero(tracks.pack == pack_id)
            table = pack.streams[STREAM_AUDIO]
            segments = tracks.audio_segment[mine]
            gain, shift = normalization(chosen, lambda name: getattr(table, name)[segments])
            if gain is not None:
                self.gain[mine] = gain
            if shift is not None:
                self.shift[mine] = shift
        self.mixing = self.train and args.audio_mix_prob > 0
        self.substituting = self.train and args.substitute_audio_prob > 0
        self.donors = DonorIndex(tracks.clip) if self.mixing or self.substituting else None
        if self.donors is not None and self.donors.num_clips < 2:
            key, value = (("audio_mix_prob", args.audio_mix_prob) if self.mixing
                          else ("substitute_audio_prob", args.substitute_audio_prob))
            raise AugmentError(f"dataset_args.{key}: {value} needs tracks from at least two clips (the other voice "
                               f"comes from a different clip); these packs have {self.donors.num_clips}: set "
                               f"{key}: 0")
        #: MuVAP's jitter: the chunks move every epoch, so their lengths do too (``unit_lengths(epoch)``).
        self.lengths_by_epoch = self.train_windows is not None and args.jitter
        self._epoch_windows: tuple[int, TrainWindows] | None = None

    # -- what the planner needs ----------------------------------------------------------------------------

    @property
    def units(self) -> PlanUnits:
        """Tracks, or training chunks (``train_window``), whose lengths move every epoch with ``jitter``."""
        windows = self.train_windows
        return PlanUnits(count=len(self.tracks) if windows is None else len(windows), lengths=self.unit_lengths,
                         lengths_by_epoch=self.lengths_by_epoch, train_windows=windows, samples=self.unit_samples)

    def dry_run(self) -> DryRunView:
        """Training batches are cut to their shortest row (the model has no padding mask); ``speechpack plan``
        measures utilisation accordingly."""
        return DryRunView(crops_to_shortest=self.train)

    def unit_samples(self) -> tuple[np.ndarray, np.ndarray]:
        return index_samples(self.tracks.pack, self.tracks.sample, self.train_windows)

    def unit_lengths(self, epoch: int | None = None) -> np.ndarray:
        """Fed model frames per unit: the chunk with its history (train; with ``jitter``, as moved in ``epoch``,
        which is then required), or the whole track."""
        if self.train_windows is None:
            return self.tracks.model_frames.copy()
        return self.windows_of(epoch).fed_length

    def windows_of(self, epoch: int | None) -> TrainWindows:
        """The training chunks of ``epoch``: ``train_windows``, or with ``jitter`` their moved copy (cached per
        epoch)."""
        if not self.lengths_by_epoch:
            return self.train_windows
        if epoch is None:
            raise ValueError("with jitter the chunks change every epoch: pass the epoch")
        if self._epoch_windows is None or self._epoch_windows[0] != epoch:
            moved = jitter_windows(self.train_windows, self.tracks.model_frames, self.asd_args.hist_frames, self.seed, epoch)
            self._epoch_windows = (epoch, moved)
        return self._epoch_windows[1]

    # -- reading -------------------------------------------------------------------------------------------

    def _read_audio(self, track: int, start: int, out: np.ndarray) -> None:
        """Samples ``[start, start + len(out))`` of the track's audio into ``out``, normalised, zero past the stored
        audio (``loader.samples.read_window``)."""
        read_window(out, self.packs[int(self.tracks.pack[track])], STREAM_AUDIO, int(self.tracks.audio_segment[track]),
                    start, float(self.gain[track]), float(self.shift[track]))

    def _audio_length(self, track: int) -> int:
        """Stored samples of the track's audio."""
        pack = self.packs[int(self.tracks.pack[track])]
        return int(pack.streams[STREAM_AUDIO].length[int(self.tracks.audio_segment[track])])

    def _will_need(self, track: int, start: int, length: int) -> None:
        """Ask the kernel for exactly the rows and samples ``_fill_row`` will copy (on a cold page cache, plain mmap
        readahead reads several times more; see ``Pack.will_need``)."""
        if length <= 0:
            return
        pack = self.packs[int(self.tracks.pack[track])]
        index = source_frame_index(start, start + length, int(self.tracks.source_frames[track]),
                                   float(self.tracks.source_fps[track]))
        first, stop = int(index[0]), int(index[-1]) + 1
        pack.will_need(STREAM_FACES, int(self.tracks.faces_segment[track]), first, stop)
        pack.will_need(STREAM_LABELS, int(self.tracks.labels_segment[track]), first, stop)
        pack.will_need(STREAM_AUDIO, int(self.tracks.audio_segment[track]), start * SAMPLES_PER_MODEL_FRAME,
                       (start + length) * SAMPLES_PER_MODEL_FRAME)

    def _fill_row(self, track: int, start: int, length: int, audio: np.ndarray, faces: np.ndarray,
                  labels: np.ndarray) -> None:
        """Model frames ``[start, start + length)`` of ``track`` into the row's first ``length`` frames."""
        pack = self.packs[int(self.tracks.pack[track])]
        index = source_frame_index(start, start + length, int(self.tracks.source_frames[track]),
                                   float(self.tracks.source_fps[track]))
        face_rows = pack.read_rows(STREAM_FACES, int(self.tracks.faces_segment[track]))
        np.take(face_rows, index, axis=0, out=faces[:length])
        label_rows = pack.read_rows(STREAM_LABELS, int(self.tracks.labels_segment[track]))
        np.take(label_rows, index, out=labels[:length])
        self._read_audio(track, start * SAMPLES_PER_MODEL_FRAME, audio[:length * SAMPLES_PER_MODEL_FRAME])

    # -- the batch -----------------------------------------------------------------------------------------

    def build(self, unit_ids: np.ndarray, valid: np.ndarray, epoch: int, global_batch: int,
              arrays: BatchArrays = NUMPY) -> dict:
        """Collated numpy arrays and lists for one batch (see the module docstring for the fields)."""
        unit_ids = np.asarray(unit_ids, dtype=np.int64)
        if self.train_windows is not None:
            windows = self.windows_of(epoch)
            tracks = windows.item[unit_ids]
            fed_start = windows.fed_start[unit_ids]
            scored_from = windows.start[unit_ids] - fed_start
            fed_len = windows.stop[unit_ids] - fed_start
        else:
            tracks = unit_ids
            fed_start = np.zeros(len(unit_ids), dtype=np.int64)
            scored_from = np.zeros(len(unit_ids), dtype=np.int64)
            fed_len = self.tracks.model_frames[unit_ids]
        rows = len(unit_ids)
        # Train crops to the shortest row (no padding mask in the model); val/test pads to the longest.
        width = int(fed_len.min() if self.train else fed_len.max()) if rows else 0
        # The outputs, in the worker's shared-memory slot when the loader gives one (``arrays``).
        audio = arrays.empty((rows, 1, width * SAMPLES_PER_MODEL_FRAME), np.float32)
        faces = arrays.empty((rows, width, *FACE_SHAPE), np.uint8)
        labels = arrays.empty((rows, width), np.uint8)
        scored = arrays.zeros((rows, width), bool)
        for r in range(rows):  # every read of the batch is requested before the first copy waits on the disk
            self._will_need(int(tracks[r]), int(fed_start[r]), min(int(fed_len[r]), width))
        for r in range(rows):
            track, take = int(tracks[r]), min(int(fed_len[r]), width)
            self._fill_row(track, int(fed_start[r]), take, audio[r, 0], faces[r], labels[r])
            faces[r, take:] = 0  # padding (val/test): zero, and never scored
            labels[r, take:] = 0
            audio[r, 0, take * SAMPLES_PER_MODEL_FRAME:] = 0.0
            if valid[r]:
                scored[r, int(scored_from[r]):take] = True
            if self.train:
                self._augment(r, track, audio[r, 0, :take * SAMPLES_PER_MODEL_FRAME], faces[r, :take],
                              labels[r, :take], item_rng(self.seed, epoch, global_batch, r))
        return {
            "audio": audio,
            "faces": faces,
            "labels": labels,
            "scored": scored,
            "key": [str(self.packs[int(self.tracks.pack[t])].keys[int(self.tracks.sample[t])]) for t in tracks],
            "model_frames": self.tracks.model_frames[tracks].astype(np.int64),
            "start": fed_start.astype(np.int64),
            "source_frames": self.tracks.source_frames[tracks].astype(np.int64),
            "source_fps": self.tracks.source_fps[tracks].astype(np.float64),
            "valid": np.asarray(valid, dtype=bool).copy(),
        }

    def _donor_audio(self, track: int, length: int, u_donor: float, u_start: float) -> np.ndarray:
        """``length`` normalised samples of a donor track from a clip other than ``track``'s (own gain and mean)."""
        donor = self.donors.draw(track, u_donor)
        available = self._audio_length(donor)
        if available >= length:  # the window fit_donor cuts, read alone
            donor_audio = np.empty(length, dtype=np.float32)
            self._read_audio(donor, donor_start(available, length, u_start), donor_audio)
            return donor_audio
        whole = np.empty(available, dtype=np.float32)  # shorter than the row: tiled (elementwise decoding commutes)
        self._read_audio(donor, 0, whole)
        return fit_donor(whole, length, u_start)

    def _augment(self, r: int, track: int, audio: np.ndarray, faces: np.ndarray, labels: np.ndarray,
                 rng: np.random.Generator) -> None:
        """One training row's augmentation (``loader.asd.augment``), all draws from the row's own generator.

        Substitution (``substitute_audio_prob``) comes first: the row's audio becomes another clip's voice and its
        labels 0 (the face is not saying what is heard: a negative the model can only get right by looking);
        the mix may then add a second voice to it as to any row."""
        u = rng.random(_AUDIO_DRAWS)
        visual = draw_visual(rng)
        s = rng.random(_SUBSTITUTE_DRAWS) if self.substituting else None
        args = self.asd_args
        if s is not None and s[0] < args.substitute_audio_prob:
            audio[...] = self._donor_audio(track, len(audio), float(s[1]), float(s[2]))
            labels[...] = 0
        if self.mixing and u[0] < args.audio_mix_prob:
            donor_audio = self._donor_audio(track, len(audio), float(u[1]), float(u[2]))
            snr = args.audio_mix_snr[0] + float(u[3]) * (args.audio_mix_snr[1] - args.audio_mix_snr[0])
            mix_at_snr(audio, donor_audio, snr)
        if args.visual_aug:
            apply_visual(faces, visual)


#: ``filter_report`` reason of the tracks too short for a single 25 Hz frame (one frame at 30 fps).
ZERO_MODEL_FRAMES = "zero_model_frames"
#: Keys named in the warning about such tracks (the count is always complete).
_KEYS_SHOWN = 5


def prepare(config, state: str, packs: list[Pack], seed: int) -> Prepared:
    """The builder for ``state`` over every track with at least one model frame; the others are counted under
    ``zero_model_frames`` in ``filter_report`` and named in a warning (they cannot be fed, so a native-rate
    evaluation must treat them as unscored)."""
    args: AsdArgs = config.dataset_args
    tracks, empty = asd_tracks(packs)
    if len(empty):
        keys = [str(packs[int(p)].keys[int(s)]) for p, s in zip(empty.pack[:_KEYS_SHOWN], empty.sample[:_KEYS_SHOWN])]
        warnings.warn(f"{len(empty)} ASD track(s) have no 25 Hz model frame and are not loaded "
                      f"({', '.join(keys)}{', ...' if len(empty) > _KEYS_SHOWN else ''}); see "
                      f"report().filter_report['{ZERO_MODEL_FRAMES}']", stacklevel=2)
    builder = AsdBatchBuilder(packs, tracks, args, state, seed)
    return Prepared(builder=builder, item_pack=tracks.pack.astype(int), filtered=len(empty),
                    filter_report={ZERO_MODEL_FRAMES: len(empty)})


class AsdTask(LoaderTask):
    """``task: asd`` (``loader.tasks.LoaderTask``)."""

    name = "asd"

    def parse_dataset_args(self, obj, where: str) -> AsdArgs:
        return parse_dataset_args(obj, where)

    def prepare(self, config, state: str, packs: list, seed: int) -> Prepared:
        return prepare(config, state, packs, seed)

    def fingerprint_args(self, args: dict) -> dict:
        """What each key's declaration says the fingerprint hashes (``loader.asd.args.DATASET_ARGS``)."""
        return DATASET_ARGS.fingerprint(args)


TASK = AsdTask()


@dataclass(frozen=True)
class TrackIndex:
    """Parallel arrays, one row per track: where it lives and its timeline.  ``clip`` is a code unique per
    (pack, clip attribute), so tracks of equally named clips of two packs never count as one clip."""

    pack: np.ndarray
    sample: np.ndarray
    source_frames: np.ndarray
    source_fps: np.ndarray
    model_frames: np.ndarray
    clip: np.ndarray
    audio_segment: np.ndarray
    faces_segment: np.ndarray
    labels_segment: np.ndarray

    def __len__(self) -> int:
        return len(self.pack)

    def subset(self, keep: np.ndarray) -> "TrackIndex":
        return TrackIndex(**{name: getattr(self, name)[keep] for name in self.__dataclass_fields__})


def check_asd_packs(packs: list[Pack]) -> None:
    """Every pack is an asd pack at 16 kHz with the face geometry this code was built for."""
    for pack in packs:
        if pack.kind != KIND_ASD:
            raise SpeechpackError(f"{pack.path}: task asd reads asd packs; this one is {pack.kind}")
        if pack.sample_rate != ASD_SAMPLE_RATE:
            raise SpeechpackError(f"{pack.path}: asd packs are {ASD_SAMPLE_RATE} Hz, this one is {pack.sample_rate}")
        faces = pack.manifest.stream(STREAM_FACES)
        if tuple(faces.row_shape) != FACE_SHAPE:
            raise SpeechpackError(f"{pack.path}: faces are {list(faces.row_shape)}, this loader reads "
                                  f"{list(FACE_SHAPE)} (re-pack at that size)")


def asd_tracks(packs: list[Pack]) -> tuple[TrackIndex, TrackIndex]:
    """(tracks with model frames, tracks without any), in pack order then storage order."""
    check_asd_packs(packs)
    columns: dict[str, list[np.ndarray]] = {name: [] for name in TrackIndex.__dataclass_fields__}
    clip_base = 0
    for pack_id, pack in enumerate(packs):
        n = len(pack)
        faces = pack.streams[STREAM_FACES]
        labels = pack.streams[STREAM_LABELS]
        audio = pack.streams[STREAM_AUDIO]
        for name, table in ((STREAM_FACES, faces), (STREAM_LABELS, labels), (STREAM_AUDIO, audio)):
            if n and np.any(np.asarray(table.count) != 1):
                raise SpeechpackError(f"{pack.path}: every asd track has one {name} segment")
        frames = np.asarray(faces.length, dtype=np.int64)[faces.first]
        fps = np.asarray(pack.attrs["source_fps"], dtype=np.float64)
        _names, clip = np.unique(np.asarray(pack.attrs["clip"].raw), return_inverse=True)
        columns["pack"].append(np.full(n, pack_id, dtype=np.int32))
        columns["sample"].append(np.arange(n, dtype=np.int64))
        columns["source_frames"].append(frames)
        columns["source_fps"].append(fps)
        columns["model_frames"].append(model_frame_count(frames, fps) if n else np.zeros(0, np.int64))
        columns["clip"].append(clip.astype(np.int64) + clip_base)
        columns["audio_segment"].append(np.asarray(audio.first, dtype=np.int64))
        columns["faces_segment"].append(np.asarray(faces.first, dtype=np.int64))
        columns["labels_segment"].append(np.asarray(labels.first, dtype=np.int64))
        clip_base += len(_names)
    tracks = TrackIndex(**{name: np.concatenate(parts) for name, parts in columns.items()})
    has_frames = tracks.model_frames > 0
    return tracks.subset(has_frames), tracks.subset(~has_frames)


__all__ = ["AsdBatchBuilder", "AsdTask", "TASK", "TrackIndex", "ZERO_MODEL_FRAMES", "asd_tracks", "check_asd_packs",
           "parse_dataset_args", "prepare"]
