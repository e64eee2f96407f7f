"""Preloaded first in the fork server: give it the parent's sys.path.

Python 3.11's fork server is handed the parent's sys.path but never applies it
(its workers get it later, one by one, while unpickling their task), so a
preloaded module that is not on the default path (a model defined next to the
user's script, a test module) would be imported again in every worker. The
parent puts its sys.path in LETCC_FORKSERVER_SYS_PATH while starting the server.
"""
import os
import sys

_paths = os.environ.get("LETCC_FORKSERVER_SYS_PATH")
if _paths:
    parent = _paths.split(os.pathsep)
    sys.path[:] = parent + [p for p in sys.path if p not in parent]
