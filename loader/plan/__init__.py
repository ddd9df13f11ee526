"""The epoch plan family, one module per algorithm (MosaicML Streaming's ``shuffle/`` layout): which units form
which batch on which rank, as pure functions of (seed, epoch, rank, world size) that read no audio and import no
torch.

- ``epoch_plan``: ``plan_epoch``, the whole composition (weighting, train windows, then a static or budget plan);
- ``static_plan``: what every plan is built from: ``EpochPlan``, batches of ``batch_size``, fairseq2's windowed
  shuffles, and the epoch's global sequence of batches dealt to ranks from a global position (equal steps per
  rank; what a resume state resumes at any world size);
- ``batching``: budget batching (ragged batches of similar-length units);
- ``train_windows``: items cut into chunks (MuVAP's train windows);
- ``weighting``: how many items each pack gives an epoch;
- ``planning_report``: the dry run (``speechpack plan``) and its picture (a task's own checks of
  planned batches are its builder's ``planned_batch_check``);
- ``decode_cost``: the audio the workers decode per epoch from compressed packs, and its core time (``plan``'s
  ``decode`` line);
- ``no_batch``: why a plan holds no batch, in the words ``speechpack plan``, ``peek`` and the loader share.

The names of the family's concepts (the epoch plan, train and shuffle windows) are docs/architecture.md's "Names".

``plan_epoch``, ``EpochPlan`` and ``PlanError`` are re-exported here.
"""

from speechpack.loader.plan.epoch_plan import EpochPlan, PlanError, plan_epoch

__all__ = ["EpochPlan", "PlanError", "plan_epoch"]
