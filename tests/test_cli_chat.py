"""``companion-train --chat`` / ``--dpo``, ``companion-sample --chat`` and ``companion-export`` (issue 31, items 1-4).

Runs call ``main(argv)`` in-process with a one-layer model of context 32 on a few dozen tiny conversations. What
is checked does not depend on how well such a model learns: the first logged loss is the source model's SFT loss
on that batch (its weights, the chat template, the assistant-only mask), DPO starts at log 2 with a zero margin,
accuracy and KL, a stopped DPO run resumes to the same numbers, and the exported folder works in ``transformers``
(``apply_chat_template`` gives the template's ids, the logits are the run's, and ``pipeline`` asked for 100 new
tokens on a 32-token model does not raise).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from cli_helpers import corpus_file, one_line_error
from cli_helpers import train as train_cli
from torch.testing import assert_close

from companion.cli.export import main as export_main
from companion.cli.run_folder import CHECKPOINT, REFERENCE, load_run, read_run_checkpoint
from companion.cli.sample import main as sample_main
from companion.cli.train import read_log
from companion.finetune import CHAT_TOKENS, END, encode_chat, encode_prompt, grow_token_rows, sft_batch, sft_loss
from companion.models import GPT, ModelConfig

WORDS = ["attention", "token", "layer", "head", "model", "vector", "softmax", "query", "key", "value", "mask", "norm"]
LOOP = ["--batch-size", "4", "--eval-every", "3", "--no-progress"]


def chat_line(word: str) -> str:
    return json.dumps({"messages": [{"role": "user", "content": f"{word}?"},
                                    {"role": "assistant", "content": f"A {word}."}]})  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("data")
    chat, pairs = folder / "chat.jsonl", folder / "pairs.jsonl"
    chat.write_text("".join(chat_line(w) + "\n" for w in WORDS * 2), encoding="utf-8")
    pairs.write_text("".join(json.dumps({"prompt": f"{w}?", "chosen": f"A {w}.", "rejected": f"{w} A."}) + "\n"
                             for w in WORDS), encoding="utf-8")  # fmt: skip
    return {"chat": chat, "pairs": pairs, "text": corpus_file(tmp_path_factory)}


@pytest.fixture(scope="module")
def base(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE run with a context of 32 tokens: the model the chats fine-tune."""
    out = tmp_path_factory.mktemp("runs") / "base"
    assert train_cli(files["text"], "--out", out, "--vocab-size", "300", "--d-model", "16", "--n-layers", "1",
                     "--n-heads", "2", "--seq-len", "32", *LOOP, "--steps", "6", "--lr", "3e-3") == 0  # fmt: skip
    return out


