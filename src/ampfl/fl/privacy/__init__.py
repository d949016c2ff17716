"""The privacy of a run: its one accountant (:mod:`~ampfl.fl.privacy.run_accountant`, which composes the
algorithm's round events), calibration of a target ε to a noise multiplier, the ledger's worker thread and the
secure sums whose noise the clients add.
"""
