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

That is a network of hosts, one per worker and per server (``host_cores=None``). It is also how a
run on this host is simulated the way the planner prices it (:func:`workbench.sim.spec.on_host`,
which ``workbench.sim.validate`` uses): the compute is the profile's at λ ranks computing at once
plus the training loop's bookkeeping, and the line is the one *in the loop*
(``perfmodel.loopback.loop_link``), whose α' and β' hold a message's waits for a core. With
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

The pool shares its k cores ideally (k/j each) and charges a message the idle ping-pong's α and β,
so it is optimistic wherever the profile measures ranks computing at once slower than k ideal cores
or the in-loop line slower than the idle one; :func:`workbench.sim.spec.on_host` prices a run on
this host from the planner's measured terms instead (docs/simulator.md).
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

from workbench.perfmodel import collectives as C
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


class _Cluster:
    """The simulated cluster's state and per-message costs, shared by both engines (a network of
    hosts, or one shared host): what the servers and workers hold, and when each worker finished."""

    def __init__(self, spec: SimSpec, record: bool) -> None:
        self.spec = spec
        self.lam, self.S = lam, S = spec.workers, spec.servers
        self.M = M = spec.model_bytes
        b, a = spec.bandwidth, spec.latency
        # the planner's prices (perfmodel.collectives), split into what holds whom: a server takes a
        # header and one shard in (its service time, were its socket buffer unbounded) ...
        self.msg = C.server_service_time(M, S, b, a, send_buffer=math.inf)
        self.hdr = a + HEADER_BYTES / b  # DONE: a header alone
        # ... the worker's link carries every shard (its push alone: collectives.ps_transfer_time) ...
        self.extra = C.ps_transfer_time(M, 1, S, b, a) - self.msg
        # ... and a reply holds the server only for the part the socket buffer cannot take
        self.blocked = C.server_service_time(M, S, b, a) - self.msg
        self.upd = spec.update_s / S
        self.easgd = easgd = spec.protocol == "easgd"
        self.local = spec.update_s if easgd else 0.0  # EASGD's workers run their optimizer every step
        self.per = spec.period if easgd else 1
        self.rounds = max(1, spec.steps // self.per)  # exchanges per worker
        self.draw = _draws(spec)
        self.rules = [_rules(spec, record) for _ in range(S)] if not easgd else []
        self.q = EventQueue()
        self.free = [0.0] * S  # when each server's queue is next empty
        self.free_out = [0.0] * S  # when each server's outgoing link is next idle (one host per node)
        self.busy = [0.0] * S
        self.link = [0.0] * S  # seconds each server's link carried (incoming; on a shared host, all copies)
        self.link_out = [0.0] * S
        self.ts = [[0] * S for _ in range(lam)]  # each shard's clock of the weights a worker computes on
        self.left = [S] * lam  # replies each worker still waits for
        self.done = [0] * lam
        self.t_done = [0.0] * lam
        self.first: list = []  # (time, pushes so far) when the first worker finishes: the steady state ends there
        self.npush = 0

    def decide(self, s: int, kind: int, w: int):
        """Server ``s`` takes ``kind`` (PUSH or DONE) from worker ``w``: the replies it sends, by the
        protocol (EASGD's centre answers every push at once), and the seconds of its updates."""
        if self.easgd:
            return ([(w, 0, None)] if kind == PUSH else []), (self.upd if kind == PUSH else 0.0)
        r = self.rules[s]
        before = r.timestamp
        replies = r.on_push(w, self.ts[w][s], None) if kind == PUSH else r.on_done(w)
        return replies, (r.timestamp - before) * self.upd

    def replied(self, s: int, v: int) -> None:
        """Server ``s`` answers worker ``v``: the reply carries the clock its next gradient is computed on."""
        if not self.easgd:
            self.ts[v][s] = self.rules[s].timestamp

    def exchanged(self, v: int, t: float) -> bool:
        """Worker ``v`` has every server's reply at ``t``; whether that was its last exchange."""
        self.done[v] += 1
        if self.done[v] < self.rounds:
            return False
        self.t_done[v] = t
        if not self.first:
            self.first.append((t, self.npush))
        return True


def _on_network(c: _Cluster) -> None:
    """One host per worker and per server: each server a FIFO queue on its own link (the module's
    docstring); a reply drains on the outgoing half of the server's link."""
    q, S = c.q, c.S
    ready = [0.0] * c.lam  # when the last of a worker's replies arrived

    def work(w: int) -> float:
        return sum(sum(c.draw(w)) + c.local for _ in range(c.per))

    def deliver(v: int, t: float) -> None:
        if t > ready[v]:
            ready[v] = t
        c.left[v] -= 1
        if c.left[v]:
            return
        c.left[v] = S
        t0, ready[v] = ready[v] + c.extra, 0.0
        if c.exchanged(v, t0):
            q.at(t0, DONE, v)
        else:
            q.at(t0 + work(v) + c.extra, PUSH, v)

    for w in range(c.lam):
        q.at(work(w) + c.extra, PUSH, w)
    while q:
        kind, w = q.pop()
        now = q.now
        c.npush += kind == PUSH
        for s in range(S):
            start = c.free[s] if c.free[s] > now else now
            cursor = start + (c.msg if kind == PUSH else c.hdr)
            replies, update = c.decide(s, kind, w)
            cursor += update
            for v, _, _ in replies:
                # the reply drains on the outgoing half of the server's link; its send holds the
                # server only for what does not fit the socket buffer (collectives.server_service_time)
                sent = max(cursor, c.free_out[s]) + c.msg
                c.free_out[s] = sent
                cursor += c.blocked
                c.replied(s, v)
                deliver(v, sent)
            c.link[s] += (c.msg if kind == PUSH else c.hdr)
            c.link_out[s] += c.msg * len(replies)
            c.busy[s] += cursor - start
            c.free[s] = cursor


class _SharedHost:
    """One shared host of ``host_cores`` cores: every CPU activity (a worker's compute, each end of a
    message's copy, a server's update) is a job in the processor-sharing pool (the module's docstring)."""

    def __init__(self, c: _Cluster) -> None:
        self.c = c
        self.pool = CorePool(c.q, c.spec.host_cores)
        self.queue = [deque() for _ in range(c.S)]  # each server's FIFO of (PUSH | DONE, worker)
        self.serving: list = [None] * c.S  # what each server is doing: (kind, worker, since)
        self.replies_left: list = [[] for _ in range(c.S)]

    def run(self) -> None:
        c, q = self.c, self.c.q
        for w in range(c.lam):
            self.compute(w)
        while q:
            ev = q.pop()
            if ev[0] == WAKE:
                c.npush += 1
                self.push(ev[1], PUSH)
                continue
            for tok in ev[1].fire(ev[2]):
                self.finished(tok)

    def finished(self, tok) -> None:
        """A pool job is over: what it was says what happens next."""
        what, x = tok[0], tok[1]
        if what == COMPUTED:
            if tok[2] > 0:  # a straggler's sleep: time, not CPU
                self.c.q.at(self.c.q.now + tok[2], WAKE, x)
            else:
                self.c.npush += 1
                self.push(x, PUSH)
        elif what == RECEIVED:
            self.received(x)
        elif what == UPDATED or what == REPLIED:
            self.reply(x)
        elif what == PULLED:
            self.pulled(x)
        # SENT: the worker's side of a push's copy; it only loads the pool

    def compute(self, w: int) -> None:
        cpu = sleep = 0.0
        for _ in range(self.c.per):
            t, d = self.c.draw(w)
            cpu += t + self.c.local
            sleep += d
        self.pool.start(cpu, (COMPUTED, w, sleep))

    def push(self, w: int, kind: int) -> None:
        for s in range(self.c.S):
            self.queue[s].append((kind, w))
            self.serve(s)

    def serve(self, s: int) -> None:
        if self.serving[s] is not None or not self.queue[s]:
            return
        kind, w = self.queue[s].popleft()
        self.serving[s] = (kind, w, self.c.q.now)
        cost = self.c.msg if kind == PUSH else self.c.hdr
        self.c.link[s] += cost
        # the copy of the message costs both ends at once: the server reading, the worker writing
        self.pool.start(cost, (RECEIVED, s))
        self.pool.start(cost, (SENT, w))

    def received(self, s: int) -> None:
        kind, w, _ = self.serving[s]
        replies, cost = self.c.decide(s, kind, w)
        self.replies_left[s] = [v for v, _, _ in replies]
        if cost > 0:
            self.pool.start(cost, (UPDATED, s))
        else:
            self.reply(s)

    def reply(self, s: int) -> None:
        c = self.c
        if not self.replies_left[s]:
            c.busy[s] += c.q.now - self.serving[s][2]
            self.serving[s] = None
            self.serve(s)
            return
        v = self.replies_left[s].pop(0)
        c.replied(s, v)
        c.link[s] += c.msg
        self.pool.start(c.msg, (REPLIED, s))
        self.pool.start(c.msg, (PULLED, v))

    def pulled(self, v: int) -> None:
        c = self.c
        c.left[v] -= 1
        if c.left[v]:
            return
        c.left[v] = c.S
        if c.exchanged(v, c.q.now):
            self.push(v, DONE)
        else:
            self.compute(v)


def simulate(spec: SimSpec, record: bool = False, max_wall_s: Optional[float] = None) -> dict:
    """Run ``spec`` to the end (every worker done, the servers' leftovers applied) and return what a
    real run's server statistics and meter would say, in simulated seconds."""
    check(spec, **({} if max_wall_s is None else {"max_wall_s": max_wall_s}))
    wall0 = time.perf_counter()
    c = _Cluster(spec, record)
    if spec.host_cores is None:
        _on_network(c)
    else:
        _SharedHost(c).run()
    for r in c.rules:
        r.finish()
    out = _statistics(c, record)
    out["wall_s"] = time.perf_counter() - wall0
    return out


def _statistics(c: _Cluster, record: bool) -> dict:
    """What a real run's server statistics and meter would say of the simulated one."""
    spec, lam, S, M, per, rounds, easgd = c.spec, c.lam, c.S, c.M, c.per, c.rounds, c.easgd
    end = max([c.q.now, *c.free])
    grads = lam * rounds  # pushes (EASGD: exchanges)
    first = c.first
    out = {"paradigm": spec.label, "protocol": spec.protocol, "workers": lam, "servers": S, "n": spec.n_eff,
           "c": spec.c if not easgd else None, "steps": rounds * per, "elapsed_s": end,
           # throughput until the first worker is done: after that a straggler's tail runs alone
           "step_s": lam * first[0][0] / (first[0][1] * per) if first[0][1] else math.inf,  # per local step
           "samples_per_s": first[0][1] * per * spec.batch / first[0][0] if first[0][0] > 0 else math.inf,
           "gradients": grads if not easgd else 0, "exchanges": grads,
           "server_utilisation": sum(c.busy) / (S * end) if end > 0 else 0.0,
           # the busier half of the servers' links (one host per node: in and out are separate)
           "server_link_utilisation": max(sum(c.link), sum(c.link_out)) / (S * end) if end > 0 else 0.0,
           # a worker's link carries its push and the replies: M each way and a header per server
           "worker_link_utilisation": rounds * 2 * (2 * spec.latency * S + M / spec.bandwidth) / end if end > 0 else 0.0,
           "bytes_per_worker_step": {("param_push" if easgd else "grad_push"): M / per, "param_pull": M / per,
                                     "ps_control": 2 * HEADER_BYTES * S / per},
           "done_s": c.t_done,  # when each worker finished its last step
           "events": c.q.events}
    if c.rules:
        r0 = c.rules[0]
        applied = sum(r0.hist.values())
        top = max(r0.hist) if r0.hist else 0
        out.update({"updates": r0.updates, "updates_per_s": r0.updates / end if end > 0 else math.inf,
                    "gradients_applied": applied, "dropped": int(r0.stats.v["dropped"]),
                    "blocked_pushes": int(r0.stats.v["blocked"]), "merged_updates": int(r0.stats.v["merged"]),
                    "mean_staleness": r0.sum_tau / applied if applied else 0.0, "max_staleness": r0.max_tau,
                    "staleness_hist": [r0.hist.get(t, 0) for t in range(top + 1)]})
        if record:
            out["applied"] = r0.applied
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
