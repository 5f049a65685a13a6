"""Model fixtures the tests build (not shipped in the library: only tests call them)."""

from __future__ import annotations

from pathlib import Path


def build_tiny_random_llama(out: str | Path, tokenizer_dir: str | Path, *, hidden_size: int = 64,
                            intermediate_size: int = 128, num_attention_heads: int = 4,
                            num_key_value_heads: int = 2, num_hidden_layers: int = 2, seed: int = 0) -> Path:
    """Save a tiny randomly-initialised fp32 Llama with ``tokenizer_dir``'s tokenizer (and chat
    template) to ``out``: a real checkpoint directory for fast tests."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = Path(out)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers, num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads, max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
