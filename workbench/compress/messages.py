"""Which compressor may carry which message, and the codecs a trainer builds for each.

A trainer declares the messages it compresses (:meth:`Trainer.compressed_messages`): each a
:class:`Message` naming its kind, its transport and the config key that chooses its codec. A
compressor declares what it can carry (``Compressor.carries``, ``Compressor.point_to_point``, its
``collective``). Validation crosses the two before any process starts, and a combination neither
declares is refused in one line naming the compressors that can carry that message:

    python -m workbench trainer=stanza compressor=powersgd
    invalid value 'powersgd' for compressor.activations: Stanza's activations (point to point) can be carried
    by bf16, fp16, none, qsgd; set compressor.activations=none to send them dense

Kinds: ``gradient`` (averaged by a collective or pushed to a server), ``delta`` (a model delta or an
elastic difference: local SGD, BMUF, EASGD), ``weights`` (a parameter server's pull) and
``activation`` (Stanza's CONV->FC activations and the gradients sent back). Transports:
``collective`` (the compressor's own all-reduce or all-gather) and ``p2p`` (one rank's tensor,
:meth:`Compressor.send` / :meth:`Compressor.receive`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from omegaconf import OmegaConf

from workbench.core import ConfigError
from workbench.spec import MESSAGE_KEYS, message_codec

KINDS = ("gradient", "delta", "weights", "activation")
TRANSPORTS = ("collective", "p2p")


@dataclass(frozen=True)
class Message:
    """One message a trainer compresses."""

    kind: str  # one of KINDS
    transport: str  # one of TRANSPORTS
    key: str = "compressor.name"  # the key that chooses its codec: compressor.name | compressor.pull | compressor.activations
    what: str = ""  # how the error line names it ("the parameter server's push")


def can_carry(cls, kind: str, transport: str) -> bool:
    """Whether compressor class ``cls`` declares ``kind`` messages over ``transport``."""
    return kind in cls.carries and (transport == "collective" or cls.point_to_point)


def carriers(kind: str, transport: str) -> List[str]:
    """The registered compressors that can carry ``kind`` over ``transport``."""
    from workbench.compress import COMPRESSORS
    return [n for n in list(COMPRESSORS) if can_carry(COMPRESSORS[n], kind, transport)]


def codec_name(comp, msg: Message) -> Optional[str]:
    """The compressor that carries ``msg`` under config ``comp`` (``cfg.compressor``); None: dense."""
    if comp is None:
        return None
    value = comp.name if msg.key == "compressor.name" else str(comp.get(msg.key.split(".", 1)[1], "none"))
    return message_codec(comp.name, value)


def check_messages(comp, messages, trainer: str) -> None:
    """Raise ConfigError (one line) unless every message of ``messages`` has a compressor that
    carries it, and every codec key set away from its default is one ``trainer`` uses."""
    from workbench.compress import COMPRESSORS
    if comp is None:
        return
    used = {m.key for m in messages}
    if comp.name != "none" and "compressor.name" not in used and not messages:
        raise ConfigError(f"invalid value {comp.name!r} for compressor.name: trainer {trainer} compresses no "
                          f"messages; use compressor=none")
    for key, default in MESSAGE_KEYS:
        value = comp.get(key, default)
        if value != default and f"compressor.{key}" not in used:
            raise ConfigError(f"invalid value {value!r} for compressor.{key}: trainer {trainer} sends no such "
                              f"messages; leave it at {default}")
    for m in messages:
        name = codec_name(comp, m)
        if name is None:
            continue
        if name not in list(COMPRESSORS):
            raise ConfigError(f"invalid value {name!r} for {m.key}: valid: same, " + ", ".join(list(COMPRESSORS)))
        if not can_carry(COMPRESSORS[name], m.kind, m.transport):
            via = "point to point" if m.transport == "p2p" else "by a collective"
            hint = f"; set {m.key}=none to send them dense" if m.key != "compressor.name" else ""
            raise ConfigError(f"invalid value {name!r} for {m.key}: {m.what or m.kind + ' messages'} ({via}) can be "
                              f"carried by {', '.join(carriers(m.kind, m.transport))}{hint}")


def codec_config(comp, msg: Message):
    """The config node of the compressor that carries ``msg``: ``comp`` itself where it is the
    one named, else that compressor's schema defaults (``compressor.pull=fp16``). None: dense."""
    from workbench.compress import SCHEMAS
    name = codec_name(comp, msg)
    if name is None:
        return None
    if name == comp.name:
        return comp
    return OmegaConf.structured(SCHEMAS[name])


def build_codec(comp, msg: Message, rank: int, world: int = 1, seed: int = 0):
    """The compressor (error feedback included where its config asks) that carries ``msg``, or
    None where the message goes dense. ``world=1`` for point-to-point messages."""
    from workbench.compress import build_compressor
    node = codec_config(comp, msg)
    return None if node is None else build_compressor(node, rank, world, seed)
