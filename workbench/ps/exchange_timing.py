"""The parameter server's loop, timed for the performance model's profile.

``workbench.perfmodel.profile.measure(loop_fns=LOOPS)`` calls these on every rank of the profile's
process group, after the collectives: the last rank serves one shard with the real protocol, rule
and optimizer (:class:`~workbench.ps.server.ServerLoop`, :class:`~workbench.ps.rules.GradientRule`),
the others run ``step(); push_pull`` back to back, as ``trainer=ps`` does, and every rank returns
the workers' mean of their median periods (seconds per worker step). The model
(``perfmodel.paradigms``) uses them for the rows that are this loop: loopback, the profiled ranks,
one server.

Why in the loop, as the collectives are: the PS rows on loopback were 16–25 % short on ResNet-18
and 34–63 % on the small CNN. The α-β exchange they charged (the idle ping-pong's 8 GB/s) was a
tenth of what a worker's meter recorded in a run: 95–130 ms for ResNet-18's 44.7 MB each way. On a
host whose ranks outnumber its cores the server copies while the workers compute, and every
blocking receive waits for a core (docs/planner.md).

It lives here, not in ``workbench.perfmodel``, because the model's layer imports none of the code
it models (the parameter server, the trainers, the compressors): the planner hands these loops to
the profile, as it hands it the compressors' codecs (``workbench.compress.codec_timing``).
"""
from __future__ import annotations

from functools import partial
from typing import Callable, Dict

import torch
import torch.distributed as dist

from workbench.perfmodel.profile import free_running_period, mean_over_ranks
from workbench.ps.protocol import PSClient
from workbench.ps.rules import GradientRule
from workbench.ps.server import ServerLoop
from workbench.ps.sharding import ShardLayout


def time_loop(model, step: Callable[[], None], meter, comm_device, make_optimizer: Callable, reps: int,
              hardsync: bool = False, payload: bool = True, **_) -> float:
    """Seconds per worker step of the PS loop on this group: hardsync, or asynchronous with c = 1;
    without ``payload``, the headers alone (an empty shard), which is what separates the loop's
    cost per message from its cost per byte."""
    rank, world = dist.get_rank(), dist.get_world_size()
    server, workers = world - 1, list(range(world - 1))
    params = list(model.parameters())
    layout = ShardLayout.of(params, 1) if payload else ShardLayout([], 1)
    saved = [p.detach().clone() for p in params]
    period = 0.0
    meter.barrier("profile")
    if rank == server:
        # learning rate 0: the optimizer does all its work and the weights stay the profile's
        rule = GradientRule(layout.flatten(params, 0).clone(), workers, hardsync=hardsync, c=1,
                            make_optimizer=make_optimizer, lr_fn=lambda k: 0.0)
        ServerLoop(meter, rule, workers, expect_final=False).run()
    else:
        client = PSClient(meter, layout, [server])

        def body(i: int) -> None:
            step()
            if payload:
                client.push_pull([p.grad for p in params], params, step=i)
            else:
                client.push_pull([], [], step=i)
        period = free_running_period(body, reps)
        client.done()
    with torch.no_grad():
        for p, v in zip(params, saved):
            p.copy_(v)
    return mean_over_ranks(period, meter, comm_device, max(1, world - 1))  # the server timed nothing


# the names the model looks up (``Profile.loops``)
LOOPS: Dict[str, Callable] = {"ps/async": partial(time_loop, hardsync=False), "ps/sync": partial(time_loop, hardsync=True),
                              "ps/async/header": partial(time_loop, hardsync=False, payload=False)}
