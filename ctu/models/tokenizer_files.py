"""A model's tokenizer read from its files without transformers, which imports torch (`ctu validate` must not):
`tokenizers` for the ids, jinja2 for the chat template rendered the way transformers renders it
(`transformers.utils.chat_template_utils`: a sandboxed environment with `trim_blocks` and `lstrip_blocks`, the loop
controls extension, a `tojson` that keeps non-ASCII text and does not escape HTML, `raise_exception`,
`strftime_now`, and the special tokens as variables). What `ctu validate` counts a first prompt with
(`ctu.spec.prompt_fit`); runs and evaluations load transformers' own tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json")
"""The files a tokenizer folder may hold that the count reads (the first two are needed)."""
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""transformers' named special tokens, handed to the chat template as variables (its `special_tokens_map`)."""


def tokenizer_folder(model_path: str) -> Path | None:
    """The folder holding `model_path`'s tokenizer files, without building or downloading anything: a ``builtin:``
    model's cache folder once built, a local folder, or a hub id's snapshot in the Hugging Face cache; None when
    none of these holds ``tokenizer.json`` and ``tokenizer_config.json``."""
    from ctu.models.builtin import BUILTIN_PREFIX, builtin_models

    if model_path.startswith(BUILTIN_PREFIX):
        model = builtin_models().get(model_path.removeprefix(BUILTIN_PREFIX))
        folder = model.folder() if model is not None and model.is_built() else None
    elif Path(model_path).is_dir():
        folder = Path(model_path)
    else:
        folder = _hub_snapshot(model_path)
    return folder if folder is not None and all((folder / name).is_file() for name in TOKENIZER_FILES[:2]) else None


def _hub_snapshot(repo_id: str) -> Path | None:
    """The snapshot folder of hub model `repo_id` in the Hugging Face cache, if its tokenizer was downloaded.
    huggingface_hub (tens of milliseconds to import) resolves it only when the cache holds a folder of the model
    (``models--<org>--<name>`` under ``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or the default), so `ctu validate` of a
    model never downloaded here does not pay for it."""
    import os

    if repo_id.count("/") != 1 or repo_id.startswith(("/", ".")):
        return None
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    cache = Path(os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub"))
    if not (cache / f"models--{repo_id.replace('/', '--')}").is_dir():
        return None
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "tokenizer.json", cache_dir=cache)
    except ValueError:  # not a valid hub id (huggingface_hub's HFValidationError)
        return None
    return Path(found).parent if isinstance(found, str) else None


class FileTokenizer:
    """The tokenizer in `folder` (`tokenizer_folder`), with as much of a Hugging Face tokenizer as a chat-template
    component calls (`ctu.components.chat_templates.base.Tokenizer`, `apply_chat_template` with
    ``tokenize=False``, `backend_tokenizer`).

    Raises:
        OSError: a file is missing or unreadable.
        ValueError: a file is not what a tokenizer folder holds (not JSON, no chat template).
    """

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self.folder = folder
        self.backend_tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.config: dict[str, object] = json.loads((folder / "tokenizer_config.json").read_text())
        self.special_tokens_map = {key: text for key in SPECIAL_TOKEN_KEYS if (text := _token_text(self.config.get(key)))}

    @property
    def eos_token(self) -> str | None:
        """The end-of-turn token's text."""
        return self.special_tokens_map.get("eos_token")

    @property
    def eos_token_id(self) -> int | None:
        """The end-of-turn token's id."""
        return None if self.eos_token is None else self.backend_tokenizer.token_to_id(self.eos_token)

    @property
    def all_special_tokens(self) -> list[str]:
        """Every added special token's text."""
        return [token.content for token in self.backend_tokenizer.get_added_tokens_decoder().values() if token.special]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`."""
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str:
        """Text of `token_ids`."""
        return self.backend_tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)

    @cached_property
    def templates(self) -> dict[str, str]:
        """The folder's chat templates by name (``default``, and others such as ``tool_use``): from
        ``chat_template.jinja``, ``chat_template.json`` or ``tokenizer_config.json``, where transformers looks."""
        if (self.folder / "chat_template.jinja").is_file():
            return {"default": (self.folder / "chat_template.jinja").read_text()}
        found: object = self.config.get("chat_template")
        if (self.folder / "chat_template.json").is_file():
            found = json.loads((self.folder / "chat_template.json").read_text()).get("chat_template")
        if isinstance(found, str):
            return {"default": found}
        if isinstance(found, list):
            return {entry["name"]: entry["template"] for entry in found if isinstance(entry, dict)}
        return {}

    def apply_chat_template(self, conversation: Sequence[Mapping[str, object]], tools: Sequence[Mapping[str, object]] | None = None,
                            tokenize: bool = False, add_generation_prompt: bool = False, chat_template: str | None = None,
                            **kwargs: object) -> str:
        """The conversation as prompt text, as transformers' `apply_chat_template` renders it (``tokenize=False``
        only). `chat_template` is a Jinja template, or a template's name in the folder; None: ``tool_use`` when
        there are tools and the folder has it, else ``default``.

        Raises:
            ValueError: ``tokenize=True``, or the folder has no chat template.
            jinja2.TemplateError: the template raised (`raise_exception`) or does not parse.
        """
        if tokenize:
            raise ValueError("FileTokenizer renders text only: encode it with `encode`")
        if chat_template is None:
            source = self.templates.get("tool_use" if tools is not None and "tool_use" in self.templates else "default")
        else:
            source = self.templates.get(chat_template, chat_template)
        if source is None:
            raise ValueError(f"{self.folder} has no chat template")
        return _compiled(source).render(messages=list(conversation), tools=None if tools is None else list(tools),
                                        documents=None, add_generation_prompt=add_generation_prompt,
                                        **{**self.special_tokens_map, **kwargs})


def _token_text(value: object) -> str | None:
    """A special token's text as a tokenizer config writes it (a string, or an added token's ``content``)."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


_templates: dict[str, object] = {}


def _compiled(source: str):  # -> jinja2.Template (jinja2 is imported here only)
    """`source` compiled in transformers' chat-template environment (see the module docstring), once per text. A
    ``{% generation %}`` block renders its body (transformers tracks where it is, which a count does not need)."""
    if source not in _templates:
        import jinja2
        from jinja2 import nodes
        from jinja2.ext import Extension, loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        class Generation(Extension):
            tags = {"generation"}

            def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
                lineno = next(parser.stream).lineno
                body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
                return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

            def _body(self, caller: jinja2.runtime.Macro) -> str:
                return caller()

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        def tojson(value: object, ensure_ascii: bool = False, indent: int | None = None, separators: tuple[str, str] | None = None,
                   sort_keys: bool = False) -> str:
            return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
        environment.filters["tojson"] = tojson
        environment.globals["raise_exception"] = raise_exception
        environment.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
        _templates[source] = environment.from_string(source)
    return _templates[source]
