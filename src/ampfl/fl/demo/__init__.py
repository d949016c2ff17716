"""``ampfl demo``: what amplification buys in accuracy at one ε (:mod:`~ampfl.fl.demo.amplification`) and
across ε (:mod:`~ampfl.fl.demo.frontier`).
"""
