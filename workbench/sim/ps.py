"""A cluster of λ workers and S parameter servers in simulated time, driven by the real protocol.

Each server shard is a :class:`workbench.ps.rules.Protocol` — the class whose decisions the real
server (:class:`~workbench.ps.rules.GradientRule`) makes — so hardsync, n-softsync, async, the SSP
bound (block or drop) and the learning-rate modulation are decided by the same code as in a real
run; only time is simulated. Per message, with M the model's bytes, S servers, β a node's link and
α the latency (:mod:`workbench.perfmodel.collectives`):

- a worker computes a step (``compute_s``, its spread and stragglers), then pushes: the push reaches
  the servers (M/S each) once its own link has carried all S shards, (S−1)·M/(S·β) after it starts;
- a server is one FIFO queue, as the real loop is serial (it posts one receive at a time, and gloo
  moves a payload only into a posted receive): receiving a push costs 2α + M/(Sβ) (header and
  payload), an update ``update_s``/S; every reply it then sends takes 2α + M/(Sβ) on the outgoing
  half of its link, but holds the server only for the part of its shard the kernel's socket buffer
  cannot take (``collectives.server_service_time``); many workers pushing at once therefore queue
  at the server (incast), and more servers help;
- a worker goes on once every server has answered; the reply carries the server's clock, which is
  the timestamp its next gradient is computed on (as in :class:`workbench.ps.protocol.PSClient`);
- EASGD: ``period`` local steps (compute + optimizer), then the parameters to the centre, which
  answers at once (the asynchronous elastic rule); staleness does not apply.

That is a network of hosts, one per worker and per server (``host_cores=None``). With
``host_cores=k`` they all share one host of k cores instead, as λ workers and a server run as
processes on this machine: every CPU activity is a job in a processor-sharing pool
(:class:`workbench.sim.engine.CorePool`; with j jobs active each runs at min(1, k/j)), and the links
are no longer resources of their own:

- a worker's compute is a job of ``compute_s`` (the spread and a straggler's factor applied; it is
  one batch's CPU-seconds on one thread, ``prof.compute_s(1)``: the pool does the time-sharing);
  a straggler's delay is a sleep, not CPU;
- a message (a push's shard, a reply, EASGD's parameters) costs 2α + M/(Sβ) of CPU on *each* end,
  both jobs starting together. β is the profile's loopback ping-pong, each leg of which is one
  process writing M bytes while the other reads them, so a one-way transfer of M already takes about
  M/β of wall with both ends busy; hence one job of M/β per end, not M/(2β) and not the sum. α (the
  header's round trip on loopback: syscalls and wake-ups) is charged likewise, twice per message as
  above (header and payload);
- a server is still one process, one FIFO queue, one job at a time: it takes up a push when free (the
  worker's side of the copy starts then too: the worker is blocked in its send until the server
  reads), then the update (``update_s``/S) if the protocol made one, then each reply in turn; a
  worker computes again once every server's reply has been copied in.

Left out on a shared host: a worker sending shards to S > 1 servers does so as parallel jobs (one
thread each), where the real worker sends them one after another; the kernel's own work beyond
the two copies; cache and memory-bandwidth contention (a job's rate depends only on how many run).

Left out in both: the workers' forward/backward overlapping their transfers, the workers' own
per-step work outside forward+backward (flattening, copying weights back, Python), network topology
beyond one link per node, TCP dynamics, the servers' message handling beyond their
link, evaluation and checkpoints. The staleness statistics are those of shard 0 (every shard sees
the same pushes; with S > 1 their clocks differ only by the order pushes reach them).
"""
from __future__ import annotations

import math
import random
import time
from collections import deque
from typing import Dict, List, Optional

from workbench.perfmodel.collectives import SEND_BUFFER
from workbench.perfmodel.paradigms import HEADER_BYTES
from workbench.ps.rules import Protocol
from workbench.sim.engine import CorePool, EventQueue
from workbench.sim.spec import SimSpec, check

