"""``fp16``: all-reduce in half precision (2 bytes per element), as torch's ``fp16_compress_hook``:
cast, divide by the world size, sum, cast back."""
from dataclasses import dataclass

import torch

from workbench.compress import COMPRESSORS, Compressor, CompressorConfig, register_compressor_schema


@dataclass
class FP16Config(CompressorConfig):
    name: str = "fp16"


register_compressor_schema("fp16", FP16Config)


@COMPRESSORS.register("fp16")
class FP16(Compressor):
    name = "fp16"
    collective = "allreduce"
    carries = frozenset({"gradient", "delta", "weights", "activation"})
    dtype = torch.float16

    @classmethod
    def payload_bytes(cls, cfg, n):
        return 2 * n  # one 16-bit float per element

    def encode(self, x, info):
        return x.to(self.dtype).div_(self.world), x.dtype

    def decode(self, received, ctx, info):
        return received.to(ctx)

    def local(self, payload, ctx, info):
        return payload.to(ctx) * self.world

    def p2p_context(self, n):
        return torch.float32
