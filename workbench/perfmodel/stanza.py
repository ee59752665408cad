"""Stanza's performance model: step time and throughput of an allocation of N nodes into n_c CONV
workers and n_f FC workers, as pure functions of measured inputs, with the data-parallel and
parameter-server baselines on the same inputs, and the per-worker byte counts every trainer's meter
is checked against.

Inputs (:class:`StanzaInputs`, measured by ``trainer=stanza trainer.fc_workers=auto``, see
``workbench/trainers/stanza.py``): ``t_c``/``t_f`` forward+backward seconds per sample of the conv and
FC parts, ``a`` boundary floats per sample, ``p_c``/``p_f`` parameter counts, ``b`` batch per CONV
worker, ``beta`` point-to-point bytes/s per node, and four refinements the reconstruction in
docs/papers.md §2 lacks: ``alpha`` (seconds per message), ``beta_allreduce`` (the ring all-reduce's
bandwidth, which on shared-memory gloo differs from a single stream's), ``u`` (optimizer seconds
per parameter: SGD with momentum touches every FC weight three times per step, which on a CPU costs as
much as the FC forward) and ``t_c_at``/``t_f_at`` (compute time per sample when k ranks compute at
once: ranks that share a host, its cores or one GPU slow each other down, and an allocation runs n_c
conv computations at once but only n_f FC ones).

Two step-time models:

* :func:`paper_step_time` -- the reconstruction in docs/papers.md §2, verbatim:
  ``T = b t_c + (n_c/n_f)(b t_f + 2 s a b / beta) + 2(n_c-1)/n_c s P_c/beta + 2(n_f-1)/n_f s P_f/beta``.
* :func:`step_time` -- the schedule ``trainer=stanza`` actually runs, which differs in three ways:

  1. BSP waits for the *busiest* FC worker, which serves ``k = ceil(n_c/n_f)`` CONV workers, not the
     average ``n_c/n_f`` (they differ whenever n_f does not divide n_c).
  2. The FC worker pipelines its k pieces: piece i+1's activations arrive while piece i is computed,
     and piece i's gradient leaves as soon as it is ready. Three stages (in, compute, out), k items:
     ``W = 2D + F + (k-1) max(D, F)`` with ``D = alpha + s a b / beta``, ``F = b t_f`` (the paper
     charges ``k (F + 2D)``).
  3. The FC all-reduce and FC update run *after* the last gradient has gone back, while the CONV
     workers do their backward pass, conv all-reduce, update and next forward; they cost time only
     when longer than that window: ``T = W + max(b t_c + AR_c + U_c, AR_f + U_f)``.

  The conv all-reduce is charged in full (``AR_c``), not hidden behind the backward pass: DDP does
  start it during backward, but on CPU gloo the transfer competes with the backward for the same
  cores, so the overlap buys little (BENCHMARKS.md (Stanza section) compares both models with runs).

Throughput is ``X = n_c b / T`` samples/s; :func:`choose_allocation` picks the n_f in [1, N-1] that
maximises it.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Callable, Dict, Optional, Tuple

from workbench.perfmodel import collectives as C


@dataclass(frozen=True)
class StanzaInputs:
    """Measured inputs of the model (SI units: seconds, bytes/s)."""

    t_c: float  # conv forward+backward seconds per sample
    t_f: float  # FC forward+backward seconds per sample
    a: int  # boundary floats per sample (the conv part's output)
    p_c: int  # conv parameters
    p_f: int  # FC parameters
    b: int  # batch per CONV worker (per worker for the baselines)
    beta: float  # point-to-point bandwidth per node, bytes/s
    s: int = 4  # bytes per float
    alpha: float = 0.0  # latency per message, seconds
    beta_allreduce: Optional[float] = None  # ring all-reduce bandwidth per node, bytes/s (None: beta)
    u: float = 0.0  # optimizer update seconds per parameter
    # t_c / t_f when k ranks compute at once, k = 1, 2, ... (ranks sharing a host slow each other
    # down); None, or k beyond the tuple: t_c / t_f
    t_c_at: Optional[Tuple[float, ...]] = None
    t_f_at: Optional[Tuple[float, ...]] = None

    def with_batch(self, b: int) -> "StanzaInputs":
        return replace(self, b=b)

    def as_dict(self) -> dict:
        return asdict(self)


def _check_allocation(n_c: int, n_f: int) -> None:
    if n_c < 1 or n_f < 1:
        raise ValueError(f"an allocation needs n_c >= 1 and n_f >= 1, got n_c={n_c}, n_f={n_f}")


def conv_time(x: StanzaInputs, concurrent: int) -> float:
    """Conv forward+backward seconds per sample while ``concurrent`` ranks compute at once."""
    return x.t_c_at[concurrent - 1] if x.t_c_at and concurrent <= len(x.t_c_at) else x.t_c


def fc_time(x: StanzaInputs, concurrent: int) -> float:
    return x.t_f_at[concurrent - 1] if x.t_f_at and concurrent <= len(x.t_f_at) else x.t_f


def allreduce_time(nbytes: float, p: int, x: StanzaInputs) -> float:
    """Ring all-reduce of ``nbytes`` over ``p`` nodes: 2(p-1) messages of nbytes/p each."""
    return C.allreduce_time(nbytes, p, x.beta_allreduce or x.beta, x.alpha)


STANZA_MESSAGES = 2  # each way: the activations and the labels out, their gradients and the loss back


def transfer_time(x: StanzaInputs) -> float:
    """One CONV worker's boundary activations (or their gradients): D = 2 alpha + s a b / beta. The
    schedule sends two messages each way (``trainer=stanza``'s ``_conv_step``); the labels' and the
    loss's few bytes cost a latency each, as the parameter server's header does (``PS_MESSAGES``)."""
    return (STANZA_MESSAGES - 1) * x.alpha + C.p2p_time(x.s * x.a * x.b, x.beta, x.alpha)


def pieces_on_busiest_fc(n_c: int, n_f: int) -> int:
    """CONV workers served by the busiest FC worker under the balanced assignment c -> c mod n_f."""
    return math.ceil(n_c / n_f)


# ---------------------------------------------------------------------------------------------
# The reconstruction of docs/papers.md §2 (kept verbatim, for comparison)

def paper_step_time(x: StanzaInputs, n_c: int, n_f: int) -> float:
    """(With per-concurrency compute times when given, so that both models see the same inputs.)"""
    _check_allocation(n_c, n_f)
    comm = 2 * x.s * x.a * x.b / x.beta
    return (x.b * conv_time(x, n_c) + (n_c / n_f) * (x.b * fc_time(x, n_f) + comm)
            + 2 * (n_c - 1) / n_c * x.s * x.p_c / x.beta + 2 * (n_f - 1) / n_f * x.s * x.p_f / x.beta)


def paper_throughput(x: StanzaInputs, n_c: int, n_f: int) -> float:
    return n_c * x.b / paper_step_time(x, n_c, n_f)


# ---------------------------------------------------------------------------------------------
# The model of the schedule trainer=stanza runs

def parts(x: StanzaInputs, n_c: int, n_f: int) -> Dict[str, float]:
    """The schedule's pieces before :func:`assemble` orders them: a network that adds to a transfer
    or a ring (the emulated links' token buckets, ``perfmodel.paradigms``) adds it here."""
    _check_allocation(n_c, n_f)
    return {"pieces": pieces_on_busiest_fc(n_c, n_f), "transfer": transfer_time(x),
            "fc_compute": x.b * fc_time(x, n_f), "conv_compute": x.b * conv_time(x, n_c),
            "allreduce_conv": allreduce_time(x.s * x.p_c, n_c, x),
            "allreduce_fc": allreduce_time(x.s * x.p_f, n_f, x),
            "update_conv": x.u * x.p_c, "update_fc": x.u * x.p_f}


def fc_phase_s(transfer: float, fc_compute: float, pieces: int) -> float:
    """The FC phase: the first activations in, the last gradients out, and the busiest FC worker's
    pieces pipelined at the pace of the slower of its transfer and its compute."""
    return 2 * transfer + fc_compute + (pieces - 1) * max(transfer, fc_compute)


def assemble(t: Dict[str, float], fc_phase: Optional[float] = None) -> Dict[str, float]:
    """The step from :func:`parts`: the FC phase (:func:`fc_phase_s` unless a network that orders
    the pieces otherwise gives its own), then the CONV workers' backward, ring and update beside the
    FC workers' ring and update; whichever ends last ends the step."""
    if fc_phase is None:
        fc_phase = fc_phase_s(t["transfer"], t["fc_compute"], t["pieces"])
    conv_window = t["conv_compute"] + t["allreduce_conv"] + t["update_conv"]
    fc_tail = t["allreduce_fc"] + t["update_fc"]
    return {**t, "fc_phase": fc_phase, "fc_exposed": max(0.0, fc_tail - conv_window),
            "step": fc_phase + max(conv_window, fc_tail)}


def breakdown(x: StanzaInputs, n_c: int, n_f: int) -> Dict[str, float]:
    """The terms of :func:`step_time` (seconds), for reports and plots."""
    return assemble(parts(x, n_c, n_f))


def step_time(x: StanzaInputs, n_c: int, n_f: int) -> float:
    return breakdown(x, n_c, n_f)["step"]


def throughput(x: StanzaInputs, n_c: int, n_f: int) -> float:
    """Samples per second of the whole cluster (n_c CONV workers, n_f FC workers)."""
    return n_c * x.b / step_time(x, n_c, n_f)


# ---------------------------------------------------------------------------------------------
# Baselines on the same inputs

def dp_step_time(x: StanzaInputs, n: int) -> float:
    """Synchronous data parallelism (ring all-reduce of the whole model) on ``n`` nodes."""
    p = x.p_c + x.p_f
    return x.b * (conv_time(x, n) + fc_time(x, n)) + allreduce_time(x.s * p, n, x) + x.u * p


def dp_throughput(x: StanzaInputs, n: int) -> float:
    return n * x.b / dp_step_time(x, n)


def ps_step_time(x: StanzaInputs, workers: int, servers: int = 1) -> float:
    """Synchronous parameter server: ``workers`` push gradients and pull parameters (s P each) to
    ``servers`` dedicated nodes holding 1/servers of the parameters each; a server's link carries
    workers/servers times what a worker's does, and it updates its shard."""
    if workers < 1 or servers < 1:
        raise ValueError(f"a parameter server needs workers >= 1 and servers >= 1, got {workers}, {servers}")
    p = x.p_c + x.p_f
    link = 2 * C.ps_transfer_time(x.s * p, workers, servers, x.beta, x.alpha)  # push, then pull
    return x.b * (conv_time(x, workers) + fc_time(x, workers)) + link + x.u * p / servers


def ps_throughput(x: StanzaInputs, workers: int, servers: int = 1) -> float:
    return workers * x.b / ps_step_time(x, workers, servers)


# ---------------------------------------------------------------------------------------------
# Allocation

def choose_allocation(x: StanzaInputs, nodes: int, global_batch: Optional[int] = None,
                      max_batch: Optional[int] = None,
                      model: Callable[[StanzaInputs, int, int], float] = throughput) -> Tuple[int, Dict[int, float]]:
    """The n_f in [1, nodes-1] with the highest predicted throughput, and the prediction for every
    feasible n_f.

    ``global_batch``: if set, the CONV workers share it (b = global_batch / n_c; allocations whose
    n_c does not divide it are infeasible); otherwise every CONV worker takes ``x.b``.
    ``max_batch``: allocations whose global batch exceeds it (the training set) are infeasible.
    Ties go to the smaller n_f (more CONV workers see data)."""
    if nodes < 2:
        raise ValueError(f"Stanza needs at least 2 nodes (one CONV, one FC), got {nodes}")
    preds: Dict[int, float] = {}
    for n_f in range(1, nodes):
        n_c = nodes - n_f
        if global_batch is not None:
            if global_batch % n_c:
                continue
            xi = x.with_batch(global_batch // n_c)
        else:
            xi = x
        if max_batch is not None and n_c * xi.b > max_batch:
            continue
        preds[n_f] = model(xi, n_c, n_f)
    if not preds:
        raise ValueError(f"no feasible allocation of {nodes} nodes (global batch {global_batch}, at most {max_batch} samples)")
    best = max(preds, key=lambda n_f: (preds[n_f], -n_f))
    return best, preds


@dataclass
class Allocation:
    """What ``trainer=stanza`` reports about its allocation: the profiled inputs, the n_f it runs
    (``fixed``, or the model's ``best`` when auto), every feasible n_f's prediction by this model and
    by the paper's, and the data-parallel and parameter-server baselines at the chosen n_c."""

    inputs: StanzaInputs
    fixed: Optional[int]
    fc_workers: int
    best: int
    profile_s: float
    predictions: Dict[int, float]
    paper_predictions: Dict[int, float]
    baselines: Dict[str, float]

    def record(self, nodes: int) -> dict:
        """The ``kind: stanza_allocation`` record of metrics.jsonl."""
        return {"kind": "stanza_allocation", "step": 0, "auto": self.fixed is None, "fc_workers": self.fc_workers,
                "conv_workers": nodes - self.fc_workers, "best_fc_workers": self.best, "profile_s": self.profile_s,
                "inputs": self.inputs.as_dict(), "predicted_samples_per_s": self.predictions,
                "paper_predicted_samples_per_s": self.paper_predictions, **self.baselines}

    def line(self) -> str:
        """Rank 0's report once the allocation is chosen."""
        preds = ", ".join(f"n_f={k}: {v:.1f}" for k, v in sorted(self.predictions.items()))
        return (f"stanza: profiled in {self.profile_s:.1f}s: {self.inputs.as_dict()}\nstanza: predicted samples/s {preds}; "
                f"{'chose' if self.fixed is None else 'fixed'} fc_workers={self.fc_workers} (model's best: {self.best})")

    def summary(self, steady: Optional[float]) -> dict:
        """The prediction fields of ``summary.json``'s ``stanza`` section, beside the ``steady``
        measured samples/s (median step period, warm-up dropped)."""
        pred = self.predictions.get(self.fc_workers)
        return {"auto": self.fixed is None, "profile_s": self.profile_s, "inputs": self.inputs.as_dict(),
                "predicted_samples_per_s": pred,
                "predicted_by_fc_workers": {str(k): v for k, v in self.predictions.items()},
                "paper_predicted_by_fc_workers": {str(k): v for k, v in self.paper_predictions.items()},
                "prediction_error": (steady / pred - 1) if (pred and steady) else None,
                **self.baselines}


def allocate(x: StanzaInputs, nodes: int, fixed: Optional[int], global_batch: Optional[int], max_batch: int,
             profile_s: float) -> Allocation:
    """The allocation a run with profiled inputs ``x`` takes: ``fixed`` FC workers, or the best
    predicted (:func:`choose_allocation`), with the paper model's predictions and the baselines."""
    best, preds = choose_allocation(x, nodes, global_batch=global_batch, max_batch=max_batch)
    n_f = best if fixed is None else fixed
    paper = choose_allocation(x, nodes, global_batch=global_batch, max_batch=max_batch, model=paper_throughput)[1]
    n_c = nodes - n_f
    xb = x.with_batch(global_batch // n_c) if global_batch is not None else x
    baselines = {"dp_samples_per_s": dp_throughput(xb, nodes), "ps_samples_per_s": ps_throughput(xb, nodes - 1, 1)}
    return Allocation(x, fixed, n_f, best, profile_s, preds, paper, baselines)


# ---------------------------------------------------------------------------------------------
# Bytes per worker per step (what the meter must count)

def ring_allreduce_bytes(nbytes: int, p: int) -> int:
    """Bytes one rank sends (and receives) in a ring all-reduce of ``nbytes`` (the meter's count)."""
    return C.allreduce_bytes(nbytes, p)


def stanza_conv_worker_bytes(p_c: int, a: int, b: int, n_c: int, s: int = 4, label_bytes: int = 8,
                             act_bytes: Optional[float] = None,
                             allreduce_bytes: Optional[float] = None) -> Dict[str, Dict[str, float]]:
    """Per CONV worker per step, by meter category: ``{cat: {"sent": ..., "recv": ...}}``. Besides
    the activations, their gradients and the conv all-reduce, a CONV worker sends its labels (the FC
    worker computes the loss) and receives its piece's loss (for the log). A compressed run gives
    ``act_bytes`` (one boundary message's payload; default ``s a b``) and ``allreduce_bytes`` (what
    the compressor's collective sends, and receives, per step; default the ring's)."""
    ar = ring_allreduce_bytes(s * p_c, n_c) if allreduce_bytes is None else allreduce_bytes
    act = s * a * b if act_bytes is None else act_bytes
    return {"allreduce_conv": {"sent": ar, "recv": ar},
            "activations": {"sent": act, "recv": 0},
            "activation_grads": {"sent": 0, "recv": act},
            "labels": {"sent": label_bytes * b, "recv": 0},
            "loss": {"sent": 0, "recv": 4}}


def stanza_fc_worker_bytes(p_f: int, a: int, b: int, pieces: int, n_f: int, s: int = 4,
                           label_bytes: int = 8, act_bytes: Optional[float] = None) -> Dict[str, Dict[str, float]]:
    """Per FC worker serving ``pieces`` CONV workers, per step, by meter category (``act_bytes``: as
    in :func:`stanza_conv_worker_bytes`; the FC all-reduce is never compressed)."""
    ar = ring_allreduce_bytes(s * p_f, n_f)
    act = s * a * b if act_bytes is None else act_bytes
    return {"allreduce_fc": {"sent": ar, "recv": ar},
            "activations": {"sent": 0, "recv": pieces * act},
            "activation_grads": {"sent": pieces * act, "recv": 0},
            "labels": {"sent": 0, "recv": pieces * label_bytes * b},
            "loss": {"sent": 4 * pieces, "recv": 0}}


def issue_conv_worker_bytes(p_c: int, a: int, b: int, n_c: int, s: int = 4) -> float:
    """The count the Stanza issue states per CONV worker: the ring's bytes sent (= received) plus
    the activations sent and their gradients received, ``2 s P_c (n_c-1)/n_c + 2 s a b``."""
    return ring_allreduce_bytes(s * p_c, n_c) + 2 * s * a * b


def sync_worker_bytes(p: int, n: int, s: int = 4) -> Dict[str, float]:
    """Per worker per step of ring data parallelism (trainer=sync)."""
    ar = ring_allreduce_bytes(s * p, n)
    return {"sent": ar, "recv": ar}


def ps_worker_bytes(p: int, s: int = 4) -> Dict[str, float]:
    """Per worker per step of a synchronous parameter server: push all gradients, pull all parameters."""
    return {"sent": s * p, "recv": s * p}


def total(by_category: Dict[str, Dict[str, float]], key: str) -> float:
    return sum(v[key] for v in by_category.values())
