"""Analysis apart from running: read runs into labelled tables, draw the trade-off figures, ask the
one performance model what-if questions. Nothing here launches a run or imports a trainer's loop;
:mod:`workbench.variants` launches the runs these read.

    from workbench import analysis as an
    runs, metrics = an.load("experiments/runs/**")        # + paradigm / label columns
    an.accuracy_vs_time(metrics).show()                   # accuracy vs wall-clock per paradigm
    an.throughput_vs_workers(runs).show()
    an.time_to_accuracy(metrics, target=0.9).show()
    an.bytes_per_step(metrics).show()                     # stacked by meter category (rank 0)
    an.pareto_front(runs).show()                          # accuracy / throughput Pareto front
    an.whatif_curves(an.whatif_profile(["model=small_cnn"])).show()  # the planner's what-if curves
    an.accuracy_against_prediction(run_dir, reference).show()  # a run beside its predicted accuracy curve

- :mod:`~workbench.runs.table`: loading, labelling (``paradigm``, ``label``), joining, tables.
- :mod:`~workbench.analysis.figures`: the plotly figure builders.
- :mod:`~workbench.analysis.whatif`: predictions from :mod:`workbench.perfmodel` through
  :func:`workbench.plan.plan` (docs/planner.md), on a profile measured on this machine.

Only completed runs are loaded unless ``completed_only=False``.
"""
from __future__ import annotations

from workbench.analysis.figures import (COLORS, accuracy_vs_time, allocation_figure, bytes_per_rank, bytes_per_step,
                                        dashboard, metric_histogram, metric_vs_step, pareto_front,
                                        throughput_vs_workers, time_to_accuracy, use_notebook_renderer, whatif_curves,
                                        whatif_to_target)
from workbench.runs.table import (COMPRESSION_COLUMNS, MiB, attach, bytes_columns, compression_table, label_runs,
                                     load, paradigm_of, pareto_mask, rank_bytes, select, summary_table,
                                     time_to_accuracy_table, with_variants)
from workbench.analysis.whatif import (accuracy_against_prediction, available_compressors, crossover_gbps,
                                       crossover_table, reference_overrides, reference_run, stanza_prediction,
                                       whatif_frame, whatif_profile)

__all__ = [
    "COLORS", "accuracy_vs_time", "allocation_figure", "bytes_per_rank", "bytes_per_step", "dashboard",
    "metric_histogram", "metric_vs_step", "pareto_front", "throughput_vs_workers", "time_to_accuracy",
    "use_notebook_renderer", "whatif_curves",
    "COMPRESSION_COLUMNS", "MiB", "attach", "bytes_columns", "compression_table", "label_runs", "load", "paradigm_of",
    "pareto_mask", "rank_bytes", "select", "summary_table", "time_to_accuracy_table", "with_variants",
    "accuracy_against_prediction", "available_compressors", "crossover_gbps", "crossover_table",
    "reference_overrides", "reference_run", "stanza_prediction", "whatif_frame", "whatif_profile", "whatif_to_target",
]
