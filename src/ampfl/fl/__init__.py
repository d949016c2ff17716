"""The torch simulator of ampfl (``train`` extra).

Sub-modules: ``data`` (datasets, partitions), ``models`` (vmap-friendly models), ``engine`` (vectorised local
training), ``sampling`` (client samplers that describe their privacy event), ``state`` (per-client store),
``params`` (parameter partitions), ``algorithms`` (FedAvg, DP-FedAvg, MS-PAFL, DP-DSGD with random
participation; each reports its rounds' privacy events), ``privacy`` (the run's one accountant), ``run`` (run
folders), ``task`` (what a run trains on). Nothing heavy is imported here; ``ampfl.accounting`` never
imports this package.
"""
