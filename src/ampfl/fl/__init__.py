"""The torch simulator of ampfl (``train`` extra), one folder per concern:

- ``run/``: a run from config to folder: the experiment, its round loop, folder and lock, the lines and
  summary it releases, what it keeps apart (``release``), plots;
- ``engine/``: how clients' local work runs: the vectorised engine (``torch.func``), its sequential
  reference, evaluation, per-example gradients, low-rank updates, the functional model, the device;
- ``privacy/``: the run's one accountant, calibration of a target ε, the ledger's thread, secure sums;
- ``algorithms/`` and ``split/``: one module per algorithm (each reports its rounds' privacy events), in
  the :data:`~ampfl.fl.algorithms.ALGORITHMS` registry;
- ``data/`` (datasets, partitions, cache), ``models/`` (vmap-friendly models);
- ``audit/``: canaries in real runs and the ε lower bounds they certify; ``demo/``: ``ampfl demo``.

At the top: ``config`` (the run config), ``task`` (what a run trains on), ``sampling`` and
``stream_draws`` (who takes part, and the privacy event of that choice), ``state`` (per-client store),
``params`` (parameter partitions), ``divergence``. Nothing heavy is imported here; ``ampfl.accounting``
never imports this package.
"""
