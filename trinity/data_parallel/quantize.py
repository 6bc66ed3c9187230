"""Uniform min-max quantization of parameters for transfer, with a precision chosen from the training state.

A tensor x is sent as integer codes q = round((x - lo) / scale), scale = (hi - lo) / (2**bits - 1),
plus lo and scale; the receiver rebuilds lo + q * scale. Rounding to the nearest code gives the
error bound |x - x'| <= scale / 2 (plus float32 rounding of lo + q * scale), checked in the tests.

Codes travel as uint8 (bits <= 8) or int16 (bits <= 16), so 8-bit codes cost 1 byte per
parameter and 9..16-bit codes 2 bytes, against 4 for float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trinity.data_parallel.config import DataParallelError
from trinity.errors import short_repr

MIN_BITS, MAX_BITS = 2, 16


def check_bits(bits: object, field: str = "bits") -> int:
    """Refuse a precision outside [2, 16] bits (1 bit keeps only lo/hi; above 16 send float32 instead)."""
    if not isinstance(bits, int) or isinstance(bits, bool) or not MIN_BITS <= bits <= MAX_BITS:
        raise DataParallelError(f"quantization precision must be an integer in [{MIN_BITS}, {MAX_BITS}] bits, "
                                f"got {short_repr(bits)}", field=field)
    return bits


@dataclass(frozen=True)
class Quantized:
    """Codes and the two numbers that rebuild a float32 tensor."""

    codes: torch.Tensor  # uint8 or int16, same shape as the source
    lo: float
    scale: float
    bits: int

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: the codes plus lo and scale as float32."""
        return self.codes.numel() * self.codes.element_size() + 8


def code_dtype(bits: int) -> torch.dtype:
    return torch.uint8 if check_bits(bits) <= 8 else torch.int16


def _offset(bits: int) -> int:
    """int16 holds codes up to 65535 only shifted by -32768."""
    return 0 if bits <= 8 else 32768


def quantize(x: torch.Tensor, bits: int) -> Quantized:
    check_bits(bits)
    x = x.detach().float()
    lo, hi = (float(x.min()), float(x.max())) if x.numel() else (0.0, 0.0)
    levels = 2 ** bits - 1
    scale = (hi - lo) / levels if hi > lo else 0.0
    if scale > 0:
        q = torch.round((x - lo) / scale).clamp_(0, levels)
    else:  # a constant tensor: every code 0 rebuilds it exactly
        q = torch.zeros_like(x)
    codes = (q - _offset(bits)).to(code_dtype(bits))
    return Quantized(codes=codes, lo=lo, scale=scale, bits=bits)


def dequantize(q: Quantized) -> torch.Tensor:
    return (q.codes.to(torch.float64) + _offset(q.bits)).mul_(q.scale).add_(q.lo).float()


def error_bound(x: torch.Tensor, bits: int) -> float:
    """The largest |x - dequantize(quantize(x))| rounding to the nearest code allows: half a step."""
    check_bits(bits)
    if x.numel() == 0:
        return 0.0
    return (float(x.max()) - float(x.min())) / (2 ** bits - 1) / 2


def precision_for(epoch_losses: list[float], *, coarse_bits: int = 8, fine_bits: int = 16,
                  threshold: float = 0.05) -> int:
    """H-PS's rule for the precision of the next transfers, from the training loss of each finished epoch.

    Coarse while the loss still falls by at least ``threshold`` (relative) per epoch: the updates are
    large against a coarse step. Fine from the first epoch where it falls by less, and from then on:
    near a plateau the updates shrink below a coarse step and coarse codes would erase them.
    """
    check_bits(coarse_bits, "coarse_bits")
    check_bits(fine_bits, "fine_bits")
    for prev, cur in zip(epoch_losses, epoch_losses[1:]):
        if prev > 0 and (prev - cur) / prev < threshold:
            return fine_bits
    return coarse_bits
