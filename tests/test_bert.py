"""companion's Encoder and its heads reproduce Hugging Face BERT, built locally from small random configs.

Nothing is downloaded. Every parameter is redrawn at a visible scale (``randomize``), so a weight put in the
wrong place changes the outputs. The inputs carry token types (three of them, so that a swapped table
shows) and padding, which BERT's ``attention_mask`` and our ``padding_mask`` must treat alike.
"""

from __future__ import annotations

import pytest
import torch
from model_helpers import randomize
from torch.testing import assert_close

from companion.models import (
    Encoder,
    ModelConfig,
    SequenceClassifier,
    TokenClassifier,
    load_bert_state_dict,
    num_parameters,
)

transformers = pytest.importorskip("transformers")

VOCAB, WIDTH, TYPES = 61, 128, 3
WIDTH_BASE = 768  # BERT-base


def hf_config(**changes) -> object:
    base = dict(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=96, max_position_embeddings=24, type_vocab_size=TYPES, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12)  # fmt: skip
    config = transformers.BertConfig(**{**base, **changes})
    config._attn_implementation = "eager"
    return config


def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (3, 9), generator=g)
    types = torch.randint(0, TYPES, (3, 9), generator=g)
    attention = torch.ones(3, 9, dtype=torch.long)
    attention[1, 6:] = 0  # a padded sequence
    attention[2, 3:] = 0
    return ids, types, attention


def padding(attention: torch.Tensor) -> torch.Tensor:
    return attention.bool()[:, None, None, :]  # (B, 1, 1, S): True = a real token


@torch.no_grad()
def test_hidden_states_equal_bert_model() -> None:
    torch.manual_seed(0)
    ref = randomize(transformers.BertModel(hf_config()))
    ours = load_bert_state_dict(ref.state_dict()).eval()
    assert isinstance(ours, Encoder) and not ours.has_mlm_head
    ids, types, attention = inputs()
    expected = ref(input_ids=ids, token_type_ids=types, attention_mask=attention).last_hidden_state
    got = ours.hidden_states(ids, padding(attention), types)
    assert (got - expected).abs().max() <= 1e-5
    # without token types, both treat every token as type 0
    assert_close(ours.hidden_states(ids), ref(input_ids=ids).last_hidden_state, atol=1e-5, rtol=0)


@torch.no_grad()
def test_masked_lm_logits_equal_bert_for_masked_lm() -> None:
    torch.manual_seed(0)
    ref = randomize(transformers.BertForMaskedLM(hf_config()))
    ref.tie_weights()  # the decoder shares the word embeddings, as in every BERT checkpoint
    ours = load_bert_state_dict(ref.state_dict()).eval()
    assert ours.has_mlm_head and ours.lm_head.weight is ours.embed.token.weight
    ids, types, attention = inputs()
    expected = ref(input_ids=ids, token_type_ids=types, attention_mask=attention).logits
    assert (ours(ids, padding(attention), types) - expected).abs().max() <= 1e-5


@torch.no_grad()
def test_sequence_classifier_logits_equal_bert_for_sequence_classification() -> None:
    torch.manual_seed(0)
    ref = randomize(transformers.BertForSequenceClassification(hf_config(num_labels=5)))
    ours = load_bert_state_dict(ref.state_dict()).eval()
    assert isinstance(ours, SequenceClassifier) and ours.num_labels == 5 and ours.pooling == "cls"
    ids, types, attention = inputs()
    expected = ref(input_ids=ids, token_type_ids=types, attention_mask=attention).logits
    assert (ours(ids, padding(attention), types) - expected).abs().max() <= 1e-5


@torch.no_grad()
def test_token_classifier_logits_equal_bert_for_token_classification() -> None:
    torch.manual_seed(0)
    ref = randomize(transformers.BertForTokenClassification(hf_config(num_labels=4)))
    ours = load_bert_state_dict(ref.state_dict()).eval()
    assert isinstance(ours, TokenClassifier) and ours.num_labels == 4
    ids, types, attention = inputs()
    expected = ref(input_ids=ids, token_type_ids=types, attention_mask=attention).logits
    assert (ours(ids, padding(attention), types) - expected).abs().max() <= 1e-5


@torch.no_grad()
def test_an_explicit_config_sets_what_the_tensors_cannot_tell() -> None:
    """Four heads of width 32 and eps 1e-6: the tensors alone would say two heads of 64 and eps 1e-12."""
    torch.manual_seed(0)
    ref = randomize(transformers.BertModel(hf_config(num_attention_heads=4, layer_norm_eps=1e-6)))
    config = ModelConfig.bert_base(vocab_size=VOCAB, d_model=WIDTH, n_heads=4, n_layers=2, d_ff=96, max_seq_len=24,
                                   type_vocab_size=TYPES, norm_eps=1e-6, dropout=0.0)  # fmt: skip
    ours = load_bert_state_dict(ref.state_dict(), config).eval()
    ids, types, attention = inputs()
    expected = ref(input_ids=ids, token_type_ids=types, attention_mask=attention).last_hidden_state
    assert (ours.hidden_states(ids, padding(attention), types) - expected).abs().max() <= 1e-5
    guessed = load_bert_state_dict(ref.state_dict()).eval()  # two heads: a different function
    assert (guessed.hidden_states(ids, padding(attention), types) - expected).abs().max() > 1e-3


