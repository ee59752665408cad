"""The role map and loop of every trainer with parameter servers (``ps``, ``staleness``, ``easgd``).

Ranks ``0 .. λ-1`` are workers (rank 0 among them: it writes metrics.jsonl and model.pt), the last
``trainer.num_servers`` ranks are servers — CPU processes whatever device the workers use, as in
BytePS. Workers run the shared loop of :class:`~workbench.trainers.base.Trainer`; servers run
:class:`~workbench.ps.server.ServerLoop` with the rule the concrete trainer builds
(``make_rule``), until every worker has said it is done.

Evaluation is rank 0's alone, on the whole test set with the weights it last pulled (in the
synchronous protocols: the servers' weights after that step), so that no evaluation barrier slows
the asynchronous protocols; at each evaluation rank 0 also fetches the servers' statistics and
logs them as a ``kind: server`` record (staleness histogram and mean over the interval, updates/s).
Checkpoints (``checkpoint.every``): after step k every worker enters a barrier through the servers
(:meth:`PSClient.checkpoint`); once all are in, each server writes its shard, optimizer state,
clocks, buffered gradients and statistics, and answers; then each worker writes its weights (as
the servers just sent them), its clocks and RNG states. A restart (``cluster.max_restarts``) or
``workbench resume`` loads the newest checkpoint that every rank, servers included, completed.

Compression (:mod:`workbench.ps.compression`): a trainer whose ``push_message`` / ``pull_message``
are set (the gradient servers) compresses what ``cfg.compressor`` names for them; the workers' push
codecs (error-feedback residuals) and the servers' per-worker replicas are part of the checkpoints.

At the end rank 0 waits for every worker, pulls the final weights and saves them as ``model.pt``;
``summary.json`` gets the final accuracy of those weights and ``ps`` (the servers' totals).

With NCCL workers the protocol runs over a separate gloo group spanning every rank, so gradients
are staged through host memory to the CPU servers; on CPU the default gloo group is used.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
import torch.distributed as dist

from workbench import checkpoint as ckpt
from workbench import data as data_mod
from workbench.core import ConfigError, world_size
from workbench.dist import new_group
from workbench.models import build_model
from workbench.ps import stats as S
from workbench.ps.compression import ServerCodecs, WorkerCodecs
from workbench.ps.protocol import PSClient
from workbench.ps.server import ServerLoop
from workbench.ps.sharding import ShardLayout
from workbench.trainers.base import Trainer, eval_metrics, score, seed_everything


def smoke_overrides(nproc: int) -> list:
    """A few-step run of a parameter-server trainer on ``nproc`` ranks (``ParadigmSpec.smoke_overrides``):
    one server rank besides at least one worker."""
    return ["trainer.num_servers=1"] + (["cluster.nproc=2"] if nproc < 2 else [])


class PSTrainer(Trainer):
    """Base class; a subclass implements ``make_rule(flat_params, total_steps)`` (server side) and
    ``train_step`` (worker side, using ``self.client``)."""

    push_category = "grad_push"
    pull_category = "param_pull"
    # the Messages (workbench.compress.messages) of the push and the pull this trainer compresses
    # through cfg.compressor; None: that direction is always dense
    push_message = None
    pull_message = None

    # -- role map ------------------------------------------------------------------------------------
    @classmethod
    def num_servers(cls, cfg) -> int:
        return int(cfg.trainer.num_servers)

    @classmethod
    def num_workers(cls, cfg) -> int:
        return world_size(cfg) - cls.num_servers(cfg)

    @classmethod
    def validate(cls, cfg) -> None:
        world = world_size(cfg)
        s = cfg.trainer.num_servers
        if not 1 <= s < world:
            raise ConfigError(f"invalid value {s!r} for trainer.num_servers: must be in [1, {world - 1}] "
                              f"(cluster.nproc x cluster.nnodes = {world} ranks, and at least one must be a worker)")

    def __init__(self, cfg, info, meter, log) -> None:
        super().__init__(cfg, info, meter, log)
        self.worker_ranks = list(range(self.workers))
        self.server_ranks = list(range(self.workers, info.world_size))
        self.is_worker = self.rank < self.workers
        self.group = None
        self.ps_stats: Optional[torch.Tensor] = None
        self._last_stats: Optional[torch.Tensor] = None
        self.steps_done = 0

    shared_evaluation = False  # rank 0 evaluates alone, the servers serve on

    def run(self) -> dict:
        if self.info.backend == "nccl":
            self.group = new_group(backend="gloo")  # collective: every rank creates it
        if not self.is_worker:
            return self.serve()
        summary = super().run()
        if self.rank == 0 and self.ps_stats is not None:
            summary["ps"] = S.summarize(self.ps_stats, len(self.server_ranks))
            summary["ps"]["servers"] = len(self.server_ranks)
            summary["final_test_accuracy"] = self._final_eval["test_accuracy"]
            summary["final_test_loss"] = self._final_eval["test_loss"]
            tot, steps = self.meter.totals(), max(1, summary["steps"])
            summary["ps"]["bytes_per_worker_step"] = {
                "push": tot.get(self.push_category, {}).get("sent", 0) / steps,
                "pull": tot.get(self.pull_category, {}).get("recv", 0) / steps,
                "control": (tot.get("ps_control", {}).get("sent", 0) + tot.get("ps_control", {}).get("recv", 0)) / steps,
            }
        return summary

    # -- server side ---------------------------------------------------------------------------------
    def make_rule(self, params: torch.Tensor, total_steps: int):
        raise NotImplementedError  # pragma: no cover - abstract

    def serve(self) -> dict:
        self.load_data()  # the servers need the step count for the learning-rate schedule
        loader, _ = data_mod.train_loader(self.train_set, self.cfg, 0, self.workers, self.cfg.seed)
        total = self.total_steps(len(loader))
        seed_everything(self.cfg.seed)  # the workers' initial weights, built on CPU
        params = list(build_model(self.cfg, self.spec).parameters())
        layout = ShardLayout.of(params, len(self.server_ranks))
        shard = self.rank - self.workers
        rule = self.make_rule(layout.flatten(params, shard).clone(), total)
        codecs = self.server_codecs(shard, rule.params, layout)

        def load(state: dict) -> None:
            rule.load_state_dict(state["rule"])
            if codecs is not None:
                codecs.load_state_dict(state["codecs"])
        self._resumed = ckpt.resume(self.log.run_dir, self.rank, self.info.world_size, self.meter, load) is not None
        c = self.cfg.inject
        kill = (lambda updates: self._maybe_kill(c.kill_at_step) if updates >= c.kill_at_step else None) \
            if self.rank == c.kill_rank and c.kill_at_step >= 0 else None

        def save(step: int) -> None:
            state = {"rule": rule.state_dict(), "step": step, "rng": ckpt.rng_state(), "meter": self.meter.totals()}
            if codecs is not None:
                state["codecs"] = codecs.state_dict()
            ckpt.save(self.log.run_dir, self.rank, step, state, keep=self.cfg.checkpoint.keep)
        self.meter.pop()
        ServerLoop(self.meter, rule, self.worker_ranks, self.group, self.push_category, self.pull_category,
                   on_message=kill, on_checkpoint=save, codecs=codecs).run()
        self.log.comm_step(0, self.meter.pop(), role="server", shard_numel=layout.numel(shard),
                           server=S.summarize(rule.stats.tensor()))
        return {"role": "server"}

    def server_codecs(self, shard: int, params: torch.Tensor, layout: ShardLayout) -> Optional[ServerCodecs]:
        """Server ``shard``'s push decoder and pull replicas; None where both directions are dense."""
        codecs = ServerCodecs(self.cfg.get("compressor"), shard, params, layout.shard_shapes(shard), self.worker_ranks,
                              self.cfg.seed, push=self.push_message, pull=self.pull_message)
        return codecs if codecs.push is not None or codecs.pull is not None else None

    # -- worker side ---------------------------------------------------------------------------------
    def setup(self) -> None:
        self.model = self.build_model()
        self.params = list(self.model.parameters())
        self.layout = ShardLayout.of(self.params, len(self.server_ranks))
        codecs = WorkerCodecs(self.cfg.get("compressor"), self.rank,
                              [self.layout.shard_shapes(s) for s in range(len(self.server_ranks))], self.cfg.seed,
                              push=self.push_message, pull=self.pull_message)
        self.codecs = codecs if codecs.push is not None or codecs.pull is not None else None
        self.client = PSClient(self.meter, self.layout, self.server_ranks, self.group,
                               self.push_category, self.pull_category, codecs=self.codecs)
        if self.client.compressed_pull:
            self.client.sync_replicas(self.params)  # the servers' replicas start as these weights
        self.setup_worker()

    def step_metrics(self) -> Dict[str, float]:
        """A compressed push's (and pull's) bytes and codec times this step."""
        return self.codecs.pop_stats() if self.codecs is not None else {}

    def setup_worker(self) -> None:
        """Anything else a worker needs (e.g. a local optimizer)."""

    def _save_checkpoint(self, step: int, epoch: int, loop: dict) -> None:
        self.client.checkpoint(step, self.params)  # the servers save first, at the barrier
        self.meter.pop()  # barrier traffic is not a training step's
        super()._save_checkpoint(step, epoch, loop)

    def state_dict(self) -> dict:
        out = {**super().state_dict(), "timestamps": list(self.client.timestamps), "steps_done": self.steps_done}
        if self.codecs is not None:
            out["codecs"] = self.codecs.state_dict()  # the push's residuals (the pull's replica is the model)
        return out

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.client.timestamps = list(state["timestamps"])
        self.steps_done = state["steps_done"]
        if self.codecs is not None:
            self.codecs.load_state_dict(state["codecs"])
        if self.client.compressed_pull:
            self.client.sync_replicas(self.params)

    def _score(self, model) -> Dict[str, float]:
        """The whole test set on this rank alone (no evaluation barrier for the asynchronous protocols)."""
        return eval_metrics(*score(model, data_mod.test_loader(self.test_set, self.cfg, 0, 1), self.device))

    def evaluate(self) -> Dict[str, float]:
        if self.rank != 0:
            return {}
        result = self._score(self.eval_model())
        vec = S.combine(self.client.stats(S.LENGTH))
        self._log_server(vec)
        return result

    def _log_server(self, vec: torch.Tensor, final: bool = False) -> None:
        rec = S.summarize(S.interval(vec, self._last_stats), len(self.server_ranks))
        self._last_stats = vec
        self.log.log({"kind": "server", "step": self.steps_done, "final": final, **rec})

    def train_step(self, x, y):
        self.steps_done += 1  # the base loop's step, for the server records
        return self.worker_step(x, y)

    def worker_step(self, x, y):
        raise NotImplementedError  # pragma: no cover - abstract

    def save_final_model(self) -> None:
        """Every worker tells the servers it is done; rank 0 waits for all of them, pulls the final
        weights into its model and saves those."""
        if self.rank != 0:
            self.client.done()
            return
        vecs = self.client.done(self.final_params(), S.LENGTH)
        self.meter.pop()
        self.ps_stats = S.combine(vecs)
        self.load_final()
        self._final_eval = self._score(self.eval_model())
        self._log_server(self.ps_stats, final=True)
        super().save_final_model()

    def final_params(self):
        """Where the final weights from the servers go (the model's parameters)."""
        return self.params

    def load_final(self) -> None:
        """Hook after the final pull (EASGD loads the centre into its evaluation model)."""
