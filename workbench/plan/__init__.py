"""Which way of distributing training wins for this model, cluster and network, and why: every
registered paradigm ranked by the calibrated performance model (:mod:`workbench.perfmodel`) before
anything runs, and, with ``--verify``, checked against short real runs here.

Runbook
-------
Plan (the same Hydra overrides as a run; ``--workers`` are processes, ``cluster.nproc``, the same
for every paradigm: a parameter server spends ``trainer.num_servers`` of them on servers, Stanza
splits them into CONV and FC workers)::

    python -m workbench.plan model=vgg16 data.resize=32 cluster.nproc=8 --bandwidth 1gbit,10gbit,100gbit
    python -m workbench.plan model=resnet18 data=synthetic --workers 4,8,16 --bandwidth 10gbit --json plan.json
    python -m workbench.plan cluster.nproc=3 --verify --json verify.json        # also runs each paradigm here
    python -m workbench.plan cluster.nproc=3 --verify --only sync,ps/async,compressed/topk
    python -m workbench.plan model=vgg16 --bandwidth 10gbit --speedup 20        # compute 20x faster (a GPU)
    python -m workbench.plan model=vgg16 --bandwidth 10gbit --profile gpu.json  # a profile taken on a GPU box

- ``--bandwidth``: each node's link, tc units (``100mbit``, ``1gbit``, ``10gbit``), comma separated;
  ``loopback`` is this machine with every rank on it (the default with ``--verify``). On a link,
  each rank is its own host of this machine's speed (``--speedup`` divides its compute).
  ``emulated:<rate>`` is this machine again, every rank behind its own link shaped to the rate
  (``network=emulated``): its ranks share the cores as on loopback; ``--verify`` runs those rows
  on the emulated network (root)::

      sudo python -m workbench.plan cluster.nproc=3 --bandwidth loopback,emulated:100mbit,emulated:1gbit --verify

  Hydra's network overrides name one link the same way: ``network=emulated network.bandwidth=700mbit``
  is ``--bandwidth emulated:700mbit``, ``network=loopback`` is ``loopback``; naming both, or a
  latency, jitter or per-node rate the planner does not plan, is one line, exit 2.
- ``--latency``: per message on a link (default ``50us``); loopback uses the measured one.
- ``--only``: paradigm labels or prefixes (``staleness`` selects every dense ``staleness/n=…``;
  ``bmuf+`` every ``bmuf+<compressor>``, ``ps+`` every compressed parameter-server row,
  ``ps/sync+topk`` that one).
- ``trainer=X`` among the overrides plans only X's variants, with your ``trainer.*`` keys.
- ``--target-accuracy 0.9``: each row's steps and time to that test accuracy, from a ``trainer=sync``
  run of the same model and data that reached it (its steps and gradient noise scale;
  :mod:`workbench.plan.to_target`, docs/time_to_target.md), and the rows ranked by that time; the
  planner makes that run once and keeps it (:mod:`workbench.plan.reference`), or ``--reference RUN``;
  with ``--verify``, each row run here to the target (``--seeds N`` runs each;
  :mod:`workbench.plan.verify_target`).

What it prints per (workers, bandwidth): rank, paradigm (the dashboards' label), predicted step
time and samples/s, bytes per worker per step (rank 0, every meter category, sent), the bottleneck
(compute, link, host codec, server), and a compressor's crossover (the link rate below which it
beats ``sync``; for a paradigm with a compressor on its own messages, ``ps/sync+topk``, the link
rate below which it beats that paradigm dense). Beside each paradigm the planner ranks it with
each of fp16, topk, efsignsgd and powersgd that can carry its messages (``bmuf+powersgd``,
``stanza/n_f=1+fp16``); a profile that did not measure a compressor's codec on those messages
plans the other rows and prints one line per row left out. Variants that differ only in a count
(``stanza/n_f=…``, ``staleness/n=…``) are one family: the table shows each family's best, marked
``*`` with how many it stands for; ``--all`` prints every variant (n-softsync values with the same
c = ⌊λ/n⌋ as one row). ``--json FILE`` writes every row: ``paradigm, workers, bandwidth_bps,
predicted_step_s, predicted_samples_per_s, predicted_bytes_per_step`` (bytes sent per worker per
step), ``predicted_bytes_by_category``, ``bottleneck``, ``crossover_bps``, and with ``--verify``
``measured_step_s, measured_bytes_per_step, measured_bytes_by_category, error`` (predicted /
measured − 1, of the step time) and ``bytes_error``. A verification runs 12 warm-up steps (more
where a paradigm's steady state starts later: PowerSGD under BMUF compresses from its
``start_iter``-th average), then
whole periods of 8 steps (BMUF's block, EASGD's period) filling about a second of predicted
steps (at most 400), and measures rank 0's median step (the mean where the bytes vary by step).
While it runs, a bar goes across the paradigms with each run's step bar under it (a terminal, a
notebook); in a log, one line per paradigm: ``verify i/N: <paradigm> … (about T left)``.

Layout: :mod:`~workbench.plan.rows` (the variants, the cluster of each bandwidth, the predicted
rows), :mod:`~workbench.plan.tables` (the text), :mod:`~workbench.plan.verification` (the runs
here), :mod:`~workbench.plan.to_target` (time to a target accuracy), :mod:`~workbench.plan.cli` (the
command line).

At scale (``--workers 30,64,1024``): on a link, the asynchronous paradigms (``ps/async``,
``staleness/n=…``, ``easgd/async``) come from the discrete-event simulator (:mod:`workbench.sim`:
the real protocol code in simulated time, ≤ 20 000 pushes per row) and their rows gain
``mean_staleness``, ``max_staleness`` and ``staleness_hist``; the synchronous ones stay analytic.
A trainer with more than 64 variants is planned at its 1st, 2nd, 4th, … and last (n = 1, 2, 4, …, λ).

The profile
-----------
The compute side, the loopback link and each compressor's codec are measured once per machine,
model, input shape, batch and rank count by :mod:`workbench.perfmodel.profile` (a few seconds for
the small CNN, longer for VGG-16 on a loaded CPU) and cached as
``experiments/profiles/<host>-<model>-<shape>-b<batch>-r<ranks>.json`` with what it was measured on
(host, cores, torch, load average). ``--refresh-profile`` measures again. To plan for hardware that
is not here, take a profile there (``python -m workbench.plan … --save-profile FILE`` on that machine)
and pass ``--profile FILE``, or scale this machine's compute with ``--speedup``.

Exit status: 0; 2 for bad input (unknown trainer or compressor, a bandwidth that does not parse,
workers < 1, a profile of another model, an ``--only`` matching nothing): one line, before anything
is profiled or launched.

Python (notebooks, the dashboards' what-if curves)::

    from workbench.plan import plan
    df = plan(workbench.compose(["model=small_cnn"]), bandwidths=["1gbit", "10gbit"], workers=[4, 8])

The model, its assumptions and its accuracy: docs/planner.md.
"""
from workbench.plan.cli import main
from workbench.plan.rows import (DEFAULT_BANDWIDTHS, EMULATED, LOOPBACK, MAX_VARIANTS, SIM_GRADIENTS, Variant,
                                 _plan_rows, _split_overrides, bandwidth_bps, check_only, cluster_for,
                                 emulated_crossover_bps, here, load_profile, parse_bandwidths, parse_workers, plan,
                                 predict_rows, profile_loops, simulated, variants)
from workbench.plan.tables import error_quantiles, table
from workbench.plan.verification import (VERIFY_MAX_STEPS, VERIFY_SECONDS, VERIFY_SKIP, VERIFY_STEPS, check_verifiable,
                                   network_overrides, scored, verify, verify_steps, verify_variant)

__all__ = ["DEFAULT_BANDWIDTHS", "EMULATED", "LOOPBACK", "MAX_VARIANTS", "SIM_GRADIENTS", "VERIFY_MAX_STEPS",
           "VERIFY_SECONDS", "VERIFY_SKIP", "VERIFY_STEPS", "Variant", "bandwidth_bps", "check_only",
           "check_verifiable", "cluster_for", "emulated_crossover_bps", "error_quantiles", "here", "load_profile",
           "main", "network_overrides", "parse_bandwidths", "parse_workers", "plan", "predict_rows", "profile_loops",
           "scored", "simulated", "table", "variants", "verify", "verify_steps", "verify_variant"]
