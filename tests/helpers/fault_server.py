"""A fault-injecting OpenAI-compatible HTTP server on loopback, for tests.

Usage::

    from helpers.fault_server import FaultServer

    with FaultServer(script=["429", "500", "timeout", "garbage", "ok"], default="ok",
                     reply="hello", delay_s=2.0) as server:
        client = OpenAICompatClient(EndpointConfig(base_urls=(server.base_url,), model=server.model,
                                                   timeout_s=0.5, backoff_base_s=0.01))
        ...
        assert server.behaviours() == ["429", "500", "timeout", "garbage", "ok"]
        assert server.requests[0].headers["authorization"] == "Bearer EMPTY"

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``
(``/health`` answers 200 too). Every POST to a completion endpoint consumes the next behaviour
of the script queue (``default`` once the queue is empty); ``/v1/models`` and ``/health`` always
answer normally and are not scripted.

Behaviours (strings):

* ``"ok"``: a valid ChatCompletion / Completion whose text is ``reply`` (a string, or a callable
  ``reply(body: dict) -> str`` of the request's JSON body); one choice per requested ``n``.
* any 3-digit HTTP status, e.g. ``"429"``, ``"500"``, ``"503"``, ``"400"``, ``"404"``: that status
  with an OpenAI-style JSON error body. 429 carries ``Retry-After: <retry_after>`` when the
  server was built with ``retry_after`` (a string, e.g. ``"0"`` or ``"1"``).
* ``"timeout"``: waits ``delay_s`` seconds (cut short when the server stops), then answers "ok";
  a client whose timeout is below ``delay_s`` sees a timeout.
* ``"garbage"``: 200 with a non-JSON body (``application/json`` content type, HTML inside).
* ``"garbage_json"``: 200 with valid JSON that is not a completion (no ``choices``).
* ``"disconnect"``: closes the connection without any response.
* ``"trickle"``: a valid "ok" response whose body is sent one byte every ``trickle_s`` seconds
  after the headers; ``"trickle_head"``: the whole response, status line and headers included,
  one byte every ``trickle_s`` (each byte within any per-read timeout, so only a bound on the
  whole attempt ends them; the server stops trickling when the client hangs up or it is stopped).
* ``reasoning=fn``: ``fn(body)`` returns ``(reasoning, finish_reason)`` or None; a chat answer then
  carries ``message.reasoning_content`` (vLLM's reasoning parsers) and ``usage.completion_tokens_details
  .reasoning_tokens``, as a thinking model's server answers.
* ``"echo_auth"``: 400 whose error message contains the request's Authorization header (checks
  that clients redact the key from their error messages).

Structured outputs (``response_format``), for the behaviours that answer ("ok", "timeout"):

* ``accept_formats=("json_object", "text")``: the response_format types the server supports
  (default: all; ``"text"`` also stands for a request without response_format). Any other type
  gets a 400 naming it, as OpenAI / vLLM word it ("Invalid parameter: 'response_format' of type
  'json_schema' is not supported ..."), recorded as behaviour ``"refused_format"``.
* ``schema_reply=True``: a request carrying ``{"type": "json_schema", "json_schema": {"schema": S}}``
  is answered with a JSON instance of S built from S itself (every required property: a number's
  midpoint of [minimum, maximum], ``true`` for a boolean...), as a constrained decoder would; a
  request without a schema gets ``reply``. A test thereby checks that the client sent the right
  schema: a wrong or missing one gives an unparseable or invalid verdict.

Attributes/methods: ``base_url`` (ends in ``/v1``), ``port``, ``model`` (served model name),
``requests`` (list of :class:`RecordedRequest`: method, path, headers with lower-case names, body
as parsed JSON or None, behaviour applied), ``push(*behaviours)`` to append to the script,
``behaviours()`` (behaviour per completion request, in arrival order), ``completion_requests()``,
``max_in_flight`` (the most completion requests being handled at once: checks client concurrency
bounds; use ``"timeout"`` with a small ``delay_s`` as a "slow" response).
The server is a ``ThreadingHTTPServer`` with daemon threads bound to a random free port of
127.0.0.1; leaving the ``with`` block (or ``stop()``) shuts it down and releases any delayed handler.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable

COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions")


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    behaviour: str | None
    time: float = field(default_factory=time.monotonic)


class FaultServer:
    def __init__(self, script: Iterable[str] = (), default: str = "ok", *,
                 reply: str | Callable[[dict], str] = "ok", delay_s: float = 5.0,
                 retry_after: str | None = None, model: str = "fault-model",
                 accept_formats: Iterable[str] | None = None, schema_reply: bool = False,
                 trickle_s: float = 2.0, reasoning: Callable[[dict], "tuple[str, str] | None"] | None = None):
        self._script: deque[str] = deque(script)
        self.accept_formats = None if accept_formats is None else frozenset(accept_formats)
        self.schema_reply = schema_reply
        self.reasoning = reasoning
        self.default = default
        self.reply = reply
        self.delay_s = delay_s
        self.trickle_s = trickle_s
        self.retry_after = retry_after
        self.model = model
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._in_flight = 0
        self.max_in_flight = 0  # the most completion requests handled at the same time

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "FaultServer":
        handler = _make_handler(self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fault-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()  # releases "timeout" handlers at once
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> "FaultServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ------------------------------------------------------------------ script / records
    def push(self, *behaviours: str) -> None:
        with self._lock:
            self._script.extend(behaviours)

    def _next_behaviour(self) -> str:
        with self._lock:
            return self._script.popleft() if self._script else self.default

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def completion_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path in COMPLETION_PATHS and r.method == "POST"]

    def behaviours(self) -> list[str | None]:
        return [r.behaviour for r in self.completion_requests()]

    def reply_text(self, body: dict) -> str:
        schema = request_schema(body)
        if self.schema_reply and schema is not None:
            return json.dumps(schema_instance(schema))
        return self.reply(body) if callable(self.reply) else str(self.reply)

    def refused_format(self, body: dict) -> str | None:
        """The response_format type of ``body`` this server does not support, or None."""
        kind = response_format_type(body)
        if self.accept_formats is None or kind in self.accept_formats:
            return None
        return kind


def response_format_type(body: dict) -> str:
    """``body["response_format"]["type"]``; "text" without a response_format."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and isinstance(response_format.get("type"), str):
        return response_format["type"]
    return "text"


