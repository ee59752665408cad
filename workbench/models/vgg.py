"""VGG-16 as torchvision defines it (no pretrained weights). At 32x32 the five pools leave 1x1, which
the adaptive 7x7 pool replicates, so the classifier keeps its 25 088-float input and 123.6 M
parameters, as in the Stanza paper's table."""
from torch import nn

from workbench.models import InputSpec, SplitModel, register


@register("vgg16", min_image_size=32)
def vgg16(spec: InputSpec, cfg) -> SplitModel:
    from torchvision.models import vgg16 as tv_vgg16  # here, not above: see models/__init__.py
    m = tv_vgg16(weights=None, num_classes=spec.num_classes, dropout=cfg.dropout)
    if spec.channels != 3:
        m.features[0] = nn.Conv2d(spec.channels, 64, kernel_size=3, padding=1)
    features = nn.Sequential(m.features, m.avgpool, nn.Flatten())
    return SplitModel(features, m.classifier)
