"""A small CNN for 8x8 digits up to 32x32 CIFAR: two conv blocks, then two FC layers.
Most of its parameters sit in the classifier, like the CNNs Stanza targets."""
from torch import nn

from workbench.models import InputSpec, SplitModel, register


@register("small_cnn", bench_data="digits")
def small_cnn(spec: InputSpec, cfg) -> SplitModel:
    w = cfg.width
    features = nn.Sequential(
        nn.Conv2d(spec.channels, w, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(inplace=True),
        nn.MaxPool2d(2) if spec.image_size >= 2 else nn.Identity(),
        # Fixed 4x4 output whatever the input size, so the classifier is the same for 8x8 and 32x32.
        nn.AdaptiveAvgPool2d(4), nn.Flatten(),
    )
    classifier = nn.Sequential(
        nn.Dropout(cfg.dropout), nn.Linear(2 * w * 16, 128), nn.ReLU(inplace=True),
        nn.Linear(128, spec.num_classes),
    )
    return SplitModel(features, classifier)
