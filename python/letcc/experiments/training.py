"""Small, seeded, CPU-friendly training loop for the experiment models.

One recipe for every model: AdamW with warm-up then cosine decay of the learning rate, cross-entropy, light
augmentation done on whole batches (random sub-pixel shifts via ``grid_sample`` and
optional horizontal flips), a tqdm progress bar. Seeded end to end: the same config,
data and torch build give the same weights on CPU. The caller's global RNG state is left
as it was (everything runs inside ``torch.random.fork_rng``).
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Optional

try:
    import torch
    import torch.nn.functional as F
except ImportError as _exc:
    from letcc._extras import missing_extra

    raise missing_extra("torch", "letcc.experiments.training") from _exc


@dataclass(frozen=True)
class TrainConfig:
    """How to train one model on one dataset. Part of the weights' code version."""
    epochs: int
    batch_size: int = 128
    lr: float = 2e-3
    weight_decay: float = 1e-4
    train_limit: Optional[int] = None   # first n images of the train split (None: all)
    test_limit: Optional[int] = None    # first n images of the test split for the reported accuracy
    shift_px: float = 0.0               # max random translation in pixels (0: none)
    hflip: bool = False                 # random horizontal flips (not for digits)
    seed: int = 0
    pct_start: float = 0.25             # warm-up fraction of all steps

    def __post_init__(self):
        for field in ("epochs", "batch_size"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"TrainConfig.{field} must be a positive int, got {v!r}")
        if not (self.lr > 0):
            raise ValueError(f"TrainConfig.lr must be positive, got {self.lr!r}")
        if self.shift_px < 0:
            raise ValueError(f"TrainConfig.shift_px must be >= 0, got {self.shift_px!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class TrainResult:
    seconds: float             # wall clock
    cpu_seconds: float         # this process's CPU time (honest when the machine is shared)
    final_loss: float          # mean loss over the last epoch
    train_images: int
    steps: int


def augment_batch(x: torch.Tensor, cfg: TrainConfig, gen: torch.Generator) -> torch.Tensor:
    """Random shifts (bilinear, zero padding) and flips, drawn from ``gen``."""
    b = x.shape[0]
    if cfg.hflip:
        flip = torch.rand(b, generator=gen) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
    if cfg.shift_px > 0:
        h, w = x.shape[-2:]
        # affine_grid works in [-1, 1] coordinates: one pixel is 2/size
        shift = (torch.rand(b, 2, generator=gen) * 2 - 1) * cfg.shift_px
        theta = torch.zeros(b, 2, 3, dtype=x.dtype)
        theta[:, 0, 0] = 1
        theta[:, 1, 1] = 1
        theta[:, 0, 2] = shift[:, 0] * 2 / w
        theta[:, 1, 2] = shift[:, 1] * 2 / h
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        x = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return x


def one_cycle(total_steps: int, pct_start: float):
    """LR multiplier per step: linear warm-up from 1/25 to 1, then cosine down to ~0.

    (torch's OneCycleLR divides by zero when the warm-up is under two steps, which tiny
    test runs hit.)
    """
    warm = max(1, int(round(pct_start * total_steps)))

    def factor(step: int) -> float:
        if step < warm:
            return 0.04 + 0.96 * step / warm
        t = min(1.0, (step - warm) / max(1, total_steps - warm))
        return 0.5 * (1.0 + math.cos(math.pi * t)) + 1e-4

    return factor


def train_model(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor,
                cfg: TrainConfig, *, progress: Optional[bool] = None, desc: str = "training",
                device: str = "cpu", num_threads: Optional[int] = None) -> TrainResult:
    """Train ``model`` in place on (images, labels); returns timing and the last epoch's loss.

    ``num_threads``: torch intra-op threads while training (restored after); None keeps
    the current setting. On a machine shared with other busy processes one thread can be
    much faster than several (OpenMP threads spin waiting for each other).
    """
    if num_threads is not None:
        if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads <= 0:
            raise ValueError(f"num_threads must be a positive int or None, got {num_threads!r}")
        previous = torch.get_num_threads()
        torch.set_num_threads(num_threads)
        try:
            return train_model(model, images, labels, cfg, progress=progress, desc=desc, device=device)
        finally:
            torch.set_num_threads(previous)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"images ({images.shape[0]}) and labels ({labels.shape[0]}) differ in length")
    if images.shape[0] == 0:
        raise ValueError("no training images")
    from letcc.experiments._progress import progress_bar

    n = images.shape[0]
    steps_per_epoch = -(-n // cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)          # dropout etc. use the global generator
        gen = torch.Generator().manual_seed(cfg.seed + 1)  # order and augmentation
        model.to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, one_cycle(total, cfg.pct_start))
        bar = progress_bar(total=total, desc=desc, progress=progress, unit="step")
        epoch_loss = float("nan")
        try:
            for epoch in range(cfg.epochs):
                order = torch.randperm(n, generator=gen)
                loss_sum, count = 0.0, 0
                for s in range(steps_per_epoch):
                    idx = order[s * cfg.batch_size:(s + 1) * cfg.batch_size]
                    xb = augment_batch(images[idx], cfg, gen).to(device)
                    yb = labels[idx].to(device)
                    loss = F.cross_entropy(model(xb), yb)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    sched.step()
                    loss_sum += loss.detach().item() * idx.numel()
                    count += idx.numel()
                    bar.update(1)
                    bar.set_postfix(epoch=f"{epoch + 1}/{cfg.epochs}", loss=f"{loss_sum / count:.3f}")
                epoch_loss = loss_sum / count
        finally:
            bar.close()
        model.eval()
    return TrainResult(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0, final_loss=epoch_loss,
                       train_images=n, steps=total)


@torch.inference_mode()
def predict_logits(model: torch.nn.Module, images: torch.Tensor, *, batch_size: int = 256,
                   device: str = "cpu") -> torch.Tensor:
    """Model outputs on ``images`` in eval mode, in batches; returned on CPU."""
    was_training = model.training
    model.eval()
    try:
        outs = [model(images[i:i + batch_size].to(device)).float().cpu()
                for i in range(0, images.shape[0], batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(outs) if outs else torch.empty(0)


def accuracy(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, *,
             batch_size: int = 256, device: str = "cpu") -> float:
    """Top-1 accuracy of ``model`` on (images, labels)."""
    if images.shape[0] == 0:
        raise ValueError("no evaluation images")
    pred = predict_logits(model, images, batch_size=batch_size, device=device).argmax(-1)
    return float((pred == labels.cpu()).double().mean())
