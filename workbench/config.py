"""Structured configs and validation: the schema Hydra validates every composed config against,
and the range checks that run before any process starts.

The YAML files under ``conf/`` hold values; the dataclasses in :mod:`workbench.core` hold types and a
docstring per field. Each trainer and compressor owns its config dataclass (next to it, filed with
:func:`workbench.core.store_schema`) so that adding one never touches this file.

The starters (``cluster.starter``, ``network.starter``) sit above this layer (they run the worker,
which validates): :func:`workbench.starters.check_names` checks their names where a run starts
(``workbench.launch``, the CLI's pre-check).

Range checks that types cannot express (``cluster.nproc >= 1``, ``optim.lr > 0`` …) live in
:func:`validate`: the cluster, checkpoint, optimizer and the fields every trainer shares here, then a
loop over the registries (network, data set, model, trainer, compressor), each member checking its
own config. It raises :class:`ConfigError` with a one-line message naming the key and the valid
values.
"""
from __future__ import annotations

import functools

from typing import List

from omegaconf import DictConfig, OmegaConf

from workbench.core import (CheckpointConfig, ClusterConfig, CompressorConfig, Config, ConfigError,  # noqa: F401
                            DataConfig, InputSpec, ModelConfig, NetworkConfig, OptimConfig, TrackingConfig,
                            TrainerConfig, check, conf_dir, store_schema, world_size)


