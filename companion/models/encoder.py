"""``Encoder``: the encoder-only model of BERT (Devlin et al. 2019), with its masked-language-model head.

Bidirectional self-attention layers, then the MLM head (dense -> activation -> norm -> output projection tied
to the token table, plus an output bias, as in BERT); ``mask_tokens`` is BERT's 80/10/10 corruption recipe.
Token types (segments A/B) come with ``ModelConfig.type_vocab_size``. Checked against Hugging Face
``BertModel`` / ``BertForMaskedLM`` from random weights (tests/test_bert.py, through ``load_bert_state_dict``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from companion._checks import check_bool, check_positive_int, check_probability, check_token_id, check_token_ids
from companion.embeddings import tie_weights
from companion.models.base import ENCODER_IGNORES, check_ids, check_unused, final_norm
from companion.models.blocks import Embeddings, EncoderLayer, attention_mask, config_norm, init_weights, make_rope
from companion.models.config import ModelConfig
from companion.packing import store_for_decoding

__all__ = ["Encoder", "mask_tokens"]

_NO_MLM_HEAD = ("this Encoder was built with mlm_head=False and has no MLM head; call hidden_states(ids) for its "
                "vectors, or build Encoder(config) for masked-LM logits")


class Encoder(nn.Module):
    """BERT-style encoder: bidirectional self-attention layers and a masked-language-model head.

    The MLM head is dense -> activation -> norm -> output projection (tied to the token table if
    ``tie_embeddings``) plus an output bias, as in BERT (``BertForMaskedLM``). ``mlm_head=False`` builds the
    encoder alone (``BertModel`` without its pooler), the body that the classification heads of
    :mod:`companion.models.heads` put their own heads on.
    """

    def __init__(self, config: ModelConfig, *, mlm_head: bool = True) -> None:
        super().__init__()
        check_bool("mlm_head", mlm_head)
        check_unused(config, "an Encoder", ENCODER_IGNORES)
        self.config = config
        self.embed = Embeddings(config)
        rope = make_rope(config)
        self.layers = nn.ModuleList(EncoderLayer(config, rope) for _ in range(config.n_layers))
        self.norm = final_norm(config)
        self.has_mlm_head = mlm_head
        if mlm_head:
            self.mlm_dense = nn.Linear(config.d_model, config.d_model)
            self.mlm_act = nn.GELU(approximate="tanh" if config.activation == "gelu_tanh" else "none")
            self.mlm_norm = config_norm(config)
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=True)
            if config.tie_embeddings:
                tie_weights(self.lm_head, self.embed.token)
        init_weights(self, config.n_layers)
        if config.decode_layout:  # the same weights, laid out for fast decoding (companion.packing)
            store_for_decoding(self)

    def hidden_states(
        self, ids: Tensor, padding_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """Contextual vectors of every token. ``padding_mask`` (B, 1, 1, S), True = real token;
        ``token_type_ids`` (B, S): the segment of each token (needs ``config.type_vocab_size``).

        Shapes: ids (B, S) -> (B, S, D).
        """
        check_ids("ids", ids, 0, self.config.max_seq_len)
        s = ids.size(1)
        mask = attention_mask(self.config, s, s, causal=False, padding_mask=padding_mask, device=ids.device)
        h = self.embed(ids, token_type_ids=token_type_ids)  # (B, S, D)
        for layer in self.layers:
            h = layer(h, mask)  # (B, S, D)
        return self.norm(h) if self.norm is not None else h

    def mlm_logits(self, h: Tensor) -> Tensor:
        """The MLM head on hidden vectors: (..., D) -> (..., V). Training needs it only at the masked
        positions (``companion.training.mlm_loss`` selects them first: 15 % of the work)."""
        if not self.has_mlm_head:
            raise ValueError(_NO_MLM_HEAD)
        return self.lm_head(self.mlm_norm(self.mlm_act(self.mlm_dense(h))))  # (..., V)

    def forward(
        self, ids: Tensor, padding_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """MLM logits for every position. Shapes: ids (B, S) -> logits (B, S, V)."""
        if not self.has_mlm_head:  # fail before the layers run
            raise ValueError(_NO_MLM_HEAD)
        return self.mlm_logits(self.hidden_states(ids, padding_mask, token_type_ids))  # (B, S, V)

    @staticmethod
    def mask_tokens(
        ids: Tensor,
        mask_id: int,
        vocab_size: int,
        generator: torch.Generator | None = None,
        prob: float = 0.15,
        special_ids: tuple[int, ...] = (),
    ) -> tuple[Tensor, Tensor]:
        """See :func:`mask_tokens`."""
        return mask_tokens(ids, mask_id, vocab_size, generator, prob, special_ids)


def mask_tokens(
    ids: Tensor,
    mask_id: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
    prob: float = 0.15,
    special_ids: tuple[int, ...] = (),
) -> tuple[Tensor, Tensor]:
    """BERT's masked-LM corruption (Devlin et al. 2019, §3.1): choose ``prob`` of the tokens to predict;
    of those, 80 % become ``mask_id``, 10 % a random token, 10 % stay unchanged.

    Tokens in ``special_ids`` (e.g. [CLS], [SEP], padding) are never chosen.

    Returns:
        (inputs, labels): the corrupted ids, and labels holding the original id where a token was
        chosen and -100 elsewhere (``torch.nn.functional.cross_entropy``'s default ``ignore_index``).

    Shapes: ids (B, S) -> inputs (B, S), labels (B, S).
    """
    check_probability("prob", prob, allow_zero=False, allow_one=False)
    check_positive_int("vocab_size", vocab_size)
    check_token_ids("ids", ids, ndim=(1, 2), vocab_size=vocab_size)
    check_token_id("mask_id", mask_id, vocab_size)
    if not isinstance(special_ids, (tuple, list, set, frozenset)):
        raise TypeError(f"special_ids must be a tuple of token ids, got {type(special_ids).__name__}")
    for special in special_ids:
        check_token_id("special_ids entry", special, vocab_size)
    if mask_id in special_ids:
        raise ValueError(f"mask_id={mask_id} is also in special_ids; expected the [MASK] id to differ from the ids "
                         "that are never masked")
    u = torch.rand(ids.shape, generator=generator, device=ids.device)  # chooses the positions
    chosen = u < prob
    for special in special_ids:
        chosen &= ids != special
    action = torch.rand(ids.shape, generator=generator, device=ids.device)  # what happens to a chosen one
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator, device=ids.device)
    inputs = torch.where(chosen & (action < 0.8), torch.full_like(ids, mask_id), ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    return inputs, labels
