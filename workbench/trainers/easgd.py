"""Elastic averaging SGD (Zhang, Choromanska & LeCun 2015; docs/papers.md §3) with the centre variable
x̃ on the parameter servers.

Workers train their own copy x_i with local SGD (the run's optimizer and schedule); every
``trainer.period`` (τ) local steps a worker sends x_i to the servers (``param_push``) and gets the
centre back (``param_pull``); with moving rate α = ηρ (``trainer.moving_rate``):

- ``mode=async``: the server answers with x̃ and sets x̃ ← x̃ + α(x_i − x̃) at once; the worker sets
  x_i ← x_i − α(x_i − x̃). Each exchange is one atomic server update (the paper's asynchronous EASGD).
- ``mode=sync``: the server waits for every worker, answers all with the same x̃ and sets
  x̃ ← x̃ + α Σ_i (x_i − x̃) (the synchronous form, every τ steps instead of every step).

The elastic step is taken after the τ-th local step. Rank 0 evaluates, and saves as ``model.pt``,
the centre x̃ (the consensus the method returns), not its own x_i.

With a compressor (``compressor=fp16``, ``topk`` …: one that carries a delta point to point) a
worker sends, instead of x_i, its elastic difference d_i = x_i − c_i against the centre c_i it
received at its last exchange, compressed (error feedback per the config, a residual per server
shard); the server, which keeps the c_i it sent each worker, takes c_i + decode(d_i) for x_i. The
difference rides beside the protocol's ``PULL`` (the rule receives it before it answers with the
centre; category ``param_push``, its 16-byte length header ``ps_control``), so ``param_push`` holds
exactly the codec's bytes. The centre comes back dense (``param_pull``). ``compressor=none`` is the
plain exchange above, bit for bit.

    python -m workbench trainer=easgd cluster.nproc=4                 # 3 workers, 1 server, async
    python -m workbench trainer=easgd trainer.mode=sync trainer.period=4 trainer.moving_rate=0.2
    python -m workbench trainer=easgd compressor=topk compressor.k=0.05 compressor.error_feedback=true
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch

from workbench.compress.base import BucketInfo
from workbench.compress.delta import recv_payload, send_payload
from workbench.compress.messages import Message, build_codec
from workbench.core import ConfigError, TrainerConfig, store_schema
from workbench.meter import nbytes
from workbench.ps import protocol as P
from workbench.ps.stats import ServerStats
from workbench.ps.trainer import PSTrainer, smoke_overrides
from workbench.perfmodel.efficiency import Update
from workbench.spec import ParadigmSpec, declare
from workbench.trainers import TRAINERS
from workbench.trainers.base import build_optimizer


@dataclass
class EASGDConfig(TrainerConfig):
    name: str = "easgd"
    num_servers: int = 1  # server ranks holding the centre variable (the last ones)
    mode: str = "async"  # async: each exchange updates the centre at once | sync: all workers, then update
    period: int = 4  # tau: local steps between elastic exchanges
    moving_rate: float = 0.1  # alpha = eta * rho, in (0, 1): how far worker and centre move toward each other


store_schema("trainer", "easgd", EASGDConfig)


class ElasticRule:
    """A server's shard of the centre variable (see :mod:`workbench.ps.server` for the interface)."""

    def __init__(self, center: torch.Tensor, workers, *, sync: bool, alpha: float) -> None:
        self.params, self.sync, self.alpha = center, sync, alpha
        self.active = set(workers)
        self.timestamp = 0
        self.pushed = {}  # sync: worker -> x_i of this round
        self.stats = ServerStats()

    def _round(self) -> list:
        t0 = time.perf_counter()
        old = self.params.clone()
        for w in sorted(self.pushed):  # worker order: the sum does not depend on arrival order
            self.params.add_(self.pushed[w] - old, alpha=self.alpha)
        self.timestamp += 1
        self.stats.update([0] * len(self.pushed), time.perf_counter() - t0)
        out = [(w, P.APPLIED, old) for w in sorted(self.pushed)]
        self.pushed = {}
        return out

    def on_push(self, worker: int, ts: int, x: torch.Tensor) -> list:
        if not self.sync:
            t0 = time.perf_counter()
            old = self.params.clone()
            self.params.add_(x - old, alpha=self.alpha)
            tau = self.timestamp - ts
            self.timestamp += 1
            self.stats.update([tau], time.perf_counter() - t0)
            return [(worker, P.APPLIED, old)]
        self.pushed[worker] = x
        return self._round() if set(self.pushed) >= self.active else []

    def on_pull(self, worker: int) -> list:
        return [(worker, P.APPLIED, self.params)]

    def on_done(self, worker: int) -> list:
        self.active.discard(worker)
        if self.sync and self.pushed and set(self.pushed) >= self.active:
            return self._round()
        return []

    def on_barrier(self, worker: int) -> list:
        return []

    def release_barrier(self, workers) -> list:
        # no payload: a worker keeps its own x_i (the centre reaches it at its next exchange)
        return [(w, P.APPLIED, torch.empty(0)) for w in workers]

    def state_dict(self) -> dict:
        return {"params": self.params, "timestamp": self.timestamp, "active": sorted(self.active),
                "pushed": {int(w): x for w, x in self.pushed.items()}, "stats": self.stats.state_dict()}

    def load_state_dict(self, st: dict) -> None:
        with torch.no_grad():
            self.params.copy_(st["params"])
        self.timestamp, self.active = st["timestamp"], set(st["active"])
        self.pushed = {int(w): x for w, x in st["pushed"].items()}
        self.stats.load_state_dict(st["stats"])

    def finish(self) -> None:
        pass


