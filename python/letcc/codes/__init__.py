"""Layer 2: coded computing schemes, pure array code (no processes, no models).

Every code has K, N, alpha, beta, encode(X), decode(Y, available),
can_decode(available), is_complete(available) (see letcc.codes._base).

- LeTCC: smoothing-spline encoder and decoder (the scheme of the paper);
- BACC: Berrut rational interpolation (the baseline of the paper);
- Uncoded, Replication: no coding, for comparison.

LeTCC and BACC take ``systematic=True`` (letcc.codes.systematic): K workers
compute the inputs themselves, exactly, and only a missing one is estimated;
``code.systematic_workers`` names them (None for every other code).
"""
from letcc.codes._base import Code, check_code
from letcc.codes.bacc import BACC, berrut_matrix
from letcc.codes.baselines import Replication, Uncoded
from letcc.codes.lam_defaults import GapScaledLam, LocalGapLam
from letcc.codes.letcc_code import LeTCC

__all__ = ["Code", "check_code", "LeTCC", "BACC", "Uncoded", "Replication", "GapScaledLam", "LocalGapLam", "berrut_matrix"]
