"""Active speaker detection (MuVAP's task) trained with Lightning on speechpack packs.

    python docs/examples/lightning_asd.py EXPERIMENT.yaml OUT [--resume OUT/last.ckpt]

``EXPERIMENT.yaml`` holds MuVAP's ``packed_asd: {train: [...], val: [...]}`` block (pack paths); the asd
``dataset_args`` are docs/asd.md's. ``SpeechDataModule`` with a ``task: asd`` config does the same job.
"""

from __future__ import annotations

import argparse

import lightning.pytorch as pl
import torch

from speechpack.loader.asd.datamodule import PackedASDDataModule


class Detector(pl.LightningModule):
    """Stands in for a real detector: per-frame logits from the face crops' brightness and the audio energy."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(2, 1)

    def loss(self, batch) -> torch.Tensor:
        faces = batch["faces"].float() / 255.0  # uint8 until here: scale on the model's device
        rows, frames = faces.shape[:2]
        energy = batch["audio"].reshape(rows, frames, -1).pow(2).mean(-1)
        logits = self.head(torch.stack([faces.mean(dim=(2, 3)), energy], dim=-1)).squeeze(-1)
        scored = batch["scored"].float()  # False on history, padding and repeats
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits, batch["labels"].float(), weight=scored, reduction="sum")
        return loss / scored.sum().clamp(min=1.0)

    def training_step(self, batch, batch_idx):
        return self.loss(batch)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.log("val_bce", self.loss(batch), batch_size=len(batch["key"]))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main(argv: list[str] | None = None) -> pl.Trainer:
    parser = argparse.ArgumentParser()
    parser.add_argument("experiment")
    parser.add_argument("out")
    parser.add_argument("--resume", default=None, help="a checkpoint to continue from (mid-epoch is fine)")
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--save-every", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--frame-budget", type=int, default=2048)
    args = parser.parse_args(argv)

    datamodule = PackedASDDataModule(args.experiment, dataset_args={"frame_budget": args.frame_budget},
                                     num_workers=args.workers, seed=0)
    trainer = pl.Trainer(
        use_distributed_sampler=False,  # required: the loader shards by rank itself
        max_steps=args.max_steps,
        callbacks=[pl.callbacks.ModelCheckpoint(dirpath=args.out, every_n_train_steps=args.save_every,
                                                save_top_k=-1, save_last=True)],
        logger=False,
    )
    trainer.fit(Detector(), datamodule=datamodule, ckpt_path=args.resume)
    return trainer


if __name__ == "__main__":
    main()
