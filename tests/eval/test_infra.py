"""Smoke tests of the shared fixtures (real vllm serve on loopback)."""

import json
import urllib.request

import pytest


@pytest.mark.vllm
def test_vllm_server_completes(vllm_server):
    base_url, model = vllm_server
    body = json.dumps({"model": model, "prompt": "1+1=", "max_tokens": 4, "temperature": 0}).encode()
    req = urllib.request.Request(base_url + "/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        out = json.load(resp)
    assert out["choices"][0]["text"] != "" or out["choices"][0]["finish_reason"] in ("length", "stop")


def test_stopping_a_server_also_ends_the_processes_it_started(tmp_path):
    """A server's own children (vllm serve's EngineCore and worker) are ended with it: they used to
    outlive a fixture that gave up, reparented to init, holding GBs of memory."""
    import os
    import subprocess
    import sys
    import time

    from helpers.net_helpers import stop_process

    child_pid_file = tmp_path / "child.pid"
    parent = ("import subprocess, sys, time; "
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
              f"open({str(child_pid_file)!r}, 'w').write(str(child.pid)); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", parent], start_new_session=True)
    deadline = time.monotonic() + 30
    while not (child_pid_file.exists() and child_pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child_pid = int(child_pid_file.read_text())
    stop_process(proc, timeout_s=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child_pid, 9)
        raise AssertionError("the server's child outlived stop_process")
