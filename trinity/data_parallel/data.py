"""What the data-parallel runs train: the MLP on scikit-learn's digits (or labelled synthetic data), or a
registered PyTorch model on its own example batch (`task`).

digits: 1797 8x8 images of handwritten digits (10 classes) shipped inside scikit-learn (no download).
A fixed split (seed 0, the same for every training seed) keeps 20% for validation; features are
scaled to [0, 1]. ``synthetic`` (for machines without scikit-learn, and always labelled as such in
results): 10 Gaussian clusters in 64 dimensions, 1797 samples, the same split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from trinity.data_parallel.config import DataParallelError

N_FEATURES, N_CLASSES = 64, 10


@dataclass(frozen=True)
class Dataset:
    name: str  # "digits" or "synthetic"
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor


def _synthetic(n: int = 1797) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(12345)
    centres = rng.normal(0, 1, (N_CLASSES, N_FEATURES))
    y = rng.integers(0, N_CLASSES, n)
    x = centres[y] + rng.normal(0, 1.5, (n, N_FEATURES))
    return ((x - x.min()) / (x.max() - x.min())).astype(np.float32), y


def load(name: str = "digits") -> Dataset:
    """The named data set. Without scikit-learn ``digits`` is an error, never a silent switch to synthetic."""
    if name == "digits":
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            raise DataParallelError("scikit-learn is not installed; use data=synthetic", field="data") from None
        d = load_digits()
        x, y = (d.data / 16.0).astype(np.float32), d.target
    elif name == "synthetic":
        x, y = _synthetic()
    else:
        raise DataParallelError(f"must be 'digits' or 'synthetic', got {name!r}", field="data")
    order = np.random.default_rng(0).permutation(len(y))
    n_val = len(y) // 5
    val, train = order[:n_val], order[n_val:]
    t = lambda a, dt: torch.as_tensor(a, dtype=dt)  # noqa: E731
    return Dataset(name, t(x[train], torch.float32), t(y[train], torch.long), t(x[val], torch.float32),
                   t(y[val], torch.long))


def mlp(hidden: tuple[int, ...], seed: int) -> torch.nn.Module:
    """The model: an MLP 64 -> hidden... -> 10 with ReLU, initialised from ``seed`` (equal on every rank)."""
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    width = N_FEATURES
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, N_CLASSES))
    return torch.nn.Sequential(*layers)


@dataclass(frozen=True)
class Task:
    """A model, its data and its loss (the mean over a batch); ``classifies``: accuracy means something."""

    model: torch.nn.Module
    data: Dataset
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    classifies: bool


def task(cfg, seed: int) -> Task:
    """The `TrainConfig`'s model, initialised from ``seed`` (equal on every rank).

    A registered model trains on its example batch of ``global_batch`` samples, which is also its validation
    set: fixed synthetic data, so its runs measure step times (and that the loss falls), not accuracy.
    """
    if cfg.model == "mlp":
        return Task(mlp(cfg.hidden, seed), load(cfg.data), F.cross_entropy, True)
    from trinity.errors import TrinityError
    from trinity.export.torch_graph import build_torch_model
    torch.manual_seed(seed)
    try:
        built, _, _ = build_torch_model(cfg.model, cfg.global_batch, **dict(cfg.model_options))
    except TrinityError as e:
        raise DataParallelError(str(e), field="model") from None
    x, y = built.example_inputs[0], built.targets
    data = Dataset(f"{cfg.model} example batch (synthetic)", x, y, x, y)
    return Task(built.module, data, built.loss_fn, False)
