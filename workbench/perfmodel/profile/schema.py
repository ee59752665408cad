"""The stored profile: everything the performance model needs to know about a model on a machine,
measured, and cached under ``experiments/profiles/`` with what it was measured on.

A :class:`Profile` holds, for one model, data shape and per-worker batch, measured with
``ranks`` processes on this machine (gloo, one process group, the run's thread share per rank):

- ``t_c_at`` / ``t_f_at``: forward+backward seconds per sample of the conv part and the FC part when
  k = 1..ranks processes compute at once (ranks that share a host slow each other down);
  ``fwd_share``: the forward's share of forward+backward; ``span_at``: a lockstep step's span;
- ``u``: optimizer seconds per parameter (SGD with momentum; also what a server pays to apply);
- ``alpha``, ``beta``: latency and bandwidth of one point-to-point message between two ranks, and
  ``beta_allreduce``, the ring all-reduce's per-rank bandwidth (they differ on shared memory);
- ``buckets``: DDP's gradient buckets as they are after its rebuild at step 1 (numel and shapes),
  and when within backward DDP hands each to its hook (``ready``, a share of the backward up to
  the last one's call);
- ``collectives``: each collective a run issues, timed in the loop at its size;
- ``loops``: loops timed in place, seconds per worker step: DDP's own, and those of the layers
  above (the parameter server's: ``workbench.ps.exchange_timing``), handed in by the caller as the
  codecs are;
- ``codecs``: per compressor, per bucket, the payloads its codec puts into collectives (bytes,
  collective, meter category: exact, they are the bytes the meter will count) and its encode+decode
  seconds, measured by :func:`workbench.compress.codec_timing.measure_codecs` (handed in by the
  caller): ``codec_s`` on rank 0 alone, ``codec_shared_s`` with every rank encoding at once, as a
  run's hooks do (:meth:`Profile.codec_s`); from version 14 each codec also holds the messages of
  the other paradigms (``measure_messages``): ``delta`` and ``conv``, its reduce on the whole
  model and on the conv part as one flat tensor, and ``p2p``, its point-to-point send and receive
  on a few sizes (:meth:`Profile.p2p_codec_s`, :meth:`Profile.message_codec_s`); a profile without
  them plans no compressed row that needs them.

How they are measured: :mod:`workbench.perfmodel.profile.measure` (the timing loops) and
:mod:`workbench.perfmodel.profile.spawn` (starting the ranks). What each version changed:
docs/notes/2026-12-06-perfmodel-history.md.
"""
from __future__ import annotations

import copy
import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Dict, List, Optional, Tuple

PROFILE_VERSION = 14  # what a profile holds and how it is timed; a cached profile of another version is measured again
PROFILE_READABLE = 11  # the oldest version whose fields today's model reads: 12 changed how loops are timed, not
# what a profile holds, so a round stored with its version-11 profile is still scored from it (``bench crossover``)

