"""The meter's byte counts are exact functions of tensor sizes, per rank and category; transfers
really happen (values checked); receives time out instead of hanging."""
import pytest
import torch

from dist_utils import run_ranks


def _collectives(rank, world):
    import torch.distributed as dist
    from workbench.meter import Meter
    m = Meter(timeout_s=20)
    t = torch.full((1000,), float(rank + 1))  # 4000 bytes
    m.all_reduce(t, "allreduce")
    assert torch.all(t == sum(range(1, world + 1)))
    outs = [torch.zeros(10) for _ in range(world)]
    m.all_gather(outs, torch.full((10,), float(rank)), "allgather")
    assert [int(o[0]) for o in outs] == list(range(world))
    b = torch.full((25,), float(rank))
    m.broadcast(b, src=1, category="bcast")
    assert torch.all(b == 1)
    # variable-length all-gather, rank 0 contributes nothing (must not hang)
    parts = m.all_gather_varlen(torch.arange(rank * 3, dtype=torch.float32), "varlen")
    assert [len(p) for p in parts] == [r * 3 for r in range(world)]
    # point to point ring: send 7 floats to the right, receive from the left
    right, left = (rank + 1) % world, (rank - 1) % world
    out = torch.full((7,), float(rank))
    inp = torch.zeros(7)
    if rank % 2 == 0:
        m.send(out, right, "p2p")
        m.recv(inp, left, "p2p")
    else:
        m.recv(inp, left, "p2p")
        m.send(out, right, "p2p")
    assert torch.all(inp == left)
    w = m.pop()
    assert m.pop() == {}
    return {k: (v["sent"], v["recv"], v["calls"]) for k, v in w.items()}, m.totals()["allreduce"]["sent"]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_exact_byte_counts(world):
    results = run_ranks(_collectives, world)
    for rank, (w, total_ar) in enumerate(results):
        ar = 2 * (world - 1) * 4000 // world
        assert w["allreduce"] == (ar, ar, 1)
        assert total_ar == ar
        assert w["allgather"] == ((world - 1) * 40, (world - 1) * 40, 1)
        assert w["bcast"] == (((world - 1) * 100, 0, 1) if rank == 1 else (0, 100, 1))
        own = rank * 3 * 4
        others = sum(r * 3 * 4 for r in range(world)) - own
        assert w["varlen"] == ((world - 1) * own + 8 * (world - 1), others + 8 * (world - 1), 1)
        assert w["p2p"] == (28, 28, 2)


def _silent_peer(rank, world):
    import time
    from workbench.meter import Meter
    m = Meter(timeout_s=2)
    if rank == 0:
        t0 = time.monotonic()
        try:
            m.recv(torch.zeros(4), 1, "p2p")
        except Exception as e:  # the timeout is the point
            return ("raised", type(e).__name__, time.monotonic() - t0)
        return ("received",)
    time.sleep(6)  # rank 1 never sends
    return ("slept",)


def test_recv_times_out_instead_of_hanging():
    r0, _ = run_ranks(_silent_peer, 2, timeout_s=30)
    assert r0[0] == "raised"


def _ddp_hook(rank, world):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from workbench.meter import AllreduceHookState, Meter, metered_allreduce_hook
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.ReLU(), torch.nn.Linear(30, 5))
    n_params = sum(p.numel() for p in model.parameters())
    torch.manual_seed(0)
    plain = DDP(torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.ReLU(), torch.nn.Linear(30, 5)))
    torch.manual_seed(0)
    metered = DDP(torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.ReLU(), torch.nn.Linear(30, 5)))
    m = Meter()
    metered.register_comm_hook(AllreduceHookState(m), metered_allreduce_hook)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(8, 20, generator=g)
    for net in (plain, metered):
        net(x).pow(2).sum().backward()
    for p, q in zip(plain.parameters(), metered.parameters()):
        # the same all-reduce; only the summation order inside gloo may differ
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7)
    w = m.pop()["allreduce"]
    return w["sent"], n_params


def test_ddp_hook_is_ddp_and_counts_buckets():
    for sent, n in run_ranks(_ddp_hook, 3):
        assert sent == 2 * 2 * (n * 4) // 3
