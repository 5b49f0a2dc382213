"""A complete tiny "user checkpoint", built offline: a random Qwen2 model saved by transformers
next to a byte-level BPE tokenizer trained here with `tokenizers` and a Qwen-style chat template.

The folder has what a downloaded Hugging Face checkpoint has (config.json, model.safetensors,
tokenizer.json, tokenizer_config.json, chat template, generation_config.json), so every loading
path of a real run (`model.init_from`, `tokenizer.kind = "hf"`, chat templates, export, reload
with transformers) runs on it in seconds. The tests use it; so can a user trying the
Hugging Face configs on a CPU:

    python -m rlvr.testing tiny-checkpoint /tmp/tiny-qwen
    python launch.py --config=configs/gsm8k.py --workdir=/tmp/gsm8k-tiny \\
        --config.model.init_from=/tmp/tiny-qwen ...   (README: "Train your own checkpoint")

The model is saved by `transformers.Qwen2ForCausalLM.save_pretrained` when torch is installed,
else by `rlvr.models.save_pretrained` from a random `rlvr.models.Transformer` (same files).
Like Qwen2.5's base tokenizers, eos is `<|endoftext|>` and the template ends a turn with
`<|im_end|>` (a different token), and there is no bos token.
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Optional

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TINY_QWEN = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=False)


def default_corpus() -> list[str]:
    """Training text for the tiny tokenizer: the shipped task files' prompts and answers plus
    a little code and JSON (all offline)."""
    from rlvr.tasks import files

    texts = []
    for name in files.BUILTIN_FILES.values():
        with open(files.builtin_path(name), encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                texts.extend(str(v) for k, v in record.items()
                             if k in ("question", "answer", "problem", "solution", "prompt"))
    texts += ["def f(x):\n    return x + 1\n", "```python\nprint('hello')\n```",
              '{"name": "Ada", "age": 36}', "The answer is \\boxed{42}."]
    return texts


def build_tokenizer(path: str, *, vocab_size: int = 2048, corpus: Optional[Iterable[str]] = None,
                    tools: bool = False):
    """Trains a byte-level BPE tokenizer with the chat template (`tools`: the shipped
    tool-aware Qwen2.5-style template, rlvr/agents/templates/qwen_tools.jinja); saves it to
    `path`; returns the `transformers.PreTrainedTokenizerFast`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    texts = list(corpus if corpus is not None else default_corpus())
    if tools and corpus is None:  # tool schemas, calls and results: short tool prompts
        from rlvr.agents import QWEN_TOOLS_TEMPLATE_PATH
        from rlvr.agents.trajectories import __file__ as trajectories_py

        data = os.path.join(os.path.dirname(trajectories_py), "data", "kv_trajectories.jsonl")
        for fn in (QWEN_TOOLS_TEMPLATE_PATH, data):
            with open(fn, encoding="utf-8") as f:
                texts.append(f.read())
    raw.train_from_iterator(texts, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>",
                                  additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    if tools:
        from rlvr.agents import qwen_tools_template

        tok.chat_template = qwen_tools_template()
    else:
        tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    return tok


def build_checkpoint(path: str, *, seed: int = 0, vocab_size: int = 2048, saver: str = "auto",
                     model_vocab_size: int = 0, tools: bool = False, **model_kw) -> str:
    """Writes the tiny checkpoint folder (module docstring) to `path`; returns `path`.

    saver: "transformers" (needs torch), "rlvr" (no torch) or "auto" (transformers if torch
    imports). vocab_size: the tokenizer's BPE vocabulary. model_vocab_size: the model's embedding
    rows, padded beyond the tokenizer's (as Qwen2.5 pads 151,665 tokens to 151,936; 0 = the
    tokenizer's size); ids past the tokenizer decode to nothing. `model_kw` override the
    `TINY_QWEN` shape. tools: the tokenizer gets the shipped tool-aware chat template (tool
    kits, `rlvr.tasks.tool_agent`).
    """
    if saver not in ("auto", "transformers", "rlvr"):
        raise ValueError(f"build_checkpoint: saver must be auto | transformers | rlvr, got "
                         f"{saver!r}")
    os.makedirs(path, exist_ok=True)
    tok = build_tokenizer(path, vocab_size=vocab_size, tools=tools)
    shape = {**TINY_QWEN, **model_kw}
    vocab = len(tok)
    if model_vocab_size:
        if model_vocab_size < vocab:
            raise ValueError(f"build_checkpoint: model_vocab_size ({model_vocab_size}) must be >= "
                             f"the tokenizer's {vocab} tokens (or 0)")
        vocab = model_vocab_size
    if saver == "auto":
        try:
            import torch  # noqa: F401
            saver = "transformers"
        except ImportError:
            saver = "rlvr"
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    if saver == "transformers":
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, eos_token_id=eos, **shape))
        with torch.no_grad():  # spread the weights so outputs differ from token to token
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                else:
                    p.copy_(0.08 * torch.randn_like(p))
        model.save_pretrained(path)
    else:
        from flax import nnx

        from rlvr.models import ModelConfig, Transformer, save_pretrained

        cfg = ModelConfig(vocab_size=vocab, hidden_size=shape["hidden_size"],
                          intermediate_size=shape["intermediate_size"],
                          num_layers=shape["num_hidden_layers"],
                          num_heads=shape["num_attention_heads"],
                          num_kv_heads=shape["num_key_value_heads"],
                          head_dim=shape["hidden_size"] // shape["num_attention_heads"],
                          max_position_embeddings=shape["max_position_embeddings"],
                          tie_word_embeddings=shape["tie_word_embeddings"],
                          attention_bias=True, architecture="qwen2")
        save_pretrained(Transformer(cfg, rngs=nnx.Rngs(seed)), path)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [eot, eos], "pad_token_id": eos}, f)
    return path


def main(argv=None) -> None:
    import argparse

    p = argparse.ArgumentParser(prog="python -m rlvr.testing",
                                description="Build a tiny random Qwen2 checkpoint folder.")
    p.add_argument("what", choices=["tiny-checkpoint"])
    p.add_argument("path")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--saver", default="auto", choices=["auto", "transformers", "rlvr"])
    p.add_argument("--tools", action="store_true",
                   help="the tool-aware chat template (for the tool kits, e.g. kv_tools)")
    a = p.parse_args(argv)
    print(build_checkpoint(a.path, seed=a.seed, saver=a.saver, tools=a.tools))


if __name__ == "__main__":
    main()