def request_schema(body: dict) -> dict | None:
    """The JSON schema of a ``json_schema`` response_format, or None."""
    response_format = body.get("response_format")
    if response_format_type(body) != "json_schema":
        return None
    schema = (response_format.get("json_schema") or {}).get("schema")
    return schema if isinstance(schema, dict) else None


def schema_instance(schema: dict) -> Any:
    """A small JSON value valid under ``schema`` (object/number/integer/boolean/string/array)."""
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: schema_instance(properties.get(name) or {}) for name in schema.get("required") or []}
    if kind in ("number", "integer"):
        low, high = schema.get("minimum", 0), schema.get("maximum", 10)
        middle = (low + high) / 2
        return int(middle) if kind == "integer" else middle
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    return "x"


def _completion_payload(server: FaultServer, path: str, body: dict) -> dict:
    n = body.get("n") or 1
    text = server.reply_text(body)
    created = int(time.time())
    thought = server.reasoning(body) if server.reasoning is not None else None
    if path == "/v1/chat/completions":
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if thought is not None:  # as vLLM's reasoning parsers answer: the reasoning beside the content
            message["reasoning_content"] = thought[0]
        choices = [{"index": i, "message": dict(message), "finish_reason": thought[1] if thought else "stop",
                    "logprobs": None} for i in range(int(n))]
        obj = "chat.completion"
    else:
        choices = [{"index": i, "text": text, "finish_reason": "stop", "logprobs": None} for i in range(int(n))]
        obj = "text_completion"
    return {"id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": obj, "created": created,
            "model": body.get("model", server.model), "choices": choices,
            "usage": _usage(text, thought[0] if thought else None)}


