"""AlexNet as torchvision defines it (no pretrained weights: nothing is downloaded).

For CIFAR-size inputs (< 64 px) the first convolution is 5x5 stride 2 instead of 11x11 stride 4,
otherwise the three max-pools shrink 32x32 to nothing. The adaptive 6x6 pool keeps the classifier
(and so the 9 216-float boundary and 96 % of the parameters in FC layers) exactly as in the paper.
"""
from torch import nn

from workbench.models import InputSpec, SplitModel, register


@register("alexnet", min_image_size=32)
def alexnet(spec: InputSpec, cfg) -> SplitModel:
    from torchvision.models import alexnet as tv_alexnet  # here, not above: see models/__init__.py
    m = tv_alexnet(weights=None, num_classes=spec.num_classes, dropout=cfg.dropout)
    if spec.image_size < 64:
        m.features[0] = nn.Conv2d(spec.channels, 64, kernel_size=5, stride=2, padding=2)
    else:
        m.features[0] = nn.Conv2d(spec.channels, 64, kernel_size=11, stride=4, padding=2)
    features = nn.Sequential(m.features, m.avgpool, nn.Flatten())
    return SplitModel(features, m.classifier)
