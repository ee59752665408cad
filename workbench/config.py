"""Structured configs: the schema Hydra validates every composed config against.

The YAML files under ``conf/`` hold values; the dataclasses here hold types and a docstring per
field. Each trainer owns its config dataclass (next to the trainer, registered with
:func:`register_trainer_schema`) so that adding a trainer never touches this file.

Range checks that types cannot express (``cluster.nproc >= 1``, ``optim.lr > 0`` …) live in
:func:`validate`, which runs before any process starts and raises :class:`ConfigError` with a
one-line message naming the key and the valid values.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf


class ConfigError(ValueError):
    """An invalid configuration, reported before any process starts."""


@dataclass
class TrainerConfig:
    """Fields every trainer shares; a trainer's own dataclass extends this one."""

    name: str = MISSING  # registry key of the trainer (workbench/trainers/<name>.py)
    epochs: float = 10.0  # passes over the training set (fractions allowed); ignored if max_steps > 0
    max_steps: int = 0  # stop after this many optimizer steps (0: use epochs)
    eval_every: int = 50  # evaluate on the held-out set every N steps (and always at the end)
    log_every: int = 1  # write a metrics.jsonl train record every N steps
    progress: bool = True  # tqdm progress bar on rank 0


@dataclass
class ModelConfig:
    name: str = MISSING  # registry key: small_cnn, lenet5, alexnet, vgg16, resnet18, resnet50
    width: int = 32  # channel width of the small CNN's first layer (other models ignore it)
    dropout: float = 0.0  # dropout before the classifier's hidden layers (models that have them)


@dataclass
class DataConfig:
    name: str = MISSING  # registry key: digits, mnist, cifar10, synthetic
    root: Optional[str] = None  # directory holding the files (mnist, cifar10); never downloaded
    batch_size: int = 16  # per worker; ignored when global_batch_size is set
    global_batch_size: Optional[int] = None  # divided among the workers (Rudra's mu*lambda = const)
    resize: Optional[int] = None  # resize images to resize x resize (e.g. digits to 32 for VGG-16)
    test_fraction: float = 0.2  # held-out fraction for sets without a test split (digits, synthetic)
    num_samples: int = 4096  # synthetic: training samples (test: a quarter of this)
    image_size: int = 32  # synthetic: image side
    channels: int = 3  # synthetic: channels
    num_classes: int = 10  # synthetic: classes
    num_workers: int = 0  # DataLoader worker processes per rank


@dataclass
class OptimConfig:
    name: str = "sgd"  # sgd (momentum, weight decay); the only optimizer the papers use
    lr: float = 0.1  # learning rate at base_batch_size
    momentum: float = 0.9
    weight_decay: float = 0.0
    nesterov: bool = False
    base_batch_size: int = 64  # global batch the lr is tuned for (reference of linear scaling)
    scale_lr: str = "none"  # none | linear: lr * global_batch / base_batch (Goyal et al.)
    warmup_steps: int = 0  # linear warm-up from lr/warmup_steps to lr
    schedule: str = "constant"  # constant | cosine | step
    step_every: int = 1000  # schedule=step: multiply by step_gamma every N steps
    step_gamma: float = 0.1


@dataclass
class ClusterConfig:
    name: str = "local"
    starter: str = "elastic"  # how ranks start: elastic (torch elastic agent) | submitit (SLURM tasks) | ray
    nproc: int = 4  # processes on this machine (nproc_per_node)
    nnodes: int = 1  # machines; >1 only under torchrun on each node (see README)
    backend: str = "auto"  # auto (nccl with CUDA, else gloo) | gloo | nccl
    device: str = "auto"  # auto (cuda if available) | cpu | cuda
    threads: int = 0  # torch threads per rank (0: cores // local ranks)
    timeout_s: float = 120.0  # every collective and receive fails after this long
    master_addr: str = "127.0.0.1"
    master_port: int = 0  # 0: pick a free port
    max_restarts: int = 0  # elastic agent restarts of a failed group
    monitor_interval_s: float = 0.1  # how often the agent checks for dead ranks
    kill_rank: int = -1  # fault injection: this rank SIGKILLs itself ...
    kill_at_step: int = -1  # ... at this step (tests and fault experiments)
    straggler_ranks: List[int] = field(default_factory=list)  # ranks made slow on purpose (experiments)
    straggler_delay_s: float = 0.0  # extra seconds per step on each straggler rank ...
    straggler_factor: float = 1.0  # ... and/or its step takes this many times as long (>= 1)


@dataclass
class NetworkConfig:
    name: str = "loopback"  # loopback: plain local run | emulated: one network namespace per rank, shaped links
    starter: Optional[str] = None  # a network that starts ranks its own way (emulated: one agent per namespace)
    bandwidth: str = "1gbit"  # emulated: each node's link rate, both directions (tc units: kbit, mbit, gbit)
    latency: str = "0ms"  # emulated: one-way delay added on each node's egress (tc netem)
    jitter: str = "0ms"  # emulated: delay variation (tc netem)
    node_bandwidth: Dict[str, str] = field(default_factory=dict)  # emulated: per-node rate overrides {"2": "100mbit"}
    subnet: str = "10.213.0"  # emulated: private /24 for the run's namespaces (<subnet>.1 is node 0)


