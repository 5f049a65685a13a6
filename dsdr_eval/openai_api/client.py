"""A small, robust client for any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, llama.cpp...).

Evaluation and judging send thousands of independent requests. The official ``openai`` SDK
retries them (408/409/429/5xx, timeouts, connection errors, ``Retry-After``; ``max_retries``);
this module adds only what the SDK has no notion of (``dsdr_eval.openai_api.sdk``):

* several base URLs (a fleet of ``vllm serve`` nodes is the scale-out path): first attempts are
  spread round-robin, and every retry moves on to the next URL, so one dead node does not stall a run;
* malformed 200 replies (a body that is not a completion object) are retried like a 502;
* the delay between attempts: exponential backoff + jitter (``backoff_base_s``, ``backoff_max_s``),
  a server's Retry-After honoured up to ``max_retry_after_s``;
* bounded concurrency (a thread pool of ``max_concurrency`` workers), results in request order,
  an ``on_result(index, result)`` callback fired as each request finishes (callers append to
  disk and survive a crash), and an exact attempt count per request;
* the API key is read from an environment variable (``EMPTY`` when unset, which local servers
  accept), handed to the ``openai`` client only, and redacted from every error message this
  module produces. It is never written anywhere.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from dsdr_eval.errors import DsdrError

DUMMY_API_KEY = "EMPTY"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class EndpointConfig:
    """Where and how to send requests. Holds the *name* of the key's env var, never the key."""

    base_urls: tuple[str, ...]
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = 8
    max_retries: int = 5          # retries after the first attempt (attempts <= max_retries + 1)
    timeout_s: float = 120.0      # per attempt
    backoff_base_s: float = 0.5   # delay before retry r (1-based) ~ base * 2**(r-1), jittered
    backoff_max_s: float = 30.0   # cap on one backoff delay
    max_retry_after_s: float = 120.0  # cap on a server's Retry-After (a hostile value cannot hang us)

    def __post_init__(self) -> None:
        urls = (self.base_urls,) if isinstance(self.base_urls, str) else tuple(self.base_urls)
        urls = tuple(u.strip().rstrip("/") for u in urls if u and u.strip())
        object.__setattr__(self, "base_urls", urls)
        if not urls:
            raise DsdrError("endpoint: at least one base URL is required (e.g. http://127.0.0.1:8000/v1)")
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise DsdrError(f"endpoint: base URL {url!r} must start with http:// or https://")
        if not self.model:
            raise DsdrError("endpoint: a model name is required")
        if self.max_concurrency < 1:
            raise DsdrError(f"endpoint: max_concurrency must be >= 1, got {self.max_concurrency}")
        if self.max_retries < 0:
            raise DsdrError(f"endpoint: max_retries must be >= 0, got {self.max_retries}")
        if self.timeout_s <= 0:
            raise DsdrError(f"endpoint: timeout_s must be > 0, got {self.timeout_s}")
        if self.backoff_base_s < 0 or self.backoff_max_s < 0:
            raise DsdrError("endpoint: backoff delays must be >= 0")

    def to_config(self) -> dict[str, Any]:
        """JSON-safe settings for config.json (the key's env var name only, never its value)."""
        return {
            "base_urls": list(self.base_urls), "model": self.model, "api_key_env": self.api_key_env,
            "max_concurrency": self.max_concurrency, "max_retries": self.max_retries,
            "timeout_s": self.timeout_s, "backoff_base_s": self.backoff_base_s,
            "backoff_max_s": self.backoff_max_s, "max_retry_after_s": self.max_retry_after_s,
        }


def split_base_urls(values: Sequence[str] | str | None) -> tuple[str, ...]:
    """Flatten repeatable and/or comma-separated ``--base-url`` values into a tuple."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def resolve_base_urls(values: Sequence[str] | str | None) -> tuple[str, ...]:
    """``split_base_urls(values)``, else ``$OPENAI_BASE_URL``, else OpenAI's own API."""
    return split_base_urls(values) or (os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,)


