"""Type information ships with letcc: py.typed, stubs of the compiled modules,
and annotations on the public API (CI runs mypy on the public modules: `mypy`
from the repository root, configured in pyproject.toml)."""
import inspect
from pathlib import Path

import pytest

import letcc

PKG = Path(letcc.__file__).resolve().parent


def test_the_package_is_marked_typed_and_its_compiled_modules_have_stubs():
    assert (PKG / "py.typed").is_file()
    for stub in ("_core.pyi", "_cuda.pyi"):
        assert (PKG / stub).is_file(), stub


def _missing(func):
    """Parameters (and the return) without an annotation."""
    sig = inspect.signature(func)
    miss = [p.name for p in sig.parameters.values()
            if p.annotation is inspect.Parameter.empty and p.name not in ("self", "cls")]
    if sig.return_annotation is inspect.Signature.empty:
        miss.append("return")
    return miss


def _public_api():
    from letcc.codes import BACC, LeTCC, Replication, Uncoded
    from letcc.policy import LamPolicy
    from letcc.runtime import CodedInference
    from letcc.tune import tune

    ours = {
        "SplineSmoother.__init__": letcc.SplineSmoother.__init__,
        "SplineSmoother.__call__": letcc.SplineSmoother.__call__,
        "SmoothingSpline.__init__": letcc.SmoothingSpline.__init__,
        "SmoothingSpline.__call__": letcc.SmoothingSpline.__call__,
        "select_lam_gcv": letcc.select_lam_gcv,
        "tune": tune,
        "LamPolicy.__init__": LamPolicy.__init__,
        "LamPolicy.calibrate": LamPolicy.calibrate,
        "LamPolicy.save": LamPolicy.save,
        "LamPolicy.load": LamPolicy.load,
        "LamPolicy.code": LamPolicy.code,
        "LamPolicy.lam_dec": LamPolicy.lam_dec,
        **{name: getattr(letcc, name) for name in ("set_num_threads", "get_num_threads", "kernel_isa",
                                                   "set_kernel_isa", "plan_kernel", "set_plan_kernel")},
    }
    ours.update({f"{cls.__name__}.{m}": getattr(cls, m)
                 for cls in (LeTCC, BACC, Uncoded, Replication) for m in ("__init__", "encode", "decode")})
    ours.update({"CodedInference.__init__": CodedInference.__init__,
                 "CodedInference.__call__": CodedInference.__call__})
    return ours


_OURS = _public_api()


@pytest.mark.parametrize("name", sorted(_OURS))
def test_public_api_is_annotated(name):
    assert _missing(_OURS[name]) == [], name


def test_lazy_exports_are_visible_to_type_checkers():
    # letcc/__init__.py names every lazy export under TYPE_CHECKING, so that
    # `letcc.LeTCC` has a type for mypy / IDEs and not just at run time
    src = (PKG / "__init__.py").read_text()
    block = src.split("if TYPE_CHECKING:", 1)[1].split("\n\n", 1)[0]
    for name in letcc._LAZY_ATTRS:
        assert name in block, name
