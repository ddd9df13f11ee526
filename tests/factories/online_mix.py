"""A sources pack of real speech for the online-mixing tests, the online-mixing config they share, and how a batch's
rows group into mixtures.  The builder behind the ``sources_pack`` fixture (tests/conftest.py) lives here.
"""

from __future__ import annotations

import torch

from factories.recordings import require_recording
from factories.wesep_lists import Source
from speechpack.packer.adapters.audio_bank import build_audio_bank
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

#: Rate of the sources pack (the real recordings are 8 and 16 kHz) and of the online mixtures.
RATE = 16000
#: Online-mixing settings of ``mix_config``: chunk length in samples (0.5 s), SNR range and peak gain in dB.
CHUNK = 8000
SNR = (-5.0, 10.0)
GAIN = (-12.0, 0.0)
#: Real noise (alsa-utils).
REAL_NOISE = "/usr/share/sounds/alsa/Noise.wav"
#: A real impulse-response pair (48 kHz mono float WAV each), Debian's jconvolver-config-files.
_REVERBS = "/usr/share/jconvolver/config-files/demo-reverbs"
REAL_RIRS = (f"{_REVERBS}/street2-L.wav", f"{_REVERBS}/street2-R.wav")


def sources_pack_maker(real_audio, wesep_list, tmp_path):
    """A sources pack of 25 utterances by 10 speakers (5 pocketsphinx x 3 crops, 5 codec2 x 2 crops, at 16 kHz)."""

    def make(seconds=(0.8,), name="src"):
        items = []
        for n, path in enumerate(real_audio("pocketsphinx")):
            for c, start in enumerate((0.1, 0.9, 1.7)):
                items.append(Source(f"ps{n}c{c}", path, seconds=seconds[(n + c) % len(seconds)], start=start))
        for n, path in enumerate(real_audio("codec2")):
            for c, start in enumerate((0.1, 0.7)):
                items.append(Source(f"c2{n}c{c}", path, seconds=seconds[(n + c) % len(seconds)], start=start))
        case = wesep_list(items, name=f"{name}.list")
        out = tmp_path / name
        build_wesep(str(case.list_path), BuildOptions(out=str(out), sample_rate=RATE, progress=False))
        return str(out), case

    return make


def augment_packs(real_audio, wesep_list, tmp_path, rirs: bool = False) -> tuple[str, ...]:
    """A sources pack of 12 real utterances of 0.7-1.3 s by 7 speakers (pocketsphinx and codec2 crops: groups
    differ), a noise bank of real noise (ALSA's Noise.wav) and, with ``rirs``, a bank of two real RIRs (jconvolver's
    street2): the paths ``(src, noise)`` or ``(src, noise, rirs)``, for the batch-augmentation tests."""
    items = [Source(f"ps{n}c{c}", p, seconds=0.7 + 0.1 * n + 0.2 * c, start=0.1 + c)
             for n, p in enumerate(real_audio("pocketsphinx")) for c in range(2)]
    items += [Source(f"c2{n}", p, seconds=0.9, start=0.1) for n, p in enumerate(real_audio("codec2", 2))]
    case = wesep_list(items, name="src.list")
    build_wesep(str(case.list_path), BuildOptions(out=str(tmp_path / "src"), sample_rate=RATE, progress=False))
    (tmp_path / "noises.list").write_text(require_recording("alsa-utils", REAL_NOISE) + "\n", encoding="utf-8")
    build_audio_bank(str(tmp_path / "noises.list"), "noise", BuildOptions(out=str(tmp_path / "noise"),
                                                                         sample_rate=RATE, progress=False))
    if not rirs:
        return str(tmp_path / "src"), str(tmp_path / "noise")
    paths = [require_recording("jconvolver-config-files", path) for path in REAL_RIRS]
    (tmp_path / "rirs.list").write_text("\n".join(paths) + "\n", encoding="utf-8")
    build_audio_bank(str(tmp_path / "rirs.list"), "rir", BuildOptions(out=str(tmp_path / "rirs"), sample_rate=RATE,
                                                                      progress=False))
    return str(tmp_path / "src"), str(tmp_path / "noise"), str(tmp_path / "rirs")


def mix_config(path, **overrides):
    args = {"online_mix": True, "num_speakers": {"distribution": [0.2, 0.5, 0.3], "max_speakers": 3},
            "mix_snr": {"range": list(SNR), "gain": list(GAIN)}, "chunk_len": CHUNK, "batch_size": 4}
    args.update(overrides)
    return {"packs": [{"path": path}], "dataset_args": args}


def collect(ld) -> list[dict]:
    return [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in b.items()} for b in ld]


def mixtures(batch: dict):
    """(row indices) per mixture of a batch (rows are mixture-major; a mixture's rows share its key)."""
    groups, start = [], 0
    while start < len(batch["key"]):
        n = batch["num_speaker"][start]
        groups.append(list(range(start, start + n)))
        start += n
    return groups
