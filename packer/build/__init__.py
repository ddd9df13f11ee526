"""The build pipeline: what an adapter hands it (``sample``), plan a pack (``plan``), write its shards (``shards``,
``writer``, ``streams``; locally or on Ray), resume (``state``), commit (``finalize``)."""