@pytest.fixture(scope="module")
def sft(files: dict[str, Path], base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "sft"
    assert train_cli("--chat", files["chat"], "--init-from", base, "--out", out, *LOOP, "--steps", "6",
                     "--lr", "3e-3") == 0  # fmt: skip
    return out


def test_chat_fine_tuning_starts_from_the_source_on_the_assistant_turns(files: dict[str, Path], base: Path,
                                                                        sft: Path) -> None:  # fmt: skip
    run = load_run(sft)
    specials = run.tokenizer.special_tokens
    assert all(t in specials for t in CHAT_TOKENS)
    source = load_run(base, decode_layout=False).model
    assert run.model.config.vocab_size == source.config.vocab_size + 4  # one new embedding row per marker
    # The first logged loss, recomputed by hand: the source's weights with the four new rows, the step-0 picks of
    # the training split (the first 22 of the 24 lines; the last 10 % validate), the assistant-only loss mask.
    grown = GPT(run.model.config.replace(decode_layout=False))
    grown.load_state_dict(grow_token_rows(source.state_dict(), run.model.config.vocab_size))
    chats = [json.loads(line)["messages"] for line in files["chat"].read_text(encoding="utf-8").splitlines()][:22]
    picks = torch.randint(22, (4,), generator=torch.Generator().manual_seed(0)).tolist()
    batch = sft_batch([encode_chat(chats[k], run.tokenizer) for k in picks], specials[END])
    with torch.no_grad():
        expected = sft_loss(grown.eval(), batch).item()
    rows = read_log(sft)
    assert rows[0]["loss"] == pytest.approx(expected, rel=1e-5)
    assert [r["step"] for r in rows] == list(range(1, 7)) and "val_loss" in rows[2]
    assert (sft / "chat.jsonl").read_bytes() == files["chat"].read_bytes()  # kept, to resume without the file


@pytest.mark.parametrize("tie", [True, False])
def test_new_token_rows_start_at_the_mean_and_a_tied_head_stays_tied(tie: bool) -> None:
    model = GPT(ModelConfig.gpt2_small(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_seq_len=8,
                                       tie_embeddings=tie))  # fmt: skip
    state = grow_token_rows(model.state_dict(), 13)
    for key in ("embed.token.weight", "lm_head.weight"):
        assert_close(state[key][:10], model.state_dict()[key])  # the old rows unchanged
        assert_close(state[key][10:], model.state_dict()[key].mean(0).expand(3, -1))  # the new ones: their mean
    grown = GPT(model.config.replace(vocab_size=13))
    grown.load_state_dict(state)
    assert (grown.lm_head.weight is grown.embed.token.weight) == tie
    with pytest.raises(ValueError, match="vocab_size=9 is smaller"):
        grow_token_rows(model.state_dict(), 9)


def test_sample_chat_answers_and_stops_at_the_end_of_turn(sft: Path, base: Path, capsys) -> None:
    capsys.readouterr()
    assert sample_main([str(sft), "--chat", "--prompt", "token?", "--system", "Be brief.", "--greedy",
                        "--max-new-tokens", "8"]) == 0  # fmt: skip
    reply = capsys.readouterr().out
    assert "<|assistant|>" not in reply and "token?" not in reply  # the reply alone, not the prompt
    assert sample_main([str(base), "--chat", "--prompt", "token?"]) == 2
    assert "was not chat-tuned" in one_line_error(capsys)
    assert sample_main([str(sft), "--system", "x", "--prompt", "token?"]) == 2
    assert "pass --chat" in one_line_error(capsys)


def test_chat_with_lora(files: dict[str, Path], base: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "lora"
    assert train_cli("--chat", files["chat"], "--init-from", base, "--out", out, "--lora", "2", *LOOP,
                     "--steps", "3") == 0  # fmt: skip
    assert "all of them LoRA adapters" in capsys.readouterr().out
    assert read_run_checkpoint(out / CHECKPOINT)["lora"]["merged"]


@pytest.mark.parametrize(
    ("line", "needle"),
    [("not json", "is not valid JSON"), ('{"text": "hi"}', "expected an object with the keys ['messages']"),
     ('{"messages": []}', "non-empty list"),
     ('{"messages": [{"role": "robot", "content": "hi"}]}', "expected one of system, user, assistant"),
     ('{"messages": [{"role": "user", "content": 3}]}', "expected a string"),
     ('{"messages": [{"role": "user", "content": "hi"}]}', "no assistant message")],
)  # fmt: skip
def test_a_bad_line_is_named_and_nothing_is_written(files: dict[str, Path], base: Path, tmp_path: Path, capsys,
                                                    line: str, needle: str) -> None:  # fmt: skip
    bad = tmp_path / "bad.jsonl"
    bad.write_text(chat_line("token") + "\n\n" + line + "\n" + chat_line("head") + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert train_cli("--chat", bad, "--init-from", base, "--out", out, *LOOP) == 2
    message = one_line_error(capsys)
    assert "line 3" in message and needle in message, message
    assert not out.exists()


def test_a_conversation_longer_than_the_context_is_left_out_by_line(files: dict[str, Path], base: Path,
                                                                     tmp_path: Path, capsys) -> None:  # fmt: skip
    long = tmp_path / "long.jsonl"
    long.write_text("\n".join([chat_line("x" * 200)] + [chat_line(w) for w in WORDS]) + "\n", encoding="utf-8")
    assert train_cli("--chat", long, "--init-from", base, "--out", tmp_path / "out", *LOOP, "--steps", "1") == 0
    assert "1 conversation longer than --seq-len 32 tokens with the chat template left out (line 1)" in \
        capsys.readouterr().out
    assert read_run_checkpoint(tmp_path / "out" / CHECKPOINT)["data"]["n_examples"] == len(WORDS)
    long.write_text(chat_line("x" * 200) + "\n" + chat_line("y" * 200) + "\n", encoding="utf-8")
    assert train_cli("--chat", long, "--init-from", base, "--out", tmp_path / "none", *LOOP) == 2
    assert "which leaves 0" in one_line_error(capsys) and not (tmp_path / "none").exists()


def test_a_hugging_face_folder_is_chat_tuned_too(files: dict[str, Path], base: Path, tmp_path: Path) -> None:
    """The tokenizer.json of a Hugging Face SOURCE takes the chat markers as well (HFTokenizer)."""
    assert export_main([str(base), str(tmp_path / "hf")]) == 0
    out = tmp_path / "sft"
    assert train_cli("--chat", files["chat"], "--init-from", tmp_path / "hf", "--out", out, *LOOP, "--steps",
                     "2") == 0  # fmt: skip
    assert all(t in load_run(out).tokenizer.special_tokens for t in CHAT_TOKENS)
    assert sample_main([str(out), "--chat", "--prompt", "token?", "--max-new-tokens", "3"]) == 0


def test_flag_refusals(files: dict[str, Path], base: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    for args, needle in [(["--chat", files["chat"]], "pass --init-from"),
                         (["--chat", files["chat"], "--dpo", files["pairs"], "--init-from", base], "pass one"),
                         (["--dpo", files["pairs"], files["text"], "--init-from", base], "leave out TEXT_FILE"),
                         (["--chat", files["chat"], "--beta", "0.5", "--init-from", base], "needs --dpo")]:  # fmt: skip
        assert train_cli(*args, "--out", out, *LOOP) == 2
        assert needle in one_line_error(capsys)
    assert not out.exists()


def test_dpo_logs_loss_margin_accuracy_and_kl_and_resumes_exactly(files: dict[str, Path], sft: Path,
                                                                  tmp_path: Path, capsys) -> None:  # fmt: skip
    args = ["--dpo", files["pairs"], "--init-from", sft, *LOOP, "--steps", "6", "--beta", "0.5", "--lr", "3e-3"]
    assert train_cli(*args, "--out", tmp_path / "dpo") == 0
    printed = capsys.readouterr().out
    assert "by DPO (β = 0.5)" in printed and "reward margin" in printed and "accuracy" in printed and "KL" in printed
    rows = read_log(tmp_path / "dpo")
    first = rows[0]  # policy = reference: loss log 2, no margin, no preference yet, no distance
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert first["reward_margin"] == 0 and first["accuracy"] == 0 and first["kl"] == pytest.approx(0, abs=1e-7)
    assert {"val_reward_margin", "val_accuracy", "val_kl"} <= set(rows[2]) and rows[-1]["kl"] > 0
    reference = torch.load(tmp_path / "dpo" / REFERENCE, weights_only=True)  # the starting weights, frozen
    assert_close(reference["lm_head.weight"], load_run(sft, decode_layout=False).model.lm_head.weight)
    # stopped at step 3 and resumed: the same log, bit for bit
    assert train_cli(*args, "--out", tmp_path / "stopped", "--stop-at", "3") == 0
    assert train_cli("--out", tmp_path / "stopped", "--resume", "--no-progress") == 0
    assert read_log(tmp_path / "stopped") == rows


def test_export_works_in_transformers(sft: Path, tmp_path: Path, capsys) -> None:
    transformers = pytest.importorskip("transformers")
    hf = tmp_path / "hf"
    assert export_main([str(sft), str(hf)]) == 0
    assert "repeat position 31" in capsys.readouterr().out  # the context, and what happens past it
    assert {p.name for p in hf.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json",
                                              "tokenizer_config.json", "generation_config.json"}  # fmt: skip
    run = load_run(sft)
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "我爱NLP?"}]
    ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert ids == encode_prompt(chat, run.tokenizer)  # the template, in Jinja, gives the same ids
    model = transformers.AutoModelForCausalLM.from_pretrained(hf).eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        assert_close(model(x).logits, run.model(x), atol=1e-4, rtol=1e-4)  # within the context: the run's logits
    pipe = transformers.pipeline("text-generation", model=str(hf), device="cpu")
    out = pipe("The model", max_new_tokens=100, do_sample=False)  # 100 tokens past a 32-token context: no IndexError
    assert out[0]["generated_text"].startswith("The model")
    answer = pipe([{"role": "user", "content": "token?"}], max_new_tokens=100, do_sample=False)
    assert answer[0]["generated_text"][-1]["role"] == "assistant"
    assert sample_main([str(hf), "--chat", "--prompt", "token?", "--max-new-tokens", "5", "--greedy"]) == 0
    capsys.readouterr()
    assert export_main([str(sft), str(hf)]) == 2  # never over an older save
    assert "not empty" in one_line_error(capsys)
