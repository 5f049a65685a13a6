"""Loopback helpers shared by tests that start servers (vllm serve, streamlit, torchrun)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_healthy(proc: subprocess.Popen, url: str, log: Path, *, timeout_s: float, what: str,
                       poll_s: float = 1.0) -> None:
    """Poll ``url`` until it answers 200; fail the test with the log's tail if ``proc`` exits or time runs out."""
    deadline = time.time() + timeout_s
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.time() > deadline:
            pytest.fail(f"{what} did not become healthy in {timeout_s:.0f} s:\n{log.read_text()[-4000:]}")
        time.sleep(poll_s)


def stop_process(proc: subprocess.Popen, *, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``; then SIGKILL what is left of
    its process group. Servers are started with ``start_new_session=True``: a `vllm serve` that
    never became healthy otherwise leaves its EngineCore and worker running, reparented to init."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _kill_group(proc.pid)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group has already exited