@dataclass
class CheckpointConfig:
    every: int = 0  # save every N steps (0: never); a restarted or resumed run continues from the newest
    keep: int = 2  # newest checkpoints kept per rank (>= 2, so a crash while saving loses nothing)


@dataclass
class TrackingConfig:
    name: str = "none"  # none | mlflow | wandb: where rank 0 also logs params, metrics, summary (workbench/tracking/)
    uri: Optional[str] = None  # mlflow: tracking URI (default: file store <output_root>/mlruns); wandb: its directory
    experiment: str = "workbench"  # mlflow experiment / wandb project
    mode: str = "offline"  # wandb: offline | online
    artifacts: bool = True  # log the run directory (without checkpoints/) as an artifact at the end
    timeout_s: float = 60.0  # the most a finished rank 0 waits for the tracker to catch up before exiting


@dataclass
class Config:
    name: str = "run"  # run name, the suffix of the run directory
    seed: int = 0
    output_root: str = "experiments"  # runs go to <output_root>/runs/<date>/<time>_<name>/
    trainer: Any = MISSING
    compressor: Any = None  # gradient compressor (conf/compressor/); used by trainer=compressed
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


_STORE = ConfigStore.instance()
_STORE.store(name="workbench_schema", node=Config)
_STORE.store(group="model", name="model_schema", node=ModelConfig)
_STORE.store(group="data", name="data_schema", node=DataConfig)
_STORE.store(group="optim", name="optim_schema", node=OptimConfig)
_STORE.store(group="cluster", name="cluster_schema", node=ClusterConfig)


def register_trainer_schema(name: str, node: type) -> None:
    """Store a trainer's dataclass as ``trainer/<name>_schema``; ``conf/trainer/<name>.yaml`` lists
    it first in its defaults, so Hydra type-checks that trainer's options."""
    _STORE.store(group="trainer", name=f"{name}_schema", node=node)


def conf_dir() -> Path:
    """The ``conf/`` directory: $WORKBENCH_CONF, else the one beside the package (editable install)."""
    env = os.environ.get("WORKBENCH_CONF")
    path = Path(env) if env else Path(__file__).resolve().parent.parent / "conf"
    if not (path / "config.yaml").is_file():
        raise ConfigError(f"no config.yaml in {path}: install the project with `pip install -e .` "
                          "from its checkout, or set WORKBENCH_CONF to its conf/ directory")
    return path


# ---------------------------------------------------------------------------------------------
# Range validation: every check names the key and the valid values.

def _check(ok: bool, key: str, value: Any, valid: str) -> None:
    if not ok:
        raise ConfigError(f"invalid value {value!r} for {key}: {valid}")


def validate(cfg: DictConfig) -> None:
    """Check ranges and cross-field rules before launch; raise ConfigError (one line) on the first."""
    from omegaconf.errors import OmegaConfBaseException
    try:
        _validate(cfg)
    except OmegaConfBaseException as e:  # e.g. an interpolation that cannot resolve here
        raise ConfigError(" ".join(str(e).split())) from None