TAG_DIFF = 16  # a compressed elastic difference's header; its payload on 17 (the protocol's tags are 11-15)


class CompressedElasticRule(ElasticRule):
    """:class:`ElasticRule` whose workers send a compressed elastic difference against the centre
    each last received (``sent``) before a ``PULL``; the rule receives it and applies c_i + d_i as
    that worker's x_i (the module docstring). Every ``PULL`` of such a run carries a difference:
    EASGD's workers pull only in their exchange."""

    def __init__(self, center: torch.Tensor, workers, *, sync: bool, alpha: float, codec, meter, group,
                 shard: int) -> None:
        super().__init__(center, workers, sync=sync, alpha=alpha)
        self.codec, self.meter, self.group, self.shard = codec, meter, group, shard
        self.sent = {int(w): center.clone() for w in workers}  # c_i: the centre worker i holds
        self.seen = {int(w): 0 for w in workers}  # the clock its last reply carried (staleness)

    def _note(self, replies: list) -> list:
        for w, _, t in replies:  # the loop sends each reply with the clock as it is now
            self.seen[w] = self.timestamp
            if t.numel():
                self.sent[w] = t
        return replies

    def on_pull(self, worker: int) -> list:
        self.stats.mark()
        payload = recv_payload(self.meter, worker, EASGDTrainer.push_category, P.CONTROL, TAG_DIFF, self.group)
        info = BucketInfo(index=self.shard, step=self.timestamp, rank=worker, world=1)
        x = self.sent[worker] + self.codec.receive(payload, self.params.numel(), info)
        return self._note(self.on_push(worker, self.seen[worker], x))

    def on_done(self, worker: int) -> list:
        return self._note(super().on_done(worker))

    def release_barrier(self, workers) -> list:
        return self._note(super().release_barrier(workers))

    def state_dict(self) -> dict:
        return {**super().state_dict(), "sent": dict(self.sent), "seen": dict(self.seen),
                "codec": self.codec.state_dict()}

    def load_state_dict(self, st: dict) -> None:
        super().load_state_dict(st)
        self.sent = {int(w): x.clone() for w, x in st["sent"].items()}
        self.seen = {int(w): int(t) for w, t in st["seen"].items()}
        self.codec.load_state_dict(st["codec"])


