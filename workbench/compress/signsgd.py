"""``signsgd``: signSGD with majority vote (Bernstein et al. 2018). Each rank sends one bit per
element (the sign of its gradient, 0 counted as +), all-gathered; the decoded gradient is the sign
of the vote, +1 / -1 per element (0 where the vote ties), times ``scale``. Its magnitude is 1
whatever the gradient's, so a sign method wants a learning rate about 1e-3 to 1e-4 (Bernstein et al.)
where SGD uses 0.05-0.1: ``scale`` (default 0.002) brings the shared ``optim.lr=0.05`` to a sign step
of 1e-4; ``compressor.scale=1`` is the paper's plain ±1 (then set ``optim.lr`` for it)."""
from dataclasses import dataclass

import math

import torch

from workbench.compress import (COMPRESSORS, Compressor, CompressorConfig, check, packbits,
                                register_compressor_schema, unpackbits)


@dataclass
class SignSGDConfig(CompressorConfig):
    name: str = "signsgd"
    scale: float = 0.002  # the decoded vote is +-scale: a sign step of optim.lr * scale (> 0)


register_compressor_schema("signsgd", SignSGDConfig)


def signs(bits: torch.Tensor) -> torch.Tensor:
    """bool (True: >= 0) -> +1.0 / -1.0."""
    return bits.float().mul_(2).sub_(1)


@COMPRESSORS.register("signsgd")
class SignSGD(Compressor):
    name = "signsgd"
    collective = "allgather"

    @classmethod
    def payload_bytes(cls, cfg, n):
        return math.ceil(n / 8)  # one bit per element

    @classmethod
    def validate(cls, cfg):
        check(cfg.scale > 0, "scale", cfg.scale, "must be > 0")

    def encode(self, x, info):
        return packbits((x >= 0).cpu()), x.numel()

    def decode(self, received, ctx, info):
        votes = torch.zeros(ctx)
        for buf in received:
            votes += signs(unpackbits(buf.cpu(), ctx))
        return torch.sign(votes).mul_(self.cfg.scale).to(received[0].device)

    def local(self, payload, ctx, info):
        return signs(unpackbits(payload.cpu(), ctx)).mul_(self.cfg.scale).to(payload.device)
