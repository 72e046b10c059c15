"""`builtin:tiny-qwen3`: a tiny Qwen3 causal LM and its tokenizer, built locally and deterministically.

FOR SMOKE RUNS AND TESTS ONLY, NOT FOR RESULTS: the model has about half a million parameters, and its only
training is a short warm-up on tau2's gold agent turns (Hermes tool calls and closing lines), then
supervised steps on gold replays of retail training tasks in their real context (system prompt,
tools, user, tool results; text and native tool formats; with and without Qwen3's empty thinking block), so
that its samples look like agent turns often enough to exercise every code path (parsing, real tool calls and
tool errors, the user, rewards that differ within a GRPO group). The tokenizer is a byte-level BPE trained on tau2's own domain
texts, tool schemas and gold calls. Nothing is downloaded:
the machines ctu is tested on reach no model hub. The chat template speaks Qwen's format (``<|im_start|>``
roles, Hermes ``<tool_call>`` blocks, tools listed in the system turn, tool results in ``<tool_response>``, and
Qwen3's ``enable_thinking`` switch), so every code path that a real Qwen model takes is exercised.

`builtin:tiny-qwen3-thinking` is the same model taught to think (`build_thinking`): with thinking on (Qwen3's
``enable_thinking``, the `qwen3_thinking` chat template) each of its turns opens with a short ``<think>`` block (the
tool it is about to call, or that it answers), so that a thinking policy's path (reasoning sampled, kept in its turn's
training sample, left out of every later prompt) runs on a real model on CPU. For tests only too.

The build is cached as every built-in model is (`ctu.models.cache`: a versioned folder in ctu's cache, built once
among processes that ask at the same time, from any calling context).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctu.models.cache import Progress, build_atomically, cache_dir, has_weights
from ctu.models.tiny_qwen3_format import CHAT_TEMPLATE

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, Qwen3Config

NAME = "tiny-qwen3"
VERSION = "v8"
"""v8: 2 attention heads of size 32 and 1 key/value head (v7: 4 of 16 and 2): the same parameters and
attention cost, in a head size vLLM's CPU attention serves (32 and up; shared/REAL_VLLM_ON_CPU.md)."""
BUILD_MINUTES = "1-2"
"""How long a build from scratch takes on this project's 2-core machine (measured: 1.5 min), as told to users."""
VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
"""Qwen's control tokens: special (dropped when decoding for a parser)."""
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
"""Qwen's markup tokens: one token each but not special, so decoded text keeps them (as Qwen's tokenizer does)."""


