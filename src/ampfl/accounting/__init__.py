"""Privacy accounting for amplification in federated learning (pure numpy/scipy + dp-accounting).

One module per analysis; every public function validates its input and cites its paper. This package never
imports torch or flwr.
"""
