"""A small, robust client for any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, llama.cpp...).

Why not just ``openai.OpenAI``: evaluation and judging send thousands of independent requests.
This wrapper adds what those need on top of the official ``openai`` package:

* several base URLs (a fleet of ``vllm serve`` nodes is the scale-out path): first attempts are
  spread round-robin, and a retry moves on to the next URL so one dead node does not stall a run;
* bounded concurrency (a thread pool of ``max_concurrency`` workers);
* retries with exponential backoff + jitter on 408/409/429/5xx, timeouts, connection errors and
  malformed 200 bodies, honouring ``Retry-After``; no retry on other 4xx (they will not heal);
* results in request order, plus an ``on_result(index, result)`` callback fired as each request
  finishes so callers can append to disk and survive a crash;
* the API key is read from an environment variable (``EMPTY`` when unset, which local servers
  accept), handed to the ``openai`` client only, and redacted from every error message this
  module produces or logs. It is never written anywhere.

The ``openai`` client's own retries are disabled (``max_retries=0``) so the retry policy is
exactly the one documented here and the attempt count is exact.
"""

from __future__ import annotations

import email.utils
import itertools
import logging
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from dsdr_eval.errors import DsdrError

log = logging.getLogger(__name__)

DUMMY_API_KEY = "EMPTY"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
# HTTP statuses worth retrying: request timeout, conflict (transient lock), rate limit, server errors.
RETRYABLE_4XX = frozenset({408, 409, 429})


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


@dataclass
class _AttemptFailure(Exception):
    kind: str
    message: str
    retryable: bool
    status_code: int | None = None
    retry_after_s: float | None = None


