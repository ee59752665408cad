"""``bf16``: all-reduce in bfloat16 (2 bytes per element, float32's exponent range), as torch's
``bf16_compress_hook``."""
from dataclasses import dataclass

import torch

from workbench.compress import COMPRESSORS, CompressorConfig, register_compressor_schema
from workbench.compress.fp16 import FP16


@dataclass
class BF16Config(CompressorConfig):
    name: str = "bf16"


register_compressor_schema("bf16", BF16Config)


@COMPRESSORS.register("bf16")
class BF16(FP16):
    name = "bf16"
    dtype = torch.bfloat16
