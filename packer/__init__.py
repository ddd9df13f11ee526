"""From sources to packs: adapters decode inputs, the writer shards them, ``build`` runs it all,
``validate`` checks finished packs."""
