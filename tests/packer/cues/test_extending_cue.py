"""A new cue representation through the documented points only (docs/extending.md, "Adding a cue
representation"): a row in ``schemas.cue_banks.REPRESENTATION_SPECS``, a writer in ``packer.cues.banks.WRITERS`` and
a read function in ``loader.pack.cues.READERS``, nothing else.  A tiny corpus of real speech is packed with it,
validated (the row's payload check included), read back, and served in a batch as read (no batch-time value
registered).

The toy: ``txt/toy_contour``, an audio cue given as a text file of numbers (say, an enrollment's energy contour),
stored as float32 series.  Each registry gets its entry with ``monkeypatch`` (the build runs in this process:
``workers`` 1), which undoes it after the test.
"""

from __future__ import annotations

import numpy as np
import torch

from factories import Mix
from factories.cue_split import build_with_cues, write_json
from speechpack.loader import build_loader, open_pack
from speechpack.loader.pack.cues import READERS
from speechpack.packer.cues.banks import WRITERS
from speechpack.packer.cues.payload import FlatWriter, LoadContext
from speechpack.packer.cues.resource import CueInputError, ItemSource
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.cue_banks import ITEMS_NAME, REPRESENTATION_SPECS, RepresentationSpec, outside


def check_toy(at, meta, arrays, data_shape):
    """The row's payload check: every series inside ``data.npy``."""
    items = arrays[ITEMS_NAME]
    if (items["length"] < 1).any() or outside(items["offset"], items["length"], int(np.prod(data_shape))).any():
        return [(at[ITEMS_NAME], "a contour falls outside data.npy")]
    return []


TOY_ROW = RepresentationSpec("txt", "toy_contour", cues=("audio",), payload_check=check_toy,
                             item_dtype=np.dtype([("offset", "<i8"), ("length", "<i8")]),
                             payload_dtype=np.dtype("<f4"))


class ToyContourWriter(FlatWriter):
    """The writer: ``parse_entry`` and ``provenance`` are CueWriter's defaults (a ``path``, an optional
    ``utt_id``)."""

    representation = "toy_contour"

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> np.ndarray:
        try:
            with open(source.path, encoding="utf-8") as fp:
                values = np.array([float(word) for word in fp.read().split()], dtype=np.float32)
        except ValueError as err:
            raise CueInputError(f"not a list of numbers ({err})") from None
        if not len(values):
            raise CueInputError("an empty contour")
        return values

    def add(self, source: ItemSource, loaded: np.ndarray) -> None:
        self.rows.append((self.append(loaded), len(loaded)))


def read_toy_contour(bank, item: int, data: np.ndarray) -> np.ndarray:
    """The read function: float32 ``[T]``, a copy."""
    offset, length = int(bank.field("offset", item)), int(bank.field("length", item))
    return np.array(data[offset:offset + length])


def test_a_toy_representation_packs_validates_and_reads_back(monkeypatch, tmp_path, wesep_list, real_audio):
    monkeypatch.setitem(REPRESENTATION_SPECS, "toy_contour", TOY_ROW)
    monkeypatch.setitem(WRITERS, "toy_contour", ToyContourWriter)
    monkeypatch.setitem(READERS, "toy_contour", read_toy_contour)

    a, b, c = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("m1", (a, b)), Mix("m2", (b, c))])
    contours = {}
    resource = {}
    for line in case.lines:
        for n, speaker in enumerate(line.speakers):
            key = f"{line.key}::{speaker}"
            contours[key] = np.round(np.linspace(0.5, 2.0, 40 + 10 * n), 3).astype(np.float32)
            path = tmp_path / f"{line.key}-{n}.txt"
            path.write_text(" ".join(str(v) for v in contours[key]), encoding="utf-8")
            resource[key] = [{"utt_id": f"{line.key}-{n}", "path": str(path)}]
    write_json(tmp_path / "toy.json", resource)
    cues = tmp_path / "cues.yaml"
    cues.write_text(f"cues:\n  audio: {{type: txt, format: toy_contour, "
                    f"policy: {{type: fixed, key: mix_spk_id, resource: {tmp_path}/toy.json}}}}\n")
    out = tmp_path / "pack"
    build_with_cues(case, out, cues, workers=1)

    assert validate_pack(str(out)).ok
    bank = open_pack(out).cues["audio"]
    assert bank.representation == "toy_contour" and bank.num_items == len(contours)
    for key, contour in contours.items():
        (entry,) = bank.find(key)
        np.testing.assert_array_equal(bank.read(bank.entry_item(entry)), contour)

    loader = build_loader({"packs": [{"path": str(out)}], "dataset_args": {
        "batch_size": 4, "shuffle": False, "cues": {"audio": {"use": True}}}}, "val", num_workers=0)
    batch = next(iter(loader))
    shortest = min(len(c) for c in contours.values())
    assert batch["audio_aux"].dtype == torch.float32 and batch["audio_aux_present"].all()
    for row, (key, speaker) in enumerate(zip(batch["key"], batch["spk"])):
        np.testing.assert_array_equal(batch["audio_aux"][row].numpy(), contours[f"{key}::{speaker}"][:shortest])

    # the row's payload check runs in validate and open_pack: a series moved past the end of data.npy
    items = np.load(out / "cues" / "audio" / ITEMS_NAME)
    items["offset"][0] = 10 ** 6
    np.save(out / "cues" / "audio" / ITEMS_NAME, items)
    assert any("a contour falls outside data.npy" in str(error) for error in validate_pack(str(out)).errors)
