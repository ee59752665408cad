"""The one profiler: everything the performance model needs to know about a model on a machine,
measured on this machine's ranks and cached under ``experiments/profiles/``.

- :mod:`.schema`: the stored :class:`Profile`, its JSON, its versions, where it is cached;
- :mod:`.measure`: the timing loops every rank runs (compute levels, lockstep span, links,
  collectives, whole loops of steps), which the layers above also use for their own loops;
- :mod:`.ranks`: what each rank of a profile measures, in order;
- :mod:`.spawn`: starting the ranks, waiting for rank 0's result, :func:`measure` and
  :func:`load_or_measure`;
- :mod:`.progress`: rank 0's progress, reported to the parent as it goes.

:func:`measure_ranks` is the in-cluster part (used by ``trainer=stanza`` before it picks n_f and by
:func:`measure`, which spawns the ranks itself). Nothing here imports a trainer: the caller passes
the optimizer factory, the codecs' timing and the loops of the layers above.
"""
from workbench.perfmodel.profile.measure import (LOOP_PASSES, READY_PASSES, aligned_loop_s,  # noqa: F401
                                                 block_loop_s, boundary_floats, ddp_loop_s, free_running_period,
                                                 lockstep, mean_over_ranks, measure_collectives, measure_ranks,
                                                 stanza_inputs, step_collectives_loop_s)
from workbench.perfmodel.profile.schema import (PROFILE_READABLE, PROFILE_VERSION, Profile,  # noqa: F401
                                                cache_path, machine, profile_key)
from workbench.perfmodel.profile.spawn import ProfileError, host_span, load_or_measure, measure  # noqa: F401