@dataclass
class Result:
    """The outcome of one request after all attempts.

    ``response`` is the parsed ``openai`` object (ChatCompletion / Completion) when ``ok``.
    ``error`` is a one-line description with the key redacted; ``error_kind`` is a stable
    category for counting (``http_429``, ``http_500``, ``timeout``, ``connection``,
    ``invalid_response``, ``http_400``...). ``base_url`` is the URL of the last attempt."""

    ok: bool
    response: Any | None
    error: str | None
    attempts: int
    base_url: str
    error_kind: str | None = None
    status_code: int | None = None
    latency_s: float = 0.0


class OpenAICompatClient:
    """Concurrent requests to one model served at one or several base URLs, retried by the SDK."""

    def __init__(self, config: EndpointConfig, *, sleep: Callable[[float], None] = time.sleep,
                 seed: int | None = None):
        import openai  # lazy: keeps `dsdr-eval --help` fast

        from dsdr_eval.openai_api.sdk import build_client

        self.config = config
        self._openai = openai
        # Read once; kept only inside the openai client and for redaction. Never logged/written.
        self._secret = os.environ.get(config.api_key_env) or DUMMY_API_KEY
        self._client, self._http = build_client(config, self._secret, sleep=sleep, seed=seed)
        self._round_robin = itertools.count()
        self._rr_lock = threading.Lock()

    def __repr__(self) -> str:  # never show the key
        return f"OpenAICompatClient(model={self.config.model!r}, base_urls={list(self.config.base_urls)!r})"

    # ------------------------------------------------------------------ public API
    def chat_many(self, requests: list[dict], *, progress: bool | None = None,
                  on_result: Callable[[int, Result], None] | None = None,
                  description: str = "chat requests") -> list[Result]:
        """Send ``chat.completions.create(model=config.model, **request)`` for each request."""
        return self._run_many("chat", requests, progress=progress, on_result=on_result, description=description)

    def complete_many(self, requests: list[dict], *, progress: bool | None = None,
                      on_result: Callable[[int, Result], None] | None = None,
                      description: str = "completion requests") -> list[Result]:
        """Send ``completions.create(model=config.model, **request)`` for each request."""
        return self._run_many("completion", requests, progress=progress, on_result=on_result,
                              description=description)

    def chat(self, request: dict) -> Result:
        """One chat request with the same retry policy (no thread pool)."""
        return self._request("chat", request, self._next_start_index())

    def complete(self, request: dict) -> Result:
        return self._request("completion", request, self._next_start_index())

    def retry_after_s(self, headers: Any) -> float | None:
        """A server's Retry-After in seconds (as the retry policy reads it), None if absent."""
        return self._client.retry_after_s(headers)

    def redact(self, text: str) -> str:
        """Remove the API key from any text (error bodies of hostile/misconfigured servers echo it)."""
        if self._secret and self._secret != DUMMY_API_KEY and len(self._secret) >= 4:
            text = text.replace(self._secret, "***")
        return text

    def close(self) -> None:
        try:
            self._client.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass

    def __enter__(self) -> "OpenAICompatClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _next_start_index(self) -> int:
        with self._rr_lock:
            return next(self._round_robin)

    def _run_many(self, kind: str, requests: list[dict], *, progress: bool | None,
                  on_result: Callable[[int, Result], None] | None, description: str) -> list[Result]:
        from dsdr_eval.progress import progress_bar

        for i, request in enumerate(requests):
            if not isinstance(request, dict):
                raise DsdrError(f"request {i}: expected a dict of create() arguments, got {type(request).__name__}")
            if "model" in request:
                raise DsdrError(f"request {i}: do not pass 'model'; it comes from the endpoint config")
        results: list[Result | None] = [None] * len(requests)
        if not requests:
            return []
        show = progress if progress is not None else (len(requests) > 1 and sys.stderr.isatty())
        # The start index fixes the round-robin URL of each request's first attempt.
        starts = [self._next_start_index() for _ in requests]
        workers = min(self.config.max_concurrency, len(requests))
        callback_lock = threading.Lock()
        with progress_bar(len(requests), description, unit="req", enabled=bool(show)) as bar, \
                ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openai-compat") as pool:
            futures = {pool.submit(self._request, kind, request, starts[i]): i for i, request in enumerate(requests)}
            try:
                for future in as_completed(futures):
                    index = futures[future]
                    result = future.result()  # _request never raises for request errors
                    results[index] = result
                    if on_result is not None:
                        with callback_lock:
                            on_result(index, result)
                    bar.advance()
            except BaseException:
                # The caller's callback failed (e.g. disk full) or Ctrl-C: do not send the rest.
                for future in futures:
                    future.cancel()
                raise
        return results  # type: ignore[return-value]  # every slot was filled above

    def _request(self, kind: str, request: dict, start_index: int) -> Result:
        """One request, every attempt included (the SDK's retry loop; failover in the HTTP client)."""
        openai = self._openai
        self._http.begin(start_index)
        attempts = self._http.attempt_log
        t0 = time.monotonic()
        create = self._client.chat.completions.create if kind == "chat" else self._client.completions.create
        kind_of_error, message, status = "", "", None
        try:
            response = create(model=self.config.model, **request)
        except openai.APITimeoutError:  # subclass of APIConnectionError: check first
            kind_of_error, message = "timeout", f"timed out after {self.config.timeout_s}s ({attempts.base_url})"
        except openai.APIConnectionError as exc:
            kind_of_error, message = "connection", f"connection error ({attempts.base_url}): {exc}"
        except openai.APIStatusError as exc:
            invalid = self._http.invalid_reply(exc.response)
            if invalid is not None:
                kind_of_error, message = "invalid_response", f"invalid response ({attempts.base_url}): {invalid}"
            else:
                status = int(exc.status_code)
                kind_of_error, message = f"http_{status}", f"HTTP {status} ({attempts.base_url}): {exc}"
        except (openai.APIResponseValidationError, ValueError, TypeError) as exc:
            # A 200 the SDK cannot turn into the promised object (not retried: it would not heal).
            kind_of_error = "invalid_response"
            message = f"invalid response ({attempts.base_url}): {type(exc).__name__}: {exc}"
        latency = time.monotonic() - t0
        if not kind_of_error:
            return Result(ok=True, response=response, error=None, attempts=attempts.attempts,
                          base_url=attempts.base_url, latency_s=latency)
        return Result(ok=False, response=None, error=self._clip(message), attempts=attempts.attempts,
                      base_url=attempts.base_url, error_kind=kind_of_error, status_code=status, latency_s=latency)

    def _clip(self, message: str, limit: int = 500) -> str:
        message = self.redact(" ".join(str(message).split()))
        return message if len(message) <= limit else message[: limit - 3] + "..."


