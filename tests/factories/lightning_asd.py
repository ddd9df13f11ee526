"""A tiny Lightning ASD model and a CPU trainer for the datamodule tests.

Imports ``lightning`` at module level: a test module imports this only after its own check that the ``lightning``
extra is installed.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch

class TinyASD(pl.LightningModule):
    """Per-frame speaking logits from the mean face brightness and the audio frame energy: enough to train."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(2, 1)
        self.epoch_keys: dict[int, list] = {}
        self.val_scored = 0

    def _logits(self, batch):
        faces = batch["faces"].float() / 255.0  # uint8 until here: the model scales on its device
        b, t = faces.shape[:2]
        energy = batch["audio"].reshape(b, t, -1).pow(2).mean(-1)
        features = torch.stack([faces.mean(dim=(2, 3)), energy], dim=-1)
        return self.head(features).squeeze(-1)

    def training_step(self, batch, _index):
        self.epoch_keys.setdefault(self.current_epoch, []).append(list(batch["key"]))
        weight = batch["scored"].float()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            self._logits(batch), batch["labels"].float(), weight=weight, reduction="sum")
        return loss / weight.sum().clamp(min=1.0)

    def validation_step(self, batch, _index):
        self.val_scored += int(batch["scored"].sum())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def cpu_trainer(**kwargs) -> "pl.Trainer":
    return pl.Trainer(accelerator="cpu", devices=1, use_distributed_sampler=False, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **kwargs)
