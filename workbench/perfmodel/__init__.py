"""The performance model: pure functions of measured inputs.

- ``paradigms/``: one step-time function per paradigm, one file per family (``dp``, ``ps``,
  ``averaging``, ``stanza_schedule``), each its formula on a profile and a cluster;
- ``cluster``: a cluster of hosts (α, β, overlap) and the :class:`Prediction` a paradigm returns;
- ``collectives``: the time and bytes of every collective; ``queueing``: the asynchronous PS's
  closed queue; ``stanza``: Stanza's schedule and allocation;
- ``testbed`` (with ``loopback`` and ``shaper``): this machine as a cluster, plugged in where a
  run here is predicted;
- ``profile/``: the measured profile, its timing loops and the spawning of its ranks.
"""