@dataclass
class Profile:
    model: str
    data: str  # data set name
    input_shape: Tuple[int, int, int]  # channels, height, width
    batch: int  # per-worker batch b the compute was timed at
    ranks: int  # processes measured at once (t_c_at has this many entries)
    t_c_at: Tuple[float, ...]  # conv forward+backward, s/sample, with k = 1.. ranks computing
    t_f_at: Tuple[float, ...]  # FC forward+backward, s/sample
    fwd_share: float  # forward / (forward + backward) of the whole model, one rank alone
    u: float  # optimizer seconds per parameter
    alpha: float  # s per message (point-to-point, this machine)
    beta: float  # bytes/s point-to-point (this machine)
    beta_allreduce: float  # bytes/s per rank of the ring all-reduce (this machine)
    boundary: int  # floats per sample at the conv/FC boundary
    params_conv: int
    params_fc: int
    param_shapes: List[Tuple[int, ...]]
    bucket_cap_mb: float
    buckets: List[dict]  # DDP buckets after the rebuild: {"numel", "shapes", "ready": its hook's call, a share of backward}
    # (``ready`` up to the last bucket's call, which is 1; absent in profiles of version 12 and older)
    span_at: Tuple[float, ...] = ()  # s per batch from a common start to the last of k ranks' backward (lockstep)
    collectives: Dict[str, float] = field(default_factory=dict)  # "<collective>:<dtype>:<bytes>" -> s, measured here
    # the same collectives from a common idle release, no step around them (the ranks' host part of the
    # exchange when a link, not the cores, re-aligns them; ``measure_collectives`` without ``step``)
    collectives_idle: Dict[str, float] = field(default_factory=dict)
    # loops timed here: name -> s per worker step; "ddp": DDP's own (``ddp_loop_s``), and those of the
    # layers that run them (``measure(loop_fns=...)``), e.g. "ps/async", "ps/sync": the parameter
    # server's, ranks − 1 workers and one server; "compressed/<c>": DDP with compressor c's hook;
    # "aligned/<B>": steps that re-align once every B (``block_loop_s``, BMUF's and local SGD's)
    loops: Dict[str, float] = field(default_factory=dict)
    loop_passes: Dict[str, List[float]] = field(default_factory=dict)  # each loop's readings, its median in ``loops``
    # compressor -> {"payloads": [[{collective, bytes, category}...] per bucket], "codec_s": [...] (rank 0
    # alone), "codec_shared_s": [...] (every rank at once, the ranks' mean)}
    codecs: Dict[str, dict] = field(default_factory=dict)
    machine: dict = field(default_factory=dict)  # where and how it was measured
    speedup: float = 1.0  # compute divided by this (planning for faster hardware)
    version: int = PROFILE_VERSION

    # -- derived -----------------------------------------------------------------------------------
    @property
    def readable(self) -> bool:
        """Whether today's model reads this profile's fields (a stored round is scored from it, not
        measured again): versions ``PROFILE_READABLE`` to ``PROFILE_VERSION``."""
        return PROFILE_READABLE <= self.version <= PROFILE_VERSION

    @property
    def params(self) -> int:
        return self.params_conv + self.params_fc

    @property
    def model_bytes(self) -> int:
        return 4 * self.params

    def t_c(self, k: int = 1) -> float:
        """Conv seconds per sample with k ranks computing at once on one host (beyond the profiled
        ranks, the host time-shares: the last level scaled by k / ranks)."""
        return _at(self.t_c_at, k) / self.speedup

    def t_f(self, k: int = 1) -> float:
        return _at(self.t_f_at, k) / self.speedup

    def compute_s(self, k: int = 1, batch: Optional[int] = None) -> float:
        """Forward+backward seconds of one worker's batch with k ranks computing at once."""
        return (batch or self.batch) * (self.t_c(k) + self.t_f(k))

    def sync_compute_s(self, k: int = 1, batch: Optional[int] = None) -> float:
        """Forward+backward of one batch as a synchronous step pays it with k ranks on one host:
        until the *last* of them is done (``span_at``; without it, :meth:`compute_s`)."""
        if not self.span_at:
            return self.compute_s(k, batch)
        return _at(self.span_at, k) * (batch or self.batch) / self.batch / self.speedup

    def host_slowdown(self, k: int) -> float:
        """How much longer host work takes on every rank at once, k ranks on one host, than on one
        rank alone (a codec in DDP's hook runs on every rank in the same phase of the step)."""
        if not self.span_at:
            return self.compute_s(k) / self.compute_s(1)
        return _at(self.span_at, k) / self.span_at[0]

    def codec_s(self, compressor: str, i: int, k: int, shares_cores: bool) -> float:
        """Bucket ``i``'s encode+decode seconds for ``compressor`` with ``k`` ranks. On ranks with
        cores of their own, the time alone. On one host, the time with every profiled rank encoding
        at once (``codec_shared_s``), scaled to k ranks as the compute slows: a codec streams its
        bucket through memory, and the ranks' codecs slow each other by their own factor, not the
        compute's (ResNet-18, 3 ranks on 2 cores: 1.2–2.7× alone against the compute's 1.4×;
        docs/notes/2026-12-02-collectives-timed-together.md). Profiles without it: the time alone scaled as the compute slows."""
        c = self.codecs[compressor]
        if not shares_cores:
            return c["codec_s"][i] / self.speedup
        together = c.get("codec_shared_s")
        if together and self.ranks > 1:
            return together[i] * self.host_slowdown(k) / self.host_slowdown(self.ranks) / self.speedup
        return c["codec_s"][i] * self.host_slowdown(k) / self.speedup

    def message_codec_s(self, compressor: str, part: str, k: int, shares_cores: bool) -> Optional[float]:
        """Seconds of ``compressor``'s reduce on one flat tensor of ``part`` ("delta": the whole
        model, "conv": the conv part), measured on rank 0 alone, slowed as the compute is with
        ``k`` ranks on one host; None where the profile did not measure it (before version 14)."""
        m = self.codecs.get(compressor, {}).get(part)
        if m is None:
            return None
        return m["codec_s"] * (self.host_slowdown(k) if shares_cores else 1.0) / self.speedup

    def p2p_codec_s(self, compressor: str, numel: float, k: int, shares_cores: bool) -> Optional[Tuple[float, float]]:
        """(send, receive) seconds of ``compressor`` point to point on a flat tensor of ``numel``
        elements: linear between the measured sizes, the smallest's time below them, scaled by size
        above; slowed as the compute is with ``k`` ranks on one host; None where the profile did
        not measure it (before version 14, or a compressor that sends no point-to-point message)."""
        pts = sorted(self.codecs.get(compressor, {}).get("p2p") or [], key=lambda q: q["numel"])
        if not pts:
            return None
        slow = (self.host_slowdown(k) if shares_cores else 1.0) / self.speedup

        def at(key: str) -> float:
            for a, b in zip(pts, pts[1:]):
                if a["numel"] <= numel <= b["numel"]:
                    return a[key] + (b[key] - a[key]) * (numel - a["numel"]) / max(b["numel"] - a["numel"], 1)
            return pts[0][key] if numel < pts[0]["numel"] else pts[-1][key] * numel / pts[-1]["numel"]
        return at("send_s") * slow, at("receive_s") * slow

    def beyond_step_s(self, loop: str) -> Optional[float]:
        """What the loop ``loop`` (``Profile.loops``) takes per period beyond the same loop of the
        step with a one-float all-reduce (``loops["aligned"]``; a profile without it: beyond the
        lockstep span of the profiled ranks), at least 0; None if it was not timed."""
        if loop not in self.loops:
            return None
        base = self.loops.get("aligned")
        if base is None:
            base = self.span_at[-1] if self.span_at else self.compute_s(self.ranks) * self.speedup
        return max(0.0, self.loops[loop] - base)

    def collective_s(self, collective: str, dtype: str, nbytes: float) -> Optional[float]:
        """The measured seconds of ``collective`` of ``nbytes`` in ``dtype`` with every profiled rank
        on this host (:func:`workbench.perfmodel.profile.measure.measure_collectives`), linear between measured sizes, the smallest's
        below them, scaled by size above; None if none of that collective and dtype was measured."""
        pts = sorted((int(k.split(":")[2]), v) for k, v in self.collectives.items()
                     if k.startswith(f"{collective}:{dtype}:"))
        if not pts:
            return None
        for (n0, t0), (n1, t1) in zip(pts, pts[1:]):
            if n0 <= nbytes <= n1:
                return t0 + (t1 - t0) * (nbytes - n0) / max(n1 - n0, 1)
        return pts[0][1] if nbytes < pts[0][0] else pts[-1][1] * nbytes / pts[-1][0]

    def bookkeeping_s(self) -> float:
        """Seconds a training step spends outside the trainer's step, in the loop every trainer
        runs (``Trainer.run``: the next batch, the meter's window, the step's records), timed on
        every profiled rank at once (``Profile.loops["bookkeeping"]``); 0 in a profile without it.
        Host work: a compute speed-up leaves it as it is."""
        return self.loops.get("bookkeeping", 0.0)

    def update_s(self, params: Optional[int] = None) -> float:
        return self.u * (self.params if params is None else params) / self.speedup

    def drifted(self, ratio: float) -> "Profile":
        """This profile on the same host running ``ratio`` times slower (``ratio`` < 1: faster), as
        a VM's speed drifts within an hour (docs/planner.md): every second it
        measured times ``ratio``, every rate it measured divided by it. The host is taken to slow
        down as a whole (compute, codecs, loopback collectives, the timed loops alike), which is
        the one assumption a single number can carry; the emulated links' shapers, being the
        cluster's and not the host's, are not touched. Unlike :meth:`with_speedup` (other hardware,
        where the loops timed here no longer apply) the model reads it as the same host, loops
        included. ``ratio`` comes from :func:`workbench.perfmodel.profile.spawn.host_span` (``bench planner``'s drift guard)."""
        if ratio == 1.0:
            return self
        p = copy.deepcopy(self)
        times = lambda xs: tuple(v * ratio for v in xs)  # noqa: E731
        p.t_c_at, p.t_f_at, p.span_at = times(p.t_c_at), times(p.t_f_at), times(p.span_at)
        p.u, p.alpha = p.u * ratio, p.alpha * ratio
        p.beta, p.beta_allreduce = p.beta / ratio, p.beta_allreduce / ratio
        p.collectives = {k: v * ratio for k, v in p.collectives.items()}
        p.collectives_idle = {k: v * ratio for k, v in p.collectives_idle.items()}
        p.loops = {k: v * ratio for k, v in p.loops.items()}
        p.loop_passes = {k: list(times(v)) for k, v in p.loop_passes.items()}
        for c in p.codecs.values():
            for key in ("codec_s", "codec_shared_s"):
                if key in c:
                    c[key] = list(times(c[key]))
            for part in ("delta", "conv"):
                if part in c:
                    c[part]["codec_s"] *= ratio
            for q in c.get("p2p", ()):
                q["send_s"], q["receive_s"] = q["send_s"] * ratio, q["receive_s"] * ratio
        p.machine = {**p.machine, "drift": p.machine.get("drift", 1.0) * ratio}
        return p

    def with_speedup(self, speedup: float) -> "Profile":
        p = copy.copy(self)
        p.speedup = speedup
        return p

    # -- files -------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Profile":
        names = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in names}
        d["input_shape"] = tuple(d["input_shape"])
        d["t_c_at"], d["t_f_at"] = tuple(d["t_c_at"]), tuple(d["t_f_at"])
        d["span_at"] = tuple(d.get("span_at", ()))
        d["param_shapes"] = [tuple(s) for s in d["param_shapes"]]
        return cls(**d)

    def save(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path) -> "Profile":
        return cls.from_json(json.loads(Path(path).read_text()))

    def matches(self, key: dict) -> Optional[str]:
        """Why this profile cannot stand for ``key`` (model, data shape, batch), or None."""
        for k in ("model", "input_shape", "batch"):
            mine = getattr(self, k)
            if _norm(mine) != _norm(key[k]):
                return f"it was measured for {k}={_norm(mine)}, not {_norm(key[k])}"
        return None


