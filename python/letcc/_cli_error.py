"""``CLIError``: the error every ``letcc`` command raises for its user (letcc.cli
and the commands it delegates to, such as letcc.bench._cli, import it from here)."""

__all__ = ["CLIError"]


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""
