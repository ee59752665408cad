"""The Stanza performance model (workbench/perfmodel/stanza.py) on hand-computed cases.

    .venv/bin/pytest tests/test_perfmodel_stanza.py -q
"""
import pytest

from workbench.perfmodel import stanza as pm

# Round numbers so every term can be computed by hand:
# D = s a b / beta = 4*100*10/1e6 = 4 ms, F = b t_f = 1 ms, b t_c = 10 ms,
# conv all-reduce of 4 kB, FC all-reduce of 40 kB at 1 MB/s.
X = pm.StanzaInputs(t_c=1e-3, t_f=1e-4, a=100, p_c=1000, p_f=10000, b=10, beta=1e6)


def test_paper_reconstruction_by_hand():
    # n_c=3, n_f=1: 10 + 3*(1 + 8) + 2*2/3*4 + 0 ms
    assert pm.paper_step_time(X, 3, 1) == pytest.approx(10e-3 + 27e-3 + 16e-3 / 3)
    # n_c=2, n_f=2: 10 + 1*(1 + 8) + 2*1/2*4 + 2*1/2*40 ms
    assert pm.paper_step_time(X, 2, 2) == pytest.approx(10e-3 + 9e-3 + 4e-3 + 40e-3)
    assert pm.paper_throughput(X, 2, 2) == pytest.approx(20 / 63e-3)


def test_step_time_by_hand():
    # n_c=3, n_f=1: k=3 pieces pipelined: W = 2D + F + 2 max(D, F) = 8 + 1 + 8 = 17 ms;
    # then the CONV side: 10 ms compute + 2*2/3*4 ms all-reduce; no FC all-reduce.
    b = pm.breakdown(X, 3, 1)
    assert b["pieces"] == 3 and b["fc_phase"] == pytest.approx(17e-3)
    assert b["allreduce_conv"] == pytest.approx(16e-3 / 3) and b["allreduce_fc"] == 0
    assert pm.step_time(X, 3, 1) == pytest.approx(17e-3 + 10e-3 + 16e-3 / 3)
    assert pm.throughput(X, 3, 1) == pytest.approx(30 / (27e-3 + 16e-3 / 3))
    # n_c=2, n_f=2: W = 2D + F = 9 ms; FC all-reduce 40 ms > CONV window 10 + 4 ms: it is exposed.
    b = pm.breakdown(X, 2, 2)
    assert b["fc_phase"] == pytest.approx(9e-3) and b["fc_exposed"] == pytest.approx(40e-3 - 14e-3)
    assert pm.step_time(X, 2, 2) == pytest.approx(9e-3 + 40e-3)


def test_unbalanced_allocation_waits_for_the_busiest_fc_worker():
    # 3 CONV workers on 2 FC workers: one FC worker serves 2 (the paper's model charges 1.5)
    assert pm.pieces_on_busiest_fc(3, 2) == 2 and pm.pieces_on_busiest_fc(4, 2) == 2 and pm.pieces_on_busiest_fc(1, 3) == 1
    assert pm.breakdown(X, 3, 2)["fc_phase"] == pytest.approx(2 * 4e-3 + 1e-3 + 4e-3)


def test_latency_update_and_allreduce_bandwidth_terms():
    x = pm.StanzaInputs(t_c=1e-3, t_f=1e-4, a=100, p_c=1000, p_f=10000, b=10, beta=1e6,
                        alpha=1e-4, beta_allreduce=2e6, u=1e-7)
    # D = 2 x 0.1 + 4 ms (activations and labels; gradients and loss back); conv all-reduce over 3:
    # 4 messages of latency + 2*2/3*4000/2e6
    assert pm.transfer_time(x) == pytest.approx(4.2e-3)
    assert pm.allreduce_time(4000, 3, x) == pytest.approx(4e-4 + 16e-3 / 6)
    assert pm.allreduce_time(4000, 1, x) == 0
    b = pm.breakdown(x, 3, 1)
    assert b["update_conv"] == pytest.approx(1e-4) and b["update_fc"] == pytest.approx(1e-3)
    assert b["step"] == pytest.approx(2 * 4.2e-3 + 1e-3 + 2 * 4.2e-3 + 10e-3 + 4e-4 + 16e-3 / 6 + 1e-4)


def test_compute_time_depends_on_how_many_ranks_compute_at_once():
    # ranks sharing a host: conv 1 ms/sample alone, 2 ms with 2 at once, 3 ms with 3 (FC alike)
    x = pm.StanzaInputs(t_c=3e-3, t_f=3e-4, a=100, p_c=1000, p_f=10000, b=10, beta=1e6,
                        t_c_at=(1e-3, 2e-3, 3e-3), t_f_at=(1e-4, 2e-4, 3e-4))
    assert pm.conv_time(x, 2) == 2e-3 and pm.fc_time(x, 1) == 1e-4 and pm.conv_time(x, 7) == 3e-3
    assert pm.breakdown(x, 2, 1)["conv_compute"] == pytest.approx(20e-3)
    assert pm.breakdown(x, 2, 1)["fc_compute"] == pytest.approx(1e-3)
    assert pm.breakdown(x, 1, 2)["conv_compute"] == pytest.approx(10e-3)
    assert pm.dp_step_time(x, 3) == pytest.approx(10 * 3.3e-3 + 2 * 2 / 3 * 44e-3)
    assert pm.paper_step_time(x, 2, 1) == pytest.approx(20e-3 + 2 * (1e-3 + 8e-3) + 4e-3)


