"""A plain training loop over torchdata's StatefulDataLoader, checkpointing the loader with the model.

    python docs/examples/torchdata_loop.py CONFIG.yaml CHECKPOINT [--steps N]

``CONFIG.yaml`` is any loader config (docs/loader.md); the model here reads a tse batch. Run it twice: the
second run continues from ``CHECKPOINT`` with exactly the batches the first had not reached, mid-epoch or not.
"""

from __future__ import annotations

import argparse
import os

import torch
import yaml

from speechpack.loader.stateful_loader import stateful_dataloader


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("checkpoint")
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps in this run")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args(argv)

    with open(args.config, encoding="utf-8") as fp:
        config = yaml.safe_load(fp)
    loader = stateful_dataloader(config, "train", num_workers=args.workers, seed=0)
    gain = torch.nn.Parameter(torch.tensor(0.5))  # stands in for a model
    optimizer = torch.optim.Adam([gain], lr=1e-3)
    epoch, step = 0, 0
    if os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint, weights_only=True)  # tensors and plain data only
        gain.data.copy_(saved["gain"])
        optimizer.load_state_dict(saved["optimizer"])
        loader.load_state_dict(saved["loader"])  # also sets the epoch it was saved in
        epoch, step = saved["epoch"], saved["step"]
        print(f"resumed from {args.checkpoint}: epoch {epoch}, step {step}, "
              f"{saved['loader']['speechpack_position']['batches_consumed']} batches of that epoch already trained on")
    else:
        print(f"fresh start (no {args.checkpoint})")

    keys = []
    while epoch < args.epochs and len(keys) < args.steps:
        loader.set_epoch(epoch)
        for batch in loader:
            loss = (gain * batch["wav_mix"][:, :1] - batch["wav_target"]).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            keys.append(batch["key"])
            step += 1
            if len(keys) == args.steps:
                break
        else:
            epoch += 1  # the epoch ran to its end
    state = {"gain": gain.detach(), "optimizer": optimizer.state_dict(), "loader": loader.state_dict(),
             "epoch": epoch, "step": step}
    torch.save(state, args.checkpoint)
    print(f"trained {len(keys)} steps, now at epoch {epoch}, step {step}, loss {loss.item():.4f}; "
          f"saved {args.checkpoint}")
    return {"keys": keys, "state": state}


if __name__ == "__main__":
    main()
