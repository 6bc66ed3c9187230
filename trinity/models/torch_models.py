"""PyTorch example models, built deterministically for make_fx export.

Each builder seeds torch, builds the module and a batch of example data, and
returns a `TorchModel`. Options are keyword arguments; the registry
(`trinity.models.specs`) names the builders.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TorchModel:
    """A module, one batch of inputs and targets, and the loss ``loss_fn(module(*inputs), targets)``."""

    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    targets: torch.Tensor
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    def to(self, device: str | torch.device) -> TorchModel:
        """The same model with its module and data on ``device`` (trace there: ops made in forward name it)."""
        return TorchModel(self.module.to(device), tuple(x.to(device) for x in self.example_inputs),
                          self.targets.to(device), self.loss_fn)


# ------------------------------------------------------------------ transformer
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, seq_len: int):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        # Written out (not scaled_dot_product_attention) so every step is its own op.
        self.register_buffer("mask", torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.n_heads)
        scores = scores.masked_fill(~self.mask[:s, :s], float("-inf"))
        y = scores.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class TransformerBlock(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, seq_len: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, seq_len)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TransformerLM(nn.Module):
    """Decoder-only (pre-LayerNorm) transformer language model."""

    def __init__(self, vocab_size: int, seq_len: int, d_model: int, n_heads: int, d_ff: int, n_layers: int):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, d_ff, seq_len) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build_transformer_lm(batch_size: int, *, seq_len: int = 64, vocab_size: int = 1000, d_model: int = 128,
                         n_heads: int = 4, d_ff: int = 512, n_layers: int = 2, seed: int = 0) -> TorchModel:
    """A small GPT-style LM on random token sequences (targets: the next token)."""
    torch.manual_seed(seed)
    module = TransformerLM(vocab_size, seq_len, d_model, n_heads, d_ff, n_layers)
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len + 1))
    return TorchModel(module, (tokens[:, :-1].contiguous(),), tokens[:, 1:].contiguous(), _lm_loss)


# ----------------------------------------------------------------------- resnet
class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class ResNetSmall(nn.Module):
    """CIFAR-style ResNet: a 3x3 stem, three stages of BasicBlocks, global pooling."""

    def __init__(self, widths: tuple[int, ...], blocks_per_stage: int, num_classes: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks, c_in = [], widths[0]
        for i, width in enumerate(widths):
            for j in range(blocks_per_stage):
                blocks.append(BasicBlock(c_in, width, 2 if i > 0 and j == 0 else 1))
                c_in = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(x.mean(dim=(2, 3)))


def build_resnet_small(batch_size: int, *, widths: tuple[int, ...] = (16, 32, 64), blocks_per_stage: int = 2,
                       num_classes: int = 10, image_size: int = 32, seed: int = 0) -> TorchModel:
    """A ResNet-14-sized CNN on random 32x32x3 images with random labels."""
    torch.manual_seed(seed)
    module = ResNetSmall(tuple(widths), blocks_per_stage, num_classes)
    images = torch.randn(batch_size, 3, image_size, image_size)
    labels = torch.randint(0, num_classes, (batch_size,))
    return TorchModel(module, (images,), labels, F.cross_entropy)


# ------------------------------------------------------------ layer sequences
# Pipeline parallelism splits a model into contiguous stages of layers. These wrappers share the
# model's own submodules (no copies), so running the sequence is running the model.
class LMEmbedding(nn.Module):
    """Token + position embedding of a `TransformerLM` (the first layer of its sequence)."""

    def __init__(self, lm: TransformerLM):
        super().__init__()
        self.tok, self.pos = lm.tok, lm.pos

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.tok(tokens) + self.pos(positions)


class LMHead(nn.Module):
    """Final LayerNorm and vocabulary projection of a `TransformerLM` (its last layer)."""

    def __init__(self, lm: TransformerLM):
        super().__init__()
        self.ln_f, self.head = lm.ln_f, lm.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln_f(x))


class PoolHead(nn.Module):
    """Global average pooling and classifier of a `ResNetSmall` (its last layer)."""

    def __init__(self, net: ResNetSmall):
        super().__init__()
        self.fc = net.fc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean(dim=(2, 3)))


def layer_sequence(module: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model as named layers applied one after the other: ``module(x) == layers[-1](...layers[0](x))``.

    Transformer LM: embedding, each block, final norm + head. ResNet: stem, each block, pool + head.
    The loss (``TorchModel.loss_fn``) follows the last layer.
    """
    if isinstance(module, TransformerLM):
        return [("embedding", LMEmbedding(module)),
                *((f"block{i}", b) for i, b in enumerate(module.blocks)),
                ("head", LMHead(module))]
    if isinstance(module, ResNetSmall):
        return [("stem", module.stem), *((f"block{i}", b) for i, b in enumerate(module.blocks)),
                ("head", PoolHead(module))]
    raise TypeError(f"no layer sequence for {type(module).__name__}")
