"""Layer 1: cubic smoothing splines over many columns (compiled core)."""
from letcc.splines.gcv import select_lam_gcv
from letcc.splines.smoother import SplineSmoother
from letcc.splines.smoothing_spline import SmoothingSpline

__all__ = ["SmoothingSpline", "SplineSmoother", "select_lam_gcv"]
