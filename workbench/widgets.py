"""ipywidgets explorers over the dashboard figures (:mod:`workbench.analysis`).

    from workbench import analysis as an, widgets as wb
    runs, metrics = an.load("experiments/runs/**")
    wb.RunExplorer(runs, metrics)              # pick a panel, filter paradigms, move the accuracy target
    wb.WhatIfExplorer(an.whatif_profile(overrides))   # sliders: bandwidth, ranks, compute speed, compressor
    wb.LiveAccuracy(run_dir, reference)        # a (running) run beside its predicted accuracy curve

Each explorer is displayable (the last expression of a cell) and keeps the figure it drew last in
``.figure``, so a test (or a notebook cell) can read what is on screen. Figures are redrawn into an
``ipywidgets.Output`` (plotly's FigureWidget needs the anywidget package, which the project does not
depend on).
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

import ipywidgets as W
import pandas as pd

from workbench import analysis as an


class _Explorer:
    def __init__(self) -> None:
        self.out = W.Output()
        self.figure = None
        self.widget: W.Widget = W.VBox()

    def _show(self, fig) -> None:
        self.figure = fig
        with self.out:
            self.out.clear_output(wait=True)
            fig.show()

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)


class RunExplorer(_Explorer):
    """One dashboard panel at a time over the given runs, with a paradigm filter and, for
    time-to-accuracy, the target accuracy."""

    def __init__(self, runs: pd.DataFrame, metrics: pd.DataFrame, target: float = 0.9) -> None:
        super().__init__()
        self.runs, self.metrics = runs, metrics
        self.panels: Dict[str, Callable] = {
            "accuracy vs wall-clock": lambda r, m, t: an.accuracy_vs_time(m),
            "accuracy vs steps": lambda r, m, t: an.accuracy_vs_time(m, x="step"),
            "throughput vs workers": lambda r, m, t: an.throughput_vs_workers(r),
            "time to accuracy": lambda r, m, t: an.time_to_accuracy(m, t),
            "bytes per step": lambda r, m, t: an.bytes_per_step(m),
            "Pareto front": lambda r, m, t: an.pareto_front(r),
        }
        paradigms = sorted(runs["paradigm"].unique()) if "paradigm" in runs and len(runs) else []
        self.panel = W.Dropdown(options=list(self.panels), description="panel")
        self.paradigms = W.SelectMultiple(options=paradigms, value=tuple(paradigms), description="paradigms",
                                          rows=min(6, max(2, len(paradigms))))
        self.target = W.FloatSlider(value=target, min=0.1, max=1.0, step=0.01, description="target acc",
                                    readout_format=".0%", continuous_update=False)
        for w in (self.panel, self.paradigms, self.target):
            w.observe(lambda _: self.redraw(), names="value")
        self.widget = W.VBox([W.HBox([self.panel, self.target]), self.paradigms, self.out])
        self.redraw()

    def redraw(self) -> None:
        keep = set(self.paradigms.value)
        r = self.runs[self.runs["paradigm"].isin(keep)] if len(self.runs) else self.runs
        m = self.metrics[self.metrics["paradigm"].isin(keep)] if len(self.metrics) and "paradigm" in self.metrics else self.metrics
        self._show(self.panels[self.panel.value](r, m, self.target.value))


class WhatIfExplorer(_Explorer):
    """The planner's what-if curves (:func:`workbench.analysis.whatif_curves`, from the calibrated
    model in :mod:`workbench.perfmodel`) under sliders, with a compressor's crossover bandwidth and
    Stanza's best allocation as text. With ``target`` = (accuracy, reference run directory) a toggle
    shows predicted time to that accuracy instead of throughput (docs/time_to_target.md)."""

    def __init__(self, profile, workers: int = 8, gbps: float = 10.0, overrides=(), target=None) -> None:
        super().__init__()
        self.target = target
        self.profile, self.overrides = profile, list(overrides)
        cu = dict(continuous_update=False, style={"description_width": "initial"})
        self.gbps = W.FloatLogSlider(value=gbps, base=10, min=-1, max=2.5, step=0.05, description="bandwidth (Gbit/s)", **cu)
        self.workers = W.IntSlider(value=workers, min=2, max=64, description="ranks", **cu)
        self.speedup = W.FloatLogSlider(value=1.0, base=2, min=-2, max=6, step=0.25, description="compute speed ×", **cu)
        names = sorted(profile.codecs) or ["(none profiled)"]
        self.compressor = W.Dropdown(options=names, value="powersgd" if "powersgd" in names else names[0],
                                     description="compressor", style=cu["style"])
        self.note = W.HTML()
        self.measure = W.ToggleButtons(options=["throughput"] + ([f"time to {target[0]:.0%}"] if target else []),
                                       description="predict", style=cu["style"])
        controls = (self.gbps, self.workers, self.speedup, self.compressor, self.measure)
        for w in controls:
            w.observe(lambda _: self.redraw(), names="value")
        self.widget = W.VBox([W.HBox(list(controls[:3])), W.HBox(list(controls[3:])), self.note, self.out])
        self.redraw()

    def redraw(self) -> None:
        from workbench.perfmodel import paradigms
        p, w, s = self.profile, self.workers.value, self.speedup.value
        to_target = self.target if self.measure.value != "throughput" else None
        self._show(an.whatif_curves(p, workers=w, gbps=self.gbps.value, speedup=s, overrides=self.overrides,
                                    target=to_target))
        c = self.compressor.value
        cross = an.crossover_gbps(p, w, c, s) if c in p.codecs else float("nan")
        prof = p.with_speedup(s * p.speedup)
        cl = paradigms.Cluster(w, self.gbps.value * 1e9 / 8, 50e-6)
        best = max(range(1, w), key=lambda n_f: paradigms.stanza(prof, cl, n_f).samples_per_s)
        x = paradigms.stanza(prof, cl, best).samples_per_s
        self.crossover = cross
        self.note.value = (f"{c} beats all-reduce on {w} ranks "
                           + (f"below <b>{cross:.3g} Gbit/s</b>" if cross == cross else "at <b>no</b> bandwidth")
                           + f"; Stanza's best split at {self.gbps.value:.3g} Gbit/s: <b>{best} FC</b> + {w - best} CONV ranks "
                           f"({x:,.0f} samples/s).")


class LiveAccuracy(_Explorer):
    """A run's accuracy beside the curve the time-to-target law predicts for it
    (:func:`workbench.analysis.accuracy_against_prediction`), redrawn every ``every_s`` seconds from
    its metrics while it runs, and once more when its summary says it ended."""

    def __init__(self, run_dir, reference, every_s: float = 5.0) -> None:
        import threading
        super().__init__()
        self.run_dir, self.reference, self.every_s = run_dir, reference, every_s
        self.widget = W.VBox([self.out])
        self._stop = threading.Event()
        self.redraw()
        if not self.ended():
            threading.Thread(target=self._watch, daemon=True).start()

    def ended(self) -> bool:
        from pathlib import Path
        return (Path(self.run_dir) / "summary.json").is_file()

    def redraw(self) -> None:
        self._show(an.accuracy_against_prediction(self.run_dir, self.reference))

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s):
            done = self.ended()
            self.redraw()
            if done:
                return

    def stop(self) -> None:
        self._stop.set()


def launch_button(overrides, description: str = "Launch", on_done: Optional[Callable] = None) -> W.VBox:
    """A button that composes and launches ``overrides`` (a list, or a callable returning one) with the
    live progress bar in its output area; ``on_done(run)`` is called with the finished run."""
    import workbench
    button = W.Button(description=description, button_style="primary")
    out = W.Output()

    def click(_):
        button.disabled = True
        with out:
            out.clear_output()
            try:
                ov = overrides() if callable(overrides) else overrides
                run = workbench.launch(workbench.compose(ov), progress=True)
                from workbench.verdict import line
                print(run.summary.get("status"), run.path)
                print(line(run.summary))  # learned / did_not_learn / unstable / diverged, and what to try
                if on_done:
                    on_done(run)
            except (workbench.ConfigError, workbench.RunFailed) as e:
                print(f"{type(e).__name__}: {e}")
            finally:
                button.disabled = False

    button.on_click(click)
    return W.VBox([button, out])
