"""Stanza's layer separation (``trainer=stanza``): n_c CONV workers and n_f FC workers of
``cl.ranks``, its schedule :func:`workbench.perfmodel.stanza.breakdown` (the formulas live there,
beside the paper's) on the profile's inputs and the cluster's link.

On this machine the link is this host's in-loop line, and behind the emulated links the schedule
is :func:`workbench.perfmodel.testbed.stanza_schedule` (``testbed.stanza_line``).
"""
from __future__ import annotations

from typing import Optional

from workbench.perfmodel import stanza as st
from workbench.perfmodel import testbed
from workbench.perfmodel.cluster import Cluster, Prediction, dominant
from workbench.perfmodel.profile.schema import Profile


def stanza_inputs(prof: Profile, cl: Cluster, batch: Optional[int] = None) -> st.StanzaInputs:
    """The Stanza model's inputs from a profile, on ``cl``'s link (compute per concurrency where the
    ranks share one host's cores)."""
    s = prof.speedup
    at = (lambda xs: tuple(v / s for v in xs)) if cl.shares_cores else (lambda xs: None)
    return st.StanzaInputs(t_c=prof.t_c(1), t_f=prof.t_f(1), a=prof.boundary, p_c=prof.params_conv,
                           p_f=prof.params_fc, b=batch or prof.batch, beta=cl.bandwidth, alpha=cl.latency,
                           beta_allreduce=cl.allreduce_bandwidth, u=prof.u / s,
                           t_c_at=at(prof.t_c_at), t_f_at=at(prof.t_f_at))


def stanza(prof: Profile, cl: Cluster, fc_workers: int = 1) -> Prediction:
    """Stanza's schedule (``perfmodel.stanza.breakdown``) with n_f FC workers of ``cl.ranks``."""
    n_f = fc_workers
    n_c = cl.ranks - n_f
    if n_c < 1 or n_f < 1:
        raise ValueError(f"Stanza needs 1 <= n_f < ranks, got n_f={n_f} of {cl.ranks}")
    x = stanza_inputs(prof, testbed.stanza_line(prof, cl))
    t = testbed.stanza_schedule(prof, cl, x, n_c, n_f)
    if t is None:
        t = st.breakdown(x, n_c, n_f)
    by = st.stanza_conv_worker_bytes(prof.params_conv, prof.boundary, x.b, n_c)
    book = prof.bookkeeping_s()  # every rank's loop, CONV and FC alike, between its steps
    step = t["step"] + book
    terms = {"conv_compute": t["conv_compute"], "fc_compute": t["fc_compute"] * t["pieces"],
             "transfer": 2 * t["transfer"] * t["pieces"], "allreduce": t["allreduce_conv"] + t["fc_exposed"],
             "update": t["update_conv"], "bookkeeping": book}
    kinds = {"conv_compute": "compute", "fc_compute": "compute", "update": "compute", "transfer": "link",
             "allreduce": "link", "bookkeeping": "compute"}
    return Prediction(step, n_c * x.b / step, by, dominant(terms, kinds), terms)
