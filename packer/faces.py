"""Face crops for ``asd`` packs: every face becomes a grayscale uint8 ``FACE_SHAPE`` image, with OpenCV.

Three inputs give faces:

- a directory of JPEG crops (AVA, WASD, AVCC): one file per native frame named by its timestamp in seconds
  (``902.04.jpg``), ordered by ``float(stem)`` -- a string sort would put ``10.0`` before ``9.96``;
- an ``.npy`` array (AVCC): uint8 ``[T, H, W]`` grayscale crops.  Any ``H x W`` is resized like a JPEG (corpora cut
  crops at 96, 112 or 224 pixels), but the dtype must be uint8: float faces may be scaled to [0, 1] or to
  [0, 255], and guessing wrong would silently wreck a corpus, so they are refused;
- a video frame and a face box (MSDWild): a grey-padded square around the box (:func:`crop_square`).

Resizing uses ``INTER_AREA`` when an image shrinks in both directions: it averages every source pixel under each
output pixel, where bilinear sampling would skip pixels and alias (a 224-pixel crop has twice the detail the
112-pixel face can hold).  Anything else grows in at least one direction and uses ``INTER_LINEAR``: ``INTER_AREA``
degenerates to near-nearest-neighbour blocks when enlarging, bilinear interpolation stays smooth.

Errors are :class:`FaceError`, a kind of ``packer.audio.AudioError`` (a file that cannot be used, and why), so the
build reports a bad face file with its line and key like a bad audio file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import cv2
import numpy as np

from speechpack.packer.audio.decode import AudioError, path_problem
from speechpack.schemas.constants import FACE_SHAPE
from speechpack.schemas.errors import NpyHeaderError
from speechpack.schemas.npyfile import read_npy_header

#: The grey of a face that is not there: MSDWild frames without a detection, and the padding of a crop square
#: that reaches past the frame edge (mid-grey carries no edge for a face model to latch onto).
PAD_GREY = 128
#: File name extensions of JPEG face crops (compared lower-case).
JPEG_EXTENSIONS = (".jpg", ".jpeg")


class FaceError(AudioError):
    """A face file or directory could not be used; ``path`` names it, ``reason`` says why."""


def grey_face() -> np.ndarray:
    """The face of a frame without a detection: uniform :data:`PAD_GREY`."""
    return np.full(FACE_SHAPE, PAD_GREY, dtype=np.uint8)


def resize_face(image: np.ndarray) -> np.ndarray:
    """One grayscale uint8 image ``[H, W]`` as a ``FACE_SHAPE`` face (a copy, even when no resize is needed)."""
    height, width = image.shape
    target_height, target_width = FACE_SHAPE
    if (height, width) == FACE_SHAPE:
        return np.array(image, dtype=np.uint8, copy=True)
    shrinking = height >= target_height and width >= target_width
    interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR
    return cv2.resize(np.ascontiguousarray(image), (target_width, target_height), interpolation=interpolation)


# ---------------------------------------------------------------------------------------------------------------
# JPEG directories
# ---------------------------------------------------------------------------------------------------------------


def jpeg_frames(directory: str) -> list[str]:
    """The JPEG crops of ``directory`` in time order (``float(stem)``); raise :class:`FaceError` for a missing or
    empty directory, a stem that is not a number, or two files with the same timestamp."""
    if not os.path.isdir(directory):
        raise FaceError(directory, "face directory not found" if not os.path.exists(directory)
                        else "not a directory (expected a directory of JPEG face crops)")
    timed: list[tuple[float, str]] = []
    for name in os.listdir(directory):
        stem, extension = os.path.splitext(name)
        if extension.lower() not in JPEG_EXTENSIONS:
            continue
        try:
            timestamp = float(stem)
        except ValueError:
            raise FaceError(os.path.join(directory, name),
                            "a face crop must be named by its timestamp in seconds (like 902.04.jpg)") from None
        timed.append((timestamp, name))
    if not timed:
        raise FaceError(directory, "no JPEG face crops (*.jpg) in the face directory")
    timed.sort()
    for (previous, first), (current, second) in zip(timed, timed[1:]):
        if previous == current:
            raise FaceError(os.path.join(directory, second), f"same timestamp as {first}: two crops of one frame")
    return [os.path.join(directory, name) for _timestamp, name in timed]


def read_jpeg_faces(directory: str) -> np.ndarray:
    """Every crop of ``directory``, in time order, as uint8 ``[T, *FACE_SHAPE]``."""
    paths = jpeg_frames(directory)
    faces = np.empty((len(paths), *FACE_SHAPE), dtype=np.uint8)
    for row, path in enumerate(paths):
        image = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
        if image is None or image.size == 0:
            raise FaceError(path, "cannot decode the JPEG face crop")
        faces[row] = resize_face(image)
    return faces


# ---------------------------------------------------------------------------------------------------------------
# .npy arrays
# ---------------------------------------------------------------------------------------------------------------


def npy_face_count(path: str) -> int:
    """Frames of an ``.npy`` face array, from its header only; raise :class:`FaceError` unless it is uint8
    ``[T, H, W]`` with ``T, H, W > 0`` (see the module docstring for why other dtypes are refused)."""
    problem = path_problem(path)
    if problem is not None:
        raise FaceError(path, f"face array {problem}")
    try:
        header = read_npy_header(path)
    except NpyHeaderError as err:
        raise FaceError(path, f"unreadable .npy header ({err.reason})") from None
    if header.dtype != np.uint8 or len(header.shape) != 3 or min(header.shape) == 0:
        raise FaceError(path, f"faces must be uint8 [frames, height, width] grayscale, got {header.dtype} "
                              f"{list(header.shape)}")
    if os.path.getsize(path) < header.expected_size:
        raise FaceError(path, f"truncated .npy file ({os.path.getsize(path)} bytes, the header promises "
                              f"{header.expected_size})")
    return header.shape[0]


def read_npy_faces(path: str) -> np.ndarray:
    """An ``.npy`` face array as uint8 ``[T, *FACE_SHAPE]`` (resized when stored at another size)."""
    npy_face_count(path)
    stored = np.load(path, mmap_mode="r", allow_pickle=False)
    if tuple(stored.shape[1:]) == FACE_SHAPE:
        return np.ascontiguousarray(stored)
    return np.stack([resize_face(frame) for frame in stored])


# ---------------------------------------------------------------------------------------------------------------
# Video frame + box (MSDWild)
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Box:
    """A face box in pixels: top-left corner and size (floats: trackers write sub-pixel boxes)."""

    x: float
    y: float
    width: float
    height: float


def crop_square(frame: np.ndarray, box: Box | None) -> np.ndarray:
    """MSDWild's face crop: the square of side ``max(width, height)`` centred on the box, cut from a grayscale
    ``frame`` ``[H, W]`` with :data:`PAD_GREY` wherever it reaches past the frame, resized to ``FACE_SHAPE``.
    A square keeps the face's aspect ratio (the resize would otherwise stretch it); ``box=None`` (no detection in
    this frame) gives :func:`grey_face`."""
    if box is None:
        return grey_face()
    side = max(1, int(round(max(box.width, box.height))))
    left = int(round(box.x + box.width / 2 - side / 2))
    top = int(round(box.y + box.height / 2 - side / 2))
    square = np.full((side, side), PAD_GREY, dtype=np.uint8)
    frame_height, frame_width = frame.shape
    x0, y0 = max(left, 0), max(top, 0)
    x1, y1 = min(left + side, frame_width), min(top + side, frame_height)
    if x0 < x1 and y0 < y1:
        square[y0 - top:y1 - top, x0 - left:x1 - left] = frame[y0:y1, x0:x1]
    return resize_face(square)