PUSH, DONE = 0, 1
WAKE = 2  # on a shared host: a straggler's sleep is over, it pushes
# what a job in the shared host's pool was, when it ends
COMPUTED, SENT, RECEIVED, UPDATED, REPLIED, PULLED = range(6)


class SimProtocol(Protocol):
    """The real protocol, counting what a real server's statistics count (the full τ histogram,
    not capped at 64 bins), and optionally every update's (worker, τ) pairs."""

    def __init__(self, workers, record: bool = False, **kw) -> None:
        super().__init__(workers, **kw)
        self.hist: Dict[int, int] = {}
        self.sum_tau = 0
        self.max_tau = 0
        self.updates = 0
        self.applied: Optional[List[list]] = [] if record else None

    def step(self, entries, taus, factors) -> None:
        h = self.hist
        for t in taus:
            h[t] = h.get(t, 0) + 1
        self.sum_tau += sum(taus)
        m = max(taus)
        if m > self.max_tau:
            self.max_tau = m
        self.updates += 1
        if self.applied is not None:
            self.applied.append([[e[1], t] for e, t in zip(entries, taus)])


def _rules(spec: SimSpec, record: bool = False) -> SimProtocol:
    return SimProtocol(range(spec.workers), record=record, hardsync=spec.protocol == "hardsync", c=spec.c,
                       max_staleness=spec.max_staleness, on_stale=spec.on_stale, lr_modulation=spec.lr_modulation)


def _draws(spec: SimSpec):
    """Per worker: a function giving the next step's (compute seconds, extra delay): the spread and
    a straggler's factor are compute (CPU on a shared host), its delay a sleep."""
    rng = random.Random(spec.seed)
    base = [spec.compute_s] * spec.workers
    delay = [0.0] * spec.workers
    for i, f, d in spec.stragglers:
        base[i] *= f
        delay[i] += d
    if spec.cv <= 0:
        return lambda w: (base[w], delay[w])
    sigma = math.sqrt(math.log1p(spec.cv ** 2))
    mu = -sigma * sigma / 2  # mean of the factor: exactly 1
    lnv = rng.lognormvariate
    return lambda w: (base[w] * lnv(mu, sigma), delay[w])


