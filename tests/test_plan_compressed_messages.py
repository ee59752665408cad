"""The planner's paradigm × compressor rows (``ps/sync+topk``, ``bmuf+powersgd``, …): each row's
bytes are the compressor's analytic payload times its message count and collective factor, its
codec the profile's measurement, invalid combinations are never planned, and a profile without
the measurement plans the rest with a note."""
import functools
import math

import pytest

from perfmodel_fixtures import synthetic_profile
from workbench.compress import COMPRESSORS
from workbench.perfmodel import collectives as C
from workbench.perfmodel.paradigms import Cluster, MissingMeasurement
from workbench.perfmodel.paradigms import compressed_messages as cm

SHAPES = [(16, 1, 3, 3), (16,), (32, 16, 3, 3), (32,), (10, 512), (10,)]  # conv: the first four
CONV = 4


@functools.lru_cache(maxsize=None)
def _compose(overrides):
    import workbench
    return workbench.compose(list(overrides))


def _cfg(c):
    return _compose((f"compressor={c}",)).compressor


def _profile():
    """A synthetic profile of a small CNN's shapes whose codecs the real compressors measured
    (``measure_codecs`` with the messages of the other paradigms)."""
    from workbench.compress.codec_timing import measure_codecs
    p = sum(math.prod(s) for s in SHAPES)
    conv = sum(math.prod(s) for s in SHAPES[:CONV])
    prof = synthetic_profile(params_conv=conv, params_fc=p - conv, param_shapes=SHAPES,
                             buckets=[{"numel": p, "shapes": [list(s) for s in SHAPES]}], boundary=512)
    comps = {c: _cfg(c) for c in ("fp16", "topk", "efsignsgd", "powersgd")}
    prof.codecs = measure_codecs(prof.buckets, comps, 4, repeats=1,
                                 messages={"shapes": SHAPES, "conv_tensors": CONV,
                                           "p2p_sizes": [p, p // 4, prof.batch * prof.boundary]})
    return prof


PROF = _profile()
LINK = Cluster(4, 1.25e8, 5e-5)


def _predict(overrides, prof=PROF, cl=LINK):
    from workbench.spec import paradigm_of_config
    from workbench.trainers import SPECS
    cfg = _compose(tuple(overrides + [f"cluster.nproc={cl.ranks}"]))
    fn, opts = SPECS[cfg.trainer.name].perf_model(cfg)
    return paradigm_of_config(cfg), cfg, fn(prof, cl, **opts)


def _payload(cfg, shapes):
    c = COMPRESSORS[cfg.compressor.name]
    return c.payload_bytes_of_shapes(cfg.compressor, shapes, [sum(math.prod(s) for s in shapes)])


@pytest.mark.parametrize("overrides,label", [
    (["trainer=ps", "trainer.mode=sync", "compressor=topk"], "ps/sync+topk"),
    (["trainer=ps", "trainer.mode=async", "compressor=efsignsgd"], "ps/async+efsignsgd"),
    (["trainer=staleness", "trainer.protocol=softsync", "trainer.n=2", "compressor=fp16"], "staleness/n=2+fp16"),
])
def test_a_parameter_servers_push_is_each_shards_payload(overrides, label):
    got, cfg, pred = _predict(overrides)
    assert got == label
    servers = int(cfg.trainer.num_servers)
    push = sum(COMPRESSORS[cfg.compressor.name].payload_bytes(cfg.compressor, sum(math.prod(s) for s in part))
               for part in cm.shards(SHAPES, servers))
    assert pred.bytes["grad_push"]["sent"] == push
    assert pred.bytes["param_pull"]["recv"] == PROF.model_bytes  # the pull stays dense by default
    assert pred.bytes["ps_control"]["sent"] == 32 * servers
    assert pred.terms.get("codec", 0) > 0 or pred.terms["exchange"] > 0
    assert pred.crossover_bps is None or pred.crossover_bps > 0


def test_a_compressed_pull_sends_its_payload_back():
    _, cfg, pred = _predict(["trainer=ps", "trainer.mode=sync", "compressor=topk", "compressor.pull=fp16"])
    assert pred.bytes["param_pull"]["recv"] == 2 * PROF.params


def test_two_servers_push_their_shards_payloads():
    _, cfg, pred = _predict(["trainer=ps", "trainer.mode=sync", "trainer.num_servers=2", "compressor=topk"])
    parts = cm.shards(SHAPES, 2)
    assert len(parts) == 2 and all(parts)
    assert pred.bytes["grad_push"]["sent"] == sum(_payload(cfg, part) for part in parts)


def test_the_deltas_buckets_are_the_averagers():
    from workbench.compress.delta import bucket_shapes
    big = [(3000, 3000), (10,), (2000, 2000), (2000, 2000), (5,)]
    for shapes in (SHAPES, big):
        for cap in (4 * 100, 25 * 2**20):
            assert cm.delta_buckets(shapes, cap) == [[tuple(s) for s in b] for b in bucket_shapes(shapes, cap)]


def test_shards_are_the_parameter_servers():
    from workbench.ps.sharding import ShardLayout
    for s in (1, 2, 3):
        layout = ShardLayout(SHAPES, s)
        assert cm.shards(SHAPES, s) == [[tuple(layout.shapes[i]) for i in o] for o in layout.owned]


def test_easgd_sends_the_elastic_differences_payload_once_a_period():
    label, cfg, pred = _predict(["trainer=easgd", "compressor=fp16"])
    assert label == "easgd/async+fp16"
    tau = int(cfg.trainer.period)
    assert pred.bytes["param_push"]["sent"] == 2 * PROF.params / tau
    assert pred.bytes["param_pull"]["recv"] == PROF.model_bytes / tau
    assert pred.bytes["ps_control"]["sent"] == (32 + 16) / tau  # the PULL's header, the difference's length


@pytest.mark.parametrize("trainer,comp", [("bmuf", "powersgd"), ("local_sgd", "topk"), ("bmuf", "efsignsgd"),
                                          ("local_sgd", "fp16")])
def test_bmufs_delta_is_the_compressors_collective_once_a_block(trainer, comp):
    from workbench.trainers import SPECS
    label, cfg, pred = _predict([f"trainer={trainer}", f"compressor={comp}"])
    assert label == f"{trainer}+{comp}"
    payload = _payload(cfg, SHAPES)
    cls = COMPRESSORS[comp]
    # the trainer's own analytic count (the bytes suite's), per step
    # (the meter floors each all-reduce's 2(p-1)n/p: one message here, within a byte)
    per_block = C.allreduce_bytes(payload, 4) if cls.collective == "allreduce" else cls.sent_bytes(payload, 1, 4)
    assert pred.bytes[cls.category]["sent"] == per_block / int(cfg.trainer.block)
    assert per_block == pytest.approx(SPECS[trainer].analytic_bytes(cfg, {}, SHAPES) * int(cfg.trainer.block), abs=1)
    # the measured reduce put exactly that payload into its collectives
    assert sum(m["bytes"] for m in PROF.codecs[comp]["delta"]["payloads"]) == payload
    assert pred.terms["codec"] == pytest.approx(PROF.codecs[comp]["delta"]["codec_s"] / int(cfg.trainer.block))


def test_stanzas_conv_ring_and_activations_are_the_compressors():
    from workbench.perfmodel.shaper import conv_bucket_numels
    from workbench.trainers import stanza_messages as sm
    label, cfg, pred = _predict(["trainer=stanza", "trainer.fc_workers=1", "compressor=fp16"])
    assert label == "stanza/n_f=1+fp16"
    n_c, b, a = 3, PROF.batch, PROF.boundary
    # the trainer's own analytic counts: the compressor over the CONV group's buckets, the activations' payload
    ar = sm.allreduce_sent_bytes(cfg.compressor, SHAPES[:CONV], conv_bucket_numels(PROF), n_c)
    assert pred.bytes["allreduce_conv"]["sent"] == sum(C.allreduce_bytes(2 * n, n_c) for n in conv_bucket_numels(PROF))
    assert pred.bytes["allreduce_conv"]["sent"] == pytest.approx(ar, abs=len(conv_bucket_numels(PROF)))
    assert pred.bytes["activations"]["sent"] == sm.activation_bytes(cfg.compressor, a * b) == 2 * a * b
    assert pred.bytes["activation_grads"]["recv"] == 2 * a * b
    dense = _predict(["trainer=stanza", "trainer.fc_workers=1"])[2]
    assert dense.bytes["activations"]["sent"] == 4 * a * b
    assert pred.bytes["labels"] == dense.bytes["labels"]


def test_stanza_with_dense_activations_compresses_the_ring_alone():
    from workbench.perfmodel.shaper import conv_bucket_numels
    from workbench.trainers import stanza_messages as sm
    _, cfg, pred = _predict(["trainer=stanza", "trainer.fc_workers=1", "compressor=topk", "compressor.activations=none"])
    assert pred.bytes["activations"]["sent"] == 4 * PROF.boundary * PROF.batch
    ar = sm.allreduce_sent_bytes(cfg.compressor, SHAPES[:CONV], conv_bucket_numels(PROF), 3)
    assert pred.bytes["allreduce_conv"]["sent"] == pytest.approx(ar)


def test_the_planned_combinations_are_the_valid_ones_and_their_labels_parse():
    from omegaconf import OmegaConf

    from workbench.compress.messages import can_carry
    from workbench.spec import paradigm_of_config
    from workbench.trainers import SPECS
    labels = set()
    for name, spec in SPECS.items():
        for vo in spec.plan_variants(4):
            cfg = _compose((vo[0], "cluster.nproc=4")).copy()  # the trainer's defaults, then the variant's keys
            for o in vo[1:]:
                k, v = o.split("=", 1)
                if k.startswith("compressor."):
                    continue  # a compressor's setting (PowerSGD's start): not part of the label
                OmegaConf.update(cfg, "compressor.name" if k == "compressor" else k, v, merge=False)
            labels.add(paradigm_of_config(cfg))
    assert {"ps/sync+topk", "ps/async+fp16", "staleness/n=1+efsignsgd", "easgd/async+topk", "bmuf+powersgd",
            "local_sgd+topk", "stanza/n_f=1+fp16"} <= labels
    # PowerSGD sends nothing point to point; top-k and EF-signSGD cannot carry activations
    assert not can_carry(COMPRESSORS["powersgd"], "gradient", "p2p")
    assert not {"ps/sync+powersgd", "ps/async+powersgd", "staleness/n=1+powersgd", "easgd/async+powersgd",
                "stanza/n_f=1+topk", "stanza/n_f=1+efsignsgd", "stanza/n_f=1+powersgd"} & labels
    # one representative set: no qsgd, randomk … beside the paradigms (compressed/<c> lists them all)
    assert not any("+" in l and l.split("+")[1] not in ("fp16", "topk", "efsignsgd", "powersgd") for l in labels)


def test_the_dense_rows_keep_their_models():
    from workbench.perfmodel import paradigms as P
    for overrides, fn in ((["trainer=ps", "trainer.mode=sync"], P.ps_sync), (["trainer=ps", "trainer.mode=async"], P.ps_async),
                          (["trainer=bmuf"], P.bmuf), (["trainer=easgd"], P.easgd), (["trainer=stanza", "trainer.fc_workers=1"], P.stanza),
                          (["trainer=staleness", "trainer.protocol=softsync", "trainer.n=1"], P.staleness)):
        from workbench.trainers import SPECS
        cfg = _compose(tuple(overrides + ["cluster.nproc=4"]))
        got, opts = SPECS[cfg.trainer.name].perf_model(cfg)
        assert got is fn and not any(isinstance(v, cm.MessageCodec) for v in opts.values())


def test_a_profile_without_the_measurement_skips_the_row_with_a_note():
    from workbench.plan import Variant, predict_rows
    from workbench.trainers import SPECS
    old = synthetic_profile()  # codecs of DDP's buckets alone, as before version 14
    vs = []
    for ov in (["trainer=sync"], ["trainer=ps", "trainer.mode=sync", "compressor=topk"], ["trainer=bmuf", "compressor=fp16"],
               ["trainer=compressed", "compressor=bf16"]):
        cfg = _compose(tuple(ov + ["cluster.nproc=4"]))
        vs.append(Variant(cfg.trainer.name, ov, cfg, "+".join(ov), *SPECS[cfg.trainer.name].perf_model(cfg)))
    notes = []
    rows = predict_rows(old, {4: vs}, ["1gbit"], 5e-5, notes)
    assert [r["paradigm"] for r in rows] == ["trainer=sync"]
    assert len(notes) == 3 and all("not planned" in n for n in notes)
    with pytest.raises(MissingMeasurement):
        cm.ps_sync(old, LINK, 1, push=vs[1].options["push"])


def test_the_codec_is_the_profiles_measurement_and_never_hides():
    _, cfg, pred = _predict(["trainer=ps", "trainer.mode=sync", "compressor=topk"])
    enc, dec = PROF.p2p_codec_s("topk", PROF.params, 1, False)
    assert pred.terms["codec"] == pytest.approx(enc + 3 * dec)  # the worker's encode, the server's 3 decodes
    slower = synthetic_profile(**{k: getattr(PROF, k) for k in ("params_conv", "params_fc", "param_shapes", "buckets",
                                                                   "boundary", "codecs")}).drifted(2.0)
    enc2, _ = slower.p2p_codec_s("topk", PROF.params, 1, False)
    assert enc2 == pytest.approx(2 * enc)


def test_p2p_codec_is_linear_between_the_measured_sizes():
    pts = [{"numel": 100, "bytes": 0, "send_s": 1.0, "receive_s": 2.0},
           {"numel": 300, "bytes": 0, "send_s": 3.0, "receive_s": 4.0}]
    p = synthetic_profile(codecs={"x": {"p2p": pts}})
    assert p.p2p_codec_s("x", 200, 1, False) == pytest.approx((2.0, 3.0))
    assert p.p2p_codec_s("x", 50, 1, False) == pytest.approx((1.0, 2.0))
    assert p.p2p_codec_s("x", 600, 1, False) == pytest.approx((6.0, 8.0))
    assert p.p2p_codec_s("y", 600, 1, False) is None


def test_the_measured_point_to_point_payload_is_the_analytic_one():
    for c in ("fp16", "topk", "efsignsgd"):
        for q in PROF.codecs[c]["p2p"]:
            assert q["bytes"] == COMPRESSORS[c].payload_bytes(_cfg(c), q["numel"])
    assert "p2p" not in PROF.codecs["powersgd"]  # it sends nothing point to point


def test_thinning_many_variants_keeps_the_compressed_ones():
    from workbench.plan.rows import _thin
    soft = [["trainer=staleness", f"trainer.n={n}"] for n in range(1, 200)]
    comp = [[*soft[0], f"compressor={c}"] for c in ("fp16", "topk", "efsignsgd")]
    kept = _thin(soft + comp)
    assert kept[-3:] == comp and len(kept) < 20
    assert _thin(soft) == kept[:-3]


def test_only_selects_a_paradigms_compressed_rows_by_its_label_and_plus():
    from workbench.plan.rows import _selected
    assert _selected("bmuf+powersgd", ["bmuf+"]) and _selected("ps/sync+topk", ["ps/sync+topk"])
    assert not _selected("bmuf+powersgd", ["bmuf"]) and _selected("bmuf", ["bmuf"])
    # a family name selects its dense rows; with a "+" its compressed ones
    assert not _selected("ps/sync+topk", ["ps"]) and not _selected("ps/sync+topk", ["ps/sync"])
    assert _selected("ps/sync+topk", ["ps+"]) and _selected("staleness/n=2+fp16", ["staleness+"])
    assert not _selected("ps/sync", ["ps+"]) and _selected("stanza/n_f=1", ["stanza"])


def test_the_payload_links_are_the_dense_ones_when_nothing_is_compressed():
    from workbench.perfmodel.paradigms import payload_links as pl
    from workbench.perfmodel.queueing import LineLink
    from workbench.perfmodel.shaper import ShapedLink
    prof = synthetic_profile(machine={"cores": 2})
    m = prof.model_bytes
    same = pl.Push(m, m, 0.0, 0.0)
    line = Cluster(3, 1.25e8, 5e-5)
    shaped = Cluster(3, 2e7, 5e-5, shaper_rate=2.5e7, shaper_burst=1e5, cores_shared=True, host_bandwidth=1e9)
    for dense, payload, cl in ((LineLink(prof, line, 1), pl.PayloadLink(prof, line, 1, same), line),
                               (ShapedLink(prof, shaped, 1), pl.PayloadShapedLink(prof, shaped, 1, same), shaped)):
        for idle in (0.0, 1e-3, 1.0):
            assert payload.exchange(1e-2, 1e-4, idle) == pytest.approx(dense.exchange(1e-2, 1e-4, idle))
            assert payload.service(idle) == pytest.approx(dense.service(idle))


def _identity_profile(**kw):
    """A profile with a codec "same" that sends the dense bytes in no time: the compressed rows must
    then be the dense rows."""
    prof = synthetic_profile(machine={"cores": 2}, ranks=3, t_c_at=(1e-3, 2e-3, 3e-3), t_f_at=(1e-4, 2e-4, 3e-4),
                             span_at=(1.1e-2, 2.2e-2, 3.3e-2), **kw)
    m = prof.model_bytes
    prof.codecs["same"] = {"delta": {"payloads": [{"collective": "allreduce", "bytes": m, "category": "allreduce"}],
                                     "codec_s": 0.0},
                           "p2p": [{"numel": 1, "bytes": 4, "send_s": 0.0, "receive_s": 0.0},
                                   {"numel": 10**9, "bytes": 4 * 10**9, "send_s": 0.0, "receive_s": 0.0}]}
    prof.collectives = {f"allreduce:float32:{m}": 2e-3, "allreduce:float32:4": 1e-4}
    return prof, cm.MessageCodec("same", "allreduce", "allreduce", lambda shapes: 4 * sum(math.prod(s) for s in shapes),
                                 lambda payload, buckets, world: C.allreduce_bytes(payload, world))


@pytest.mark.parametrize("loops", [{}, {"block/8": 0.05, "ps/sync": 0.06}])
def test_with_nothing_compressed_the_rows_on_this_host_are_the_dense_ones(loops):
    from workbench.perfmodel import paradigms as P
    from workbench.plan import cluster_for
    prof, same = _identity_profile(loops=dict(loops))
    cfg = _compose(("cluster.nproc=3",))
    for bw in ("loopback", "emulated:200mbit", "1gbit"):
        cl = cluster_for(cfg, prof, 3, bw, 5e-5)
        assert cm._bmuf(prof, cl, 8, same).step_s == pytest.approx(P.bmuf(prof, cl, 8).step_s, rel=1e-9)
        assert cm._ps_async(prof, cl, 1, 1, same).step_s == pytest.approx(P.ps_async(prof, cl, 1).step_s, rel=1e-9)
        if bw != "emulated:200mbit":  # behind the buckets the dense hardsync has its loop's host part as a floor
            assert cm._ps_sync(prof, cl, 1, same).step_s == pytest.approx(P.ps_sync(prof, cl, 1).step_s, rel=1e-9)
        prof.codecs["same"]["conv"] = {"payloads": [], "codec_s": 0.0}
        assert cm._stanza(prof, cl, 1, same, same).step_s == pytest.approx(P.stanza(prof, cl, 1).step_s, rel=1e-9)


def test_the_planners_composition_of_every_variant_is_hydras():
    """The planner sets a variant's compressor choice and plain keys on kept compositions
    (``workbench/plan/compose.py``): every variant at 3 ranks, with a shared group override, is the
    config Hydra composes from its override list, schema types included."""
    from omegaconf import OmegaConf

    from workbench.plan import rows
    vs, _ = rows.variants(["model=small_cnn", "trainer.max_steps=60"], 3)
    assert any(o.startswith("compressor=") for v in vs for o in v.overrides)
    for v in vs:
        ref = _compose(tuple(v.overrides))
        assert OmegaConf.to_container(v.cfg) == OmegaConf.to_container(ref), v.label
        assert OmegaConf.get_type(v.cfg.compressor) is OmegaConf.get_type(ref.compressor), v.label


def test_bmuf_powersgds_verification_measures_compressed_rounds(tmp_path):
    """PowerSGD's start counts averaging rounds under BMUF: a verification skips until its compressed
    rounds (the spec's ``steady_after``) and measures the compressed payload, not the dense model."""
    from types import SimpleNamespace

    from workbench.bench.bytes import param_shapes
    from workbench.plan import VERIFY_SKIP, variants, verify_variant
    from workbench.trainers import SPECS
    vs, _ = variants(["model=small_cnn", "data=digits", "cluster.timeout_s=120"], 2)
    v = next(v for v in vs if v.label == "bmuf+powersgd")
    block, start = int(v.cfg.trainer.block), int(v.cfg.compressor.start_iter)
    assert SPECS["bmuf"].steady_after(v.cfg) == (start + 1) * block > VERIFY_SKIP
    m = verify_variant(v, tmp_path, steps=block)
    shapes = param_shapes(SimpleNamespace(config=v.cfg))
    dense = SPECS["bmuf"].analytic_bytes(_compose(("trainer=bmuf", "cluster.nproc=2")), {}, shapes)
    assert m["measured_bytes_per_step"] == pytest.approx(SPECS["bmuf"].analytic_bytes(v.cfg, {}, shapes), abs=1)
    assert m["measured_bytes_per_step"] < dense / 4
