"""The model registry's conv/FC split, checked against the parameter counts and boundary sizes in
docs/papers.md (torchvision definitions, 224x224, 1000 classes)."""
import pytest
import torch

from workbench.models import MODELS, InputSpec, build_model
import workbench


def _build(name, spec):
    cfg = workbench.compose([f"model={name}"])
    return build_model(cfg, spec)


@pytest.mark.parametrize("name, conv_m, fc_m, boundary", [
    ("alexnet", 2.47, 58.63, 9216),
    ("vgg16", 14.71, 123.64, 25088),
    ("resnet50", 23.51, 2.05, 2048),
])
def test_split_matches_paper_table(name, conv_m, fc_m, boundary):
    spec = InputSpec(3, 224, 1000)
    m = _build(name, spec)
    counts = m.param_counts()
    assert counts["features"] / 1e6 == pytest.approx(conv_m, abs=0.01)
    assert counts["classifier"] / 1e6 == pytest.approx(fc_m, abs=0.01)
    assert m.boundary_size(spec) == boundary


@pytest.mark.parametrize("name", sorted(MODELS))
def test_forward_is_classifier_of_features(name):
    entry = MODELS[name]
    spec = InputSpec(3, max(32, entry.min_image_size), 10)
    torch.manual_seed(0)
    m = _build(name, spec).eval()
    x = torch.randn(2, spec.channels, spec.image_size, spec.image_size)
    with torch.no_grad():
        out = m(x)
        a = m.features(x)
        assert a.shape == (2, m.boundary_size(spec))
        assert torch.equal(out, m.classifier(a))
    assert out.shape == (2, 10)


def test_small_models_fit_digits():
    spec = InputSpec(1, 8, 10)
    for name in ("small_cnn", "lenet5", "resnet18"):
        m = _build(name, spec).eval()
        assert m(torch.randn(3, 1, 8, 8)).shape == (3, 10)


def test_cifar_size_keeps_paper_classifier():
    spec = InputSpec(3, 32, 10)
    assert _build("vgg16", spec).boundary_size(spec) == 25088
    assert _build("alexnet", spec).boundary_size(spec) == 9216


def test_same_seed_same_weights():
    spec = InputSpec(1, 8, 10)
    torch.manual_seed(3)
    a = _build("small_cnn", spec)
    torch.manual_seed(3)
    b = _build("small_cnn", spec)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
