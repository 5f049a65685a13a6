"""User-facing errors: the CLI prints their message (no traceback) and exits with code 2."""


class DsdrError(Exception):
    """An error caused by bad input or configuration; the message names the file/line/field."""


def warn(message: str) -> None:
    """Print a one-line ``warning: ...`` on stderr (an accepted oddity that changes a number)."""
    import sys

    print(f"warning: {message}", file=sys.stderr)