def response_text(response: Any, index: int = 0) -> str | None:
    """The text of choice ``index`` of a chat or text completion (None when absent)."""
    try:
        choice = response.choices[index]
    except (AttributeError, IndexError, TypeError):
        return None
    message = getattr(choice, "message", None)
    if message is not None:
        content = getattr(message, "content", None)
        return content if isinstance(content, str) else None
    text = getattr(choice, "text", None)
    return text if isinstance(text, str) else None


def response_reasoning(response: Any, index: int = 0) -> str | None:
    """The separate reasoning of choice ``index`` that a server's reasoning parser returned: the
    message's ``reasoning_content`` (vLLM, DeepSeek, SGLang) or ``reasoning`` (newer vLLM, OpenRouter,
    Ollama); None when the server sent neither (the reasoning, if any, is then inline in the text)."""
    try:
        choice = response.choices[index]
    except (AttributeError, IndexError, TypeError):
        return None
    message = getattr(choice, "message", None)
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None) if message is not None else None
        if isinstance(value, str):
            return value
    return None


def response_finish_reason(response: Any, index: int = 0) -> str | None:
    try:
        reason = response.choices[index].finish_reason
    except (AttributeError, IndexError, TypeError):
        return None
    return reason if isinstance(reason, str) else None


def response_usage(response: Any) -> dict[str, int | None]:
    usage = getattr(response, "usage", None)
    counts = {
        "prompt_tokens": getattr(usage, "prompt_tokens", None),
        "completion_tokens": getattr(usage, "completion_tokens", None),  # reasoning tokens included
    }
    reasoning = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None)
    if reasoning is not None:  # only a reasoning model's server sends it
        counts["reasoning_tokens"] = reasoning
    return counts
