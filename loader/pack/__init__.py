"""The pack reader: the floor every other part of speechpack reads packs through.

``open_pack(path)`` checks the manifest, loads the columnar index into numpy and maps stream files lazily; what
it verifies at open and at each mapping is ``verify``; the read-ahead advice for a batch's mapped ranges is
``readahead``.  This package knows no task: the loader's tasks, packer's tools (validate, inspect, copy, export)
and the demo all read through it.
"""

from speechpack.loader.pack.reader import (
    DataSegmentTable,
    MappedStream,
    Pack,
    Sample,
    SegmentTable,
    map_stream,
    open_pack,
    read_manifest,
    will_need_view,
)

__all__ = ["DataSegmentTable", "MappedStream", "Pack", "Sample", "SegmentTable", "map_stream", "open_pack",
           "read_manifest", "will_need_view"]
