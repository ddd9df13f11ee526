"""Generated TSE mixtures and packs for the loader tests: int16 noise targets whose mixture is exactly their sum,
packed at ``RATE`` into small shards, and the loader calls the tests share.

The builders behind the ``tse_pack`` and ``two_packs`` fixtures (tests/conftest.py) live here.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from speechpack import loader
from factories.recordings import FULL_SCALE
from factories.wesep_lists import Mix, mixture_line
from speechpack.loader import open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

#: Sample rate of the generated packs (low, so packs stay small and fast).
RATE = 8000

#: Small shards, so every pack below spans several of them.
SHARD_BYTES = 16000


@dataclass(frozen=True)
class Mixture:
    """A generated mixture: int16 targets ``[N, T]`` and their int16 mixture ``[C, T]`` (channel 0 = the sum;
    channel 1, if any, ``t0 - t1 - ...``), so the mixture is exactly the sum of its targets."""

    key: str
    speakers: tuple[str, ...]
    targets: np.ndarray
    mix: np.ndarray

    @property
    def target_f(self) -> np.ndarray:
        return self.targets.astype(np.float64) / FULL_SCALE

    @property
    def mix_f(self) -> np.ndarray:
        return self.mix.astype(np.float64) / FULL_SCALE

    @property
    def frames(self) -> int:
        return self.targets.shape[1]


def noise(key: str, slot: int, frames: int, amplitude: float = 0.2) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(f"{key}/{slot}".encode()))
    return np.rint(rng.uniform(-amplitude, amplitude, frames) * FULL_SCALE).astype(np.int16)


def mixture(key: str, frames: int, speakers: int = 2, channels: int = 1, amplitude: float = 0.2,
            targets: np.ndarray | None = None) -> Mixture:
    if targets is None:
        targets = np.stack([noise(key, i, frames, amplitude) for i in range(speakers)])
    else:
        targets = np.clip(np.rint(np.atleast_2d(targets) * FULL_SCALE), -32768, 32767).astype(np.int16)
    wide = targets.astype(np.int64)
    planes = [wide.sum(0), wide[0] - wide[1:].sum(0)][:channels]
    mix = np.stack(planes)
    assert np.abs(mix).max() <= 32767, "generated mixture would clip"
    offset = zlib.crc32(key.encode()) % 7
    names = tuple(f"spk{(offset + i) % 7}" for i in range(len(targets)))
    return Mixture(key, names, targets, mix.astype(np.int16))


def tse_pack_maker(make_wav, write_list, tmp_path):
    """``tse_pack(name, mixtures, rate=RATE) -> (pack_dir, {key: Mixture})``: write the audio and a WeSep list,
    and pack it."""

    def make(name: str, mixtures: list[Mixture], rate: int = RATE, shard_bytes: int = SHARD_BYTES):
        lines = []
        for m in mixtures:
            src = {spk: [make_wav(f"{name}-{m.key}-t{i}.wav", data=m.targets[i], rate=rate)]
                   for i, spk in enumerate(m.speakers)}
            mix = [make_wav(f"{name}-{m.key}-mix{c}.wav", data=m.mix[c], rate=rate) for c in range(len(m.mix))]
            lines.append(mixture_line(m.key, mix, src, spk=list(m.speakers)))
        list_path = write_list(lines, name=f"{name}.list")
        out = tmp_path / name
        build_wesep(str(list_path), BuildOptions(out=str(out), sample_rate=rate, progress=False,
                                                 shard_bytes=shard_bytes))
        return str(out), {m.key: m for m in mixtures}

    return make


def config(*packs: str, **dataset_args) -> dict:
    return {"packs": [{"path": p} for p in packs], "dataset_args": dataset_args}


def build(cfg: dict, state: str = "train", **kwargs):
    return loader.build_loader(cfg, state, **kwargs)


def frames_list(n: int, low: int, high: int, seed: int) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).integers(low, high, n)]


def make_two_packs(tse_pack):
    """Two packs of uneven sizes (7 and 4 mixtures, 1-3 speakers, 600-2400 frames): 11 mixtures, 22 targets."""
    a_frames, b_frames = frames_list(7, 600, 2400, 1), frames_list(4, 600, 2400, 2)
    a = [mixture(f"a{i}", f, s) for i, (f, s) in enumerate(zip(a_frames, (1, 2, 3, 2, 1, 3, 2)))]
    b = [mixture(f"b{i}", f, s) for i, (f, s) in enumerate(zip(b_frames, (2, 1, 3, 2)))]
    pack_a, mix_a = tse_pack("pa", a)
    pack_b, mix_b = tse_pack("pb", b)
    assert len(open_pack(pack_a).manifest.shards) > 1, "the fixture should span several shards"
    return (pack_a, pack_b), {**mix_a, **mix_b}


def take(l, k: int) -> list[dict]:
    it = iter(l)
    return [next(it) for _ in range(k)]


def real_mixtures_config(real_audio, wesep_list, out, count: int, seconds: float, seconds_step: float,
                         seconds_cycle: int, start_step: float, partner: int) -> dict:
    """A loader config over a tse pack of ``count`` two-speaker mixtures of real LibriVox recordings at 16 kHz:
    mixture ``i`` pairs recording ``i % 4`` with ``(i + partner) % 4``, lasts ``seconds + seconds_step * (i %
    seconds_cycle)`` and starts ``start_step * i`` into them; batches of 2, 8000-sample chunks, shuffled."""
    p = real_audio("pocketsphinx", 4)
    mixes = [Mix(f"m{i:02d}", (p[i % 4], p[(i + partner) % 4]), seconds=seconds + seconds_step * (i % seconds_cycle),
                 start=start_step * i) for i in range(count)]
    build_wesep(str(wesep_list(mixes).list_path), BuildOptions(out=str(out), sample_rate=16000, progress=False))
    return {"packs": [{"path": str(out)}], "dataset_args": {"batch_size": 2, "chunk_len": 8000, "shuffle": True}}
