"""Compressors against NumPy references on fixed tensors (encode/local/decode, no processes), the
error-feedback invariant, bit packing, empty payloads, config validation and state dicts."""
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import compress_reference as ref
import workbench
from workbench.compress import COMPRESSORS, BucketInfo, build_compressor, packbits, unpackbits
from workbench.config import ConfigError, validate

N = 1000
ALL = list(COMPRESSORS)  # every registered compressor, in-tree or by an entry point


def ccfg(name, **kw):
    cfg = workbench.compose(["trainer=compressed", f"compressor={name}"] + [f"compressor.{k}={v}" for k, v in kw.items()])
    return cfg.compressor


def vec(seed, n=N):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g)


def info(rank=0, world=3, step=0, index=0, seed=0):
    return BucketInfo(index=index, step=step, rank=rank, world=world, seed=seed)


def roundtrip(comp_by_rank, xs, inf):
    """Encode on every rank, combine as the collective would (sum / list), decode."""
    encoded = [c.encode(x.clone(), inf(r)) for r, (c, x) in enumerate(zip(comp_by_rank, xs))]
    c0 = comp_by_rank[0]
    if c0.collective == "allreduce":
        received = sum(p for p, _ in encoded)
    else:
        received = [p for p, _ in encoded]
    return encoded, c0.decode(received, encoded[0][1], inf(0))


def test_the_papers_compressors_are_registered():
    assert {"none", "fp16", "bf16", "topk", "mstopk", "randomk", "signsgd", "efsignsgd", "qsgd", "powersgd"} <= set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_every_compressor_is_registered_with_a_config(name):
    assert ccfg(name).name == name


@pytest.mark.parametrize("name", [c for c in ALL if COMPRESSORS[c].payload_bytes_of_shapes.__func__
                                  is COMPRESSORS["none"].payload_bytes_of_shapes.__func__])
def test_declared_payload_bytes_are_what_encode_puts_on_the_wire(name):
    """What the bytes suite's analytic count takes from the compressor equals its encoded payload, at
    the settings the suites run it with and at odd bucket sizes."""
    base = workbench.compose(["trainer=compressed", f"compressor={name}", *COMPRESSORS[name].bench_overrides])
    for n in (1, 9, 1000, 4099):
        p, _ = COMPRESSORS[name](base.compressor, 0, 3).encode(vec(n, n), info())
        if name == "mstopk":  # multi-sampling keeps at most k*n: the declared size is its bound
            assert p.numel() * p.element_size() <= COMPRESSORS[name].payload_bytes(base.compressor, n)
        else:
            assert p.numel() * p.element_size() == COMPRESSORS[name].payload_bytes(base.compressor, n), n


def test_packbits_matches_numpy():
    for n in (0, 1, 7, 8, 9, 1001):
        bits = vec(n, n) >= 0
        packed = packbits(bits)
        assert np.array_equal(packed.numpy(), np.packbits(bits.numpy()))
        assert torch.equal(unpackbits(packed, n), bits)


@pytest.mark.parametrize("name,kw", [("topk", {"k": 0.05}), ("mstopk", {"k": 0.05}), ("mstopk", {"k": 0.3}),
                                     ("signsgd", {}), ("efsignsgd", {"error_feedback": False}), ("qsgd", {"levels": 4}),
                                     ("qsgd", {"levels": 300}), ("fp16", {}), ("none", {}), ("randomk", {"k": 0.1})])
