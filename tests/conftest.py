"""Shared fixtures, used by name (pytest injects them; never imported): real recordings from Debian packages, the real
talking-face video, WeSep raw lists, generated audio, and the packs and corpora several test modules build on.

Plain builders and helpers live in tests/factories/ (imported as ``from factories import ...``); a fixture here is
the ``tmp_path``-bound front of one of them.  Real speech comes from installed Debian packages (see docs/testing.md,
"Real recordings"); it is read from its installed path and cropped into ``tmp_path``, never copied into the
repository.  When a recording is missing a test skips locally and fails in CI (``CI`` set), naming the package.
"""

from __future__ import annotations

import atexit
import importlib.abc
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import factories  # noqa: F401  first: it pins the numeric kernels before numpy loads (factories.kernels)
import numpy as np
import pytest
import soundfile

from factories.cue_corpus import CueCorpus, make_cue_corpus
from factories.cue_split import make_tse_split
from factories.pack_reads import make_real_pack
from factories.recordings import FULL_SCALE, REAL_CORPORA, missing_recording, real_video_path
from factories.wesep_lists import Mix, Source, WesepCase, write_mixture, write_source


#: Readers record the content checks of the files they map in the user's cache (``loader.pack.content_check``):
#: the tests' records, from their processes and every subprocess they start, go to a directory of this session.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="speechpack-test-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)


#: Fixtures that read the Debian recordings or the real video (docs/testing.md, "Real recordings").  They are
#: session-scoped, so that a module- or session-scoped fixture that reads recordings asks for them too, and the
#: tests that use it are marked as well (pytest's ``fixturenames`` is the whole closure of a test's fixtures).
_REAL_FIXTURES = ("real_audio", "real_video")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Mark every test that uses real recordings ``real_data`` (before ``-m`` selects), wherever it lives; a test
    marked ``fast`` must not use them (the fast tier runs where they are not installed), and must sit in a module
    the tier imports (``_joins_fast_tier``), or ``-m fast`` would never see it."""
    misplaced, unseen = [], []
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in _REAL_FIXTURES):
            item.add_marker(pytest.mark.real_data)
        if item.get_closest_marker("fast") is None:
            continue
        if item.get_closest_marker("real_data") is not None:
            misplaced.append(item.nodeid)
        if not _joins_fast_tier(Path(item.path)):
            unseen.append(item.nodeid)
    if misplaced:
        raise pytest.UsageError(f"marked fast but using real recordings: {', '.join(misplaced)}")
    if unseen:
        raise pytest.UsageError(f"marked fast in a module without the line {FAST_MODULE_LINE!r}, which -m fast never "
                                f"imports: {', '.join(unseen)}")


class _WithoutTorch(importlib.abc.MetaPathFinder):
    """Makes ``import torch`` fail as if torch were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (the fast tier runs without torch)", name=name)
        return None


#: A test module the fast tier may import says so with this line at module level: it imports without torch.  Its
#: tests join the tier one by one, by ``@pytest.mark.fast``; ``-m fast`` reads the line as text, so that it never
#: imports the other modules, which may import torch.
FAST_MODULE_LINE = "FAST_MODULE = True"
#: A module whose every test is fast says so once (``pytestmark``); that line implies ``FAST_MODULE_LINE``.
FAST_MODULE_MARK = "pytestmark = pytest.mark.fast"
_FAST_LINES = re.compile(rf"^(?:{re.escape(FAST_MODULE_LINE)}|{re.escape(FAST_MODULE_MARK)})\b", re.MULTILINE)
_FAST_MODULES: dict[Path, bool] = {}


def _joins_fast_tier(path: Path) -> bool:
    """Whether ``-m fast`` imports the test module at ``path`` (it holds one of the two lines at module level)."""
    if path not in _FAST_MODULES:
        _FAST_MODULES[path] = bool(_FAST_LINES.search(path.read_text(encoding="utf-8")))
    return _FAST_MODULES[path]


def _fast_only(config) -> bool:
    return config.option.markexpr.strip() == "fast"


def pytest_configure(config):
    """``pytest -m fast`` runs as if torch were not installed, so the tier proves it needs no torch every time it
    runs (docs/testing.md, "The fast tier")."""
    if _fast_only(config) and "torch" not in sys.modules:
        sys.meta_path.insert(0, _WithoutTorch())


