"""WeSep-style noise LMDBs (what WeSep's make_lmdb.py writes) of real recordings, for the noise-bank tests."""

from __future__ import annotations

import pickle

from factories.recordings import require
from speechpack.media.noise_lmdb import KEYS_ENTRY

_QABCS = "/usr/share/qabcs/abcs/all/noises/{}.ogg"

#: key -> (Debian package, real recording): qabcs-data noises (Ogg Vorbis, 11.025-96 kHz, mono and stereo), alsa's
#: stationary noise, and speech (alsa's voice at 48 kHz, a librivox clip at 16 kHz) under ``speech*`` keys.
RECORDINGS = {
    "airplane": ("qabcs-data", _QABCS.format("airplane")),
    "dolphin": ("qabcs-data", _QABCS.format("dolphin")),
    "xun": ("qabcs-data", _QABCS.format("xun")),
    "alsa_noise": ("alsa-utils", "/usr/share/sounds/alsa/Noise.wav"),
    "speech_front_center": ("alsa-utils", "/usr/share/sounds/alsa/Front_Center.wav"),
    "speech_librivox": ("pocketsphinx-testdata",
                        "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0870.wav"),
}


def make_lmdb(path, entries: dict[str, bytes], keys_pickle: bytes | None = None) -> None:
    """What WeSep's make_lmdb.py does: one write transaction putting every key's file bytes, then ``__keys__``
    holding ``pickle.dumps`` of the key list (or ``keys_pickle``)."""
    env = require("lmdb", "wesep").open(str(path), map_size=1 << 28)
    with env.begin(write=True) as txn:
        for key, data in entries.items():
            txn.put(key.encode("utf-8"), data)
        txn.put(KEYS_ENTRY, pickle.dumps(list(entries)) if keys_pickle is None else keys_pickle)
    env.sync()
    env.close()
