"""Target speaker extraction (WeSep's task) trained with Lightning on speechpack packs.

    python docs/examples/lightning_tse.py TRAIN_PACK DEV_PACK OUT [--resume OUT/last.ckpt]

Replace ``Extractor`` with your model; the rest is what a trainer needs: the DataModule, a Trainer without a
DistributedSampler (the loader deals batches to ranks itself), checkpoints that resume mid-epoch.
"""

from __future__ import annotations

import argparse

import lightning.pytorch as pl
import torch

from speechpack.loader.datamodule import SpeechDataModule


class Extractor(pl.LightningModule):
    """Stands in for a real extractor: a learnable gain from the mixture's first channel to the target."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = torch.nn.Parameter(torch.tensor(0.5))

    def loss(self, batch) -> torch.Tensor:
        estimate = self.gain * batch["wav_mix"][:, :1]  # [rows, 1, T]: a row is a (mixture, target speaker) pair
        error = (estimate - batch["wav_target"]).pow(2).mean(dim=(1, 2))
        valid = batch["valid"].float()  # False on rows that only pad the epoch out
        return (error * valid).sum() / valid.sum().clamp(min=1.0)

    def training_step(self, batch, batch_idx):
        return self.loss(batch)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.log("val_loss", self.loss(batch), batch_size=len(batch["key"]))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main(argv: list[str] | None = None) -> pl.Trainer:
    parser = argparse.ArgumentParser()
    parser.add_argument("train_pack")
    parser.add_argument("dev_pack")
    parser.add_argument("out")
    parser.add_argument("--resume", default=None, help="a checkpoint to continue from (mid-epoch is fine)")
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--save-every", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args(argv)

    config = {"task": "tse", "packs": [{"path": args.train_pack}],
              "dataset_args": {"batch_size": 4, "chunk_len": 48000}}  # any docs/loader.md config, or a YAML path
    datamodule = SpeechDataModule(train=config, val={"dev": args.dev_pack}, num_workers=args.workers, seed=0)
    trainer = pl.Trainer(
        use_distributed_sampler=False,  # required: the loader shards by rank itself
        max_steps=args.max_steps,
        callbacks=[pl.callbacks.ModelCheckpoint(dirpath=args.out, every_n_train_steps=args.save_every,
                                                save_top_k=-1, save_last=True)],
        logger=False,
    )
    trainer.fit(Extractor(), datamodule=datamodule, ckpt_path=args.resume)
    return trainer


if __name__ == "__main__":
    main()
