"""Config composition and validation: every option of every group composes and builds; invalid
values fail before launch with one line naming the key."""
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import workbench
from workbench.config import ConfigError, conf_dir, validate

CONF = conf_dir()


def group_options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_default_config_is_valid():
    cfg = workbench.compose([])
    validate(cfg)
    assert cfg.trainer.name == "sync" and cfg.model.name == "small_cnn" and cfg.data.name == "digits"
    assert cfg.cluster.nproc == 4


@pytest.mark.parametrize("group", ["trainer", "model", "data", "optim", "cluster", "compressor"])
def test_every_option_composes(group, tmp_path):
    """Every file of every group composes against the schema; the ones that can be checked here
    (data with files present, no GPU needed) also validate."""
    opts = group_options(group)
    assert opts, f"conf/{group}/ is empty"
    for opt in opts:
        overrides = [f"{group}={opt}"] + (["trainer=compressed"] if group == "compressor" else [])
        cfg = workbench.compose(overrides)
        if group == "cluster" and opt == "slurm":
            # nodes and tasks come from the submitit launcher, so they resolve only inside a SLURM job
            with pytest.raises(ConfigError, match="cluster.nproc"):
                validate(cfg)
            continue
        assert OmegaConf.to_container(cfg, resolve=True)
        if group == "model" and opt in ("alexnet", "vgg16"):
            cfg = workbench.compose(overrides + ["data.resize=32"])
        if group == "data" and opt in ("mnist", "cifar10"):
            with pytest.raises(ConfigError, match="data.root"):
                validate(workbench.compose(overrides + [f"data.root={tmp_path}"]))
            continue
        if group == "cluster" and opt == "local_gpu":
            import torch
            if not torch.cuda.is_available():
                with pytest.raises(ConfigError, match="cluster.device"):
                    validate(cfg)
                continue
        validate(cfg)


def test_every_model_builds():
    from workbench.data import DATASETS
    from workbench.models import MODELS, build_model
    for name in MODELS:
        cfg = workbench.compose([f"model={name}", "data=synthetic"])
        spec = DATASETS["synthetic"].spec(cfg.data)
        model = build_model(cfg, spec)
        assert sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.parametrize("exp", group_options("experiment"))
def test_every_experiment_composes_and_validates(exp):
    cfg = workbench.compose([f"experiment={exp}"])
    validate(cfg)


@pytest.mark.parametrize("override, key", [
    ("cluster.nproc=0", "cluster.nproc"),
    ("optim.lr=-0.1", "optim.lr"),
    ("optim.momentum=1.5", "optim.momentum"),
    ("optim.schedule=exponential", "optim.schedule"),
    ("cluster.backend=mpi", "cluster.backend"),
    ("data.batch_size=0", "data.batch_size"),
    ("data.global_batch_size=6", "data.global_batch_size"),  # not a multiple of 4 workers
    ("trainer.eval_every=0", "trainer.eval_every"),
    ("inject.straggler_ranks=[7]", "inject.straggler_ranks"),
    ("model.name=nope", "model.name"),
])
def test_invalid_values_name_the_key(override, key):
    with pytest.raises(ConfigError) as e:
        validate(workbench.compose([override]))
    msg = str(e.value)
    assert key in msg and "\n" not in msg


def test_missing_data_root_names_path_and_files(tmp_path):
    with pytest.raises(ConfigError) as e:
        validate(workbench.compose(["data=cifar10", f"data.root={tmp_path}"]))
    msg = str(e.value)
    assert str(tmp_path) in msg and "data_batch_1" in msg and "data.root" in msg


def test_model_too_big_for_input_names_fix():
    with pytest.raises(ConfigError, match="data.resize=32"):
        validate(workbench.compose(["model=vgg16"]))  # digits are 8x8


def test_unknown_option_and_key_are_one_line_errors():
    with pytest.raises(ConfigError) as e:
        workbench.compose(["model=not_a_model"])
    assert "not_a_model" in str(e.value) and "small_cnn" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        workbench.compose(["optim.learning_rate=0.1"])
    assert "learning_rate" in str(e.value)
    with pytest.raises(ConfigError):
        workbench.compose(["cluster.nproc=four"])  # type-checked by the structured config


def test_global_batch_divides_among_workers():
    from workbench.data import batch_size_per_worker
    cfg = workbench.compose(["data.global_batch_size=64", "cluster.nproc=4"])
    assert batch_size_per_worker(cfg, 4) == 16
    cfg = workbench.compose(["data.global_batch_size=64", "cluster.nproc=2"])
    assert batch_size_per_worker(cfg, 2) == 32


def test_lr_scaling_and_warmup():
    from workbench.trainers.base import lr_at
    cfg = workbench.compose(["optim.lr=0.1", "optim.scale_lr=linear", "optim.base_batch_size=64", "optim.warmup_steps=4"])
    assert lr_at(cfg.optim, 0, 100, 256) == pytest.approx(0.4 / 4)
    assert lr_at(cfg.optim, 3, 100, 256) == pytest.approx(0.4)
    assert lr_at(cfg.optim, 50, 100, 256) == pytest.approx(0.4)
    cfg = workbench.compose(["optim.lr=0.1", "optim.schedule=cosine"])
    assert lr_at(cfg.optim, 100, 100, 64) == pytest.approx(0.0, abs=1e-12)


def test_schemas_are_no_options_of_their_groups():
    """Hydra offers ``trainer=sync``, never ``trainer=sync_schema``: the dataclasses that type a group's
    options live in the config store under ``schema/<group>/``."""
    from hydra.core.config_store import ConfigStore

    from workbench.compress import COMPRESSORS
    from workbench.trainers import TRAINERS
    repo = ConfigStore.instance().repo
    for group in ("trainer", "compressor", "model", "data", "optim", "cluster"):
        assert not [n for n in repo.get(group, {}) if "schema" in n], group
    assert {n.removesuffix(".yaml") for n in repo["schema"]["trainer"]} == set(TRAINERS)
    assert {n.removesuffix(".yaml") for n in repo["schema"]["compressor"]} == set(COMPRESSORS)


def test_nccl_ranks_beyond_the_gpus_are_refused_before_start():
    """NCCL takes a GPU per rank; more ranks on this machine than its GPUs would fail in NCCL's
    set-up after every process started ("Duplicate GPU detected", seen with a parameter server's
    server rank on one H200), so the starter refuses them in one line, naming the way out."""
    import torch

    from workbench.dist import check_gpus_for_nccl
    gpus = torch.cuda.device_count()
    cfg = workbench.compose([f"cluster.nproc={gpus + 1}", "cluster.backend=nccl"])
    with pytest.raises(ConfigError) as e:
        check_gpus_for_nccl(cfg.cluster)
    assert "cluster.nproc" in str(e.value) and "cluster.backend=gloo" in str(e.value) and "\n" not in str(e.value)
    check_gpus_for_nccl(workbench.compose([f"cluster.nproc={gpus + 1}", "cluster.backend=gloo"]).cluster)
