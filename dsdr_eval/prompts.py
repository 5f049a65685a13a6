"""Prompt templates: how a benchmark problem becomes the text a model is asked to continue.

The DSDR paper does not state its template (docs/ALGORITHMS.md §5); the default here is the field's
Qwen-style instruction "Please reason step by step, and put your final answer within \\boxed{}."
placed after the problem inside the model's chat template. Every run records the template's
name, text and chat mode in config.json and the fully rendered prompt in every sample line,
because published numbers move with the template.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

from dsdr_eval.errors import DsdrError

PLACEHOLDER = "{problem}"
PromptMode = Literal["auto", "chat", "raw"]

QWEN_BOXED_TEXT = "{problem}\nPlease reason step by step, and put your final answer within \\boxed{}."
# Raw-completion framing for base models without a chat template: a plain Q/A scaffold whose
# last line invites the reasoning, so a base model continues with a solution, not a new problem.
QWEN_BOXED_RAW_TEXT = ("Problem: {problem}\nPlease reason step by step, and put your final answer "
                       "within \\boxed{}.\nSolution:")


@dataclass(frozen=True)
class PromptTemplate:
    """A user-message template with exactly one ``{problem}`` placeholder.

    Only ``{problem}`` is substituted (plain string replacement, not ``str.format``), so the
    literal braces of ``\\boxed{}`` and of LaTeX in problems are kept as they are."""

    name: str
    text: str
    raw_text: str | None = None  # used instead of `text` when the prompt is rendered without a chat template

    def __post_init__(self) -> None:
        for field, value in (("text", self.text), ("raw_text", self.raw_text)):
            if value is not None and value.count(PLACEHOLDER) != 1:
                raise DsdrError(f"template {self.name!r}: field {field} must contain the placeholder "
                                f"{PLACEHOLDER} exactly once (found {value.count(PLACEHOLDER)})")

    def user_message(self, problem: str) -> str:
        return self.text.replace(PLACEHOLDER, problem)

    def raw_prompt(self, problem: str) -> str:
        return (self.raw_text if self.raw_text is not None else self.text).replace(PLACEHOLDER, problem)


BUILTIN_TEMPLATES: dict[str, PromptTemplate] = {
    "qwen-boxed": PromptTemplate("qwen-boxed", QWEN_BOXED_TEXT, QWEN_BOXED_RAW_TEXT),
    # The problem alone: for models trained with their own instruction baked in.
    "plain": PromptTemplate("plain", "{problem}", None),
}
DEFAULT_TEMPLATE = "qwen-boxed"


def load_template(spec: str | None) -> PromptTemplate:
    """A built-in template name, or a path to a UTF-8 text file with one ``{problem}`` placeholder."""
    if spec is None:
        return BUILTIN_TEMPLATES[DEFAULT_TEMPLATE]
    if spec in BUILTIN_TEMPLATES:
        return BUILTIN_TEMPLATES[spec]
    path = Path(spec).expanduser()
    if not path.is_file():
        raise DsdrError(f"--template {spec}: neither a built-in template "
                        f"({', '.join(sorted(BUILTIN_TEMPLATES))}) nor an existing file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DsdrError(f"{path}: template file is not UTF-8 ({exc})") from None
    if text.endswith("\n"):  # editors add one; a trailing newline is not part of the template
        text = text[:-1]
    if text.count(PLACEHOLDER) != 1:
        raise DsdrError(f"{path}: a template file must contain the placeholder {PLACEHOLDER} exactly "
                        f"once (found {text.count(PLACEHOLDER)})")
    return PromptTemplate(f"file:{path.name}", text, None)


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def resolve_chat_mode(mode: PromptMode, tokenizer: Any | None) -> bool:
    """Decide whether prompts go through the tokenizer's chat template.

    ``auto`` = chat when the tokenizer has a template (instruct models), raw completion otherwise
    (base models). ``chat`` without a template is an error rather than a silent fallback."""
    if mode not in ("auto", "chat", "raw"):
        raise DsdrError(f"--prompt-mode {mode!r}: expected auto, chat or raw")
    if mode == "raw":
        return False
    available = tokenizer is not None and has_chat_template(tokenizer)
    if mode == "chat" and not available:
        raise DsdrError("--prompt-mode chat: the model's tokenizer has no chat template "
                        "(use --prompt-mode raw for base models)")
    return available


def render_prompt(template: PromptTemplate, problem: str, *, tokenizer: Any | None, chat: bool,
                  template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The exact text the model continues (stored per sample as ``prompt``). ``template_kwargs``: extra
    variables of the chat template (``{"enable_thinking": false}`` for Qwen3), as vLLM's
    ``chat_template_kwargs``."""
    if not chat:
        return template.raw_prompt(problem)
    messages = [{"role": "user", "content": template.user_message(problem)}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                         **dict(template_kwargs or {}))


def encode_prompt(tokenizer: Any, prompt: str, *, chat: bool) -> list[int]:
    """Token ids of a rendered prompt, identical for the HF and vLLM backends.

    A chat template already writes its own BOS/special tokens, so they are not added again
    (a doubled BOS silently changes outputs); a raw prompt gets the tokenizer's usual specials."""
    return list(tokenizer(prompt, add_special_tokens=not chat)["input_ids"])