def _parse_retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` / ``Retry-After`` (seconds or HTTP date), None if absent."""
    if headers is None:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return max(0.0, float(millis) / 1000.0)
        value = headers.get("retry-after")
    except Exception:  # noqa: BLE001 - headers of a hostile server: ignore, fall back to backoff
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class OpenAICompatClient:
    """Concurrent, retrying requests to one model served at one or several base URLs."""

    def __init__(self, config: EndpointConfig, *, sleep: Callable[[float], None] = time.sleep,
                 seed: int | None = None):
        import openai  # lazy: keeps `dsdr-eval --help` fast

        self.config = config
        self._openai = openai
        # Read once; kept only inside the openai clients and for redaction. Never logged/written.
        self._secret = os.environ.get(config.api_key_env) or DUMMY_API_KEY
        self._clients = {
            url: openai.OpenAI(base_url=url, api_key=self._secret, max_retries=0, timeout=config.timeout_s)
            for url in config.base_urls
        }
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
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
        return self._request_with_retries("chat", request, self._next_start_index())

    def complete(self, request: dict) -> Result:
        return self._request_with_retries("completion", request, self._next_start_index())

    def redact(self, text: str) -> str:
        """Remove the API key from any text (error bodies of hostile/misconfigured servers echo it)."""
        if self._secret and self._secret != DUMMY_API_KEY and len(self._secret) >= 4:
            text = text.replace(self._secret, "***")
        return text

    def close(self) -> None:
        for client in self._clients.values():
            try:
                client.close()
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
        for i, request in enumerate(requests):
            if not isinstance(request, dict):
                raise DsdrError(f"request {i}: expected a dict of create() arguments, got {type(request).__name__}")
            if "model" in request:
                raise DsdrError(f"request {i}: do not pass 'model'; it comes from the endpoint config")
        results: list[Result | None] = [None] * len(requests)
        if not requests:
            return []
        show = progress if progress is not None else (len(requests) > 1 and sys.stderr.isatty())
        bar = None
        if show:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(requests), desc=description, unit="req")
        # The start index fixes the round-robin URL of each request's first attempt.
        starts = [self._next_start_index() for _ in requests]
        workers = min(self.config.max_concurrency, len(requests))
        callback_lock = threading.Lock()
        try:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openai-compat") as pool:
                futures = {pool.submit(self._request_with_retries, kind, request, starts[i]): i
                           for i, request in enumerate(requests)}
                try:
                    for future in as_completed(futures):
                        index = futures[future]
                        result = future.result()  # _request_with_retries never raises for request errors
                        results[index] = result
                        if on_result is not None:
                            with callback_lock:
                                on_result(index, result)
                        if bar is not None:
                            bar.update(1)
                except BaseException:
                    # The caller's callback failed (e.g. disk full) or Ctrl-C: do not send the rest.
                    for future in futures:
                        future.cancel()
                    raise
        finally:
            if bar is not None:
                bar.close()
        return results  # type: ignore[return-value]  # every slot was filled above

    def _backoff_delay(self, retry_number: int, retry_after_s: float | None) -> float:
        """Exponential backoff with 'equal jitter'; a server's Retry-After is a lower bound."""
        cap = min(self.config.backoff_max_s, self.config.backoff_base_s * (2 ** (retry_number - 1)))
        with self._rng_lock:
            delay = cap / 2 + self._rng.uniform(0, cap / 2)
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, self.config.max_retry_after_s))
        return delay

    def _request_with_retries(self, kind: str, request: dict, start_index: int) -> Result:
        urls = self.config.base_urls
        t0 = time.monotonic()
        failure: _AttemptFailure | None = None
        url = urls[start_index % len(urls)]
        for attempt in range(1, self.config.max_retries + 2):
            url = urls[(start_index + attempt - 1) % len(urls)]  # a retry moves to the next URL
            try:
                response = self._attempt(kind, url, request)
                return Result(ok=True, response=response, error=None, attempts=attempt, base_url=url,
                              latency_s=time.monotonic() - t0)
            except _AttemptFailure as exc:
                failure = exc
            if not failure.retryable or attempt > self.config.max_retries:
                break
            delay = self._backoff_delay(attempt, failure.retry_after_s)
            log.warning("%s request to %s failed (%s, attempt %d/%d); retrying in %.2fs",
                        kind, url, failure.kind, attempt, self.config.max_retries + 1, delay)
            self._sleep(delay)
        assert failure is not None
        return Result(ok=False, response=None, error=failure.message, attempts=attempt, base_url=url,
                      error_kind=failure.kind, status_code=failure.status_code,
                      latency_s=time.monotonic() - t0)

    def _attempt(self, kind: str, url: str, request: dict) -> Any:
        openai = self._openai
        client = self._clients[url]
        try:
            if kind == "chat":
                response = client.chat.completions.create(model=self.config.model, **request)
            else:
                response = client.completions.create(model=self.config.model, **request)
        except openai.APITimeoutError:  # subclass of APIConnectionError: check first
            raise _AttemptFailure("timeout", f"timed out after {self.config.timeout_s}s ({url})", True) from None
        except openai.APIConnectionError as exc:
            raise _AttemptFailure("connection", self._clip(f"connection error ({url}): {exc}"), True) from None
        except openai.APIStatusError as exc:
            status = int(exc.status_code)
            retryable = status in RETRYABLE_4XX or status >= 500
            retry_after = _parse_retry_after(getattr(exc.response, "headers", None)) if retryable else None
            raise _AttemptFailure(f"http_{status}", self._clip(f"HTTP {status} ({url}): {exc}"), retryable,
                                  status_code=status, retry_after_s=retry_after) from None
        except (openai.APIResponseValidationError, ValueError, TypeError) as exc:
            # A 200 whose body is not what the API promises (e.g. invalid JSON from a broken proxy).
            raise _AttemptFailure("invalid_response",
                                  self._clip(f"invalid response ({url}): {type(exc).__name__}: {exc}"),
                                  True) from None
        problem = _response_problem(response)
        if problem is not None:
            raise _AttemptFailure("invalid_response", self._clip(f"invalid response ({url}): {problem}"), True)
        return response

    def _clip(self, message: str, limit: int = 500) -> str:
        message = self.redact(" ".join(str(message).split()))
        return message if len(message) <= limit else message[: limit - 3] + "..."


def _response_problem(response: Any) -> str | None:
    """Why a 'successful' response is unusable, or None. The openai client (non-strict mode)
    hands back a bare string for non-JSON bodies and a partially-built model for JSON without
    the expected fields; both must be retried/counted, not crash the caller later."""
    if isinstance(response, (str, bytes)) or response is None:
        body = response if isinstance(response, str) else repr(response)
        return f"body is not a JSON completion object: {body[:120]!r}"
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        return "no choices in response"
    return None


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


def response_finish_reason(response: Any, index: int = 0) -> str | None:
    try:
        reason = response.choices[index].finish_reason
    except (AttributeError, IndexError, TypeError):
        return None
    return reason if isinstance(reason, str) else None


def response_usage(response: Any) -> dict[str, int | None]:
    usage = getattr(response, "usage", None)
    return {
        "prompt_tokens": getattr(usage, "prompt_tokens", None),
        "completion_tokens": getattr(usage, "completion_tokens", None),
    }
