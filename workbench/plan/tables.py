"""The plan as text: one table per (workers, bandwidth), its paradigms ranked, and, after a
verification, the measured step times and the accuracy summary.

A family is the variants of one paradigm that differ only in a count (``stanza/n_f=1`` …
``stanza/n_f=63``, ``staleness/n=1`` … ``staleness/n=7``, each with or without the same compressor).
By default a table shows the best of each family (highest predicted samples/s), marked ``*``, and
says how many it stands for; ``all_rows`` shows every variant, the family's best marked, and the
variants that run one protocol (n-softsync's n values with the same c = ⌊λ/n⌋) as one row."""
from __future__ import annotations

import math
import statistics
from typing import Dict, List, Sequence, Tuple

from workbench.perfmodel.efficiency import NO_LAW
from workbench.perfmodel.profile import Profile
from workbench.plan.rows import LOOPBACK

def _rate(bps) -> str:
    if bps is None:
        return "never"
    if math.isinf(bps):
        return "always"
    for unit, f in (("Tbit", 1e12), ("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)):
        if bps >= f:
            return f"{bps / f:.3g} {unit}/s"
    return f"{bps:.3g} bit/s"


def _bytes(by: Dict[str, float]) -> str:
    parts = [f"{k} {v / 2**20:.3g}" for k, v in sorted(by.items()) if v]
    return ", ".join(parts) or "0"


def family(label: str) -> str:
    """The family of a paradigm label: its count left out (``stanza/n_f=3+fp16`` -> ``stanza/n_f=*+fp16``)."""
    dense, plus, comp = label.partition("+")
    head, eq, value = dense.rpartition("=")
    return f"{head}=*{plus}{comp}" if eq and value.isdigit() else label


def _key(r: dict) -> tuple:
    """Better first: the shorter predicted time to target where there is one, then more samples/s."""
    t = r.get("predicted_time_to_target_s", 0.0)
    return (math.inf if t is None else t, -r["predicted_samples_per_s"])


def family_best(rows: List[dict]) -> Dict[str, Tuple[dict, int]]:
    """Each family of ``rows``: its best row (shortest predicted time to target with
    ``--target-accuracy``, else highest predicted samples/s) and how many rows it has."""
    best: Dict[str, Tuple[dict, int]] = {}
    for r in rows:
        f = family(r["paradigm"])
        top, n = best.get(f, (r, 0))
        best[f] = (r if _key(r) < _key(top) else top, n + 1)
    return best


def table(rows: List[dict], prof: Profile, all_rows: bool = False) -> str:
    out = []
    groups: Dict[Tuple[int, str], List[dict]] = {}
    for r in rows:
        groups.setdefault((r["workers"], r["bandwidth"]), []).append(r)
    for (w, bw), rs in groups.items():
        link = f"loopback ({_rate(8 * prof.beta)} measured)" if bw == LOOPBACK else bw
        out.append(f"\n{w} ranks, {link}:")
        verify_cols = any("measured_step_s" in r for r in rs)
        target = any("predicted_time_to_target_s" in r for r in rs)
        head = (f"{'#':>3}  {'paradigm':<22} {'step ms':>9} {'samples/s':>10}  "
                + (f"{'steps→T (interval)':>20} {'time→T':>9}  " if target else "")
                + f"{'bottleneck':<10}  {'crossover':<12}  MiB/step sent (by category)")
        if verify_cols:
            head += "  | measured ms  error   bytes"
        reach_cols = any("measured_reached" in r for r in rs)
        if reach_cols:
            head += f"  | {'steps→T':>8} {'time→T':>9} reached"
        out.append(head)
        best, notes = family_best(rs), []
        starred = {id(top): n for top, n in best.values() if n > 1}
        shown = collapse(rs) if all_rows else [r for r in rs if best[family(r["paradigm"])][0] is r]
        merged = [r for r in shown if r.get("same_protocol")]
        for i, r in enumerate(shown):
            compressing = r["paradigm"].startswith("compressed/") or "+" in r["paradigm"]  # against its dense self
            cross = _rate(r["crossover_bps"]) if compressing else ""
            name = r["paradigm"] + (" *" if id(r) in starred else "")
            line = (f"{r['rank'] if all_rows else i + 1:>3}  {name:<22} {1e3 * r['predicted_step_s']:>9.2f} {r['predicted_samples_per_s']:>10.1f}  "
                    + (_to_target(r) if target else "")
                    + f"{r['bottleneck']:<10}  {cross:<12}  {_bytes(r['predicted_bytes_by_category'])}")
            if target and r.get("to_target_note"):
                notes.append(None if NO_LAW in r["to_target_note"] else f"{r['paradigm']}: {r['to_target_note']}")
            if "mean_staleness" in r:
                line += f"  ⟨τ⟩ {r['mean_staleness']:.1f}, max τ {r['max_staleness']} (simulated)"
            if "measured_step_s" in r:
                ok = "exact" if r["bytes_error"] == 0 else f"{100 * r['bytes_error']:+.2f}%"
                line += f"  | {1e3 * r['measured_step_s']:>9.2f}  {100 * r['error']:+6.1f}%  {ok}"
            elif "measured_status" in r:
                line += f"  | run {r['measured_status']}"
            if "measured_reached" in r:
                ms, mt = r["measured_steps_to_target"], r["measured_time_to_target_s"]
                line += (f"  | {'n.r.' if ms is None else f'{ms:,.0f}':>8} {'—' if mt is None else _duration(mt):>9} "
                         f"{r['measured_reached']} (cap {r['measured_cap']:,})")
            out.append(line)
        if merged:
            out.append("     " + "; ".join(f"{r['paradigm']}: {r['same_protocol']} variants, one protocol ({r['protocol']})"
                                          for r in merged))
        unmodelled = sorted({family(r["paradigm"]).split("+")[0] for r in rs
                             if NO_LAW in str(r.get("to_target_note", ""))})
        if unmodelled:
            out.append(f"     —: no time to target: no statistical-efficiency law yet for {', '.join(unmodelled)}")
        out += [f"     {n}" for n in dict.fromkeys(n for n in notes if n)]
        ef = {r["paradigm"].split("+")[-1].split("/")[-1]: r["compressor_ef_excess"] for r in rs if "compressor_ef_excess" in r}
        if ef:
            out.append("     error feedback taken at SGD's rate; its bound's extra term (1−δ)/δ², large = optimistic: "
                       + ", ".join(f"{c} {x:,.3g}" for c, x in sorted(ef.items(), key=lambda kv: kv[1])))
        if starred:
            fams = ", ".join(f"{f} ({n})" for f, (_, n) in best.items() if n > 1)
            out.append(f"     * the best of its family here: {fams}" +
                       ("" if all_rows else f"; {len(rs) - len(shown)} more rows with --all"))
    errs = [r["error"] for r in rows if "error" in r]
    if errs:
        med, p90 = error_quantiles(errs)
        out.append(f"\nstep time |error|: median {100 * med:.1f} %, 90th percentile {100 * p90:.1f} % "
                   f"over {len(errs)} runs; bytes exact in {sum(r.get('bytes_error') == 0 for r in rows)}/{len(errs)}")
    return "\n".join(out)


def collapse(rows: List[dict]) -> List[dict]:
    """``rows`` with the variants of one family that run the same protocol (the same ``protocol``
    key: n-softsync's n values with one c = ⌊λ/n⌋) as one row, the best of them, labelled with
    their counts (``staleness/n=2…3``) and ``same_protocol`` = how many it stands for."""
    groups: Dict[tuple, List[dict]] = {}
    for r in rows:
        key = (family(r["paradigm"]), r["protocol"]) if r.get("protocol") else (id(r),)
        groups.setdefault(key, []).append(r)
    out = []
    for r in rows:
        g = groups[(family(r["paradigm"]), r["protocol"]) if r.get("protocol") else (id(r),)]
        if len(g) == 1:
            out.append(r)
        elif r is min(g, key=_key):
            counts = sorted(int(x["paradigm"].partition("+")[0].rpartition("=")[2]) for x in g)
            head, _, rest = r["paradigm"].partition("+")
            span = f"{counts[0]}…{counts[-1]}" if counts == list(range(counts[0], counts[-1] + 1)) else ",".join(map(str, counts))
            out.append({**r, "paradigm": f"{head.rpartition('=')[0]}={span}" + (f"+{rest}" if rest else ""),
                        "same_protocol": len(g)})
    return out


def _to_target(r: dict) -> str:
    steps, t, span = r.get("predicted_steps_to_target"), r.get("predicted_time_to_target_s"), r.get("predicted_steps_interval")
    if steps is None:
        return f"{'—':>20} {'—':>9}  "
    text = f"{steps:,}" + (f" ({span[0]:,}–{span[1]:,})" if span and span[0] != span[1] else "")
    return f"{text:>20} {_duration(t):>9}  "


def _duration(s: float) -> str:
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def error_quantiles(errors: Sequence[float]) -> Tuple[float, float]:
    """The median and the 90th percentile (nearest rank) of the errors' magnitudes: the planner's two
    accuracy targets, computed one way for every table that reports them."""
    errs = sorted(abs(e) for e in errors)
    return statistics.median(errs), errs[min(len(errs) - 1, math.ceil(0.9 * len(errs)) - 1)]