"""ampfl's algorithms on Flower (optional extra ``flower``): ``ampfl deploy`` and its Flower apps.

- :mod:`ampfl.flower.deploy`: :func:`~ampfl.flower.deploy.deploy`, one run of an ``ampfl run`` config on a
  local federation or an existing SuperLink;
- :mod:`ampfl.flower.server_app` / :mod:`ampfl.flower.client_app`: the ServerApp (own Grid loop, privacy
  ledger, run-level accountant) and ClientApp (local training on the node's partition), both reusing the
  simulator's algorithm code (``ampfl.fl.algorithms``) for the math;
- :mod:`ampfl.flower.secagg`: SecAgg+ (``ampfl deploy --secure-aggregation secaggplus``): its ClientApp and
  the per-round secure sum of the ServerApp; :mod:`ampfl.flower.noise_shares`: the clients' shares of the
  Gaussian noise under it (the server decodes only a noised sum), the encoding range and the accounting of
  dropouts;
- :mod:`ampfl.flower.ledger`: the SQLite privacy ledger; :mod:`ampfl.flower.local`: SuperLink/SuperNode
  processes.

Importing this package does not import flwr; the app modules do.
"""
