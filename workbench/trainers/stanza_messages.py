"""What Stanza compresses (``trainer=stanza compressor=...``): the boundary messages between CONV and
FC workers, and the CONV group's gradient all-reduce (docs/stanza.md, "Compression in Stanza").

Two codecs, one config:

* ``compressor.activations`` (``same``: the codec ``compressor.name`` names) carries the activations
  a CONV worker sends its FC worker and the activation gradients that come back, point to point
  (:meth:`Compressor.send` / :meth:`Compressor.receive`, an instance built with world 1). Only a
  compressor that carries ``activation`` messages may (none, fp16, bf16, qsgd): validation refuses
  the others before launch. Activations are not accumulated from step to step, so they get no
  error feedback, whatever ``compressor.error_feedback`` says (it applies to the all-reduce). A
  stochastic codec draws from the run's seed, the message's CONV worker, direction and step: a
  rerun, or a resumed run, sends the same bits.
* ``compressor.name`` carries the CONV group's all-reduce: DDP's buckets go through
  :func:`workbench.compress.hook.compression_hook` on the CONV group's process group, with error
  feedback as the config says, and the average it returns times n_c (Stanza *sums* the CONV
  gradients: the FC side already divides the loss by the global batch).

Either codec ``none`` leaves that message exactly as uncompressed Stanza sends it (the same bits).
The meter's categories stay Stanza's (``activations``, ``activation_grads``, ``allreduce_conv``); the
bytes they count are the payloads on the wire.
"""
import copy
from typing import Dict, List, Optional

import torch
import torch.distributed as dist

from workbench import data as data_mod
from workbench.compress import COMPRESSORS
from workbench.compress.base import BucketInfo
from workbench.compress.hook import Channel, CompressionHookState, compression_hook
from workbench.compress.messages import Message, build_codec, codec_config, codec_name  # noqa: F401  (stanza.py)
from workbench.models import MODELS
from workbench.perfmodel import stanza as pm

ALLREDUCE = Message("gradient", "collective", what="the CONV group's all-reduce")
ACTIVATIONS = Message("activation", "p2p", key="compressor.activations", what="Stanza's activations")
MESSAGES = [ALLREDUCE, ACTIVATIONS]

FORWARD, BACKWARD = 0, 1  # a boundary message's direction: activations out, their gradients back


class Link:
    """The codec of one direction of Stanza's boundary messages of ``n`` floats each: the tensor a
    sender puts on the wire, the buffer a receiver posts for it, and the float32 tensor it decodes
    to. Codec none: the float32 tensor itself, as uncompressed Stanza sends it."""

    def __init__(self, comp, n: int, device: torch.device, seed: int, direction: int) -> None:
        node = codec_config(comp, ACTIVATIONS)
        # Built directly, not through build_compressor: no error feedback on activations.
        self.codec = None if node is None else COMPRESSORS[node.name](node, 0, 1, seed)
        self.n, self.device, self.seed, self.direction = n, device, seed, direction
        if self.codec is None:
            self.dtype, self.numel = torch.float32, n
        else:  # dense codecs (and qsgd) put the same number of bytes on the wire for every n-float tensor
            probe = self.codec.send(torch.zeros(n, device=device), self._info(0, 0))
            self.dtype, self.numel = probe.dtype, probe.numel()

    def _info(self, conv_rank: int, step: int) -> BucketInfo:
        return BucketInfo(index=self.direction, step=step, rank=conv_rank, world=1, seed=self.seed)

    def buffer(self, shape) -> torch.Tensor:
        """A receive buffer: ``shape`` (float32) without a codec, else the payload's flat length."""
        return torch.empty(shape if self.codec is None else (self.numel,), dtype=self.dtype, device=self.device)

    def encode(self, x: torch.Tensor, conv_rank: int, step: int) -> torch.Tensor:
        """What goes on the wire for ``x`` (on the comm device), the message of CONV worker
        ``conv_rank`` at ``step``."""
        x = x.to(self.device).contiguous()
        if self.codec is None:
            return x
        return self.codec.send(x.reshape(-1), self._info(conv_rank, step)).reshape(-1).to(self.device).contiguous()

    def decode(self, buf: torch.Tensor, conv_rank: int, step: int) -> torch.Tensor:
        """The float32 tensor a received ``buf`` stands for (flat with a codec)."""
        if self.codec is None:
            return buf
        return self.codec.receive(buf, self.n, self._info(conv_rank, step))


