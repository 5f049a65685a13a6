"""A content-hash cache of judge responses so reruns never pay twice.

key = sha256 of the canonical JSON of {model, messages, params} (never the base URL, so any node
of a fleet can answer; never the API key). Stored as append-only JSONL (``judge_cache.jsonl``
under RUN_DIR or ``--cache-dir``): one line per HTTP-successful response, with its text,
finish_reason and token usage. HTTP failures are not cached, so a rerun retries them, except a
server's refusal of a response format (``refusal``: its error; ``dsdr_eval.llm_judge.structured``),
which is that server's fixed answer to the request and lets a rerun skip the probe. An
unparseable reply is cached (with the same request it is what the judge says) - use
``--retry-failed`` to ask again for those only (the new reply replaces the cached one), or
``--no-cache`` to ask again for everything.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

from dsdr_eval.rundir.jsonl import append_jsonl, read_jsonl, repair_truncated_tail
from dsdr_eval.rundir.directory import now_iso

CACHE_FILE = "judge_cache.jsonl"


def request_key(model: str, messages: list[dict], params: dict[str, Any]) -> str:
    canonical = json.dumps({"model": model, "messages": messages, "params": params}, sort_keys=True,
                           ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class JudgeCache:
    """Thread-safe get/put over a JSONL file; a crash leaves at most one partial line (skipped)."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / CACHE_FILE
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            repair_truncated_tail(self.path)
            for entry in read_jsonl(self.path, tolerate_truncated_tail=True):
                key = entry.get("key")
                if isinstance(key, str) and isinstance(entry.get("text"), (str, type(None))):
                    self._entries[key] = entry

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: str, *, model: str, text: str | None, finish_reason: str | None,
            usage: dict[str, Any] | None, replace: bool = False, refusal: str | None = None) -> None:
        """Store a reply (or a format ``refusal``); an existing entry is kept unless ``replace``
        (the later line wins on load)."""
        entry = {"key": key, "model": model, "text": text, "finish_reason": finish_reason,
                 "usage": usage or {}, "created": now_iso()}
        if refusal is not None:
            entry["refusal"] = refusal
        with self._lock:
            if key in self._entries and not replace:
                return
            self._entries[key] = entry
            append_jsonl(self.path, [entry])