@TRAINERS.register("easgd")
class EASGDTrainer(PSTrainer):
    name = "easgd"
    push_category = "param_push"

    @classmethod
    def compressed_messages(cls, cfg) -> list:
        return [Message("delta", "p2p", what="EASGD's elastic difference")]

    @classmethod
    def validate(cls, cfg) -> None:
        super().validate(cfg)
        t = cfg.trainer
        if t.mode not in ("sync", "async"):
            raise ConfigError(f"invalid value {t.mode!r} for trainer.mode: choose from sync, async")
        if t.period < 1:
            raise ConfigError(f"invalid value {t.period!r} for trainer.period: must be >= 1")
        if not 0 < t.moving_rate < 1:
            raise ConfigError(f"invalid value {t.moving_rate!r} for trainer.moving_rate: must be in (0, 1)")

    def codec(self):
        """The compressor of the elastic difference (a point-to-point instance), None: dense x_i."""
        return build_codec(self.cfg.compressor, self.compressed_messages(self.cfg)[0], self.rank, 1, self.cfg.seed)

    def make_rule(self, params: torch.Tensor, total_steps: int) -> ElasticRule:
        t, codec = self.cfg.trainer, self.codec()
        if codec is None:
            return ElasticRule(params, self.worker_ranks, sync=t.mode == "sync", alpha=t.moving_rate)
        return CompressedElasticRule(params, self.worker_ranks, sync=t.mode == "sync", alpha=t.moving_rate,
                                     codec=codec, meter=self.meter, group=self.group, shard=self.rank - self.workers)

    def setup_worker(self) -> None:
        self.optimizer = build_optimizer(self.model.parameters(), self.cfg.optim)
        self.center_model = copy.deepcopy(self.model)  # the centre as of this worker's last exchange
        self.center = list(self.center_model.parameters())
        self.local_steps = 0
        self.compressor = self.codec()
        self.exchanges = 0  # compressed exchanges so far (the codec's step)
        self._sent = {}  # this step's payload and dense bytes, where it exchanged

    def eval_model(self):
        return self.center_model

    def state_dict(self) -> dict:
        out = {**super().state_dict(), "local": self.model.state_dict(), "local_steps": self.local_steps}
        if self.compressor is not None:  # error-feedback residuals, per server shard
            out["compressor"] = {"codec": self.compressor.state_dict(), "exchanges": self.exchanges}
        return out

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.model.load_state_dict(state["local"])
        self.local_steps = state["local_steps"]
        if self.compressor is not None and "compressor" in state:
            self.compressor.load_state_dict(state["compressor"]["codec"])
            self.exchanges = int(state["compressor"]["exchanges"])

    def send_difference(self) -> None:
        """The compressed exchange: each server shard's x_i − c_i through the codec, then a ``PULL``
        whose answer is the centre (into ``self.center``)."""
        works, payload_b, dense_b = [], 0, 0
        for s, rank in enumerate(self.server_ranks):
            diff = self.layout.flatten(self.params, s) - self.layout.flatten(self.center, s)
            info = BucketInfo(index=s, step=self.exchanges, rank=self.rank, world=1, seed=self.cfg.seed)
            payload = self.compressor.send(diff, info)
            payload_b, dense_b = payload_b + nbytes(payload), dense_b + nbytes(diff)
            works += send_payload(self.meter, payload, rank, self.push_category, P.CONTROL, TAG_DIFF, self.group)
        self.client.pull(self.center)
        for w in works:
            w.wait()
        self.exchanges += 1
        self._sent = {"payload_bytes": payload_b, "dense_bytes": dense_b,
                      "compression_ratio": dense_b / payload_b if payload_b else float("inf")}

    def step_metrics(self) -> dict:
        """A compressed exchange's payload and dense bytes and their ratio, in the record of its step."""
        out, self._sent = self._sent, {}
        return out

    def final_params(self):
        return self.center

    def worker_step(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        self.local_steps += 1
        if self.local_steps % self.cfg.trainer.period == 0:
            if self.compressor is None:
                self.client.push_pull(self.params, self.center)
            else:
                self.send_difference()
            alpha = self.cfg.trainer.moving_rate
            with torch.no_grad():
                for p, c in zip(self.params, self.center):
                    p.sub_(alpha * (p - c))
        return loss.detach()


def _easgd_model(cfg):
    from workbench.compress.codec_timing import codec_for
    from workbench.perfmodel import paradigms
    t = cfg.trainer
    opts = {"servers": int(t.num_servers), "period": int(t.period), "sync": t.mode == "sync"}
    push = codec_for(cfg.get("compressor"))
    if push is not None:  # easgd/<mode>+<c>: the elastic difference compressed
        return paradigms.compressed_messages.easgd, {**opts, "push": push}
    return paradigms.easgd, opts


def _easgd_variants(ranks: int) -> list:
    """EASGD, and with each planned compressor that carries a delta point to point."""
    from workbench.compress.codec_timing import planned
    if ranks < 2:
        return []
    return [["trainer=easgd"]] + [["trainer=easgd", f"compressor={c}"] for c in planned(("delta", "p2p"))]


# Time to target: the samples law of the other averaging paradigms (docs/time_to_target.md); the
# elastic force's own stability (Zhang et al. 2015 on the quadratic) is not checked.
SAMPLES = Update(law="samples (elastic averaging, stability not checked)")

declare(ParadigmSpec("easgd", perf_model=_easgd_model, smoke_overrides=smoke_overrides, plan_variants=_easgd_variants,
                     update_law=lambda cfg, ranks: SAMPLES))
