"""Real chat templates beside ours: ChatML (as Qwen uses it) and Llama 3, as ``transformers`` tokenizers built offline.

A model's chat template ships in its ``tokenizer_config.json`` as a Jinja string; ``transformers`` renders it
with ``tokenizer.apply_chat_template(messages)``. The two written here follow the published ones:

- **ChatML** (OpenAI; Qwen2's ``tokenizer_config.json``): ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per
  message and ``<|im_start|>assistant\\n`` as the generation prompt. Qwen's own template also inserts a default
  system message when the chat has none; that line is left out here.
- **Llama 3** (Meta-Llama-3-8B-Instruct): ``<|begin_of_text|>`` once, then
  ``<|start_header_id|>{role}<|end_header_id|>\\n\\n{content | trim}<|eot_id|>`` per message.

Each marks the assistant's content and its closing token with ``{% generation %}`` ... ``{% endgeneration %}``,
the tags from which ``apply_chat_template(..., return_assistant_tokens_mask=True)`` builds the loss mask (trl's
``assistant_only_loss`` reads the same). Our template (:mod:`companion.finetune.chat`) is the same layout with
other markers: ``rename_markers(text, name)`` rewrites our rendered text into theirs, and the masked spans
correspond one to one (the content and the end marker; ChatML's newline after ``<|im_end|>`` is unmasked).

The tokenizer is a byte-level BPE with no merges (one token per byte, as GPT-2's alphabet) plus the template's
special tokens, built from ``tokenizers`` alone, so that nothing is downloaded. Checked in tests/test_finetune.py:
rendered text and loss masks equal ours after renaming, for chats with and without a system turn, several turns,
and the generation prompt.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHATML_TEMPLATE", "LLAMA3_TEMPLATE", "TEMPLATES", "hf_chat_tokenizer", "rename_markers"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}"
    "{{ '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# name -> (template, special tokens, bos token, our marker -> theirs)
TEMPLATES: dict[str, tuple[str, tuple[str, ...], str | None, dict[str, str]]] = {
    "chatml": (CHATML_TEMPLATE, ("<|im_start|>", "<|im_end|>"), None, {
        "<|system|>": "<|im_start|>system\n", "<|user|>": "<|im_start|>user\n",
        "<|assistant|>": "<|im_start|>assistant\n", "<|end|>": "<|im_end|>\n"}),
    "llama3": (LLAMA3_TEMPLATE, ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
               "<|begin_of_text|>", {
        "<|system|>": "<|start_header_id|>system<|end_header_id|>\n\n",
        "<|user|>": "<|start_header_id|>user<|end_header_id|>\n\n",
        "<|assistant|>": "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|end|>": "<|eot_id|>"}),
}  # fmt: skip


def _check_name(name: Any) -> None:
    if name not in TEMPLATES:
        raise ValueError(f"name={name!r} is not a template written here; expected one of {sorted(TEMPLATES)}")


def hf_chat_tokenizer(name: str) -> Any:
    """A ``transformers.PreTrainedTokenizerFast`` with the chat template ``name`` ("chatml" or "llama3").

    Byte-level, one token per byte, plus the template's special tokens; built locally, nothing downloaded.
    """
    _check_name(name)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    template, specials, bos, _ = TEMPLATES[name]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # the 256 byte symbols of GPT-2's byte-level BPE
    tokenizer = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(specials))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, chat_template=template, bos_token=bos)


def rename_markers(text: str, name: str) -> str:
    """Our rendered chat (``chat_template``) with each marker replaced by template ``name``'s; Llama 3's
    ``<|begin_of_text|>`` put in front. Message contents must not hold our markers (they are text then)."""
    _check_name(name)
    if not isinstance(text, str):
        raise TypeError(f"text must be a str (a rendered chat), got {type(text).__name__}")
    _, _, bos, mapping = TEMPLATES[name]
    for ours, theirs in mapping.items():
        text = text.replace(ours, theirs)
    return (bos or "") + text