def test_baselines_by_hand():
    # data parallel on 4 nodes: 4*10 / (10*(1.1 ms) + 2*3/4*44 kB / 1 MB/s)
    assert pm.dp_step_time(X, 4) == pytest.approx(11e-3 + 66e-3)
    assert pm.dp_throughput(X, 4) == pytest.approx(40 / 77e-3)
    # one server, 3 workers: the server's link carries 3 x (push + pull) of 44 kB
    assert pm.ps_step_time(X, 3, 1) == pytest.approx(11e-3 + 3 * 2 * 44e-3)
    assert pm.ps_step_time(X, 3, 3) == pytest.approx(11e-3 + 2 * 44e-3)
    assert pm.ps_throughput(X, 3, 1) == pytest.approx(30 / (11e-3 + 264e-3))


def test_choose_allocation_picks_the_best_of_a_cost_table():
    table = {1: 50.0, 2: 80.0, 3: 70.0, 4: 80.0, 5: 10.0}  # a tie: the smaller n_f wins
    best, preds = pm.choose_allocation(X, 6, model=lambda x, n_c, n_f: table[n_f])
    assert best == 2 and preds == table


def test_choose_allocation_by_brute_force():
    # FC-heavy and slow network: the FC all-reduce dominates, so one FC worker is best
    best, preds = pm.choose_allocation(X, 5)
    assert set(preds) == {1, 2, 3, 4}
    assert best == max(preds, key=preds.get) == 1
    for n_f, v in preds.items():
        assert v == pytest.approx(pm.throughput(X, 5 - n_f, n_f))
    # FC compute dominates and the FC part is tiny: spread the FC work over more workers
    fc_bound = pm.StanzaInputs(t_c=1e-4, t_f=1e-2, a=10, p_c=10, p_f=10, b=10, beta=1e9)
    best, preds = pm.choose_allocation(fc_bound, 6)
    assert best == 3 and preds[3] > preds[2] > preds[1]  # n_c = n_f: one piece each


def test_choose_allocation_with_a_fixed_global_batch_and_a_small_training_set():
    # global batch 12 over 5 nodes: n_c in {1, 2, 3, 4} must divide 12 -> all; batch 12 / n_c
    best, preds = pm.choose_allocation(X, 5, global_batch=12)
    assert preds[1] == pytest.approx(pm.throughput(X.with_batch(3), 4, 1))
    # global batch 10: n_c = 4 and 3 do not divide it (n_f = 1, 2 infeasible)
    _, preds = pm.choose_allocation(X, 5, global_batch=10)
    assert set(preds) == {3, 4}
    # per-worker batch 10 and 25 samples: only n_c <= 2 fits
    _, preds = pm.choose_allocation(X, 5, max_batch=25)
    assert set(preds) == {3, 4}
    with pytest.raises(ValueError):
        pm.choose_allocation(X, 5, max_batch=5)
    with pytest.raises(ValueError):
        pm.choose_allocation(X, 1)


def test_byte_counts_match_the_papers_table():
    # VGG-16 at b = 32 (docs/papers.md §2): 1107 MB per data-parallel (PS) worker vs 124 MB per CONV
    # worker (conv parameters pushed and pulled once, activations out and their gradients in): 8.9x
    p_c, p_f, a, b = 14_714_688, 123_642_856, 25_088, 32
    ps = pm.ps_worker_bytes(p_c + p_f)
    assert ps["sent"] + ps["recv"] == pytest.approx(1107e6, rel=1e-3)
    stanza_paper = 2 * 4 * p_c + 2 * 4 * a * b
    assert stanza_paper == pytest.approx(124e6, rel=0.01)
    # the issue's count with a ring among n_c CONV workers, which tends to the paper's as n_c grows
    assert pm.issue_conv_worker_bytes(p_c, a, b, 3) == pytest.approx(2 * 4 * p_c * 2 / 3 + 2 * 4 * a * b)
    assert pm.issue_conv_worker_bytes(p_c, a, b, 10**6) == pytest.approx(stanza_paper, rel=1e-5)
    conv = pm.stanza_conv_worker_bytes(p_c, a, b, 3)
    assert conv["activations"]["sent"] == conv["activation_grads"]["recv"] == 4 * a * b
    assert conv["labels"]["sent"] == 8 * b and conv["loss"]["recv"] == 4
    fc = pm.stanza_fc_worker_bytes(p_f, a, b, pieces=3, n_f=1)
    assert fc["allreduce_fc"]["sent"] == 0 and fc["activations"]["recv"] == 3 * 4 * a * b
    sync = pm.sync_worker_bytes(p_c + p_f, 4)
    assert sync["sent"] == pytest.approx(1.5 * 4 * (p_c + p_f))


def test_invalid_allocations_raise():
    with pytest.raises(ValueError):
        pm.step_time(X, 0, 1)
    with pytest.raises(ValueError):
        pm.paper_step_time(X, 2, 0)
    with pytest.raises(ValueError):
        pm.ps_step_time(X, 0)


def test_compressed_byte_counts_by_hand():
    # float16 activations (2 bytes per float) and an all-reduce that sends 1000 bytes
    conv = pm.stanza_conv_worker_bytes(1000, 100, 10, 3, act_bytes=2 * 100 * 10, allreduce_bytes=1000)
    assert conv["activations"] == {"sent": 2000, "recv": 0} and conv["activation_grads"] == {"sent": 0, "recv": 2000}
    assert conv["allreduce_conv"] == {"sent": 1000, "recv": 1000} and conv["labels"]["sent"] == 80
    fc = pm.stanza_fc_worker_bytes(10000, 100, 10, 3, 2, act_bytes=2000)
    assert fc["activations"]["recv"] == fc["activation_grads"]["sent"] == 6000
    assert fc["allreduce_fc"]["sent"] == 40000  # the FC all-reduce stays dense
    # without them, the dense counts
    assert pm.stanza_conv_worker_bytes(1000, 100, 10, 3)["activations"]["sent"] == 4000