def test_against_numpy_reference(name, kw):
    world = 3
    cfg = ccfg(name, **kw)
    comps = [COMPRESSORS[name](cfg, r, world, seed=5) for r in range(world)]
    xs = [vec(r) for r in range(world)]
    inf = lambda r: info(rank=r, world=world, step=2, index=1, seed=5)  # noqa: E731
    encoded, out = roundtrip(comps, xs, inf)
    c = OmegaConf.to_container(cfg)
    us = idx = None
    if name == "qsgd":
        from workbench.compress import mix_seed
        us = [torch.rand(N, generator=torch.Generator().manual_seed(mix_seed(5, r, 2, 1))).numpy() for r in range(world)]
    if name == "randomk":
        idx = encoded[0][1][0].numpy()
        assert idx.size == int(0.1 * N) and np.unique(idx).size == idx.size
        assert all(np.array_equal(e[1][0].numpy(), idx) for e in encoded)  # the same positions on every rank
    want, _ = ref.exchange(name, [x.numpy() for x in xs], c, us=us, idx=idx)
    tol = {"fp16": 2e-3}.get(name, 1e-6)
    np.testing.assert_allclose(out.numpy(), want, rtol=tol, atol=tol)
    for r, (payload, ctx) in enumerate(encoded):  # each rank's payload stands for the reference's local value
        loc = comps[r].local(payload, ctx, inf(r)).numpy()
        np.testing.assert_allclose(loc, ref.local(name, xs[r].numpy(), c, None if us is None else us[r], idx),
                                   rtol=tol, atol=tol)


def test_payload_sizes():
    x = vec(0)
    i = info()
    sizes = {}
    for name, kw in [("none", {}), ("fp16", {}), ("bf16", {}), ("topk", {"k": 0.01}), ("mstopk", {"k": 0.01}),
                     ("randomk", {"k": 0.01}), ("signsgd", {}), ("efsignsgd", {}), ("qsgd", {"levels": 16}),
                     ("qsgd", {"levels": 200})]:
        p, _ = COMPRESSORS[name](ccfg(name, **kw), 0, 3).encode(x.clone(), i)
        sizes[(name, kw.get("levels"))] = p.numel() * p.element_size()
    assert sizes[("none", None)] == 4 * N
    assert sizes[("fp16", None)] == sizes[("bf16", None)] == 2 * N
    assert sizes[("topk", None)] == 8 * 10  # 10 values + 10 int32 indices
    assert sizes[("mstopk", None)] <= 8 * 10
    assert sizes[("randomk", None)] == 4 * 10
    assert sizes[("signsgd", None)] == N // 8
    assert sizes[("efsignsgd", None)] == 4 + N // 8
    assert sizes[("qsgd", 16)] == 4 + N  # norm + int8 levels
    assert sizes[("qsgd", 200)] == 4 + 2 * N  # int16 above 127 levels


def test_bf16_matches_torch_cast():
    x = vec(1)
    comp = COMPRESSORS["bf16"](ccfg("bf16"), 0, 2)
    p, ctx = comp.encode(x.clone(), info(world=2))
    assert p.dtype == torch.bfloat16 and torch.equal(p, x.to(torch.bfloat16).div_(2))
    assert torch.equal(comp.decode(p * 2, ctx, info(world=2)), (p * 2).float())


def test_mstopk_selects_at_most_k_and_close_to_topk():
    x = vec(3, 5000)
    for k in (0.001, 0.01, 0.1):
        from workbench.compress.mstopk import mstopk_select
        from workbench.compress.topk import topk_select
        m = ref.keep(k, x.numel())
        sel = mstopk_select(x, m, 30)
        assert sel.numel() == m
        assert np.array_equal(sel.numpy(), ref.mstopk_indices(x.numpy(), k, 30))
        exact = set(topk_select(x, m).tolist())
        assert len(exact & set(sel.tolist())) >= 0.9 * m  # a threshold search finds (almost) the same set


@pytest.mark.parametrize("name", ["topk", "mstopk"])
def test_empty_sparse_payloads_decode(name):
    world = 3
    cfg = ccfg(name, k=0.02)
    comps = [COMPRESSORS[name](cfg, r, world) for r in range(world)]
    xs = [torch.zeros(N), vec(1), torch.zeros(N)]
    encoded, out = roundtrip(comps, xs, lambda r: info(rank=r, world=world))
    assert encoded[0][0].numel() == 0 and encoded[2][0].numel() == 0 and encoded[1][0].numel() == 8 * 20
    want, _ = ref.exchange(name, [x.numpy() for x in xs], OmegaConf.to_container(cfg))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", [c for c in ALL if not getattr(COMPRESSORS[c], "own_error_feedback", False)])
