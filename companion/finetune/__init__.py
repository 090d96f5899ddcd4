"""Fine-tuning a pretrained GPT (chapter 13): supervised fine-tuning on chats, LoRA, and DPO.

Import from here (``from companion.finetune import apply_lora, dpo_loss``); one concept per module, each
importing only the ones listed before it:

- :mod:`companion.finetune.logprobs` -- a batch as ``(inputs, labels)`` with ``IGNORE_INDEX`` where nothing is
  scored; ``token_logprobs``, ``sequence_logprobs`` (log π(response | prompt)), ``mean_token_kl``.
- :mod:`companion.finetune.chat` -- the chat template (``<|user|>``, ``<|assistant|>``, ``<|end|>``...; in Jinja
  for ``tokenizer_config.json``), ``add_chat_tokens`` and ``grow_token_rows`` (room for them in a trained model),
  ``encode_chat`` with its loss mask, ``sft_batch`` and ``sft_loss`` (Ouyang et al. 2022).
- :mod:`companion.finetune.lora` -- ``LoRALinear``, ``apply_lora``, ``merge_lora`` (Hu et al. 2022; rsLoRA's α / √r).
- :mod:`companion.finetune.dpo` -- ``dpo_loss`` and ``implicit_rewards`` (Rafailov et al. 2023).
- :mod:`companion.finetune.grpo` -- ``group_advantages`` and ``grpo_loss`` (Shao et al. 2024, DeepSeekMath).
- :mod:`companion.finetune.templates` -- ChatML (Qwen) and Llama 3 chat templates as ``transformers`` tokenizers
  built offline, to set ours beside them.

The training loop is :func:`companion.training.train` with ``sft_loss`` or a DPO loss function; the command
line ``companion-train --init-from SOURCE [--lora R]`` fine-tunes a run or a Hugging Face folder on a text, on
conversations (``--chat FILE``) or on preference pairs (``--dpo FILE``), with these functions.
"""

from __future__ import annotations

from companion.finetune.chat import (
    CHAT_TOKENS,
    END,
    JINJA_CHAT_TEMPLATE,
    ROLE_TOKENS,
    ROLES,
    add_chat_tokens,
    chat_template,
    encode_chat,
    encode_prompt,
    grow_token_rows,
    sft_batch,
    sft_loss,
)
from companion.finetune.dpo import dpo_loss, implicit_rewards
from companion.finetune.grpo import group_advantages, grpo_loss
from companion.finetune.logprobs import IGNORE_INDEX, mean_token_kl, sequence_logprobs, token_logprobs
from companion.finetune.lora import DEFAULT_TARGETS, LoRALinear, apply_lora, lora_modules, merge_lora
from companion.finetune.templates import CHATML_TEMPLATE, LLAMA3_TEMPLATE, hf_chat_tokenizer, rename_markers

__all__ = [
    "IGNORE_INDEX", "token_logprobs", "sequence_logprobs", "mean_token_kl", "ROLES", "ROLE_TOKENS", "END",
    "CHAT_TOKENS", "JINJA_CHAT_TEMPLATE", "add_chat_tokens", "grow_token_rows", "chat_template", "encode_chat",
    "encode_prompt", "sft_batch", "sft_loss",
    "LoRALinear", "apply_lora", "merge_lora", "lora_modules", "DEFAULT_TARGETS", "dpo_loss", "implicit_rewards",
    "group_advantages", "grpo_loss", "CHATML_TEMPLATE", "LLAMA3_TEMPLATE", "hf_chat_tokenizer", "rename_markers",
]  # fmt: skip
