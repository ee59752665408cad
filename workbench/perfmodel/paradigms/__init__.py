"""One step-time function per paradigm: a pure function of a measured
:class:`~workbench.perfmodel.profile.Profile` and a :class:`~workbench.perfmodel.cluster.Cluster`,
returning a :class:`~workbench.perfmodel.cluster.Prediction` (step time, samples/s, bytes per
worker per step by meter category, the bottleneck). Each trainer names the functions that model it
(``Trainer.plan_variants``), so a new trainer brings its model; the planner never lists paradigms.

==========================  ==================================  ===========================
paradigm                    function                            file
==========================  ==================================  ===========================
``sync`` (DDP)              :func:`sync`                        ``paradigms/dp.py``
``compressed/<c>``          :func:`compressed`, crossover       ``paradigms/dp.py``
``ps/sync`` (hardsync)      :func:`ps_sync`                     ``paradigms/ps.py``
``ps/async``, n-softsync    :func:`ps_async`, :func:`staleness`  ``paradigms/ps.py``
``easgd``                   :func:`easgd`                       ``paradigms/averaging.py``
``bmuf`` / ``local_sgd``    :func:`bmuf`                        ``paradigms/averaging.py``
``stanza/n_f=k``            :func:`stanza`                      ``paradigms/stanza_schedule.py``
``<paradigm>+<c>``          ``compressed_messages.<paradigm>``  ``paradigms/compressed_messages.py``
==========================  ==================================  ===========================

Symbols (docs/planner.md has the derivations): b per-worker batch, C_k = b·(t_c(k) + t_f(k)) the
forward+backward of one batch while k ranks compute on one host, F and B its forward and backward
parts (F = fwd_share·C), U = u·P the optimizer over P parameters, M = 4P the model's bytes,
AR(n, p) / AG(n, p) / PS(n, W, S) the collective times of :mod:`workbench.perfmodel.collectives`,
book the training loop's own seconds a step (``Profile.bookkeeping_s``). Each module's docstring
states its formula on a cluster of hosts. Where a row is a run on this machine (loopback, or the
emulated links' token buckets on its cores), each function asks :mod:`workbench.perfmodel.testbed`
for the term that differs there.

Bytes are the meter's exact counts per worker per step (worker rank 0), averaged over a block or
period where a paradigm communicates every few steps.
"""
from __future__ import annotations

from typing import Callable, Dict

from workbench.perfmodel.cluster import (HEADER_BYTES, Cluster, Prediction, bucket_ready,  # noqa: F401
                                         exposed_after_backward)
from workbench.perfmodel.loopback import ddp_overhead_s, loop_link, oversubscribed, ps_loop_s  # noqa: F401
from workbench.perfmodel.paradigms import compressed_messages  # noqa: F401
from workbench.perfmodel.paradigms.averaging import bmuf, easgd
from workbench.perfmodel.paradigms.compressed_messages import MessageCodec, MissingMeasurement  # noqa: F401
from workbench.perfmodel.paradigms.dp import compressed, crossover_bps, sync
from workbench.perfmodel.paradigms.ps import ps_async, ps_sync, staleness
from workbench.perfmodel.paradigms.stanza_schedule import stanza, stanza_inputs  # noqa: F401
from workbench.perfmodel.queueing import MVA_POPULATIONS, mva  # noqa: F401
from workbench.perfmodel.shaper import beyond_host_s, shaper_after_s, shaper_delay_s  # noqa: F401

# The step-time functions by name, for code that has only a name (the JSON of a plan).
MODELS: Dict[str, Callable[..., Prediction]] = {
    "sync": sync, "compressed": compressed, "ps_sync": ps_sync, "ps_async": ps_async, "staleness": staleness,
    "easgd": easgd, "bmuf": bmuf, "stanza": stanza}
