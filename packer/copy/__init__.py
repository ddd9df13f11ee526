"""Copying packs: to a local directory (``to_directory``: ``copy_pack``, ``verify_copy``; the per-file work in
``staging``), to an object store (``publish``; one publish per prefix and the leftovers of killed ones:
``store_prefix``), and the report both give (``report``).  The lock every writer of a
destination takes is ``packer.ownership``'s."""