def build_tokenizer(path: Path) -> None:
    """Train the byte-level BPE on `training_corpus()` and save it with the chat template to `path`."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from ctu.models.tiny_qwen3_data import call_tokens, training_corpus

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_corpus(), trainer=trainer)
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in call_tokens() + MARKUP_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
    )
    fast.save_pretrained(str(path))


WARMUP_STEPS = 300
WARMUP_BATCH = 16
WARMUP_LR = 3e-3
MAX_POSITION_OFFSET = 12000
"""Warm-up sequences start at a random position up to this, so the model behaves alike deep into a long prompt."""
CONTEXT_STEPS = 120
CONTEXT_LR = 2e-3
"""Supervised steps on gold turns in their real context (the retail training tasks of `tiny_qwen3_data.CONTEXT_TASKS`),
and their learning rate.
The context (~5k tokens) is run without gradients and kept as a KV cache; the turn is trained on top of it, so
a step costs ~0.2 s of CPU instead of ~1.1 s for a full backward pass through the context (measured here)."""


def build_model(path: Path, seed: int = 0, progress: Progress | None = None) -> None:
    """Save a tiny Qwen3 (hidden 64, 2 layers), warmed up on `agent_turns()` and trained on `gold_examples()`
    in context, next to the tokenizer in `path`. `progress` is told of each step.

    Deterministic: fixed seeds, one CPU thread, deterministic kernels.
    """
    import torch
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    from ctu.models import tiny_qwen3_data

    report = progress or (lambda phase, done, total: None)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(_config(tokenizer))
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=WARMUP_LR)
    model.train()
    try:
        _warm_up(model, optimizer, tokenizer, rng, report)
        report("replaying gold episodes", 0, 1)
        examples = tiny_qwen3_data.gold_examples()
        for group in optimizer.param_groups:
            group["lr"] = CONTEXT_LR
        train_in_context(model, optimizer, tokenizer, examples, rng, report)
        report("gold turns in their context", CONTEXT_STEPS, CONTEXT_STEPS)
    finally:
        torch.set_num_threads(threads)
    model.eval()
    model.save_pretrained(str(path))
    model.generation_config.save_pretrained(str(path))


def _config(tokenizer: PreTrainedTokenizerBase) -> Qwen3Config:
    """The architecture: hidden 64, 2 layers, 2 heads of 32 (vLLM's CPU attention serves head sizes of 32 and up),
    tied embeddings."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )


def _warm_up(model: PreTrainedModel, optimizer: torch.optim.Optimizer, tokenizer: PreTrainedTokenizerBase, rng: random.Random, report: Progress) -> None:
    """`WARMUP_STEPS` steps on batches of agent turns (`agent_turns()`) after an assistant header, the loss on the
    turn only, at random position offsets (below `MAX_POSITION_OFFSET`) so that any place in a context works."""
    import torch

    from ctu.models.tiny_qwen3_data import agent_turns

    header = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    turns = [tokenizer.encode(turn + tokenizer.eos_token, add_special_tokens=False)[:96] for turn in agent_turns()]
    for step in range(WARMUP_STEPS):
        report("warm-up on gold agent turns", step, WARMUP_STEPS)
        batch = [turns[rng.randrange(len(turns))] for _ in range(WARMUP_BATCH)]
        width = len(header) + max(len(turn) for turn in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)  # loss on the agent's turn only
        positions = torch.zeros((len(batch), width), dtype=torch.long)
        for row, turn in enumerate(batch):
            sequence = header + turn
            ids[row, : len(sequence)] = torch.tensor(sequence)
            labels[row, len(header) : len(sequence)] = torch.tensor(turn)
            start = rng.randrange(MAX_POSITION_OFFSET)
            positions[row] = torch.arange(start, start + width)
        loss = model(input_ids=ids, labels=labels, position_ids=positions).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def train_in_context(model: PreTrainedModel, optimizer: torch.optim.Optimizer, tokenizer: PreTrainedTokenizerBase, examples: list[Any],
                     rng: random.Random, report: Progress, steps: int = CONTEXT_STEPS, reasoning: bool = False,
                     phase: str = "gold turns in their context") -> None:
    """`steps` steps on gold turns (`examples`) after their episode's context, rendered in native or text mode and
    with or without thinking at random (with `reasoning`: thinking always, each turn opened by its reasoning, as
    `build_thinking` teaches); the loss on the turn only; `report` told of each step as `phase`."""
    import torch

    from ctu.models.tiny_qwen3_data import context_example

    for step in range(steps):
        report(phase, step, steps)
        example = examples[rng.randrange(len(examples))]
        native = rng.random() < 0.5
        prompt, target = context_example(tokenizer, example, native=native, thinking=reasoning or rng.random() < 0.5,
                                         reasoning=reasoning)
        with torch.no_grad():
            context = model(input_ids=torch.tensor([prompt[:-1]]), use_cache=True, logits_to_keep=1).past_key_values
        # the prompt's last token and the turn but its last token predict the turn
        logits = model(input_ids=torch.tensor([prompt[-1:] + target[:-1]]), past_key_values=context, use_cache=True).logits
        loss = torch.nn.functional.cross_entropy(logits[0].float(), torch.tensor(target))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def build(path: Path, with_model: bool = True, progress: Progress | None = None) -> Path:
    """Build the tokenizer (and the model) into `path` atomically (`ctu.models.cache.build_atomically`); returns `path`."""

    def fill(staging: Path) -> None:
        if progress is not None:
            progress("training the tokenizer", 0, 1)
        build_tokenizer(staging)
        if with_model:
            build_model(staging, progress=progress)

    return build_atomically(path, lambda folder: _complete(folder, with_model), fill)


def _complete(path: Path, with_model: bool) -> bool:
    """Whether `path` holds a finished build: the model's weights (`has_weights`), or the tokenizer without a model."""
    return has_weights(path) if with_model else (path / "tokenizer.json").exists()


def tokenizer_path() -> Path:
    """The cached tokenizer folder (built on first use; no model weights, no torch needed)."""
    path = cache_dir() / f"{NAME}-tokenizer-{VERSION}"
    return path if _complete(path, with_model=False) else build(path, with_model=False)


def model_folder() -> Path:
    """Where the built-in model is cached (built or not)."""
    return cache_dir() / f"{NAME}-{VERSION}"


def model_path(progress: Progress | None = None) -> Path:
    """The cached model folder with tokenizer and weights (built on first use, ~1-2 min here; needs torch)."""
    return model_folder() if is_built() else build(model_folder(), with_model=True, progress=progress)


def is_built() -> bool:
    """Whether the built-in model is in the cache already (so `model_path()` returns at once)."""
    return _complete(model_folder(), with_model=True)


THINKING_NAME = "tiny-qwen3-thinking"
"""The thinking variant's built-in name (`build_thinking`)."""
THINKING_VERSION = "t1"
"""t1: `THINKING_STEPS` steps at `THINKING_LR` from the base build."""
THINKING_STEPS = 300
THINKING_LR = 1e-3


def thinking_folder() -> Path:
    """Where the thinking variant is cached (built or not): beside the base build, named after it and its version."""
    base = model_folder()
    return base.with_name(f"{base.name}-thinking-{THINKING_VERSION}")


def build_thinking(progress: Progress | None = None) -> Path:
    """The cached thinking variant, built first if need be (the base model too): the base build taught
    `THINKING_STEPS` steps on its gold turns in context, thinking on, each turn opened by its reasoning line
    (`train_in_context`); atomically and once among processes asking at the same time (`ctu.models.cache.build_atomically`)."""
    base = model_path(progress)

    def fill(staging: Path) -> None:
        shutil.copytree(base, staging, dirs_exist_ok=True)
        _teach_thinking(staging, progress or (lambda phase, done, total: None))

    return build_atomically(thinking_folder(), lambda folder: _complete(folder, True), fill)


def _teach_thinking(path: Path, report: Progress, seed: int = 0) -> None:
    """The thinking steps of `build_thinking` on the model in `path`, saved over it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ctu.models.tiny_qwen3_data import gold_examples

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(path))
    optimizer = torch.optim.AdamW(model.parameters(), lr=THINKING_LR)
    model.train()
    try:
        report("replaying gold episodes", 0, 1)
        train_in_context(model, optimizer, tokenizer, gold_examples(), random.Random(seed), report, steps=THINKING_STEPS,
                         reasoning=True, phase="thinking before gold turns")
        report("thinking before gold turns", THINKING_STEPS, THINKING_STEPS)
    finally:
        torch.set_num_threads(threads)
    model.eval()
    model.save_pretrained(str(path))
