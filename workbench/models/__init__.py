"""Model registry. Every model is a :class:`SplitModel`: a ``features`` part (convolutions; what
Stanza's CONV workers train) and a ``classifier`` part (fully connected; Stanza's FC workers), with
``forward(x) = classifier(features(x))``. ``features`` ends with a flatten, so its output is the
boundary activation of ``boundary_size`` floats per sample.

Add a model: one module in this package (or one named by an entry point of the ``workbench.models``
group) with a builder decorated by ``@register(name)`` that returns a :class:`SplitModel`, and one
``conf/model/<name>.yaml``.

Models built on torchvision import it inside their builder: importing ``torchvision.models`` pulls in
torch's compiler stack (dynamo, sympy, triton), about 2 s of start-up per rank on this 2-core
machine that a run of the small CNN never uses.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from workbench.core import ConfigError, InputSpec, check  # noqa: F401  (InputSpec: the models' import path)
from workbench.registry import Registry


class SplitModel(nn.Module):
    def __init__(self, features: nn.Module, classifier: nn.Module) -> None:
        super().__init__()
        self.features = features
        self.classifier = classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))

    def boundary_size(self, spec: InputSpec) -> int:
        """Floats per sample crossing the conv/FC boundary."""
        with torch.no_grad():
            was = self.training
            self.eval()
            out = self.features(torch.zeros(1, spec.channels, spec.image_size, spec.image_size))
            self.train(was)
        return int(out[0].numel())

    def param_counts(self) -> dict:
        return {"features": sum(p.numel() for p in self.features.parameters()),
                "classifier": sum(p.numel() for p in self.classifier.parameters())}


@dataclass(frozen=True)
class ModelEntry:
    build: Callable[..., SplitModel]  # build(spec: InputSpec, cfg) -> SplitModel
    min_image_size: int = 1
    note: str = ""
    bench_data: str = "synthetic"  # the data set the bench suites run it on (digits: made for 8x8 inputs)

    def validate(self, cfg) -> None:
        """``cfg.model``'s ranges, and that the data set's images are large enough for this model."""
        from workbench.data import DATASETS
        check(cfg.model.width >= 1, "model.width", cfg.model.width, "must be >= 1")
        check(0 <= cfg.model.dropout < 1, "model.dropout", cfg.model.dropout, "must be in [0, 1)")
        if cfg.data.name in DATASETS:
            self.check_input(DATASETS[cfg.data.name].spec(cfg.data), key="model.name")

    def check_input(self, spec: InputSpec, key: str = "model.name") -> None:
        if spec.image_size < self.min_image_size:
            raise ConfigError(
                f"invalid value for {key}: this model needs images of at least {self.min_image_size}x"
                f"{self.min_image_size}, the data set gives {spec.image_size}x{spec.image_size}; "
                f"set data.resize={self.min_image_size} or use a larger data set")


MODELS: Registry[ModelEntry] = Registry("model", key="model.name", entry_points="workbench.models")


def register(name: str, min_image_size: int = 1, note: str = "", bench_data: str = "synthetic"):
    def deco(fn):
        MODELS.register(name)(ModelEntry(fn, min_image_size, note, bench_data))
        return fn
    return deco


def build_model(cfg, spec: InputSpec) -> SplitModel:
    """Build ``cfg.model`` for inputs described by ``spec`` (seeded by the caller)."""
    entry = MODELS[cfg.model.name]
    entry.check_input(spec)
    return entry.build(spec, cfg.model)


MODELS.discover(__name__, __path__)
