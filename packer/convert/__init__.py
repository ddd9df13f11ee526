"""``speechpack convert PACK --codec C --out DIR``: an existing pack written again with another audio codec (or the
same one with block digests added), from the pack alone, with a build's guarantees.

A convert is a build whose items are the samples of a pack: ``source`` reads the pack (its shard indexes, verified
by their hashes; each sample's stored int16 audio and data rows through the reader floor, ``loader.pack``),
``cues`` writes its ``cues/`` (enrollment audio re-encoded with the convert's codec), and ``run`` hands them to the build's executor and shard writer (``packer.build``), so the output is atomic, resumable
after a kill and byte-identical across ``--workers`` exactly as a build's is.  The source pack's shard cuts, keys,
lines and sample provenance are kept, so a lossless round trip (pcm16 -> flac -> pcm16) gives back the same stream
files and index records.
"""

from speechpack.packer.convert.run import ConvertOptions, convert_pack

__all__ = ["ConvertOptions", "convert_pack"]
