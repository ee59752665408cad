"""``none``: no compression, the plain average all-reduce DDP does by default (the reference every
other compressor is tested against). Dividing before the sum, as DDP does, keeps the result
bit-identical to DDP's."""
from dataclasses import dataclass

from workbench.compress import COMPRESSORS, Compressor, CompressorConfig, register_compressor_schema


@dataclass
class NoneConfig(CompressorConfig):
    name: str = "none"


register_compressor_schema("none", NoneConfig)


@COMPRESSORS.register("none")
class NoCompression(Compressor):
    name = "none"
    collective = "allreduce"
    carries = frozenset({"gradient", "delta", "weights", "activation"})
    category = "allreduce"  # the same traffic as trainer=sync

    def encode(self, x, info):
        return x.div(self.world), None

    def decode(self, received, ctx, info):
        return received

    def local(self, payload, ctx, info):
        return payload * self.world
