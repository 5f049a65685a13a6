"""OpenAICompatClient against the fault-injecting server (and the real vllm server, marked)."""

from __future__ import annotations

import logging
import secrets
import time

import pytest
from helpers.fault_server import FaultServer

from dsdr_eval.errors import DsdrError
from dsdr_eval.openai_api.client import (
    EndpointConfig,
    OpenAICompatClient,
    Result,
    response_text,
    split_base_urls,
)

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _client(*urls: str, model: str = "fault-model", sleeps: list[float] | None = None, **kw) -> OpenAICompatClient:
    kw.setdefault("timeout_s", 0.5)
    kw.setdefault("backoff_base_s", 0.001)
    sleep = (lambda s: sleeps.append(s)) if sleeps is not None else (lambda s: None)
    return OpenAICompatClient(EndpointConfig(base_urls=tuple(urls), model=model, **kw), sleep=sleep, seed=0)


def test_retries_each_fault_kind_then_succeeds():
    with FaultServer(script=["429", "500", "timeout", "garbage", "garbage_json", "disconnect", "503", "ok"],
                     reply="fine", delay_s=2.0) as server:
        result = _client(server.base_url, max_retries=7).chat(CHAT)
        assert result.ok, result.error
        assert result.attempts == 8
        assert response_text(result.response) == "fine"
        assert server.behaviours() == ["429", "500", "timeout", "garbage", "garbage_json", "disconnect", "503", "ok"]


def test_exhausted_retries_is_a_counted_failure():
    with FaultServer(default="500") as server:
        result = _client(server.base_url, max_retries=3).chat(CHAT)
        assert not result.ok and result.response is None
        assert result.attempts == 4 and len(server.completion_requests()) == 4
        assert result.error_kind == "http_500" and result.status_code == 500


@pytest.mark.parametrize("status", ["400", "401", "404", "422"])
def test_no_retry_on_client_errors(status):
    with FaultServer(script=[status], default="ok") as server:
        result = _client(server.base_url, max_retries=5).chat(CHAT)
        assert not result.ok and result.attempts == 1
        assert result.error_kind == f"http_{status}"
        assert len(server.completion_requests()) == 1


@pytest.mark.parametrize("status", ["408", "409"])
def test_retry_on_retryable_4xx(status):
    with FaultServer(script=[status], default="ok") as server:
        result = _client(server.base_url).chat(CHAT)
        assert result.ok and result.attempts == 2


def test_timeout_then_timeout_exhausts():
    with FaultServer(default="timeout", delay_s=3.0) as server:
        result = _client(server.base_url, max_retries=1, timeout_s=0.3).complete({"prompt": "x"})
        assert not result.ok and result.error_kind == "timeout" and result.attempts == 2


@pytest.mark.parametrize("behaviour", ["trickle", "trickle_head"])
def test_the_timeout_bounds_each_whole_attempt_against_a_trickling_server(behaviour):
    """Issue 24: one byte every 0.1 s never trips a per-read timeout of 0.6 s (the body takes
    ~30 s); each attempt must end at its 0.6 s, whether the body or the headers trickle."""
    with FaultServer(default=behaviour, trickle_s=0.1) as server:
        client = _client(server.base_url, max_retries=1, timeout_s=0.6)
        started = time.monotonic()
        result = client.complete({"prompt": "x"})
        elapsed = time.monotonic() - started
    assert not result.ok and result.error_kind == "timeout" and result.attempts == 2
    assert elapsed < 2 * 0.6 + 1.0, elapsed


def test_retry_after_is_honoured_and_capped():
    sleeps: list[float] = []
    with FaultServer(script=["429", "429"], default="ok", retry_after="7") as server:
        result = _client(server.base_url, sleeps=sleeps, backoff_base_s=0.01, max_retry_after_s=60).chat(CHAT)
    assert result.ok and result.attempts == 3
    assert sleeps == [7.0, 7.0]  # the server's Retry-After beats the tiny backoff
    sleeps.clear()
    with FaultServer(script=["429"], default="ok", retry_after="100000") as server:
        result = _client(server.base_url, sleeps=sleeps, max_retry_after_s=2.0).chat(CHAT)
    assert result.ok and sleeps == [2.0]  # a hostile Retry-After cannot stall the run


def test_parse_retry_after_forms():
    _parse_retry_after = _client("http://127.0.0.1:9/v1").retry_after_s  # the SDK's parser, never negative
    assert _parse_retry_after({"retry-after": "3"}) == 3.0
    assert _parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert _parse_retry_after({"retry-after": "soon"}) is None
    assert _parse_retry_after({}) is None
    assert _parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past


def test_exponential_backoff_with_jitter_bounds():
    sleeps: list[float] = []
    with FaultServer(default="500") as server:
        _client(server.base_url, sleeps=sleeps, max_retries=6, backoff_base_s=1.0, backoff_max_s=8.0).chat(CHAT)
    assert len(sleeps) == 6
    caps = [1, 2, 4, 8, 8, 8]
    for delay, cap in zip(sleeps, caps):
        assert cap / 2 <= delay <= cap, (sleeps, caps)


def test_order_callback_and_bounded_concurrency():
    seen: list[tuple[int, Result]] = []
    requests = [{"prompt": f"p{i}", "max_tokens": 2} for i in range(12)]
    with FaultServer(default="timeout", delay_s=0.15, reply=lambda body: body["prompt"].upper()) as server:
        client = _client(server.base_url, max_concurrency=3, timeout_s=5)
        results = client.complete_many(requests, on_result=lambda i, r: seen.append((i, r)))
        assert 2 <= server.max_in_flight <= 3
    assert [response_text(r.response) for r in results] == [f"P{i}" for i in range(12)]
    assert sorted(i for i, _ in seen) == list(range(12))
    assert all(results[i] is r for i, r in seen)


