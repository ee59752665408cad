"""Runs, from the files a run directory holds to the tables the dashboards read, one module a floor:

- :mod:`workbench.runs.store` (foundations): writing and reading a run directory's files
  (``config.yaml``, ``metrics.jsonl``, ``summary.json`` …, and the ranks' :class:`~workbench.runs.store.RunLog`);
- :mod:`workbench.runs.handle`: :class:`~workbench.runs.handle.Run`, one run directory read back
  (what :func:`workbench.launch` returns);
- :mod:`workbench.runs.table` (analysis): :func:`~workbench.runs.table.load_runs`,
  :func:`~workbench.runs.table.load_metrics` and the labelled run tables of :mod:`workbench.analysis`.

This ``__init__`` imports none of them, so that a rank reading its config pays for no analysis
import; ``workbench.Run``, ``workbench.load_runs`` and ``workbench.load_metrics`` resolve to them.
"""
