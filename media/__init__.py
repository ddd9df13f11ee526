"""Untrusted media that both sides decode: the packer, converting them into packs, and the loader, reading them as
they are at training time.

- ``noise_lmdb``: WeSep's noise LMDB (``make_lmdb.py``'s environment of encoded audio files, never unpickled),
  decoded with soundfile and resampled with soxr (lmdb imported on first use), and WeSep's SNR rule for its keys;
  ``packer.adapters.noise_lmdb`` converts one into a noise pack, ``loader.tse.augment`` draws from one directly;
- ``codecs``: the audio codecs of a pack (format 1.4: pcm16, flac, opus), one registry row each, encoding and
  decoding int16 blocks through libsndfile; the build's workers encode, the loader and ``validate`` decode;
- ``sound_blocks``: libsndfile decoding in bounded blocks, so memory follows what a file holds, not what its header
  claims (every build's decode in ``packer.audio``, the ASR line spans, the noise LMDB).

Why a layer of its own, between ``schemas/`` and the two sides: ``schemas/`` holds contracts only (what a writer
and a reader agree on; numpy and PyYAML, no decoder), the loader imports nothing from the packer, and the pack
reader (``loader/pack/``) reads packs, not foreign inputs.  So a reader of foreign media that both sides use lives
here: it imports nothing of the project but ``schemas/``, and ``packer/`` and ``loader/`` may import it
(tests/project/test_layers.py; docs/architecture.md).
"""
