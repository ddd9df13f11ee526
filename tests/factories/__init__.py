"""Plain builders and helpers the test modules share (not fixtures, not tests): import them, never from a test module
or from conftest.py.  Fixtures live in tests/conftest.py and are used by name.

The general builders are re-exported here (``from factories import Mix, pack_files``); a domain's builders are
imported from their module:

- ``recordings``: real recordings and video from Debian packages, what a missing one or a missing extra does;
- ``wesep_lists``: WeSep raw-list line specs of real recordings and what each line packs to;
- ``batches``: batches compared bit for bit (tensors and arrays), as an assertion or as what differs;
- ``tse``: generated TSE mixtures and packs, the loader calls the TSE tests share;
- ``delivery``: where a delivered batch came from (worker, ring slot) and what is lost, repeated or changed, for
  failure messages;
- ``online_mix``: a sources pack of real speech, the noise and RIR packs of augmentation tests (``augment_packs``)
  and the online-mixing config;
- ``cue_split`` / ``cue_corpus``: a real split with every cue kind (build tests) / every cue resource (loader tests);
- ``pack_reads``: a real multi-shard pack and numpy's own view of it;
- ``format_rules``: what a format 1.3 reader required of a manifest (why it refuses a 1.4 pack);
- ``asd_tracks`` / ``asd_inputs`` / ``muvap_packs``: ASD packs from generated tracks / corpus inputs of a real
  talking-face video / MuVAP-layout packs;
- ``asr``: librivox clips as a parquet dataset and a JSON-lines manifest;
- ``lhotse_cuts``: librivox clips as transcribed Lhotse cuts, and a pack's stored audio to compare with;
- ``wesep_mainline``: splits written the way mainline WeSep's prep writes them (LibriMix-like, online tars);
- ``lhotse_export``: an asr-jsonl manifest of real clips and ``export lhotse`` run in a killable process;
- ``noise_lmdb``: WeSep-style noise LMDBs;
- ``fuzz``: what the fuzz tests of input lines share (settings, JSON values, the outcome of a fuzzed build);
- ``s3``: a real S3-protocol server (moto) on a loopback port, restartable, behind conftest's ``s3_store`` and
  ``s3_server``, the small real-speech pack the object-storage tests publish, and how they publish;
- ``store_rank``: one rank of a training run from an object store, run as its own process
  (``python -m factories.store_rank``);
- ``wheel``: the speechpack wheel built offline from a copy of the tree;
- ``kernels``: the one level of numeric kernels the suite runs (importing ``factories`` pins it first);
- ``paths``: where the repository, tests/ and tests/data/ lie, and every test module, for modules at any depth;
- ``lightning_asd``: a tiny Lightning model (imports ``lightning``).
"""

# First, before anything below loads numpy, torch or OpenCV: the suite's numeric kernels (``factories.kernels``).
from factories.kernels import pin_kernels

pin_kernels()

from factories.recordings import (  # noqa: E402
    FULL_SCALE,
    REAL_CORPORA,
    at_rate,
    corpus_rate,
    missing_recording,
    pack_files,
    real_video_path,
    require,
    require_recording,
    unavailable,
)
from factories.wesep_lists import ExpectedLine, Mix, Source, WesepCase, mixture_line, source_line

__all__ = [
    "FULL_SCALE", "REAL_CORPORA", "at_rate", "corpus_rate", "missing_recording", "pack_files", "real_video_path",
    "require", "require_recording", "unavailable", "ExpectedLine", "Mix", "Source", "WesepCase", "mixture_line",
    "source_line",
]