def pytest_ignore_collect(collection_path, config):
    """With ``-m fast``, a test module that does not join the tier (``_joins_fast_tier``) is not collected (nor
    imported) at all; in the modules that do, ``-m`` selects the tests marked ``fast``."""
    if _fast_only(config) and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return not _joins_fast_tier(Path(collection_path))
    return None


@pytest.fixture(scope="session")
def real_audio():
    """``real_audio(corpus, count=None)``: paths of installed real recordings of ``corpus`` (see ``REAL_CORPORA``).

    A missing recording fails the test in CI and skips it elsewhere; either way the message names the package.
    """

    def get(corpus: str, count: int | None = None) -> list[str]:
        package, _rate, paths = REAL_CORPORA[corpus]
        chosen = list(paths if count is None else paths[:count])
        if count is not None and count > len(paths):
            raise ValueError(f"{corpus} has {len(paths)} configured recordings, asked for {count}")
        for path in chosen:
            if not os.path.isfile(path):
                missing_recording(path, package)
        return chosen

    return get


# ---------------------------------------------------------------------------------------------------------------
# WeSep raw lists built from real recordings
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def wesep_list(tmp_path):
    """``wesep_list(items, name="raw.list") -> WesepCase``: write a WeSep raw list and its audio into tmp_path.

    ``items`` are ``Mix`` or ``Source`` (audio is cropped from real recordings and written here), ``dict``
    (dumped as one JSON line, verbatim) or ``str`` (written as the line, verbatim: blank or broken lines).
    Line numbers in the returned case are 1-based, as an editor shows them.
    """
    counter = {"n": 0}

    def make(items, name: str = "raw.list") -> WesepCase:
        counter["n"] += 1
        audio_dir = tmp_path / f"audio{counter['n']}"
        audio_dir.mkdir()
        case = WesepCase(list_path=tmp_path / name)
        texts = []
        for number, item in enumerate(items, start=1):
            if isinstance(item, str):
                texts.append(item)
                continue
            if isinstance(item, dict):
                texts.append(json.dumps(item))
                continue
            if isinstance(item, Mix):
                expected = write_mixture(item, audio_dir / item.key, number)
            elif isinstance(item, Source):
                expected = write_source(item, audio_dir / item.key, number)
            else:
                raise TypeError(f"cannot write {item!r} as a list line")
            case.lines.append(expected)
            texts.append(json.dumps(expected.record))
        case.list_path.write_text("".join(t if t.endswith("\n") else t + "\n" for t in texts), encoding="utf-8")
        return case

    return make


# ---------------------------------------------------------------------------------------------------------------
# Generated audio for quick unit tests
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def make_wav(tmp_path):
    """``make_wav(name, seconds=0.5, rate=16000, channels=1, subtype="PCM_16", kind="sine", ...) -> str``.

    Writes a sine (``kind="sine"``, ``freq`` Hz) or seeded white noise (``kind="noise"``) at ``amplitude`` into
    ``tmp_path/gen/name``; or ``data`` (``[T]`` or ``[T, C]``) verbatim.  PCM_16 audio is rounded to int16 first,
    so the file decodes to exactly the values generated.  Returns the path as a string.
    """
    folder = tmp_path / "gen"
    folder.mkdir(exist_ok=True)

    def make(name: str, seconds: float = 0.5, rate: int = 16000, channels: int = 1, subtype: str = "PCM_16",
             kind: str = "sine", freq: float = 440.0, amplitude: float = 0.5, seed: int = 0,
             data: np.ndarray | None = None) -> str:
        path = folder / name
        if data is None:
            frames = int(round(seconds * rate))
            t = np.arange(frames) / rate
            columns = []
            for c in range(channels):
                if kind == "sine":
                    columns.append(amplitude * np.sin(2 * np.pi * freq * (c + 1) * t))
                elif kind == "noise":
                    columns.append(amplitude * np.random.default_rng(seed + c).uniform(-1, 1, frames))
                else:
                    raise ValueError(f"unknown kind {kind!r}")
            data = np.stack(columns, axis=1) if columns else np.zeros((frames, 0))
            if subtype == "PCM_16":
                data = np.clip(np.rint(data * FULL_SCALE), -32768, 32767).astype(np.int16)
            else:
                data = data.astype(np.float32 if subtype == "FLOAT" else np.float64)
        soundfile.write(path, data, rate, subtype=subtype)
        return str(path)

    return make


@pytest.fixture
def write_list(tmp_path):
    """``write_list(lines, name="raw.list") -> Path``: ``dict`` lines are dumped as JSON, ``str`` lines verbatim."""

    def write(lines, name: str = "raw.list") -> Path:
        path = tmp_path / name
        path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines),
                        encoding="utf-8")
        return path

    return write