def _norm(v):
    return tuple(v) if isinstance(v, (list, tuple)) else v


def _at(levels: Tuple[float, ...], k: int) -> float:
    k = max(1, int(k))
    if k <= len(levels):
        return levels[k - 1]
    return levels[-1] * k / len(levels)


def machine() -> dict:
    import torch
    return {"host": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "torch": torch.__version__, "python": platform.python_version(), "device": "cpu",
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average": _loadavg()}


def _loadavg():
    try:
        return list(os.getloadavg())
    except OSError:  # pragma: no cover - not on Linux
        return None


def profile_key(cfg) -> dict:
    """What a profile must match to stand for ``cfg``: model, input shape, per-worker batch."""
    from workbench import data as data_mod
    spec = data_mod.DATASETS[cfg.data.name].spec(cfg.data)
    return {"model": str(cfg.model.name), "input_shape": (spec.channels, spec.image_size, spec.image_size),
            "batch": int(cfg.data.batch_size)}


def cache_path(cfg, ranks: int, root="experiments") -> Path:
    """``experiments/profiles/<host>-<model>-<C>x<H>x<W>-b<batch>-r<ranks>.json``."""
    k = profile_key(cfg)
    shape = "x".join(str(v) for v in k["input_shape"])
    return Path(root) / "profiles" / f"{platform.node()}-{k['model']}-{shape}-b{k['batch']}-r{ranks}.json"