@functools.lru_cache(maxsize=None)
def user_config_groups() -> str:
    """The config groups a user picks from, ``group: option, option`` a line: Hydra's
    ``$APP_CONFIG_GROUPS`` without the schemas under ``schema/`` (for conf/hydra/help/workbench.yaml,
    as the resolver ``${workbench.config_groups:}``; read from the running Hydra's config loader).
    Hydra resolves the help template at every compose; walking the groups costs more than the
    compose itself, and they do not change while a process runs, so the first answer is kept."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.object_type import ObjectType

    from workbench.core import SCHEMA_GROUP
    loader = GlobalHydra.instance().config_loader()

    def walk(parent: str):
        for g in loader.list_groups(parent):
            name = f"{parent}/{g}" if parent else g
            if name not in ("hydra", SCHEMA_GROUP):
                if loader.get_group_options(name, ObjectType.CONFIG):
                    yield name
                yield from walk(name)
    return "\n".join(f"{g}: {', '.join(sorted(loader.get_group_options(g)))}" for g in sorted(walk("")))


OmegaConf.register_new_resolver("workbench.config_groups", user_config_groups, replace=True)

# ---------------------------------------------------------------------------------------------
# Range validation: every check names the key and the valid values.

_check = check


def validate(cfg: DictConfig) -> None:
    """Check ranges and cross-field rules before launch; raise ConfigError (one line) on the first."""
    from omegaconf.errors import OmegaConfBaseException
    try:
        _validate(cfg)
    except OmegaConfBaseException as e:  # e.g. an interpolation that cannot resolve here
        raise ConfigError(" ".join(str(e).split())) from None


def registries() -> list:
    """Every registry whose member a config picks, in the order validation asks them."""
    from workbench.compress import COMPRESSORS
    from workbench.data import DATASETS
    from workbench.models import MODELS
    from workbench.network import NETWORKS
    from workbench.trainers import TRAINERS
    return [NETWORKS, DATASETS, MODELS, TRAINERS, COMPRESSORS]


def _validate(cfg: DictConfig) -> None:
    c = cfg.cluster
    _check_cluster(cfg)
    _check_inject(cfg)
    _check(cfg.checkpoint.every >= 0, "checkpoint.every", cfg.checkpoint.every, "must be >= 0 (0: never)")
    _check(cfg.checkpoint.keep >= 2, "checkpoint.keep", cfg.checkpoint.keep, "must be >= 2")
    _check(c.max_restarts == 0 or cfg.checkpoint.every > 0, "cluster.max_restarts", c.max_restarts,
           "restarts resume from a checkpoint: set checkpoint.every > 0 too")
    _check_optim(cfg.optim)
    t = cfg.trainer
    _check(t.epochs >= 0, "trainer.epochs", t.epochs, "must be >= 0 (0: set trainer.max_steps > 0)")
    _check(t.epochs > 0 or t.max_steps > 0, "trainer.epochs", t.epochs, "must be > 0 (or set trainer.max_steps > 0)")
    _check(t.max_steps >= 0, "trainer.max_steps", t.max_steps, "must be >= 0")
    _check(t.eval_every >= 1, "trainer.eval_every", t.eval_every, "must be >= 1")
    _check(t.log_every >= 1, "trainer.log_every", t.log_every, "must be >= 1")
    for registry in registries():  # each member checks its own config (a known name first)
        registry.validate(cfg)


def _check_cluster(cfg: DictConfig) -> None:
    c = cfg.cluster
    _check(c.nproc >= 1, "cluster.nproc", c.nproc, "must be >= 1")
    _check(c.nnodes >= 1, "cluster.nnodes", c.nnodes, "must be >= 1")
    _check(c.backend in ("auto", "gloo", "nccl"), "cluster.backend", c.backend, "choose from auto, gloo, nccl")
    _check(c.device in ("auto", "cpu", "cuda"), "cluster.device", c.device, "choose from auto, cpu, cuda")
    _check(c.timeout_s > 0, "cluster.timeout_s", c.timeout_s, "must be > 0")
    _check(c.threads >= 0, "cluster.threads", c.threads, "must be >= 0 (0: automatic)")
    _check(c.max_restarts >= 0, "cluster.max_restarts", c.max_restarts, "must be >= 0")
    _check(0 <= c.master_port < 65536, "cluster.master_port", c.master_port, "must be in [0, 65535]")
    if c.backend == "nccl" or c.device == "cuda":
        import torch
        _check(torch.cuda.is_available(), "cluster.backend" if c.backend == "nccl" else "cluster.device",
               c.backend if c.backend == "nccl" else c.device, "CUDA is not available on this machine; use auto or gloo/cpu")


def _check_inject(cfg: DictConfig) -> None:
    i, world = cfg.inject, world_size(cfg)
    _check(i.kill_rank == -1 or 0 <= i.kill_rank < world, "inject.kill_rank", i.kill_rank,
           f"must be -1 (no fault injection) or a rank in [0, {world - 1}]")
    _check(i.kill_at_step == -1 or i.kill_at_step >= 1, "inject.kill_at_step", i.kill_at_step,
           "must be -1 (no fault injection) or a step >= 1")
    _check((i.kill_rank == -1) == (i.kill_at_step == -1), "inject.kill_rank", i.kill_rank,
           "set inject.kill_rank and inject.kill_at_step together (both -1: no fault injection)")
    for r in i.straggler_ranks:
        _check(0 <= r < world, "inject.straggler_ranks", list(i.straggler_ranks), f"ranks must be in [0, {world - 1}]")
    _check(i.straggler_delay_s >= 0, "inject.straggler_delay_s", i.straggler_delay_s, "must be >= 0")
    _check(i.straggler_factor >= 1, "inject.straggler_factor", i.straggler_factor, "must be >= 1")


def _check_optim(o: DictConfig) -> None:
    _check(o.name == "sgd", "optim.name", o.name, "choose from sgd")
    _check(o.lr > 0, "optim.lr", o.lr, "must be > 0")
    _check(0 <= o.momentum < 1, "optim.momentum", o.momentum, "must be in [0, 1)")
    _check(o.weight_decay >= 0, "optim.weight_decay", o.weight_decay, "must be >= 0")
    _check(o.base_batch_size >= 1, "optim.base_batch_size", o.base_batch_size, "must be >= 1")
    _check(o.scale_lr in ("none", "linear", "sqrt"), "optim.scale_lr", o.scale_lr, "choose from none, linear, sqrt")
    _check(o.warmup_steps >= 0, "optim.warmup_steps", o.warmup_steps, "must be >= 0")
    _check(o.schedule in ("constant", "cosine", "step"), "optim.schedule", o.schedule, "choose from constant, cosine, step")
    _check(o.step_every >= 1, "optim.step_every", o.step_every, "must be >= 1")
    _check(not o.nesterov or o.momentum > 0, "optim.nesterov", o.nesterov, "Nesterov needs optim.momentum > 0")


def warnings(cfg: DictConfig) -> List[str]:
    """Configurations known to be unstable, one line each: printed before launch, never refused
    (reproducing a paper's failure is a legitimate run). See :mod:`workbench.stability`."""
    from workbench.stability import warnings as stability_warnings
    return stability_warnings(cfg)


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)
