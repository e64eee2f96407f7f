"""Layer 3: adversary models, who answers wrongly and with what.

Beside the straggler models (letcc.stragglers: who is late), these say which
of the workers that answered a round return a wrong output, and what they
return instead. Every model has E (wrong answers per round) and

    model.choose(available, rng) -> sorted int64 worker indices (the adversaries among `available`)
    model.corrupt(Y, available, rng) -> (Y', adversarial)

``corrupt`` takes one round's outputs Y (row i: worker available[i]'s answer,
any trailing shape: all of it is that worker's answer) and returns a copy
with the adversaries' rows replaced, and the sorted worker indices it
replaced. Workers are drawn first, then the wrong values, both from `rng`
(a numpy Generator: np.random.default_rng(seed)), so two schemes fed the
same generator state, the same answering set and outputs of the same shape
see the same adversaries and the same wrong values.

Who is adversarial:

- ``workers=None`` (default): E workers drawn uniformly, without
  replacement, among the workers that answered (min(E, |available|) of
  them), afresh every round: exactly E wrong answers reach the decoder;
- ``workers=[...]``: fixed adversarial workers (E = len(workers)); only those
  that answered a round corrupt it.

What they return (y: the worker's true output, flattened):

- SignFlip:       -y                                   (ApproxIFER's experiments)
- GaussianNoise:  y + scale * N(0, 1) per entry
- ConstantShift:  y + shift (the same number added to every entry)
- UniformBounded: uniform values in [-M, M] per entry, independent of y
                  (the bounded adversary of arXiv 2502.08058)
- Colluding:      one wrong vector shared by all adversaries of the round:
                  ``vector`` when given (broadcast to y's shape), else
                  uniform in [-M, M] drawn once per round
- RelabelClasses: each class vector rolled by a random non-zero shift
                  (probabilities stay probabilities, on the wrong classes)

NumPy arrays and torch tensors (any device) are accepted; the result is of
Y's kind, device and dtype (the draws are made in float64 on the host).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Optional

import numpy as np

from letcc._checks import as_int, as_real

__all__ = ["AdversaryModel", "SignFlip", "GaussianNoise", "ConstantShift", "UniformBounded", "Colluding", "RelabelClasses",
           "as_adversary_model"]


def _check_generator(rng) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator (np.random.default_rng(seed)), got {type(rng).__name__}")
    return rng


def _is_torch(a) -> bool:
    return type(a).__module__.startswith("torch")


class AdversaryModel(ABC):
    """E wrong answers per round (see the module docstring)."""

    def __init__(self, E=None, workers=None):
        if workers is None:
            if E is None:
                raise TypeError("give E (adversaries per round) or workers (fixed adversarial workers)")
            self.E = as_int(E, "E", 0)
            self.workers: Optional[np.ndarray] = None
        else:
            arr = np.asarray(workers)
            if arr.ndim != 1 or arr.dtype.kind not in "iu":
                raise TypeError(f"workers must be a 1-D sequence of integer worker indices, got {workers!r}")
            arr = np.unique(arr.astype(np.int64))
            if arr.size != len(workers):
                raise ValueError(f"workers lists a worker more than once: {list(workers)!r}")
            if arr.size and arr[0] < 0:
                raise ValueError(f"workers holds a negative index: {list(workers)!r}")
            if E is not None and as_int(E, "E", 0) != arr.size:
                raise ValueError(f"E = {E!r} but workers lists {arr.size} workers")
            arr.setflags(write=False)
            self.workers = arr
            self.E = int(arr.size)

    # ---- who -------------------------------------------------------------

    def choose(self, available, rng: np.random.Generator) -> np.ndarray:
        """The adversaries of one round among the answering workers
        `available` (any order): sorted int64 worker indices."""
        _check_generator(rng)
        avail = np.asarray(available, dtype=np.int64).ravel()
        if self.workers is not None:
            return np.intersect1d(self.workers, avail)
        e = min(self.E, avail.size)
        if e == 0:
            return np.zeros(0, dtype=np.int64)
        return np.sort(avail[rng.choice(avail.size, size=e, replace=False)])

    # ---- what --------------------------------------------------------------

    @abstractmethod
    def _wrong(self, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """(e, M) float64 true outputs of the e adversaries -> their wrong outputs."""

    def corrupt(self, Y, available, rng: np.random.Generator):
        """(Y', adversarial): Y (len(available), ...) with the rows of this
        round's adversaries replaced (a copy; Y is not modified) and the
        sorted adversarial worker indices."""
        avail = np.asarray(available, dtype=np.int64).ravel()
        if Y.shape[0] != avail.size:
            raise ValueError(f"Y has {Y.shape[0]} rows but available lists {avail.size} workers")
        adv = self.choose(avail, rng)
        if _is_torch(Y):
            out = Y.clone()
        else:
            out = np.array(Y, copy=True)
        if adv.size == 0:
            return out, adv
        pos = np.flatnonzero(np.isin(avail, adv))
        pos = pos[np.argsort(avail[pos])]          # rows in the order of adv (ascending worker)
        if _is_torch(Y):
            import torch

            true = Y[torch.as_tensor(pos, device=Y.device)].detach().cpu().numpy().astype(np.float64)
            wrong = self._wrong(true.reshape(pos.size, -1), rng).reshape(true.shape)
            out[torch.as_tensor(pos, device=Y.device)] = torch.as_tensor(wrong, dtype=Y.dtype, device=Y.device)
        else:
            true = np.asarray(Y[pos], dtype=np.float64)
            wrong = self._wrong(true.reshape(pos.size, -1), rng).reshape(true.shape)
            if out.dtype.kind != "f":
                out = out.astype(np.float64)
            out[pos] = wrong
        return out, adv

    def _params(self) -> str:
        return ""

    def __repr__(self) -> str:
        who = f"E={self.E}" if self.workers is None else f"workers={self.workers.tolist()}"
        return f"{type(self).__name__}({who}{self._params()})"


class SignFlip(AdversaryModel):
    """Adversaries return the negated output, -y (ApproxIFER's adversary)."""

    def __init__(self, E=None, workers=None):
        super().__init__(E, workers)

    def _wrong(self, y, rng):
        return -y


class GaussianNoise(AdversaryModel):
    """Adversaries return y + scale * N(0, 1), independently per entry."""

    def __init__(self, E=None, scale: float = 1.0, workers=None):
        super().__init__(E, workers)
        self.scale = as_real(scale, "scale", 0.0, strict=True)

    def _wrong(self, y, rng):
        return y + self.scale * rng.standard_normal(y.shape)

    def _params(self) -> str:
        return f", scale={self.scale}"


class ConstantShift(AdversaryModel):
    """Adversaries return y + shift (the same number on every entry)."""

    def __init__(self, E=None, shift: float = 1.0, workers=None):
        super().__init__(E, workers)
        self.shift = as_real(shift, "shift")
        if self.shift == 0.0:
            raise ValueError("shift must be non-zero (a shift of 0 is an honest worker), got 0.0")

    def _wrong(self, y, rng):
        return y + self.shift

    def _params(self) -> str:
        return f", shift={self.shift}"


class UniformBounded(AdversaryModel):
    """Adversaries return uniform values in [-M, M] per entry, independent of
    their true outputs (arXiv 2502.08058's bounded adversary)."""

    def __init__(self, E=None, M: float = 1.0, workers=None):
        super().__init__(E, workers)
        self.M = as_real(M, "M", 0.0, strict=True)

    def _wrong(self, y, rng):
        return rng.uniform(-self.M, self.M, size=y.shape)

    def _params(self) -> str:
        return f", M={self.M}"


class Colluding(AdversaryModel):
    """All adversaries of a round return the same wrong vector: ``vector``
    (broadcast to one worker's output shape) when given, else one draw of
    uniform values in [-M, M] per round."""

    def __init__(self, E=None, vector=None, M: float = 1.0, workers=None):
        super().__init__(E, workers)
        self.M = as_real(M, "M", 0.0, strict=True)
        if vector is not None:
            vec = np.array(vector, dtype=np.float64)
            if not np.all(np.isfinite(vec)):
                raise ValueError("vector must be finite")
            vec.setflags(write=False)
            self.vector = vec
        else:
            self.vector = None

    def _wrong(self, y, rng):
        if self.vector is None:
            v = rng.uniform(-self.M, self.M, size=y.shape[1])
        elif self.vector.size == 1:
            v = np.full(y.shape[1], float(self.vector.ravel()[0]))
        elif self.vector.size == y.shape[1]:
            v = self.vector.ravel()
        else:
            raise ValueError(f"vector has {self.vector.size} numbers but a worker's output has {y.shape[1]}")
        return np.broadcast_to(v, y.shape).copy()

    def _params(self) -> str:
        return f", M={self.M}" if self.vector is None else f", vector of {self.vector.size}"


class RelabelClasses(AdversaryModel):
    """Adversaries relabel the classes: each returns its true class vectors
    (the last ``classes`` entries of its output, repeatedly) rolled by r, a
    shift drawn uniformly from 1 .. classes - 1 per adversary per round, so
    class c's score is reported as class (c + r) mod classes. Every class
    moves, and a probability vector stays a probability vector: a wrong
    answer that no validity check (``valid='simplex'``) can reject."""

    def __init__(self, E=None, classes: int = 10, workers=None):
        super().__init__(E, workers)
        self.classes = as_int(classes, "classes", 2)

    def _wrong(self, y, rng):
        C = self.classes
        if y.shape[1] % C:
            raise ValueError(f"a worker's output has {y.shape[1]} numbers, not a multiple of classes = {C}")
        r = rng.integers(1, C, size=y.shape[0])
        V = y.reshape(y.shape[0], -1, C)
        idx = (np.arange(C)[None, :] - r[:, None]) % C          # out[c] = in[c - r]
        return np.take_along_axis(V, idx[:, None, :], axis=2).reshape(y.shape)

    def _params(self) -> str:
        return f", classes={self.classes}"


def as_adversary_model(obj, name: str = "adversaries") -> Optional[AdversaryModel]:
    """None, or an AdversaryModel (TypeError naming the value otherwise)."""
    if obj is None or isinstance(obj, AdversaryModel):
        return obj
    raise TypeError(f"{name} must be None or a letcc.adversaries model (SignFlip(E), UniformBounded(E, M), ...), "
                    f"got {obj!r}")