def _validate(cfg: DictConfig) -> None:
    from workbench import data as data_reg
    from workbench import models as model_reg
    from workbench import trainers as trainer_reg

    c = cfg.cluster
    from workbench.starters import STARTERS
    _check(c.starter in STARTERS, "cluster.starter", c.starter, f"choose from {', '.join(STARTERS)}")
    n = cfg.network
    _check(n.name in ("loopback", "emulated"), "network.name", n.name, "choose from loopback, emulated")
    _check(n.starter is None or n.starter in STARTERS, "network.starter", n.starter, f"choose from {', '.join(STARTERS)}")
    if n.name == "emulated":
        from workbench.network import check_config
        check_config(cfg)
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

    world = c.nproc * c.nnodes
    _check(c.kill_rank == -1 or 0 <= c.kill_rank < world, "cluster.kill_rank", c.kill_rank,
           f"must be -1 (no fault injection) or a rank in [0, {world - 1}]")
    _check(c.kill_at_step == -1 or c.kill_at_step >= 1, "cluster.kill_at_step", c.kill_at_step,
           "must be -1 (no fault injection) or a step >= 1")
    _check((c.kill_rank == -1) == (c.kill_at_step == -1), "cluster.kill_rank", c.kill_rank,
           "set cluster.kill_rank and cluster.kill_at_step together (both -1: no fault injection)")
    for r in c.straggler_ranks:
        _check(0 <= r < c.nproc * c.nnodes, "cluster.straggler_ranks", list(c.straggler_ranks),
               f"ranks must be in [0, {c.nproc * c.nnodes - 1}]")
    _check(c.straggler_delay_s >= 0, "cluster.straggler_delay_s", c.straggler_delay_s, "must be >= 0")
    _check(c.straggler_factor >= 1, "cluster.straggler_factor", c.straggler_factor, "must be >= 1")

    _check(cfg.checkpoint.every >= 0, "checkpoint.every", cfg.checkpoint.every, "must be >= 0 (0: never)")
    _check(cfg.checkpoint.keep >= 2, "checkpoint.keep", cfg.checkpoint.keep, "must be >= 2")
    _check(c.max_restarts == 0 or cfg.checkpoint.every > 0, "cluster.max_restarts", c.max_restarts,
           "restarts resume from a checkpoint: set checkpoint.every > 0 too")

    o = cfg.optim
    _check(o.name == "sgd", "optim.name", o.name, "choose from sgd")
    _check(o.lr > 0, "optim.lr", o.lr, "must be > 0")
    _check(0 <= o.momentum < 1, "optim.momentum", o.momentum, "must be in [0, 1)")
    _check(o.weight_decay >= 0, "optim.weight_decay", o.weight_decay, "must be >= 0")
    _check(o.base_batch_size >= 1, "optim.base_batch_size", o.base_batch_size, "must be >= 1")
    _check(o.scale_lr in ("none", "linear"), "optim.scale_lr", o.scale_lr, "choose from none, linear")
    _check(o.warmup_steps >= 0, "optim.warmup_steps", o.warmup_steps, "must be >= 0")
    _check(o.schedule in ("constant", "cosine", "step"), "optim.schedule", o.schedule, "choose from constant, cosine, step")
    _check(o.step_every >= 1, "optim.step_every", o.step_every, "must be >= 1")
    _check(not o.nesterov or o.momentum > 0, "optim.nesterov", o.nesterov, "Nesterov needs optim.momentum > 0")

    t = cfg.trainer
    _check(t.name in trainer_reg.TRAINERS, "trainer.name", t.name, f"choose from {', '.join(sorted(trainer_reg.TRAINERS))}")
    _check(t.epochs >= 0, "trainer.epochs", t.epochs, "must be >= 0 (0: set trainer.max_steps > 0)")
    _check(t.epochs > 0 or t.max_steps > 0, "trainer.epochs", t.epochs, "must be > 0 (or set trainer.max_steps > 0)")
    _check(t.max_steps >= 0, "trainer.max_steps", t.max_steps, "must be >= 0")
    _check(t.eval_every >= 1, "trainer.eval_every", t.eval_every, "must be >= 1")
    _check(t.log_every >= 1, "trainer.log_every", t.log_every, "must be >= 1")

    _check(cfg.model.name in model_reg.MODELS, "model.name", cfg.model.name, f"choose from {', '.join(sorted(model_reg.MODELS))}")
    _check(cfg.model.width >= 1, "model.width", cfg.model.width, "must be >= 1")
    _check(0 <= cfg.model.dropout < 1, "model.dropout", cfg.model.dropout, "must be in [0, 1)")

    d = cfg.data
    _check(d.name in data_reg.DATASETS, "data.name", d.name, f"choose from {', '.join(sorted(data_reg.DATASETS))}")
    _check(d.batch_size >= 1, "data.batch_size", d.batch_size, "must be >= 1")
    _check(d.resize is None or d.resize >= 1, "data.resize", d.resize, "must be >= 1 or null")
    _check(0 < d.test_fraction < 1, "data.test_fraction", d.test_fraction, "must be in (0, 1)")
    _check(d.num_samples >= 1, "data.num_samples", d.num_samples, "must be >= 1")
    _check(d.num_workers >= 0, "data.num_workers", d.num_workers, "must be >= 0")

    trainer_cls = trainer_reg.TRAINERS[t.name]
    workers = trainer_cls.num_workers(cfg)
    _check(workers >= 1, "cluster.nproc", c.nproc, f"trainer {t.name} needs at least one worker rank")
    if d.global_batch_size is not None:
        _check(d.global_batch_size >= workers and d.global_batch_size % workers == 0, "data.global_batch_size",
               d.global_batch_size, f"must be a positive multiple of the {workers} worker ranks")

    data_reg.DATASETS[d.name].check(d)  # e.g. data.root exists and holds the expected files
    spec = data_reg.DATASETS[d.name].spec(d)
    model_reg.MODELS[cfg.model.name].check_input(spec, key="model.name")
    trainer_cls.validate(cfg)
    from workbench import compress as compress_reg
    compress_reg.validate_config(cfg, trainer_cls)  # known compressor, a trainer that uses it, its ranges


def warnings(cfg: DictConfig) -> List[str]:
    """Configurations known to be unstable, one line each: printed before launch, never refused
    (reproducing a paper's failure is a legitimate run). See :mod:`workbench.stability`."""
    from workbench.stability import warnings as stability_warnings
    return stability_warnings(cfg)


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)
