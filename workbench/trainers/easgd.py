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

    python -m workbench trainer=easgd cluster.nproc=4                 # 3 workers, 1 server, async
    python -m workbench trainer=easgd trainer.mode=sync trainer.period=4 trainer.moving_rate=0.2
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch

from workbench.core import ConfigError, TrainerConfig, store_schema
from workbench.ps import protocol as P
from workbench.ps.stats import ServerStats
from workbench.ps.trainer import PSTrainer, smoke_overrides
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


@TRAINERS.register("easgd")
class EASGDTrainer(PSTrainer):
    name = "easgd"
    push_category = "param_push"

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

    def make_rule(self, params: torch.Tensor, total_steps: int) -> ElasticRule:
        t = self.cfg.trainer
        return ElasticRule(params, self.worker_ranks, sync=t.mode == "sync", alpha=t.moving_rate)

    def setup_worker(self) -> None:
        self.optimizer = build_optimizer(self.model.parameters(), self.cfg.optim)
        self.center_model = copy.deepcopy(self.model)  # the centre as of this worker's last exchange
        self.center = list(self.center_model.parameters())
        self.local_steps = 0

    def eval_model(self):
        return self.center_model

    def state_dict(self) -> dict:
        return {**super().state_dict(), "local": self.model.state_dict(), "local_steps": self.local_steps}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.model.load_state_dict(state["local"])
        self.local_steps = state["local_steps"]

    def final_params(self):
        return self.center

    def worker_step(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        self.local_steps += 1
        if self.local_steps % self.cfg.trainer.period == 0:
            self.client.push_pull(self.params, self.center)
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


declare(ParadigmSpec("easgd", perf_model=_easgd_model, smoke_overrides=smoke_overrides, plan_variants=_easgd_variants))
