"""``efsignsgd``: scaled sign with error feedback (EF-SignSGD, Karimireddy et al. 2019). Each rank
sends ``||p||_1 / n * sign(p)`` of its error-corrected gradient ``p = g + e`` (one float32 scale and
one bit per element) and keeps ``e = p - scale * sign(p)``; the decode averages the ranks' scaled
signs. Error feedback is on by default (``compressor.error_feedback``), through the same wrapper any
compressor can use. ``step_scale`` multiplies the decoded average only (the residual keeps the full
reconstruction): shipped at 0.5, since the shared lr 0.05 with momentum 0.9 was on the edge of
stability for it (conf/compressor/efsignsgd.yaml); 1 is the paper's step."""
from dataclasses import dataclass

import math

import torch

from workbench.compress import (COMPRESSORS, Compressor, CompressorConfig, as_bytes, check, from_bytes, packbits,
                                register_compressor_schema, unpackbits)
from workbench.compress.signsgd import signs


@dataclass
class EFSignSGDConfig(CompressorConfig):
    name: str = "efsignsgd"
    error_feedback: bool = True  # the "EF" of EF-SignSGD
    step_scale: float = 1.0  # the decoded average is multiplied by this (the residual is not): a step of optim.lr * step_scale (> 0)


register_compressor_schema("efsignsgd", EFSignSGDConfig)


@COMPRESSORS.register("efsignsgd")
class ScaledSign(Compressor):
    name = "efsignsgd"
    collective = "allgather"

    @classmethod
    def payload_bytes(cls, cfg, n):
        return 4 + math.ceil(n / 8)  # the float32 scale + one bit per element

    def encode(self, x, info):
        n = x.numel()
        scale = (x.abs().sum() / max(1, n)).float().reshape(1).cpu()
        return as_bytes(scale, packbits((x >= 0).cpu())), n

    def _one(self, buf, n):
        scale, off = from_bytes(buf.cpu(), torch.float32, 1)
        return signs(unpackbits(buf.cpu()[off:], n)).mul_(scale)

    @classmethod
    def validate(cls, cfg):
        check(cfg.step_scale > 0, "step_scale", cfg.step_scale, "must be > 0")

    def decode(self, received, ctx, info):
        out = torch.zeros(ctx)
        for buf in received:
            out += self._one(buf, ctx)
        return out.div_(self.world).mul_(self.cfg.step_scale).to(received[0].device)

    def receive(self, payload, n, info):
        """A point-to-point payload (a push) decoded with ``step_scale``, as the collective's average is."""
        return super().receive(payload, n, info).mul_(self.cfg.step_scale)

    def local(self, payload, ctx, info):
        return self._one(payload, ctx).to(payload.device)
