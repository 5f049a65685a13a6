"""``dsdr-dashboard [--runs DIR] [--port N] [--host 127.0.0.1]``: start the Streamlit app headless.

Equivalent to ``streamlit run dashboards/app.py --server.address 127.0.0.1 --server.headless true
-- --runs DIR``. Binds to loopback unless --host says otherwise (the app shows local files).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from dsdr_eval.options.checks import nonempty, port
from dsdr_eval.options.parser import OneLineParser, add_options
from dsdr_eval.options.schema import FLAG, Option

APP = Path(__file__).resolve().parent / "app.py"


def build_command(args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(APP),
            "--server.address", args.host, "--server.port", str(args.port), "--server.headless", "true",
            "--browser.gatherUsageStats", "false", "--", "--runs", str(Path(args.runs).resolve())]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineParser(prog="dsdr-dashboard", description=(
        "Start the dsdr Streamlit dashboard (training dynamics, evaluation, samples) headless, bound to "
        "127.0.0.1 by default. It only reads the runs directory."))
    add_options(parser, (
        Option("runs", "--runs", default=os.environ.get("DSDR_RUNS_DIR", "runs"),
               help="directory holding run directories (default: $DSDR_RUNS_DIR or ./runs)"),
        Option("port", "--port", check=port, default=8501, help="port, 1-65535 (default 8501)"),
        Option("host", "--host", default="127.0.0.1", check=nonempty,
               help="address to bind (default 127.0.0.1; anything else exposes your runs to the network)"),
        Option("print_command", "--print-command", kind=FLAG, default=False,
               help="print the streamlit command and exit"),
    ))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = build_command(args)
    if args.print_command:
        print(" ".join(command))
        return 0
    if not Path(args.runs).is_dir():
        print(f"note: runs directory {args.runs} does not exist yet; the dashboard will say how to make a run",
              file=sys.stderr)
    print(f"dsdr dashboard on http://{args.host}:{args.port} (runs: {Path(args.runs).resolve()})", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    # streamlit replaces this process (same PID): a SIGTERM or Ctrl-C sent to the PID the user started
    # reaches the server itself, which stops serving; a child would be left serving, re-parented to init
    if hasattr(os, "execv"):
        os.execv(command[0], command)
    try:  # no exec on this platform
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
