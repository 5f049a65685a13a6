"""User-facing errors: the CLI prints their message (no traceback) and exits with code 2."""


class DsdrError(Exception):
    """An error caused by bad input or configuration; the message names the file/line/field."""


def os_error_line(exc: OSError) -> str:
    """An OS error as one line ``FILE: reason`` (``[Errno 28] ...`` and its traceback are noise to a user)."""
    where = f"{exc.filename}: " if exc.filename is not None else ""
    if exc.filename2 is not None:
        where = f"{exc.filename} -> {exc.filename2}: "
    return f"{where}{exc.strerror or type(exc).__name__}"


def warn(message: str) -> None:
    """Print a one-line ``warning: ...`` on stderr (an accepted oddity that changes a number)."""
    import sys

    print(f"warning: {message}", file=sys.stderr)
