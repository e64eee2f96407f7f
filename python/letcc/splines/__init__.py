"""Layer 1: cubic smoothing splines over many columns (compiled core)."""
from letcc.splines.dense_operator import DenseOperator
from letcc.splines.gcv import select_lam_gcv
from letcc.splines.smoother import SplineSmoother
from letcc.splines.smoother_rows import smoother_rows
from letcc.splines.smoothing_spline import SmoothingSpline

__all__ = ["DenseOperator", "SmoothingSpline", "SplineSmoother", "select_lam_gcv", "smoother_rows"]
