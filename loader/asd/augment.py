"""Training augmentation of ASD chunks (MuVAP's; docs/asd.md, "Normalisation and augmentation"), as pure functions.

- Audio: with probability ``audio_mix_prob`` a second voice is added: a donor track from a *different clip*
  (WASD's face tracks of one clip share one clip-level WAV, so a donor from the same clip would be the same
  voices), normalised by its own statistics, cut (or tiled) to the chunk's length from a random start, and mixed at
  an SNR drawn uniformly from ``audio_mix_snr`` dB; the sum is clipped to [-1, 1].  The labels are kept: the face's
  own speech is still there.
- Visual: one of {orig, flip, crop, rotate}, the same for every frame of a chunk (a per-frame draw would make the
  face jitter, which a real track never does): horizontal flip; a square crop of 0.7-1 of the side, resized back
  with OpenCV; a rotation of up to +-15 degrees about the centre.  Faces stay uint8.

Every draw comes from the generator the caller passes (``loader.rng.item_rng``: one per item of a batch), never
from global random state, so a batch is the same whichever worker builds it.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from speechpack.schemas.errors import SpeechpackError

VISUAL_AUGMENTS = ("orig", "flip", "crop", "rotate")
#: Side of the crop as a fraction of the face's side (MuVAP's range).
CROP_SCALE = (0.7, 1.0)
#: Largest rotation, degrees, either way (MuVAP's).
ROTATE_DEGREES = 15.0
#: Signal powers below this count as this much when setting an SNR (MuVAP's floor): a silent chunk or donor never
#: turns the donor's scale infinite.
SNR_POWER_FLOOR = 1e-4
#: Frames rotated per OpenCV call, as the channels of one image (see ``_framewise``).
_ROTATE_GROUP = 4


class AugmentError(SpeechpackError):
    """An augmentation cannot be applied as configured (no donor from another clip)."""


@dataclass(frozen=True)
class VisualDraw:
    """One chunk's visual augmentation: ``kind`` and its parameters (crop: side fraction and corner in [0, 1]
    of the free range; rotate: angle in degrees)."""

    kind: str
    scale: float = 1.0
    corner: tuple[float, float] = (0.0, 0.0)
    angle: float = 0.0


def draw_visual(rng: np.random.Generator) -> VisualDraw:
    """A uniform choice of ``VISUAL_AUGMENTS`` and its parameters (always the same number of draws)."""
    u = rng.random(4)
    kind = VISUAL_AUGMENTS[min(int(u[0] * len(VISUAL_AUGMENTS)), len(VISUAL_AUGMENTS) - 1)]
    scale = CROP_SCALE[0] + u[1] * (CROP_SCALE[1] - CROP_SCALE[0])
    angle = (2.0 * u[1] - 1.0) * ROTATE_DEGREES
    if kind == "crop":
        return VisualDraw(kind, scale=float(scale), corner=(float(u[2]), float(u[3])))
    if kind == "rotate":
        return VisualDraw(kind, angle=float(angle))
    return VisualDraw(kind)


def apply_visual(faces: np.ndarray, draw: VisualDraw) -> None:
    """Apply ``draw`` to every frame of ``faces`` (uint8 ``[T, H, W]``), in place."""
    if draw.kind == "orig" or not len(faces):
        return
    if draw.kind == "flip":
        faces[...] = faces[:, :, ::-1]
        return
    height, width = faces.shape[1:]
    if draw.kind == "crop":
        side_h, side_w = max(1, int(round(height * draw.scale))), max(1, int(round(width * draw.scale)))
        top = int(draw.corner[0] * (height - side_h + 1)) if side_h < height else 0
        left = int(draw.corner[1] * (width - side_w + 1)) if side_w < width else 0
        top, left = min(top, height - side_h), min(left, width - side_w)
        _framewise(faces, lambda image: cv2.resize(image[top:top + side_h, left:left + side_w], (width, height),
                                                    interpolation=cv2.INTER_LINEAR))
        return
    if draw.kind == "rotate":
        matrix = cv2.getRotationMatrix2D(((width - 1) / 2.0, (height - 1) / 2.0), draw.angle, 1.0)
        _framewise(faces, lambda image: cv2.warpAffine(image, matrix, (width, height), flags=cv2.INTER_LINEAR,
                                                        borderMode=cv2.BORDER_REFLECT_101), group=_ROTATE_GROUP)
        return
    raise AugmentError(f"unknown visual augmentation {draw.kind!r} (known: {', '.join(VISUAL_AUGMENTS)})")


def _framewise(faces: np.ndarray, op, group: int = 1) -> None:
    """``faces[t] = op(faces[t])`` for every frame, in place.  With ``group > 1`` that many frames go through one
    OpenCV call as the channels of one image (channels are transformed independently, so the result is the same):
    measured on 112x112 frames, 4-channel groups make a rotation about 2x faster, while a crop's resize is faster
    frame by frame (the transposes cost more than they save)."""
    if group <= 1:
        for frame in faces:
            frame[...] = op(frame)
        return
    for lo in range(0, len(faces), group):
        frames = faces[lo:lo + group]
        out = op(np.ascontiguousarray(frames.transpose(1, 2, 0)))
        frames[...] = out.reshape(*out.shape[:2], -1).transpose(2, 0, 1)


class DonorIndex:
    """Tracks grouped by clip, to draw a donor from any clip but the recipient's in O(1).

    ``clip_code[t]`` is track ``t``'s clip; tracks are ordered clip by clip so clip ``c`` is the block
    ``order[first[c]:first[c] + count[c]]``, and a uniform draw over the others skips that block.
    """

    def __init__(self, clips: np.ndarray):
        names, code = np.unique(np.asarray(clips), return_inverse=True)
        self.clip_code = code.astype(np.int64)
        self.order = np.argsort(self.clip_code, kind="stable").astype(np.int64)
        self.count = np.bincount(self.clip_code, minlength=len(names)).astype(np.int64)
        self.first = (np.cumsum(self.count) - self.count).astype(np.int64)
        self.num_clips = len(names)

    def draw(self, track: int, u: float) -> int:
        """A donor track for ``track`` from ``u`` in [0, 1): uniform over the tracks of the other clips."""
        clip = int(self.clip_code[track])
        others = len(self.order) - int(self.count[clip])
        if others <= 0:
            raise AugmentError("audio_mix_prob > 0 needs tracks from at least two clips (a donor must come from a "
                               "different clip)")
        r = min(int(u * others), others - 1)
        if r >= self.first[clip]:
            r += int(self.count[clip])
        return int(self.order[r])


def fit_donor(donor: np.ndarray, length: int, u: float) -> np.ndarray:
    """``length`` samples of ``donor``: cut from a start drawn from ``u`` when it is long enough, else tiled."""
    if not len(donor):
        return np.zeros(length, dtype=np.float32)
    if len(donor) >= length:
        start = donor_start(len(donor), length, u)
        return donor[start:start + length]
    return np.resize(donor, length)


def donor_start(available: int, length: int, u: float) -> int:
    """Where ``fit_donor`` cuts ``length`` samples from a donor of ``available >= length``, drawn from ``u``."""
    return min(int(u * (available - length + 1)), available - length)


def mix_at_snr(speech: np.ndarray, donor: np.ndarray, snr_db: float) -> None:
    """``speech += donor`` scaled so that speech is ``snr_db`` above it (powers floored), clipped to [-1, 1];
    in place, float32."""
    speech_power = max(float(np.dot(speech, speech)) / max(len(speech), 1), SNR_POWER_FLOOR)
    donor_power = max(float(np.dot(donor, donor)) / max(len(donor), 1), SNR_POWER_FLOOR)
    scale = np.sqrt(speech_power / (donor_power * 10.0 ** (snr_db / 10.0)))
    speech += donor.astype(np.float32, copy=False) * np.float32(scale)
    np.clip(speech, -1.0, 1.0, out=speech)


__all__ = ["AugmentError", "CROP_SCALE", "DonorIndex", "ROTATE_DEGREES", "SNR_POWER_FLOOR", "VISUAL_AUGMENTS",
           "VisualDraw", "apply_visual", "donor_start", "draw_visual", "fit_donor", "mix_at_snr"]
