"""``packer.faces``: face crops from JPEG directories, ``.npy`` arrays and video frames + boxes, on real faces.

The faces are the man of kphotoalbum's talking-face movie, found by OpenCV's Haar cascade (``tests/asd_inputs.py``;
missing video or cascade: fails in CI, skips elsewhere).
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from factories.asd_inputs import AVA_TIME_OFFSET, load_movie
from speechpack.packer.faces import (
    PAD_GREY,
    Box,
    FaceError,
    crop_square,
    grey_face,
    jpeg_frames,
    npy_face_count,
    read_jpeg_faces,
    read_npy_faces,
    resize_face,
)
from speechpack.schemas.constants import FACE_SHAPE

pytestmark = pytest.mark.real_data


@pytest.fixture(scope="module")
def movie():
    return load_movie()


def _face(movie, frame: int, grow: int = 0) -> np.ndarray:
    """The grayscale detected face of ``frame`` (grown by ``grow`` pixels each side, within the frame)."""
    x, y, w, h = movie.boxes[frame]
    height, width = movie.gray.shape[1:]
    return movie.gray[frame, max(y - grow, 0):min(y + h + grow, height), max(x - grow, 0):min(x + w + grow, width)]


def test_the_real_video_has_a_face_in_every_frame(movie):
    assert movie.frames == 68 and movie.gray.shape[1:] == (120, 160)
    assert all(box is not None for box in movie.boxes)
    assert 0 < movie.labels.mean() < 1  # the man talks and pauses: both labels occur


def test_resize_shrinks_with_area_averaging_and_grows_bilinearly(movie):
    small = _face(movie, 10)  # ~65 px: grows to 112
    assert small.shape[0] < FACE_SHAPE[0]
    np.testing.assert_array_equal(resize_face(small), cv2.resize(small, FACE_SHAPE[::-1],
                                                                 interpolation=cv2.INTER_LINEAR))
    large = cv2.resize(movie.gray[10], (280, 210), interpolation=cv2.INTER_CUBIC)  # larger than 112 both ways
    np.testing.assert_array_equal(resize_face(large), cv2.resize(large, FACE_SHAPE[::-1], interpolation=cv2.INTER_AREA))
    # wider than 112 but shorter: grows in one direction, so bilinear
    mixed = movie.gray[10, :100, :]
    np.testing.assert_array_equal(resize_face(mixed), cv2.resize(mixed, FACE_SHAPE[::-1],
                                                                 interpolation=cv2.INTER_LINEAR))
    exact = np.ascontiguousarray(resize_face(small))
    again = resize_face(exact)
    np.testing.assert_array_equal(again, exact)
    assert again is not exact and again.dtype == np.uint8 and again.shape == FACE_SHAPE


def test_jpeg_directory_is_read_in_timestamp_order(movie, tmp_path):
    frames = range(0, 30)
    for frame in frames:  # timestamps 9.00 ... 10.93: a string sort would put 10.x before 9.x
        cv2.imwrite(str(tmp_path / f"{AVA_TIME_OFFSET + frame / movie.fps:.2f}.jpg"),
                    cv2.cvtColor(_face(movie, frame, grow=10), cv2.COLOR_GRAY2BGR))
    (tmp_path / "notes.txt").write_text("not a face")
    paths = jpeg_frames(str(tmp_path))
    stamps = [float(p.rsplit("/", 1)[1][:-4]) for p in paths]
    assert stamps == sorted(stamps) and len(paths) == 30 and stamps[0] < 10 < stamps[-1]
    faces = read_jpeg_faces(str(tmp_path))
    assert faces.dtype == np.uint8 and faces.shape == (30, *FACE_SHAPE)
    for row, path in enumerate(paths):
        np.testing.assert_array_equal(faces[row], resize_face(cv2.imread(path, cv2.IMREAD_GRAYSCALE)))
    # the crops follow the face: consecutive frames are alike, far frames less so
    assert np.abs(faces[0].astype(int) - faces[1]).mean() < np.abs(faces[0].astype(int) - faces[29]).mean() + 10


def test_bad_jpeg_directories_name_the_file(movie, tmp_path):
    with pytest.raises(FaceError, match="face directory not found"):
        jpeg_frames(str(tmp_path / "absent"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FaceError, match="no JPEG face crops"):
        jpeg_frames(str(empty))
    named = tmp_path / "named"
    named.mkdir()
    cv2.imwrite(str(named / "frame_0001.jpg"), _face(movie, 0))
    with pytest.raises(FaceError, match="named by its timestamp") as err:
        jpeg_frames(str(named))
    assert err.value.path.endswith("frame_0001.jpg")
    twice = tmp_path / "twice"
    twice.mkdir()
    cv2.imwrite(str(twice / "1.5.jpg"), _face(movie, 0))
    cv2.imwrite(str(twice / "1.50.jpg"), _face(movie, 1))
    with pytest.raises(FaceError, match="same timestamp"):
        jpeg_frames(str(twice))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "0.0.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(FaceError, match="cannot decode the JPEG"):
        read_jpeg_faces(str(broken))


def test_npy_faces_are_uint8_and_resized_when_stored_at_another_size(movie, tmp_path):
    crops = np.stack([cv2.resize(_face(movie, f), (96, 96), interpolation=cv2.INTER_AREA) for f in range(12)])
    path = tmp_path / "faces96.npy"
    np.save(path, crops)
    assert npy_face_count(str(path)) == 12
    faces = read_npy_faces(str(path))
    assert faces.shape == (12, *FACE_SHAPE)
    np.testing.assert_array_equal(faces[3], resize_face(crops[3]))
    exact = tmp_path / "faces112.npy"
    np.save(exact, faces)
    np.testing.assert_array_equal(read_npy_faces(str(exact)), faces)
    for name, array, reason in (("float.npy", crops.astype(np.float32) / 255, "must be uint8"),
                                ("colour.npy", np.stack([crops] * 3, axis=-1), "must be uint8"),
                                ("empty.npy", crops[:0], "must be uint8")):
        np.save(tmp_path / name, array)
        with pytest.raises(FaceError, match=reason):
            npy_face_count(str(tmp_path / name))
    truncated = tmp_path / "truncated.npy"
    truncated.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(FaceError, match="truncated"):
        npy_face_count(str(truncated))
    with pytest.raises(FaceError, match="not found"):
        npy_face_count(str(tmp_path / "absent.npy"))


def test_crop_square_centres_a_square_on_the_box(movie):
    frame = movie.gray[20]
    x, y, w, h = movie.boxes[20]
    box = Box(x, y, w, h + 10)  # taller than wide: the square's side is the height
    side = h + 10
    left, top = int(round(x + w / 2 - side / 2)), int(round(y + (h + 10) / 2 - side / 2))
    expected = resize_face(frame[top:top + side, left:left + side])
    np.testing.assert_array_equal(crop_square(frame, box), expected)


def test_crop_square_pads_grey_past_the_frame_edge_and_greys_a_missing_face(movie):
    frame = movie.gray[20]
    corner = crop_square(frame, Box(-40.0, -40.0, 80.0, 80.0))  # three quarters outside the frame
    assert corner.shape == FACE_SHAPE
    assert (corner[:50, :50] == PAD_GREY).all()  # the outside part is grey
    np.testing.assert_array_equal(corner[60:, 60:], resize_face(
        np.pad(frame[:40, :40], ((40, 0), (40, 0)), constant_values=PAD_GREY))[60:, 60:])
    np.testing.assert_array_equal(crop_square(frame, None), grey_face())
    assert (grey_face() == PAD_GREY).all() and grey_face().shape == FACE_SHAPE
    outside = crop_square(frame, Box(500.0, 500.0, 30.0, 30.0))
    np.testing.assert_array_equal(outside, grey_face())
