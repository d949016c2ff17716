"""ampfl: privacy-amplified federated learning.

Accountants for the amplification analyses of five papers (``ampfl.accounting``, pure numpy/scipy),
a vectorised simulator (``ampfl.fl``, needs the ``train`` extra) and a CLI (``ampfl``).
"""

__version__ = "0.1.0"
