"""Split federated learning (paper 003): SplitFed, Standalone, SplitFed-PM, PM-SFL, reconstruction attack.

Modules: :mod:`~ampfl.fl.split.common` (the split training loop and evaluation), :mod:`~ampfl.fl.split.masks`
(Eq. 7 aggregation, personalised-mask selection), :mod:`~ampfl.fl.split.algorithms` (the four algorithms,
registered in ``ampfl.fl.algorithms.ALGORITHMS``), the baselines :mod:`~ampfl.fl.split.hetero`,
:mod:`~ampfl.fl.split.depthfl`, :mod:`~ampfl.fl.split.lg_fedavg`, :mod:`~ampfl.fl.split.splitfed_dp`, and
:mod:`~ampfl.fl.split.attack` (DLG-style attack on
smashed data, PSNR, SSIM).
"""

from __future__ import annotations

# Import the algorithm registry first: it imports ampfl.fl.split.algorithms, which needs
# ampfl.fl.algorithms.base; entering through this package would otherwise be a circular import.
import ampfl.fl.algorithms  # noqa: F401
