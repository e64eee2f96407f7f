"""Names for the types letcc's public API takes and returns (for annotations and docs).

letcc works on numpy arrays, torch tensors and CuPy arrays without copies and
returns the kind it was given, so most array types are deliberately broad.
Imports nothing from letcc.
"""
from __future__ import annotations

from typing import Any, Sequence, Union

import numpy as np
import numpy.typing as npt

__all__ = ["Array", "ArrayLike", "Lam", "Indices"]

# a numpy array, a torch tensor (CPU or CUDA) or a CuPy array: what letcc reads and
# returns (results come back as the same kind, on the same device)
Array = Any
# anything numpy turns into an array (lists, scalars, arrays) or an Array above
ArrayLike = Union[npt.ArrayLike, Any]
# a smoothing parameter: one number >= 0, or one per evaluation point
Lam = Union[float, Sequence[float], np.ndarray]
# worker indices: a sequence of ints or an integer array
Indices = Union[Sequence[int], np.ndarray]
