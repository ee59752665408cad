"""Parameter-server machinery shared by ``trainer=ps``, ``trainer=staleness`` and ``trainer=easgd``.

- :mod:`workbench.ps.sharding`: which server holds which parameter (whole tensors, balanced by size);
- :mod:`workbench.ps.protocol`: the metered push/pull messages and the worker's client;
- :mod:`workbench.ps.server`: the server's message loop around an update rule;
- :mod:`workbench.ps.rules`: gradient rules (hardsync, n-softsync, async, bounded staleness);
- :mod:`workbench.ps.stats`: staleness histogram, update sizes, updates/s;
- :mod:`workbench.ps.trainer`: the worker/server role map and loop the trainers share;
- benchmarks: ``python -m workbench.bench bytes`` and ``python -m workbench.bench staleness``.
"""
