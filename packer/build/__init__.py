"""The build pipeline: plan a pack, write its shards (locally or on Ray), resume, finalize."""
