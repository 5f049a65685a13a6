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
