"""How batches travel from DataLoader workers to the training process: reused shared-memory slots (``batch_ring``,
on 2 MB pages where the kernel gives them: ``huge_pages``), several batches per message (``message_groups``) and the
builders' output arrays carved from a slot (``batch_arrays``)."""