def test_error_feedback_invariant(name):
    """sent + new residual == input + old residual, at every step, for every bucket."""
    cfg = ccfg(name, error_feedback=True)
    comp = build_compressor(cfg, 0, 2, seed=1)
    assert type(comp).__name__ == "ErrorFeedback"
    for step in range(4):
        for b in range(2):
            x = vec(10 * step + b, 500 + b)
            old = comp.errors.get(b, torch.zeros_like(x)).clone()
            i = BucketInfo(index=b, step=step, rank=0, world=2, seed=1)
            payload, ctx = comp.encode(x.clone(), i)
            sent = comp.local(payload, ctx, i)
            torch.testing.assert_close(sent + comp.errors[b], x + old, rtol=1e-5, atol=1e-5)
    sd = comp.state_dict()
    fresh = build_compressor(cfg, 0, 2, seed=1)
    fresh.load_state_dict(sd)
    assert all(torch.equal(fresh.errors[b], comp.errors[b]) for b in comp.errors)


def test_efsignsgd_residual_is_the_paper_one():
    cfg = ccfg("efsignsgd")
    comp = build_compressor(cfg, 0, 2)
    x = vec(7)
    comp.encode(x.clone(), info(world=2))
    np.testing.assert_allclose(comp.errors[0].numpy(), x.numpy() - ref.scaled_sign(x.numpy()), rtol=1e-6, atol=1e-6)


def test_randomk_indices_depend_on_step_and_bucket_only():
    from workbench.compress.randomk import shared_indices
    a = shared_indices(1000, 10, seed=3, step=4, bucket=2)
    assert torch.equal(a, shared_indices(1000, 10, seed=3, step=4, bucket=2))
    assert not torch.equal(a, shared_indices(1000, 10, seed=3, step=5, bucket=2))
    assert not torch.equal(a, shared_indices(1000, 10, seed=3, step=4, bucket=1))


@pytest.mark.parametrize("overrides,key", [
    (["compressor=topk"], "compressor.name"),  # trainer=sync cannot use a compressor
    (["trainer=compressed", "compressor=topk", "compressor.k=0"], "compressor.k"),
    (["trainer=compressed", "compressor=topk", "compressor.k=1.5"], "compressor.k"),
    (["trainer=compressed", "compressor=randomk", "compressor.k=-0.1"], "compressor.k"),
    (["trainer=compressed", "compressor=mstopk", "compressor.search_steps=0"], "compressor.search_steps"),
    (["trainer=compressed", "compressor=qsgd", "compressor.levels=0"], "compressor.levels"),
    (["trainer=compressed", "compressor=powersgd", "compressor.rank=0"], "compressor.rank"),
    (["trainer=compressed", "compressor=powersgd", "compressor.rank=-2"], "compressor.rank"),
    (["trainer=compressed", "compressor=powersgd", "compressor.start_iter=1"], "compressor.start_iter"),
    (["trainer=compressed", "compressor.name=foo"], "compressor.name"),
])
def test_bad_input_fails_before_launch(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as e:
        validate(workbench.compose(overrides))
    assert "\n" not in str(e.value)


def test_unknown_compressor_option_is_one_line():
    with pytest.raises(ConfigError, match="unknown option 'foo' for compressor: choose from bf16") as e:
        workbench.compose(["trainer=compressed", "compressor=foo"])
    assert "\n" not in str(e.value) and "_schema" not in str(e.value)


@pytest.mark.parametrize("name", ALL)
def test_valid_configs_pass(name):
    validate(workbench.compose(["trainer=compressed", f"compressor={name}"]))


def test_sync_takes_compressor_none():
    validate(workbench.compose(["trainer=sync", "compressor=none"]))
