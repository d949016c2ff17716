"""The auditor of training code: canaries planted in real runs, observers that score what a run releases,
and the lower bounds on ε they certify against the accounted ε.
"""
