"""The leaf every layer shares; it imports nothing from workbench.

- :class:`ConfigError` and :func:`check`: an invalid configuration, one line naming the key and the
  valid values, raised before any process starts;
- :class:`InputSpec`: what a data set feeds a model (data and models both use it, neither owns it);
- the schema dataclasses of the config's groups (types, defaults, a comment per field) and
  :func:`store_schema`, which files a group member's own dataclass in Hydra's config store;
- the cluster arithmetic: :func:`world_size`;
- :func:`conf_dir`, where the YAML files live.

Everything above (registries, trainers, validation, the launcher) imports from here, never the
other way round (``tests/test_imports.py`` holds the package to that).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


class ConfigError(ValueError):
    """An invalid configuration, reported before any process starts."""


def check(ok: bool, key: str, value: Any, valid: str) -> None:
    """Raise the one-line :class:`ConfigError` every check writes: ``invalid value V for KEY: VALID``."""
    if not ok:
        raise ConfigError(f"invalid value {value!r} for {key}: {valid}")


@dataclass(frozen=True)
class InputSpec:
    """What a data set feeds a model."""
    channels: int
    image_size: int
    num_classes: int


def world_size(cfg) -> int:
    """Ranks of a run: ``cluster.nproc`` processes on each of ``cluster.nnodes`` machines."""
    return int(cfg.cluster.nproc) * int(cfg.cluster.nnodes)


def conf_dir() -> Path:
    """The ``conf/`` directory: $WORKBENCH_CONF, else the one beside the package (editable install)."""
    env = os.environ.get("WORKBENCH_CONF")
    path = Path(env) if env else Path(__file__).resolve().parent.parent / "conf"
    if not (path / "config.yaml").is_file():
        raise ConfigError(f"no config.yaml in {path}: install the project with `pip install -e .` "
                          "from its checkout, or set WORKBENCH_CONF to its conf/ directory")
    return path


# ---------------------------------------------------------------------------------------------
# Schemas. A group member's own dataclass (a trainer's, a compressor's) extends its group's base
# here and is filed with store_schema; its YAML names it first in its defaults list.

SCHEMA_GROUP = "schema"  # schemas live under schema/<group>/<name>, apart from the options a user picks


def store_schema(group: str, name: str, node: type) -> None:
    """File ``node`` as ``schema/<group>/<name>`` in Hydra's config store; ``conf/<group>/<name>.yaml``
    starts with ``defaults: [/schema/<group>/<name>@_here_]`` so Hydra type-checks its options, and
    ``<group>=<name>_schema`` is no option of the group."""
    ConfigStore.instance().store(group=f"{SCHEMA_GROUP}/{group}", name=name, node=node)


def store_option(group: str, name: str, node: type) -> None:
    """File ``node`` as the option ``<group>=<name>`` itself, its defaults the option's values: how a
    member from another package (an entry point, ``docs/extending.md``), which has no YAML in this
    tree's ``conf/``, becomes a choice of its group."""
    ConfigStore.instance().store(group=group, name=name, node=node)


@dataclass
class TrainerConfig:
    """Fields every trainer shares; a trainer's own dataclass extends this one."""

    name: str = MISSING  # registry key of the trainer (workbench/trainers/<name>.py)
    epochs: float = 10.0  # passes over the training set (fractions allowed); ignored if max_steps > 0
    max_steps: int = 0  # stop after this many optimizer steps (0: use epochs)
    eval_every: int = 50  # evaluate on the held-out set every N steps (and always at the end)
    log_every: int = 1  # write a metrics.jsonl train record every N steps
    progress: bool = True  # tqdm progress bar on rank 0
    stop_at_accuracy: Optional[float] = None  # end at the first evaluation at or above this test accuracy


@dataclass
class ModelConfig:
    name: str = MISSING  # registry key: small_cnn, lenet5, alexnet, vgg16, resnet18, resnet50
    width: int = 32  # channel width of the small CNN's first layer (other models ignore it)
    dropout: float = 0.0  # dropout before the classifier's hidden layers (models that have them)


@dataclass
class DataConfig:
    name: str = MISSING  # registry key: digits, mnist, cifar10, synthetic
    root: Optional[str] = None  # directory holding the files (mnist, cifar10)
    download: bool = False  # mnist, cifar10: fetch missing files into root once, before launch (md5-checked)
    mirror: Optional[str] = None  # download from this folder (URL or path; files + MD5SUMS), not torchvision's sources
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
    scale_lr: str = "none"  # none | linear: lr * global_batch / base_batch (Goyal et al.) | sqrt: lr * its square root
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


@dataclass
class InjectConfig:
    """Faults injected on purpose, for tests and experiments (``conf/inject/none.yaml``: none)."""

    kill_rank: int = -1  # this rank SIGKILLs itself at kill_at_step (-1: no rank is killed)
    kill_at_step: int = -1  # the step after which kill_rank dies, first attempt only (-1: never; with kill_rank)
    straggler_ranks: List[int] = field(default_factory=list)  # ranks made slow on purpose
    straggler_delay_s: float = 0.0  # extra seconds each straggler sleeps after every step
    straggler_factor: float = 1.0  # a straggler's step takes this many times its compute time (>= 1)


@dataclass
class TestbedConfig:
    """Tuning of the machine the ranks share, for timings taken here (``conf/testbed/default.yaml``);
    a run on a real cluster can ignore this group."""

    __test__ = False  # not a pytest test class, whatever its name
    # each rank's threads on its own cores where the ranks fit them (an emulated network's nodes too),
    # and its gloo device threads under SCHED_BATCH (workbench.dist.yield_gloo_loops)
    pin: bool = False


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
    uri: Optional[str] = None  # mlflow: tracking URI (default: sqlite:///<output_root>/mlflow.db); wandb: its directory
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
    inject: InjectConfig = field(default_factory=InjectConfig)  # fault injection (conf/inject/)
    testbed: TestbedConfig = field(default_factory=TestbedConfig)  # this machine's tuning (conf/testbed/)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)



@dataclass
class CompressorConfig:
    """Fields every compressor shares; a compressor's own dataclass extends this one."""

    name: str = MISSING  # registry key (workbench/compress/<name>.py)
    error_feedback: bool = False  # keep what was not sent and add it to the next step's gradient
    pull: str = "none"  # parameter server's pull: none | same | a compressor that carries weights (fp16)
    activations: str = "same"  # Stanza's CONV<->FC messages: same | none | a compressor that carries them


ConfigStore.instance().store(name="workbench_schema", node=Config)  # conf/config.yaml's first default
for _group, _node in (("model", ModelConfig), ("data", DataConfig), ("optim", OptimConfig), ("cluster", ClusterConfig),
                      ("inject", InjectConfig), ("testbed", TestbedConfig)):
    store_schema(_group, _group, _node)
