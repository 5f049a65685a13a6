"""OpenAI-compatible endpoint backend (vLLM / SGLang / llama.cpp servers, or OpenAI itself).

All HTTP work goes through ``dsdr_eval.openai_api.client`` (round-robin over base URLs, bounded
concurrency, retries with backoff, key from an env var and never written). One request per
rollout (``n=1``, its own derived ``seed``): a failure costs one sample, which is logged and
retried by the next run, and servers with prefix caching (vLLM's default) still share the
prompt's KV cache across a problem's rollouts.

Every sampling field is sent explicitly (``sampling.openai_sampling_body``): a vLLM server fills
each field a request leaves out from the model's generation_config.json (Qwen2.5: top-k 20,
repetition penalty 1.05). The non-OpenAI fields (top_k, min_p, repetition_penalty) go in
``extra_body``; they are left out for OpenAI's own API, which rejects them.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any, Sequence

from dsdr_eval.backends.base import Backend, Completion, GenerationRequest, OnResults, RequestResult
from dsdr_eval.backends.sampling import openai_sampling_body, server_sampling_fields, trim_at_stop
from dsdr_eval.errors import DsdrError
from dsdr_eval.prompts import PromptTemplate, render_prompt, resolve_chat_mode


class OpenAIBackend(Backend):
    name = "openai"
    seed_scope = "request"  # a seed per rollout: a shard may hold any requests

    def __init__(self, endpoint: Any, *, api: str = "chat", tokenizer_path: str | None = None,
                 prompt_mode: str = "auto", extra_body: dict[str, Any] | None = None,
                 client: Any | None = None, server_sampling_fields: bool | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None) -> None:
        """``server_sampling_fields``: send the neutral top_k/min_p/repetition_penalty (vLLM, SGLang);
        None = yes unless every base URL is OpenAI's own API."""
        from dsdr_eval.openai_api.client import OpenAICompatClient

        if api not in ("chat", "completions"):
            raise DsdrError(f"--api {api!r}: expected chat or completions")
        self.endpoint = endpoint
        self.api = api
        self.extra_body = dict(extra_body or {})
        # chat API: sent as the body's chat_template_kwargs (vLLM, SGLang apply them); completions API:
        # applied here when the local tokenizer renders the prompt
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        if server_sampling_fields is None:
            server_sampling_fields = not all(_is_openai_api(url) for url in endpoint.base_urls)
        self.server_sampling_fields = server_sampling_fields
        self.client = client if client is not None else OpenAICompatClient(endpoint)
        self.tokenizer = None
        self.tokenizer_path = tokenizer_path
        if api == "chat":
            if prompt_mode == "raw":
                raise DsdrError("--prompt-mode raw needs --api completions (a chat API always applies "
                                "the server's chat template)")
            self._chat = True  # the server applies its own chat template to the user message
        else:
            if tokenizer_path is not None:
                from transformers import AutoTokenizer

                try:
                    self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
                except OSError as exc:
                    raise DsdrError(f"--tokenizer {tokenizer_path}: cannot load ({exc})") from None
            self._chat = resolve_chat_mode(prompt_mode, self.tokenizer)

    @property
    def chat(self) -> bool:
        return self._chat

    def render(self, template: PromptTemplate, problem: str) -> tuple[str, str]:
        user = template.user_message(problem)
        if self.api == "chat":
            return user, user  # stored prompt = the user turn the server wraps in its template
        return render_prompt(template, problem, tokenizer=self.tokenizer, chat=self._chat,
                             template_kwargs=self.chat_template_kwargs), user

    def batch_capacity(self) -> int:
        return 1 << 30  # concurrency is the client's max_concurrency; one batch = the whole plan

    def max_n_per_request(self) -> int:
        return 1

    def config(self) -> dict[str, Any]:
        try:
            version = importlib.metadata.version("openai")
        except importlib.metadata.PackageNotFoundError:
            version = None
        return {"name": self.name, "version": version, "api": self.api, **self.endpoint.to_config(),
                "tokenizer": self.tokenizer_path, "extra_body": self.extra_body,
                **({"chat_template_kwargs": self.chat_template_kwargs} if self.chat_template_kwargs else {}),
                "server_sampling_fields": self.server_sampling_fields,
                "seeding": "per rollout (request `seed`; honoured by vLLM servers)"}

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        spec = request.sampling_spec(())
        body: dict[str, Any] = {**openai_sampling_body(spec), "seed": request.seed, "n": 1}
        # the user's --extra-body wins over the neutral server fields (and is recorded as given)
        if spec.filters() and not self.server_sampling_fields:
            raise DsdrError(f"the protocol's {' and '.join(spec.filters())} cannot be sent to OpenAI's own API "
                            "(it has no such field); use a protocol without them")
        extra = {**(server_sampling_fields(spec) if self.server_sampling_fields else {}),
                 **({"chat_template_kwargs": self.chat_template_kwargs}
                    if self.chat_template_kwargs and self.api == "chat" else {}),
                 **self.extra_body}
        if extra:
            body["extra_body"] = extra
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": request.user_message}]
        else:
            body["prompt"] = request.prompt
        return body

    def effective_sampling(self, request: GenerationRequest) -> dict[str, Any]:
        """The request body as sent, minus the prompt (the ``extra_body`` fields are sent at top level)."""
        body = self._body(request)
        return {k: v for k, v in {**body, **body.get("extra_body", {})}.items()
                if k not in ("messages", "prompt", "extra_body")}

    def generate(self, requests: Sequence[GenerationRequest], batches: Sequence[Sequence[int]],
                 on_results: OnResults) -> None:
        from dsdr_eval.openai_api.client import (response_finish_reason, response_reasoning, response_text,
                                                 response_usage)

        order = [i for batch in batches for i in batch]
        for i in order:
            if requests[i].n != 1:
                raise ValueError("the OpenAI backend sends one rollout per request (n=1)")
        bodies = [self._body(requests[i]) for i in order]

        def on_result(position: int, result: Any) -> None:
            index = order[position]
            if not result.ok:
                on_results([(index, RequestResult(None, f"{result.error_kind or 'error'}: {result.error}",
                                                  result.attempts, result.base_url))])
                return
            text = response_text(result.response)
            if text is None:  # a 200 whose choice carries no text (hostile/garbled server)
                on_results([(index, RequestResult(None, "invalid_response: choice has no text",
                                                  result.attempts, result.base_url))])
                return
            usage = response_usage(result.response)
            finish, n_completion = response_finish_reason(result.response), _int_or_none(usage.get("completion_tokens"))
            text, cut_here = trim_at_stop(text, requests[index].stop)
            if cut_here is not None:  # a server that ignored `stop`: cut as vLLM would; its count is of the uncut text
                finish, n_completion = "stop", None
            stopped_by = cut_here or _matched_stop(result.response, requests[index].stop)
            completion = Completion(text=text, finish_reason=finish,
                                    n_prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
                                    n_completion_tokens=n_completion,
                                    seed=requests[index].seed, reasoning=response_reasoning(result.response),
                                    n_reasoning_tokens=_int_or_none(usage.get("reasoning_tokens")),
                                    stopped_by=stopped_by if finish == "stop" else None)
            on_results([(index, RequestResult((completion,), None, result.attempts, result.base_url))])

        many = self.client.chat_many if self.api == "chat" else self.client.complete_many
        many(bodies, progress=False, on_result=on_result)

    def close(self) -> None:
        self.client.close()


def _is_openai_api(url: str) -> bool:
    from urllib.parse import urlparse

    host = (urlparse(url).hostname or "").lower()
    return host == "openai.com" or host.endswith(".openai.com")


def _matched_stop(response: Any, stop: tuple[str, ...]) -> str | None:
    """The stop string a vLLM server says it stopped at (its choice's ``stop_reason``), if one of ``stop``."""
    choices = response.get("choices") if isinstance(response, dict) else getattr(response, "choices", None)
    choice = choices[0] if isinstance(choices, list) and choices else None
    reason = choice.get("stop_reason") if isinstance(choice, dict) else getattr(choice, "stop_reason", None)
    return reason if isinstance(reason, str) and reason in stop else None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
