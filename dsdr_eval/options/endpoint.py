"""The OpenAI-endpoint options that `run`, `judge` and `diversity` spell the same way, and the
``EndpointConfig`` they make.

``options(defaults, prefix=...)`` declares them; every value defaults to None there and
``endpoint_options`` fills in ``defaults``, so a command can tell an option that was given from one
that was not. The readers take any object with the option names as attributes (a parsed command line
or a frozen options dataclass).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dsdr_eval.options.checks import integer, number
from dsdr_eval.options.schema import REPEATED, Option


class EndpointDefaults(NamedTuple):
    """A command's defaults for the shared OpenAI-endpoint options (shown in --help). Immutable;
    a NamedTuple rather than a dataclass: it is a plain record of five defaults."""

    max_concurrency: int
    timeout_s: float
    max_retries: int = 5
    backoff_base_s: float = 0.5
    api_key_env: str = "OPENAI_API_KEY"


MODEL_ENDPOINT = EndpointDefaults(max_concurrency=16, timeout_s=600.0)   # `run --backend openai`
JUDGE_ENDPOINT = EndpointDefaults(max_concurrency=8, timeout_s=120.0)    # `judge`, `diversity --partition judge`

ENDPOINT_POLICY_DESTS = ("max_concurrency", "max_retries", "timeout_s", "backoff_base_s")


def options(defaults: EndpointDefaults, *, prefix: str = "", group: str = "OpenAI-compatible endpoint") -> tuple[Option, ...]:
    """The options of one OpenAI-compatible endpoint, spelled the same in every command.

    ``prefix`` names whose endpoint it is (``""`` for `run`'s model server, ``"judge-"`` for a
    judge): ``--{prefix}base-url``, ``--{prefix}api-key-env``. The request policy is unprefixed:
    ``--max-concurrency``, ``--max-retries``, ``--request-timeout``, ``--retry-backoff`` (the old
    spellings ``--concurrency`` and ``--backoff-base`` still parse, hidden, so existing scripts run)."""
    key = prefix.replace("-", "_")
    return (
        Option(f"{key}base_url", f"--{prefix}base-url", kind=REPEATED, metavar="URL", group=group,
               help="base URL ending in /v1; repeat it or give a comma list to spread requests over several "
                    "servers (a fleet of `vllm serve` nodes); a failed attempt moves on to the next URL"
                    + ("" if not prefix else ". Default: $OPENAI_BASE_URL, else https://api.openai.com/v1")),
        Option(f"{key}api_key_env", f"--{prefix}api-key-env", metavar="VAR", group=group,
               help=f"environment variable holding the API key (default {defaults.api_key_env}; "
                    "'EMPTY' is sent when it is unset, which local servers accept). The key is "
                    "never written or logged."),
        Option("max_concurrency", "--max-concurrency", check=integer(1), metavar="N", group=group,
               aliases=("--concurrency",), help=f"requests in flight at once (default {defaults.max_concurrency})"),
        Option("max_retries", "--max-retries", check=integer(0), metavar="N", group=group,
               help="retries per request on 408/409/429/5xx, timeouts, connection errors and malformed 200 "
                    f"replies (default {defaults.max_retries})"),
        Option("timeout_s", "--request-timeout", check=number(0, min_open=True), metavar="S", group=group,
               help=f"seconds per attempt (default {defaults.timeout_s:g})"),
        Option("backoff_base_s", "--retry-backoff", check=number(0), metavar="S", group=group,
               aliases=("--backoff-base",),
               help="first retry delay in seconds; doubles each retry, jittered, capped at 30 s; a server's "
                    f"Retry-After is honoured (default {defaults.backoff_base_s:g})"),
    )


def endpoint_options(values: Any, defaults: EndpointDefaults, *, prefix: str = "") -> dict[str, Any]:
    """``EndpointConfig`` fields (all but the model) from the endpoint options of ``values``;
    ``base_urls`` as given (a list of URL / comma-list strings, or None)."""
    key = prefix.replace("-", "_")
    found: dict[str, Any] = {"base_urls": getattr(values, f"{key}base_url"),
                             "api_key_env": getattr(values, f"{key}api_key_env") or defaults.api_key_env}
    for dest in ENDPOINT_POLICY_DESTS:
        value = getattr(values, dest, None)
        found[dest] = getattr(defaults, dest) if value is None else value
    return found


def given_endpoint_options(values: Any, *, prefix: str = "") -> list[str]:
    """The endpoint options that were given (their flag), for "only applies to" checks."""
    return [option.flag for option in options(JUDGE_ENDPOINT, prefix=prefix)
            if option.flag is not None and getattr(values, option.name, None) is not None]


def endpoint_config(values: Any, defaults: EndpointDefaults, *, model: str, prefix: str = "") -> Any:
    """The ``EndpointConfig`` of the options (base URLs default to $OPENAI_BASE_URL, else OpenAI's API)."""
    from dsdr_eval.openai_api.client import EndpointConfig, resolve_base_urls

    found = endpoint_options(values, defaults, prefix=prefix)
    return EndpointConfig(base_urls=resolve_base_urls(found.pop("base_urls")), model=model, **found)
