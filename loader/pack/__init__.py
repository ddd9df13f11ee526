"""The pack reader: the floor every other part of speechpack reads packs through.

``open_pack(path)`` checks the manifest, loads the columnar index into numpy and maps stream files lazily
(``reader``); what it verifies at open and at each mapping is ``verify``, and the content of each mapped file,
hashed once per node in the background, ``content_check``; compressed audio streams (format 1.4, FLAC and Opus) are
decoded a block at a time, only the blocks a read touches, by ``blocks``; a pack's speaker-cue banks are read by
``cues``; the
read-ahead advice for a batch's
mapped ranges is ``readahead``.  Every file is reached through ``PackFiles`` (``files``: a local directory;
``object_store``: an fsspec URL such as ``s3://bucket/packs/train``), so one reader serves local and remote packs.
This package knows no task: the loader's tasks, packer's tools (validate, inspect, copy, export) and the demo all
read through it.
"""

from speechpack.loader.pack.files import DirectoryPackFiles, MappedStream, PackFiles, is_remote, map_stream
from speechpack.loader.pack.object_store import ObjectStoreError, ObjectStorePackFiles
from speechpack.loader.pack.reader import (
    DataSegmentTable,
    Pack,
    Sample,
    SegmentTable,
    open_pack,
    pack_files,
    read_manifest,
    will_need_view,
)

__all__ = ["DataSegmentTable", "DirectoryPackFiles", "MappedStream", "ObjectStoreError", "ObjectStorePackFiles",
           "Pack", "PackFiles", "Sample", "SegmentTable", "is_remote", "map_stream", "open_pack", "pack_files",
           "read_manifest", "will_need_view"]
