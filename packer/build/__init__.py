"""The build pipeline: what an adapter hands it and how a pack is planned (``plan``), run in a process pool and
committed (``run``; ``speechpack finalize`` commits alone), how its audio is stored (``encoding``: codec, blocks,
digests), write its shards (``shards``, ``writer``, ``streams``; locally or on Ray; a compressed build reads its
input a few samples ahead of its encoding, ``read_ahead``), resume (``state``), the output directory
(``output_dir``) and the pool (``executor``)."""
