"""``signsgd``: signSGD with majority vote (Bernstein et al. 2018). Each rank sends one bit per
element (the sign of its gradient, 0 counted as +), all-gathered; the decoded gradient is the sign
of the vote, +1 / -1 per element (0 where the vote ties). Its magnitude is 1 whatever the gradient's:
use a learning rate suited to sign methods (about 1e-3 to 1e-4)."""
from dataclasses import dataclass

import torch

from workbench.compress import (COMPRESSORS, Compressor, CompressorConfig, packbits, register_compressor_schema,
                                unpackbits)


@dataclass
class SignSGDConfig(CompressorConfig):
    name: str = "signsgd"


register_compressor_schema("signsgd", SignSGDConfig)


def signs(bits: torch.Tensor) -> torch.Tensor:
    """bool (True: >= 0) -> +1.0 / -1.0."""
    return bits.float().mul_(2).sub_(1)


@COMPRESSORS.register("signsgd")
class SignSGD(Compressor):
    name = "signsgd"
    collective = "allgather"

    def encode(self, x, info):
        return packbits((x >= 0).cpu()), x.numel()

    def decode(self, received, ctx, info):
        votes = torch.zeros(ctx)
        for buf in received:
            votes += signs(unpackbits(buf.cpu(), ctx))
        return torch.sign(votes).to(received[0].device)

    def local(self, payload, ctx, info):
        return signs(unpackbits(payload.cpu(), ctx)).to(payload.device)
