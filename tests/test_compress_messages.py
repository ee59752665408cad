"""Which compressor carries which message: the declarations, the refusals before launch (one line
naming the compressors that can carry the message), the labels, and the page's table."""
import re
from pathlib import Path

import pytest
import torch

import workbench
from workbench.compress import COMPRESSORS, SCHEMAS, BucketInfo, build_compressor
from workbench.compress.messages import can_carry, carriers
from workbench.config import ConfigError, validate
from workbench.trainers import paradigm_of_config

DOC = Path(__file__).resolve().parent.parent / "docs" / "compression.md"
COLUMNS = {"gradient / delta by collective": [("gradient", "collective"), ("delta", "collective")],
           "gradient / delta p2p": [("gradient", "p2p"), ("delta", "p2p")],
           "weights (pull)": [("weights", "p2p")], "activation": [("activation", "p2p")]}


def test_the_pages_table_is_what_the_compressors_declare():
    text = DOC.read_text()
    header = "| compressor | " + " | ".join(COLUMNS) + " |"
    assert header in text
    rows = text.split(header, 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    seen = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        names = re.findall(r"`(\w+)`", cells[0])
        for name in names:
            seen.add(name)
            for (title, messages), mark in zip(COLUMNS.items(), cells[1:]):
                for kind, transport in messages:
                    assert can_carry(COMPRESSORS[name], kind, transport) == (mark == "✓"), (name, title)
    assert seen == set(COMPRESSORS)


@pytest.mark.parametrize("name", [n for n in SCHEMAS if COMPRESSORS[n].point_to_point])
def test_point_to_point_payload_is_its_declared_size_and_stands_for_the_tensor(name):
    from omegaconf import OmegaConf
    cfg = OmegaConf.structured(SCHEMAS[name])
    comp = build_compressor(cfg, rank=0, world=1, seed=3)
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    info = BucketInfo(index=0, step=0, rank=0, world=1)
    payload = comp.send(x, info)
    assert payload.numel() * payload.element_size() == COMPRESSORS[name].payload_bytes(cfg, x.numel())
    y = comp.receive(payload, x.numel(), info)
    assert y.shape == x.shape and y.dtype == torch.float32
    if name == "none":
        assert torch.equal(x, y)
    elif name in ("fp16", "bf16"):
        assert torch.allclose(x, y, rtol=1e-2, atol=1e-2)
    else:  # a lossy codec keeps the direction: positive correlation with what was sent
        assert torch.dot(x, y) > 0


@pytest.mark.parametrize("overrides,key,valid", [
    (["trainer=stanza", "compressor=topk"], "compressor.activations", "bf16, fp16, none, qsgd"),
    (["trainer=ps", "compressor=powersgd"], "compressor.name", "bf16, efsignsgd, fp16, mstopk, none, qsgd, signsgd, topk"),
    (["trainer=easgd", "compressor=randomk"], "compressor.name", "bf16, efsignsgd"),
    (["trainer=ps", "compressor=topk", "compressor.pull=signsgd"], "compressor.pull", "bf16, fp16, mstopk, none, qsgd, topk"),
    (["trainer=sync", "compressor=topk"], "compressor.name", "compresses no messages"),
    (["trainer=compressed", "compressor=topk", "compressor.pull=fp16"], "compressor.pull", "sends no such messages"),
])
def test_a_combination_no_one_declares_is_refused_in_one_line(overrides, key, valid):
    with pytest.raises(ConfigError) as e:
        validate(workbench.compose(overrides))
    msg = str(e.value)
    assert "\n" not in msg and key in msg and valid in msg, msg


@pytest.mark.parametrize("overrides,label", [
    (["trainer=ps", "compressor=topk"], "ps/sync+topk"),
    (["trainer=bmuf", "compressor=powersgd"], "bmuf+powersgd"),
    (["trainer=stanza", "trainer.fc_workers=1", "compressor=fp16"], "stanza/n_f=1+fp16"),
    (["trainer=compressed", "compressor=topk"], "compressed/topk"),
    (["trainer=ps", "compressor=none"], "ps/sync"),
    (["trainer=ps", "compressor=topk", "compressor.pull=fp16"], "ps/sync+topk,pull=fp16"),
    (["trainer=ps", "compressor=topk", "compressor.pull=same"], "ps/sync+topk,pull=topk"),
    (["trainer=ps", "compressor=none", "compressor.pull=fp16"], "ps/sync+pull=fp16"),
    (["trainer=stanza", "trainer.fc_workers=1", "compressor=powersgd", "compressor.activations=fp16"],
     "stanza/n_f=1+powersgd,activations=fp16"),
    (["trainer=stanza", "trainer.fc_workers=1", "compressor=fp16", "compressor.activations=none"],
     "stanza/n_f=1+fp16,activations=none"),
    (["trainer=stanza", "trainer.fc_workers=1", "compressor=none", "compressor.activations=bf16"],
     "stanza/n_f=1+activations=bf16"),
])
def test_labels_name_the_compressor_after_the_protocol(overrides, label):
    cfg = workbench.compose(overrides)
    validate(cfg)
    assert paradigm_of_config(cfg) == label


def test_every_kind_has_a_carrier_besides_none():
    for kind, transport in (("gradient", "collective"), ("gradient", "p2p"), ("delta", "collective"),
                            ("weights", "p2p"), ("activation", "p2p")):
        assert set(carriers(kind, transport)) - {"none"}, (kind, transport)
