"""ResNet-18/50 from torchvision (no pretrained weights). Below 64 px the stem is the usual CIFAR
variant (3x3 stride-1 conv, no max-pool). Almost all parameters are convolutional: the FC part is
one linear layer, which is why Stanza's layer separation gains nothing on ResNets."""
from torch import nn

from workbench.models import InputSpec, SplitModel, register


def _split(m, spec: InputSpec) -> SplitModel:
    if spec.image_size < 64:
        m.conv1 = nn.Conv2d(spec.channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        m.maxpool = nn.Identity()
    elif spec.channels != 3:
        m.conv1 = nn.Conv2d(spec.channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    features = nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool, m.layer1, m.layer2, m.layer3, m.layer4,
                             m.avgpool, nn.Flatten())
    return SplitModel(features, nn.Sequential(m.fc))


@register("resnet18", min_image_size=8)
def resnet18(spec: InputSpec, cfg) -> SplitModel:
    from torchvision.models import resnet18 as tv_resnet18  # here, not above: see models/__init__.py
    return _split(tv_resnet18(weights=None, num_classes=spec.num_classes), spec)


@register("resnet50", min_image_size=8)
def resnet50(spec: InputSpec, cfg) -> SplitModel:
    from torchvision.models import resnet50 as tv_resnet50  # here, not above: see models/__init__.py
    return _split(tv_resnet50(weights=None, num_classes=spec.num_classes), spec)
