"""LeNet-5 (LeCun et al. 1998) with padded convolutions so that 8x8 digits fit as well as 28x28."""
from torch import nn

from workbench.models import InputSpec, SplitModel, register


@register("lenet5", min_image_size=4, bench_data="digits")
def lenet5(spec: InputSpec, cfg) -> SplitModel:
    features = nn.Sequential(
        nn.Conv2d(spec.channels, 6, 5, padding=2), nn.Tanh(), nn.AvgPool2d(2),
        nn.Conv2d(6, 16, 5, padding=2), nn.Tanh(), nn.AvgPool2d(2),
        nn.Flatten(),
    )
    side = spec.image_size // 2 // 2
    classifier = nn.Sequential(
        nn.Linear(16 * side * side, 120), nn.Tanh(), nn.Linear(120, 84), nn.Tanh(),
        nn.Linear(84, spec.num_classes),
    )
    return SplitModel(features, classifier)