def _usage(text: str, thought: str | None) -> dict:
    """Word counts as token counts; a reasoning's words are completion tokens too (as OpenAI counts them)."""
    reasoning = len(thought.split()) if thought is not None else 0
    completion = max(1, len(text.split()) + reasoning)
    usage: dict[str, Any] = {"prompt_tokens": 1, "completion_tokens": completion, "total_tokens": 1 + completion}
    if thought is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def _make_handler(server: FaultServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            return

        def _send_json(self, status: int, payload: Any, extra_headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self._send_bytes(status, data, extra_headers)

        def _send_bytes(self, status: int, data: bytes, extra_headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (extra_headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout): nothing to do

        def _trickle(self, data: bytes, head_too: bool) -> None:
            head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                    "\r\n").encode()
            try:
                if not head_too:
                    self.wfile.write(head)
                    self.wfile.flush()
                for i in range(len(data) + (len(head) if head_too else 0)):
                    if server._stopped.wait(server.trickle_s):
                        break
                    self.wfile.write(((head + data) if head_too else data)[i:i + 1])
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up
            self.close_connection = True

        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            server._record(RecordedRequest("GET", self.path, {k.lower(): v for k, v in self.headers.items()},
                                           None, None))
            if self.path == "/v1/models":
                self._send_json(200, {"object": "list", "data": [
                    {"id": server.model, "object": "model", "created": 0, "owned_by": "fault-server"}]})
            elif self.path == "/health":
                self._send_bytes(200, b"")
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except json.JSONDecodeError:
                body = None
            headers = {k.lower(): v for k, v in self.headers.items()}
            if self.path not in COMPLETION_PATHS:
                server._record(RecordedRequest("POST", self.path, headers, body, None))
                self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            behaviour = server._next_behaviour()
            if behaviour in ("ok", "timeout", "trickle", "trickle_head") and isinstance(body, dict) and server.refused_format(body):
                behaviour = "refused_format"
            server._record(RecordedRequest("POST", self.path, headers, body, behaviour))
            server._enter()
            try:
                self._respond(behaviour, body, headers)
            finally:
                server._leave()

        def _respond(self, behaviour: str, body: Any, headers: dict[str, str]) -> None:
            if not isinstance(body, dict):
                self._send_json(400, {"error": {"message": "body is not a JSON object", "type": "invalid_request"}})
                return
            if behaviour == "refused_format":
                self._send_json(400, {"error": {
                    "message": f"Invalid parameter: 'response_format' of type '{server.refused_format(body)}' is "
                               "not supported with this model.", "type": "invalid_request_error",
                    "param": "response_format"}})
                return
            if behaviour == "ok":
                self._send_json(200, _completion_payload(server, self.path, body))
            elif behaviour == "timeout":
                server._stopped.wait(server.delay_s)
                self._send_json(200, _completion_payload(server, self.path, body))
            elif behaviour in ("trickle", "trickle_head"):
                self._trickle(json.dumps(_completion_payload(server, self.path, body)).encode(),
                              head_too=behaviour == "trickle_head")
            elif behaviour == "garbage":
                self._send_bytes(200, b"<html><body>502 Bad Gateway (not JSON) {{{</body>")
            elif behaviour == "garbage_json":
                self._send_json(200, {"unexpected": True, "data": [1, 2, 3]})
            elif behaviour == "disconnect":
                self.close_connection = True
                try:
                    self.connection.shutdown(2)
                except OSError:
                    pass
            elif behaviour == "echo_auth":
                auth = headers.get("authorization", "")
                self._send_json(400, {"error": {"message": f"bad request; you sent Authorization: {auth}",
                                                "type": "invalid_request"}})
            elif len(behaviour) == 3 and behaviour.isdigit():
                status = int(behaviour)
                extra = {"Retry-After": server.retry_after} if status == 429 and server.retry_after is not None else None
                self._send_json(status, {"error": {"message": f"injected fault {status}", "type": "fault",
                                                   "code": status}}, extra)
            else:
                self._send_json(500, {"error": {"message": f"fault server: unknown behaviour {behaviour!r}",
                                                "type": "fault"}})

    return Handler
