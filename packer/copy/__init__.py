"""Copying packs: to a local directory (``to_directory``: ``copy_pack``, ``verify_copy``; the per-file work in
``staging``), to an object store (``publish``), one writer per destination (``lock``), and the report both give
(``report``)."""
