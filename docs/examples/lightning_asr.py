"""Speech recognition (Omnilingual ASR's task) trained with Lightning on speechpack packs, with a CTC loss.

    python docs/examples/lightning_asr.py CONFIG.yaml OUT [--val DEV_PACK ...] [--resume OUT/last.ckpt]

``CONFIG.yaml`` is an ASR loader config (``task: asr``, docs/asr.md) or an Omnilingual recipe with ``packs:``
added. Each ``--val`` pack is its own validation set, read with the training config's ``dataset_args``.
"""

from __future__ import annotations

import argparse
import os

import lightning.pytorch as pl
import torch

from speechpack.loader.datamodule import SpeechDataModule

#: Samples per model frame (20 ms at 16 kHz).
HOP = 320


class Recognizer(pl.LightningModule):
    """Stands in for a real recognizer: one linear layer over 20 ms waveform frames, trained with CTC."""

    def __init__(self, vocabulary: int) -> None:
        super().__init__()
        self.blank = vocabulary  # an extra class, so no token id is the blank
        self.frames = torch.nn.Linear(HOP, vocabulary + 1)

    def loss(self, batch) -> torch.Tensor:
        audio = batch["source_seqs"]  # [B, T] float32 waveforms, zero past each row's length
        usable = audio.shape[1] // HOP * HOP
        log_probs = self.frames(audio[:, :usable].reshape(len(audio), -1, HOP)).log_softmax(-1)
        return torch.nn.functional.ctc_loss(
            log_probs.transpose(0, 1), batch["target_seqs"], batch["source_seq_lens"] // HOP,
            batch["target_seq_lens"], blank=self.blank, zero_infinity=True)

    def training_step(self, batch, batch_idx):
        return self.loss(batch)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.log("val_ctc", self.loss(batch), batch_size=len(batch["key"]))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main(argv: list[str] | None = None) -> pl.Trainer:
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("out")
    parser.add_argument("--val", action="append", default=[], help="a validation pack (repeat for more)")
    parser.add_argument("--resume", default=None, help="a checkpoint to continue from (mid-epoch is fine)")
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--save-every", type=int, default=100)
    parser.add_argument("--workers", type=int, default=None, help="default: the config's npc")
    args = parser.parse_args(argv)

    val = {os.path.basename(os.path.normpath(pack)): pack for pack in args.val}  # one named set per pack
    datamodule = SpeechDataModule(train=args.config, val=val or None, num_workers=args.workers, seed=0)
    tokenizer = datamodule.train_dataloader().loader.tokenizer  # the packs' vocabulary, or the recipe's
    trainer = pl.Trainer(
        use_distributed_sampler=False,  # required: the loader shards by rank itself
        max_steps=args.max_steps,
        callbacks=[pl.callbacks.ModelCheckpoint(dirpath=args.out, every_n_train_steps=args.save_every,
                                                save_top_k=-1, save_last=True)],
        logger=False,
    )
    trainer.fit(Recognizer(len(tokenizer)), datamodule=datamodule, ckpt_path=args.resume)
    return trainer


if __name__ == "__main__":
    main()
