# Type stub of the compiled core (csrc/bindings*.cpp, pybind11). Its functions
# are reached through the typed Python layers (letcc.splines, letcc.codes); to a
# type checker every attribute here is Any.
from typing import Any

def __getattr__(name: str) -> Any: ...