def simulate(spec: SimSpec, record: bool = False, max_wall_s: Optional[float] = None) -> dict:
    """Run ``spec`` to the end (every worker done, the servers' leftovers applied) and return what a
    real run's server statistics and meter would say, in simulated seconds."""
    check(spec, **({} if max_wall_s is None else {"max_wall_s": max_wall_s}))
    wall0 = time.perf_counter()
    lam, S = spec.workers, spec.servers
    M = spec.model_bytes
    msg = 2 * spec.latency + M / (S * spec.bandwidth)  # header + one shard, on a server's link
    hdr = spec.latency + HEADER_BYTES / spec.bandwidth  # DONE: a header alone
    extra = (M - M / S) / spec.bandwidth  # the worker's link carries every shard
    blocked = max(0.0, M / S - SEND_BUFFER) / spec.bandwidth  # a reply's part the socket buffer cannot take
    upd = spec.update_s / S
    easgd = spec.protocol == "easgd"
    local = spec.update_s if easgd else 0.0  # EASGD's workers run their optimizer every step
    per = spec.period if easgd else 1
    rounds = max(1, spec.steps // per)  # exchanges per worker
    draw = _draws(spec)
    rules = [_rules(spec, record) for _ in range(S)] if not easgd else []
    q = EventQueue()
    free = [0.0] * S  # when each server's queue is next empty
    free_out = [0.0] * S  # when each server's outgoing link is next idle (one host per node)
    busy = [0.0] * S
    link = [0.0] * S  # seconds each server's link carried (incoming; on a shared host, all copies)
    link_out = [0.0] * S
    ts = [[0] * S for _ in range(lam)]  # each shard's clock of the weights a worker computes on
    left = [S] * lam
    ready = [0.0] * lam
    done = [0] * lam
    t_done = [0.0] * lam
    first = []  # (time, pushes so far) when the first worker finishes: the steady state ends there
    npush = 0

    def work(w: int) -> float:
        return sum(sum(draw(w)) + local for _ in range(per))

    def deliver(v: int, t: float) -> None:
        if t > ready[v]:
            ready[v] = t
        left[v] -= 1
        if left[v]:
            return
        left[v] = S
        t0, ready[v] = ready[v] + extra, 0.0
        done[v] += 1
        if done[v] >= rounds:
            t_done[v] = t0
            if not first:
                first.append((t0, npush))
            q.at(t0, DONE, v)
        else:
            q.at(t0 + work(v) + extra, PUSH, v)

    if spec.host_cores is None:
        for w in range(lam):
            q.at(work(w) + extra, PUSH, w)
        while q:
            kind, w = q.pop()
            now = q.now
            npush += kind == PUSH
            for s in range(S):
                start = free[s] if free[s] > now else now
                cursor = start + (msg if kind == PUSH else hdr)
                if easgd:
                    replies = [(w, 0, None)] if kind == PUSH else []
                    cursor += upd if kind == PUSH else 0.0
                else:
                    r = rules[s]
                    before = r.timestamp
                    replies = r.on_push(w, ts[w][s], None) if kind == PUSH else r.on_done(w)
                    cursor += (r.timestamp - before) * upd
                for v, _, _ in replies:
                    # the reply drains on the outgoing half of the server's link; its send holds the
                    # server only for what does not fit the socket buffer (collectives.server_service_time)
                    sent = max(cursor, free_out[s]) + msg
                    free_out[s] = sent
                    cursor += blocked
                    if not easgd:
                        ts[v][s] = rules[s].timestamp
                    deliver(v, sent)
                link[s] += (msg if kind == PUSH else hdr)
                link_out[s] += msg * len(replies)
                busy[s] += cursor - start
                free[s] = cursor
    else:
        # One shared host: every CPU activity is a job in the pool (see the module's docstring).
        pool = CorePool(q, spec.host_cores)
        queue = [deque() for _ in range(S)]  # each server's FIFO of (PUSH | DONE, worker)
        serving = [None] * S  # what each server is doing: (kind, worker, since)
        replies_left = [[] for _ in range(S)]

        def compute(w: int) -> None:
            cpu = sleep = 0.0
            for _ in range(per):
                c, d = draw(w)
                cpu += c + local
                sleep += d
            pool.start(cpu, (COMPUTED, w, sleep))

        def push(w: int, kind: int) -> None:
            for s in range(S):
                queue[s].append((kind, w))
                serve(s)

        def serve(s: int) -> None:
            if serving[s] is not None or not queue[s]:
                return
            kind, w = queue[s].popleft()
            serving[s] = (kind, w, q.now)
            cost = msg if kind == PUSH else hdr
            link[s] += cost
            # the copy of the message costs both ends at once: the server reading, the worker writing
            pool.start(cost, (RECEIVED, s))
            pool.start(cost, (SENT, w))

        def received(s: int) -> None:
            kind, w, _ = serving[s]
            if easgd:
                replies = [(w, 0, None)] if kind == PUSH else []
                cost = upd if kind == PUSH else 0.0
            else:
                r = rules[s]
                before = r.timestamp
                replies = r.on_push(w, ts[w][s], None) if kind == PUSH else r.on_done(w)
                cost = (r.timestamp - before) * upd
            replies_left[s] = [v for v, _, _ in replies]
            if cost > 0:
                pool.start(cost, (UPDATED, s))
            else:
                reply(s)

        def reply(s: int) -> None:
            if not replies_left[s]:
                busy[s] += q.now - serving[s][2]
                serving[s] = None
                serve(s)
                return
            v = replies_left[s].pop(0)
            if not easgd:
                ts[v][s] = rules[s].timestamp
            link[s] += msg
            pool.start(msg, (REPLIED, s))
            pool.start(msg, (PULLED, v))

        def pulled(v: int) -> None:
            nonlocal npush
            left[v] -= 1
            if left[v]:
                return
            left[v] = S
            done[v] += 1
            if done[v] >= rounds:
                t_done[v] = q.now
                if not first:
                    first.append((q.now, npush))
                push(v, DONE)
            else:
                compute(v)

        for w in range(lam):
            compute(w)
        while q:
            ev = q.pop()
            if ev[0] == WAKE:
                npush += 1
                push(ev[1], PUSH)
                continue
            for tok in ev[1].fire(ev[2]):
                what, x = tok[0], tok[1]
                if what == COMPUTED:
                    if tok[2] > 0:  # a straggler's sleep: time, not CPU
                        q.at(q.now + tok[2], WAKE, x)
                    else:
                        npush += 1
                        push(x, PUSH)
                elif what == RECEIVED:
                    received(x)
                elif what == UPDATED or what == REPLIED:
                    reply(x)
                elif what == PULLED:
                    pulled(x)
                # SENT: the worker's side of a push's copy; it only loads the pool
    for r in rules:
        r.finish()
    end = max([q.now, *free])
    grads = lam * rounds  # pushes (EASGD: exchanges)
    r0 = rules[0] if rules else None
    out = {"paradigm": spec.label, "protocol": spec.protocol, "workers": lam, "servers": S, "n": spec.n_eff,
           "c": spec.c if not easgd else None, "steps": rounds * per, "elapsed_s": end,
           # throughput until the first worker is done: after that a straggler's tail runs alone
           "step_s": lam * first[0][0] / (first[0][1] * per) if first[0][1] else math.inf,  # per local step
           "samples_per_s": first[0][1] * per * spec.batch / first[0][0] if first[0][0] > 0 else math.inf,
           "gradients": grads if not easgd else 0, "exchanges": grads,
           "server_utilisation": sum(busy) / (S * end) if end > 0 else 0.0,
           # the busier half of the servers' links (one host per node: in and out are separate)
           "server_link_utilisation": max(sum(link), sum(link_out)) / (S * end) if end > 0 else 0.0,
           # a worker's link carries its push and the replies: M each way and a header per server
           "worker_link_utilisation": rounds * 2 * (2 * spec.latency * S + M / spec.bandwidth) / end if end > 0 else 0.0,
           "bytes_per_worker_step": {("param_push" if easgd else "grad_push"): M / per, "param_pull": M / per,
                                     "ps_control": 2 * HEADER_BYTES * S / per},
           "done_s": t_done,  # when each worker finished its last step
           "events": q.events}
    if r0 is not None:
        applied = sum(r0.hist.values())
        top = max(r0.hist) if r0.hist else 0
        out.update({"updates": r0.updates, "updates_per_s": r0.updates / end if end > 0 else math.inf,
                    "gradients_applied": applied, "dropped": int(r0.stats.v["dropped"]),
                    "blocked_pushes": int(r0.stats.v["blocked"]), "merged_updates": int(r0.stats.v["merged"]),
                    "mean_staleness": r0.sum_tau / applied if applied else 0.0, "max_staleness": r0.max_tau,
                    "staleness_hist": [r0.hist.get(t, 0) for t in range(top + 1)]})
        if record:
            out["applied"] = r0.applied
    out["wall_s"] = time.perf_counter() - wall0
    return out


def replay(trace: List[dict], workers: int, **rule_options) -> List[list]:
    """Replay a real server's recorded schedule (``WORKBENCH_PS_TRACE`` records: ``pull``, ``push``,
    ``done``, in arrival order) through the simulator's server and workers: which worker's message
    arrives next is taken from the trace, everything else — the timestamp each worker computes on
    (from the replies it got), the protocol's decisions and every gradient's τ — is the simulator's.
    Returns every update's [[worker, τ], …], to compare with the trace's ``apply`` records."""
    r = SimProtocol(range(workers), record=True, **rule_options)
    ts = [0] * workers
    for rec in trace:
        if "pull" in rec:
            replies = r.on_pull(rec["pull"])
        elif "push" in rec:
            replies = r.on_push(rec["push"], ts[rec["push"]], None)
        elif "done" in rec:
            replies = r.on_done(rec["done"])
        else:
            continue
        for v, _, _ in replies:
            ts[v] = r.timestamp
    r.finish()
    return r.applied