def test_requests_spread_over_base_urls_and_failover():
    with FaultServer(reply="a") as a, FaultServer(reply="b") as b:
        results = _client(a.base_url, b.base_url).chat_many([CHAT] * 6, progress=False)
        assert all(r.ok for r in results)
        assert len(a.completion_requests()) == 3 and len(b.completion_requests()) == 3
    # one node down (always 503): every request still succeeds by retrying on the other node
    with FaultServer(default="503") as dead, FaultServer(reply="alive") as alive:
        results = _client(dead.base_url, alive.base_url, max_retries=1).chat_many([CHAT] * 6)
        assert all(r.ok and response_text(r.response) == "alive" for r in results)
        assert all(r.base_url == alive.base_url for r in results)
        assert len(dead.completion_requests()) == 3


def test_api_key_sent_but_never_leaked(monkeypatch, caplog):
    key = "sk-test-" + secrets.token_hex(16)
    monkeypatch.setenv("DSDR_TEST_KEY", key)
    caplog.set_level(logging.DEBUG)  # the openai/httpx loggers included
    with FaultServer(script=["429", "echo_auth"], default="ok") as server:
        client = _client(server.base_url, api_key_env="DSDR_TEST_KEY")
        result = client.chat(CHAT)
        assert server.requests[0].headers["authorization"] == f"Bearer {key}"
    assert not result.ok and result.error_kind == "http_400"
    assert "Bearer ***" in result.error and key not in result.error
    assert key not in caplog.text
    assert key not in repr(client) and key not in repr(client.config) and key not in str(client.config.to_config())


def test_dummy_key_when_env_unset(monkeypatch):
    monkeypatch.delenv("DSDR_UNSET_KEY", raising=False)
    with FaultServer() as server:
        assert _client(server.base_url, api_key_env="DSDR_UNSET_KEY").chat(CHAT).ok
        assert server.requests[0].headers["authorization"] == "Bearer EMPTY"


def test_connection_refused_is_retried_then_counted():
    with FaultServer() as server:
        url = server.base_url  # the port is closed after the block
    result = _client(url, max_retries=2).chat(CHAT)
    assert not result.ok and result.error_kind == "connection" and result.attempts == 3


def test_config_validation_and_url_splitting():
    assert split_base_urls(["http://a/v1,http://b/v1", " http://c/v1 "]) == ("http://a/v1", "http://b/v1", "http://c/v1")
    assert EndpointConfig(base_urls=("http://a/v1/",), model="m").base_urls == ("http://a/v1",)
    with pytest.raises(DsdrError, match="http"):
        EndpointConfig(base_urls=("localhost:8000",), model="m")
    with pytest.raises(DsdrError, match="base URL"):
        EndpointConfig(base_urls=(), model="m")
    with pytest.raises(DsdrError, match="max_concurrency"):
        EndpointConfig(base_urls=("http://a",), model="m", max_concurrency=0)
    with FaultServer() as server:
        with pytest.raises(DsdrError, match="model"):
            _client(server.base_url).chat_many([{"model": "x", **CHAT}])


@pytest.mark.vllm
def test_real_vllm_server_chat_and_completion(vllm_server):
    base_url, model = vllm_server
    client = _client(base_url, model=model, timeout_s=60, max_retries=2)
    chats = client.chat_many([{"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8,
                               "temperature": 0.0}] * 2)
    comps = client.complete_many([{"prompt": "1 + 1 =", "max_tokens": 4, "temperature": 0.0}])
    assert all(r.ok for r in chats + comps), [r.error for r in chats + comps]
    assert all(isinstance(response_text(r.response), str) for r in chats + comps)


def test_failing_callback_stops_sending_the_rest():
    def explode(index, result):
        raise OSError("disk full")

    with FaultServer(default="timeout", delay_s=0.05) as server:
        client = _client(server.base_url, max_concurrency=1, timeout_s=5)
        with pytest.raises(OSError, match="disk full"):
            client.complete_many([{"prompt": str(i)} for i in range(20)], on_result=explode)
        assert len(server.completion_requests()) <= 2


def test_the_sdk_does_the_retrying_and_a_retry_moves_to_the_next_url():
    # The openai SDK's own retry loop sends every attempt (it numbers them in x-stainless-retry-count);
    # this client only moves each retry to the next base URL and turns a malformed 200 into a retry.
    with FaultServer(script=["500", "garbage"], default="ok") as a, FaultServer(script=["429"], default="ok") as b:
        result = _client(a.base_url, b.base_url, max_retries=4).chat(CHAT)
        sent = sorted(a.completion_requests() + b.completion_requests(), key=lambda r: r.time)
        assert result.ok and result.attempts == 4 and result.base_url == b.base_url
        assert [r.headers.get("x-stainless-retry-count") for r in sent] == ["0", "1", "2", "3"]
        assert [r.behaviour for r in sent] == ["500", "429", "garbage", "ok"]
        assert len(a.completion_requests()) == 2 and len(b.completion_requests()) == 2
    with FaultServer(default="garbage_json") as server:
        result = _client(server.base_url, max_retries=2).chat(CHAT)
        assert not result.ok and result.attempts == 3 and result.error_kind == "invalid_response"
        assert result.status_code is None and "no choices" in result.error
