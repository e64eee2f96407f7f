# Type stub of the compiled CUDA module (csrc/cuda, pybind11; built only where nvcc is found). Its functions
# are reached through the typed Python layers (letcc.splines, letcc.codes); to a
# type checker every attribute here is Any.
from typing import Any

def __getattr__(name: str) -> Any: ...