def test_bert_base_counts_equal_hugging_face() -> None:
    """BERT-base, on the meta device: the MLM model, the bare encoder (+ BERT's pooler) and a classifier."""
    hf = transformers.BertConfig()  # BERT-base's published sizes
    with torch.device("meta"):
        mlm, body, clf = transformers.BertForMaskedLM(hf), transformers.BertModel(hf), \
            transformers.BertForSequenceClassification(hf)  # fmt: skip
        config = ModelConfig.bert_base()
        ours_mlm, ours_body, ours_clf = Encoder(config), Encoder(config, mlm_head=False), SequenceClassifier(config, 2)
    assert num_parameters(ours_mlm) == num_parameters(mlm) == 109_514_298
    pooler = WIDTH_BASE * WIDTH_BASE + WIDTH_BASE
    assert num_parameters(ours_body) + pooler == num_parameters(body) == 109_482_240
    assert num_parameters(ours_clf) == num_parameters(clf)


def test_loader_refuses_what_is_not_bert() -> None:
    torch.manual_seed(0)
    gpt2_config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=20, bos_token_id=0, eos_token_id=0)
    gpt2 = transformers.GPT2LMHeadModel(gpt2_config)
    with pytest.raises(ValueError, match="no embeddings"):
        load_bert_state_dict(gpt2.state_dict())
    sd = transformers.BertModel(hf_config()).state_dict()
    pre_norm = ModelConfig.bert_base(vocab_size=VOCAB, d_model=WIDTH, n_heads=2, n_layers=2, d_ff=96, max_seq_len=24,
                                     type_vocab_size=TYPES, norm_placement="pre", final_norm=True)  # fmt: skip
    with pytest.raises(ValueError, match="BERT-shaped config"):
        load_bert_state_dict(sd, pre_norm)
    with pytest.raises(ValueError, match="has 2 layers but the config says n_layers=3"):
        load_bert_state_dict(sd, pre_norm.replace(norm_placement="post", final_norm=False, n_layers=3))
    truncated = {k: v for k, v in sd.items() if "layer.1.output.dense.bias" not in k}
    with pytest.raises(ValueError, match="encoder.layer.1.output.dense.bias"):
        load_bert_state_dict(truncated)


# --- token types, as an option of every encoder ------------------------------------------------------------


def tiny(**changes) -> ModelConfig:
    base = dict(vocab_size=30, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=12, dropout=0.0)
    return ModelConfig.bert_base(**{**base, **changes})


def test_type_zero_is_the_default_and_other_types_change_the_output() -> None:
    torch.manual_seed(0)
    model = Encoder(tiny()).eval()
    ids = torch.randint(0, 30, (2, 7))
    zeros, ones = torch.zeros_like(ids), torch.ones_like(ids)
    assert_close(model.hidden_states(ids), model.hidden_states(ids, token_type_ids=zeros))
    assert not torch.allclose(model.hidden_states(ids), model.hidden_states(ids, token_type_ids=ones))
    expected = model.embed.token(ids) + model.embed.position(7) + model.embed.token_type(ones)  # before the norm
    assert_close(model.embed(ids, token_type_ids=ones), model.embed.norm(expected))


def test_bad_token_types_are_refused() -> None:
    ids = torch.randint(0, 30, (2, 7))
    with pytest.raises(ValueError, match="type_vocab_size=0"):
        Encoder(tiny(type_vocab_size=0))(ids, token_type_ids=torch.zeros_like(ids))
    model = Encoder(tiny())
    with pytest.raises(ValueError, match="token id 2 in token_type_ids is out of range"):
        model(ids, token_type_ids=torch.full_like(ids, 2))
    with pytest.raises(ValueError, match="token_type_ids has shape"):
        model(ids, token_type_ids=torch.zeros(2, 6, dtype=torch.long))
    with pytest.raises(ValueError, match="type_vocab_size=-1"):
        tiny(type_vocab_size=-1)


# --- what the tensors cannot tell, or a config that drops them --------------------------------------------------


def test_a_token_type_table_is_never_dropped() -> None:
    sd = transformers.BertModel(hf_config()).state_dict()
    config = ModelConfig.bert_base(vocab_size=VOCAB, d_model=WIDTH, n_heads=2, n_layers=2, d_ff=96, max_seq_len=24,
                                   type_vocab_size=0)  # fmt: skip
    with pytest.raises(ValueError, match=f"token-type table .*{TYPES} rows.* type_vocab_size=0; expected "
                                         f"type_vocab_size={TYPES}"):  # fmt: skip
        load_bert_state_dict(sd, config)


def test_heads_are_guessed_only_for_the_published_widths() -> None:
    """Width 96 (say 4 heads of 24): no published BERT has it, so the guess of 64-wide heads is not made."""
    sd = transformers.BertModel(hf_config(hidden_size=96, num_attention_heads=4)).state_dict()
    with pytest.raises(ValueError, match=r"width 96, which no published BERT has .* pass config="):
        load_bert_state_dict(sd)
    config = ModelConfig.bert_base(vocab_size=VOCAB, d_model=96, n_heads=4, n_layers=2, d_ff=96, max_seq_len=24,
                                   type_vocab_size=TYPES)  # fmt: skip
    assert load_bert_state_dict(sd, config).config.n_heads == 4