class _StanzaChannel(Channel):
    """The compressor's collectives, counted under Stanza's category whatever the compressor calls them."""

    def __init__(self, meter, group, category: str) -> None:
        super().__init__(meter, group)
        self.category = category

    def exchange(self, collective: str, payload: torch.Tensor, category: str):
        return super().exchange(collective, payload, self.category)


class ConvReduceState:
    """The hook state of the CONV group's compressed all-reduce (:func:`conv_sum_hook`): the
    compressor's :class:`CompressionHookState`, the group's size, and whether the hook is settling
    DDP's buckets (a plain sum that leaves the compressor alone)."""

    __slots__ = ("inner", "size", "group", "settling")

    def __init__(self, comp, meter, group, seed: int) -> None:
        self.group, self.size = group, dist.get_world_size(group)
        codec = build_codec(comp, ALLREDUCE, dist.get_rank(group), self.size, seed)
        self.inner = CompressionHookState(codec, meter, group, seed)
        self.inner.channel = _StanzaChannel(meter, group, "allreduce_conv")
        self.settling = False


def conv_sum_hook(state: ConvReduceState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP hook: the bucket's sum over the CONV group through the compressor (its average times n_c).
    (DDP checks these annotations as objects: this module does without ``from __future__ import annotations``.)"""
    if state.settling:
        return state.inner.meter.all_reduce_async(bucket.buffer(), "setup", group=state.group).then(lambda f: f.value()[0])
    return compression_hook(state.inner, bucket).then(lambda f: f.value().mul_(state.size))


def settle_buckets(ddp, state: ConvReduceState, features: torch.nn.Module, x: torch.Tensor) -> None:
    """One backward of the CONV part on a zero batch, summed plainly, then everything restored: DDP
    rebuilds its buckets after its first backward, and compressor state (residuals, PowerSGD's Q)
    is laid out per bucket, so every step, fresh or resumed, uses the rebuilt layout
    (:meth:`workbench.trainers.compressed.CompressedTrainer.settle_buckets` does the same)."""
    saved = copy.deepcopy(features.state_dict())
    rng = torch.get_rng_state()
    state.settling = True
    try:
        ddp(x).sum().backward()
    finally:
        state.settling = False
    features.zero_grad(set_to_none=True)
    features.load_state_dict(saved)
    torch.set_rng_state(rng)


# ---------------------------------------------------------------------------------------------
# The analytic count of a compressed run's bytes (the spec's analytic_bytes)

def activation_bytes(comp, n: int) -> int:
    """Bytes of one boundary message of ``n`` floats under config ``comp`` (``cfg.compressor``)."""
    node = codec_config(comp, ACTIVATIONS)
    return 4 * n if node is None else COMPRESSORS[node.name].payload_bytes(node, n)


def allreduce_sent_bytes(comp, shapes, buckets: List[int], n_c: int) -> Optional[float]:
    """Bytes a CONV worker sends per step in the CONV group's all-reduce through ``comp``'s
    compressor, DDP's buckets ``buckets`` (element counts) of the CONV part's parameter ``shapes``;
    None where it is not compressed (the dense ring)."""
    node = codec_config(comp, ALLREDUCE)
    if node is None:
        return None
    cls = COMPRESSORS[node.name]
    return cls.sent_bytes(cls.payload_bytes_of_shapes(node, shapes, buckets), len(buckets), n_c)


def conv_worker_bytes(cfg, summary) -> Dict[str, Dict[str, float]]:
    """A CONV worker's bytes per step by category: the conv part's all-reduce among the CONV workers
    (a ring, or the compressor's collective over DDP's buckets), plus its boundary activations and
    their gradients, one :meth:`Compressor.payload_bytes` each under a codec
    (:func:`workbench.perfmodel.stanza.stanza_conv_worker_bytes`)."""
    st, b = summary["stanza"], summary["batch_per_worker"]
    comp, a, n_c = cfg.get("compressor"), st["boundary_floats"], st["conv_workers"]
    ar = None
    if st.get("conv_buckets") is not None:
        ar = allreduce_sent_bytes(comp, _features_shapes(cfg), st["conv_buckets"], n_c)
    return pm.stanza_conv_worker_bytes(st["params"]["features"], a, b, n_c, act_bytes=activation_bytes(comp, a * b),
                                       allreduce_bytes=ar)


def _features_shapes(cfg) -> List[tuple]:
    """The CONV part's parameter shapes, in DDP's parameter order (built on the meta device)."""
    spec = data_mod.DATASETS[cfg.data.name].spec(cfg.data)
    with torch.device("meta"):
        return [tuple(p.shape) for p in MODELS[cfg.model.name].build(spec, cfg.model).features.parameters()]
