"""Adapters that put ampfl's amplified accounting and mechanisms inside code ampfl did not write.

One module per framework, each a thin layer over :mod:`ampfl.accounting` (events, accountants) and the
existing mechanisms; none re-implements a bound. Each needs its framework's extra installed:
``ampfl.integrations.opacus`` (extra ``opacus``), ``ampfl.integrations.flower`` (extra ``flower``).
Nothing is imported here, so importing this package costs nothing.
"""