# ---------------------------------------------------------------------------------------------------------------
# Packs and corpora several test modules build on
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def real_video() -> str:
    """kphotoalbum's talking-face demo movie (``factories.recordings.real_video_path``): missing fails in CI."""
    return real_video_path()


@pytest.fixture
def tse_pack(make_wav, write_list, tmp_path):
    """``tse_pack(name, mixtures, rate=factories.tse.RATE) -> (pack_dir, {key: Mixture})``: generated mixtures packed
    into small shards (``factories.tse``)."""
    from factories.tse import tse_pack_maker  # torch: imported by the tests that use it, not by the fast tier

    return tse_pack_maker(make_wav, write_list, tmp_path)


@pytest.fixture
def four_items(make_wav, write_list, tmp_path) -> str:
    """A sources pack of four single-speaker utterances (generated audio: no recordings, no torch)."""
    from speechpack.packer.adapters.wesep import build_wesep
    from speechpack.packer.build.run import BuildOptions

    rng = np.random.default_rng(0)
    lines = []
    for i in range(4):
        path = make_wav(f"u{i}.wav", data=(0.1 * rng.standard_normal(8000)).astype(np.float32))
        lines.append({"key": f"u{i}", "spk": [f"s{i}"], "src": {f"s{i}": [path]}})
    build_wesep(str(write_list(lines, "sources.list")), BuildOptions(out=str(tmp_path / "pack"), progress=False))
    return str(tmp_path / "pack")


@pytest.fixture
def two_packs(tse_pack):
    """Two packs of uneven sizes (7 and 4 mixtures, 1-3 speakers, 600-2400 frames): 11 mixtures, 22 targets."""
    from factories.tse import make_two_packs

    return make_two_packs(tse_pack)


@pytest.fixture
def real_pack(tmp_path, wesep_list, real_audio) -> Path:
    """A wesep pack of three real mixtures (one stereo) over several shards."""
    return make_real_pack(tmp_path, wesep_list, real_audio)


@pytest.fixture
def sources_pack(real_audio, wesep_list, tmp_path):
    """``sources_pack(seconds=(0.8,), name="src") -> (pack_dir, case)``: 25 real utterances by 10 speakers."""
    from factories.online_mix import sources_pack_maker

    return sources_pack_maker(real_audio, wesep_list, tmp_path)


@pytest.fixture
def tse_split(tmp_path, wesep_list, real_audio, real_video):
    """Two real mixtures with every cue of ``factories.cue_split.CUES_YAML``: ``(case, cues_yaml, root, facts)``."""
    return make_tse_split(tmp_path, wesep_list, real_audio, real_video)


@pytest.fixture
def corpus(tmp_path, wesep_list, real_audio) -> CueCorpus:
    """Four real two-speaker mixtures and a resource of every cue kind (``factories.cue_corpus``)."""
    return make_cue_corpus(tmp_path, wesep_list, real_audio)


@pytest.fixture
def six_line_corpus(real_audio, wesep_list):
    """Six real 0.5 s two-speaker lines (16 kHz LibriVox; one of 8 kHz codec2, resampled): with a 100 kB shard
    size, two samples per shard and three shards, what the resume, kill and writeback tests build."""
    ps = real_audio("pocketsphinx", 3)
    codec = real_audio("codec2", 2)
    return wesep_list([Mix(f"utt{i}", (ps[i % 3], ps[(i + 1) % 3]) if i != 4 else tuple(codec), seconds=0.5,
                           start=0.2 + 0.1 * i) for i in range(6)])


@pytest.fixture(scope="module")
def s3_store():
    """A real S3-protocol server on a free loopback port, credentials and endpoint in the environment
    (``factories.s3``); yields the server, which a test may stop and start again (``S3Server``)."""
    from factories.s3 import s3_server_running

    with s3_server_running() as server:
        yield server


@pytest.fixture(scope="module")
def s3_server(s3_store):
    """The endpoint URL of the module's S3-protocol server (``s3_store``)."""
    return s3_store.endpoint


@pytest.fixture
def store_pack(tmp_path, wesep_list, real_audio):
    """The small real-speech pack the object-storage tests publish (``factories.s3.make_store_test_pack``)."""
    from factories.s3 import make_store_test_pack

    return make_store_test_pack(tmp_path, wesep_list, real_audio)
