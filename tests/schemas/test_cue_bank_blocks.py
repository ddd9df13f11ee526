"""The checks of a compressed waveform bank (schemas/cue_banks.py, "Compressed enrollment audio"), on arrays made
here: ``meta.json``'s codec keys, and block sizes against the items' lengths, ``data.npy`` and the items' offsets.
numpy only (the fast tier)."""

from __future__ import annotations

import numpy as np
import pytest

from speechpack.schemas.cue_banks import (
    BLOCKS_NAME,
    DIGESTS_NAME,
    ITEMS_NAME,
    REPRESENTATION_SPECS,
    codec_issues,
    is_compressed,
)

pytestmark = pytest.mark.fast

WAVEFORM = REPRESENTATION_SPECS["waveform"]
META = {"type": "wav", "format": "waveform", "sample_rate": 16000, "codec": "flac", "block_frames": 100,
        "digests": "blake2b-128"}
AT = {name: f"bank/{name}" for name in WAVEFORM.files_of(META)}


def bank(lengths=(250, 100), sizes=(10, 11, 12, 13)):
    items = np.zeros(len(lengths), dtype=WAVEFORM.item_dtype)
    items["channels"], items["length"], items["scale"] = 1, lengths, 1.0
    blocks = np.asarray(sizes, dtype="<i8")
    first = np.concatenate([[0], np.cumsum(-(-np.asarray(lengths) // 100))])[:-1]
    items["offset"] = np.concatenate([[0], np.cumsum(blocks)])[first]
    return {ITEMS_NAME: items, BLOCKS_NAME: blocks, DIGESTS_NAME: np.zeros((len(blocks), 16), dtype=np.uint8)}


def issues(arrays, data_bytes=46):
    return WAVEFORM.payload_check(AT, META, arrays, (data_bytes,))


def test_a_well_formed_compressed_bank_has_no_issue():
    assert issues(bank()) == []
    assert WAVEFORM.files_of(META) == WAVEFORM.files + (BLOCKS_NAME, DIGESTS_NAME)
    assert WAVEFORM.payload_dtype_of(META) == np.uint8 and WAVEFORM.payload_dtype_of({}) == np.int16


def test_a_pcm16_bank_has_no_codec_files():
    assert not is_compressed({"type": "wav", "format": "waveform", "sample_rate": 16000})
    assert WAVEFORM.files_of({"sample_rate": 16000}) == WAVEFORM.files


@pytest.mark.parametrize("change, message", [
    ({"codec": "mp3"}, "codec is 'mp3', expected one of flac, opus (absent: pcm16)"),
    ({"codec": "pcm16"}, "codec is 'pcm16', expected one of flac, opus (absent: pcm16)"),
    ({"block_frames": True}, "block_frames is True, expected an integer > 0"),
    ({"block_frames": -3}, "block_frames is -3, expected an integer > 0"),
    ({"digests": "sha1"}, "digests is 'sha1', expected 'blake2b-128'"),
])
def test_a_bad_codec_key_is_named(change, message):
    assert codec_issues("bank/meta.json", WAVEFORM, {**META, **change}) == [("bank/meta.json", message)]


def test_codec_keys_come_together_and_only_on_audio_banks():
    found = codec_issues("m", WAVEFORM, {"codec": "flac"})
    assert found == [("m", "a compressed bank declares codec, block_frames and digests; block_frames, digests "
                           "missing")]
    found = codec_issues("m", REPRESENTATION_SPECS["spk_embedding"], META)
    assert found and "only waveform banks store compressed audio" in found[0][1]


@pytest.mark.parametrize("arrays, data_bytes, where, message", [
    (bank(sizes=(10, 11, 12)), 33, BLOCKS_NAME, "3 block sizes, the items' lengths need 4"),
    (bank(), 47, BLOCKS_NAME, "the block sizes sum to 46 bytes, data.npy holds 47"),
    (bank(sizes=(10, 0, 12, 24)), 46, BLOCKS_NAME, "row 1: block of 0 bytes"),
    (bank(lengths=(250, 0)), 46, ITEMS_NAME, "1 item(s) with a bad shape or scale"),
])
def test_block_sizes_that_do_not_fit_are_named(arrays, data_bytes, where, message):
    found = issues(arrays, data_bytes)
    assert len(found) == 1 and found[0][0] == AT[where] and message in found[0][1], found


def test_an_item_placed_off_its_blocks_is_named():
    arrays = bank()
    arrays[ITEMS_NAME]["offset"][1] += 1
    assert issues(arrays) == [(AT[ITEMS_NAME], "item 1: offset 34, its blocks start at byte 33 (items are stored "
                                               "contiguously, in order)")]


def test_digests_need_one_row_per_block():
    arrays = bank()
    arrays[DIGESTS_NAME] = arrays[DIGESTS_NAME][:3]
    assert issues(arrays) == [(AT[DIGESTS_NAME], "shape [3, 16], expected [4, 16] (one digest per block)")]
