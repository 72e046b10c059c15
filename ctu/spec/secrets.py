"""Secrets a spec names: API keys are never in a spec, only the names of the environment variables that hold them,
in fields whose names end in ``_env`` (`ctu.components.endpoint.OpenAIEndpointParams.api_key_env`, the wandb
tracker's, the Tinker backend's).

A run reads their values where it starts (`secret_values`) and hands them, in memory, to the processes that call
the endpoints (on the `skyrl` backend, the Ray task that runs the rollouts: `ctu.backends.skyrl.experiment`); no
value is written to the run directory, a log or Ray's runtime environment (whose agent logs it on every node).

Whatever text carries a value back (an endpoint that echoes the request's key in its error, a traceback), it is
replaced at the writer: each process remembers the values of the variables its specs name (`remember_secrets`, from
the composition root), and every writer of text ctu owns (trajectory lines, an evaluation's folder, the logs, the
console, `ctu view`'s page) passes its text through `scrub` (`ctu.redaction`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ctu.spec.errors import SpecIssue

if TYPE_CHECKING:
    from ctu.spec.models import Spec

SECRET_FIELD_SUFFIX = "_env"
"""A component field whose name ends so, holding a string, names an environment variable that holds a secret."""
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""What an environment variable's name is (POSIX's portable names)."""
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
"""A variable whose name matches holds a secret by its name's word."""
_PREFIXED_KEY = re.compile(r"(?:sk|pk|rk|hf|gh[pousr]|github_pat|xox[abprs]|AKIA|AIza|glpat)[-_][-_A-Za-z0-9]{16,}"
                           r"|Bearer\s+\S{8,}")
"""Keys by their issuers' prefixes (OpenAI's, Anthropic's, Hugging Face's, GitHub's, Slack's, AWS's, Google's,
GitLab's), or an HTTP bearer credential."""
_TOKEN_RUN = re.compile(r"(?=[^0-9]*[0-9])(?=[^A-Za-z]*[A-Za-z])[A-Za-z0-9_\-+=]{32,}")
"""A long run of token characters, letters and digits both, without spaces, dots or slashes (not a dotted spec
path, a variable's name or a file name)."""


def is_prefixed_key(value: object) -> bool:
    """Whether `value` is a string shaped like a key by an issuer's prefix (`_PREFIXED_KEY`): no spec field
    holds one."""
    return isinstance(value, str) and bool(_PREFIXED_KEY.fullmatch(value.strip()))


def looks_like_secret(value: object) -> bool:
    """Whether `value` is a string shaped like an API key or token: `is_prefixed_key`, or a long run of token
    characters (never echoed in a message, never accepted where a variable's name or an environment value
    belongs). Paths and URLs are not keys."""
    if not isinstance(value, str) or "://" in value or value.startswith(("/", "./", "~")):
        return False
    return is_prefixed_key(value) or bool(_TOKEN_RUN.fullmatch(value.strip()))


def secret_variables(spec: Spec) -> list[str]:
    """The environment variables `spec` names as holding secrets (every ``*_env`` field set), sorted, each once."""
    return sorted({value for _, key, value in _leaves(spec.model_dump(mode="json"))
                   if key.endswith(SECRET_FIELD_SUFFIX) and isinstance(value, str) and value})


def secret_values(spec: Spec) -> dict[str, str]:
    """The values of `secret_variables` set in this process's environment, by variable name (unset ones left out:
    where the value is read, the process's own environment then decides)."""
    return {name: os.environ[name] for name in secret_variables(spec) if os.environ.get(name)}


def _leaves(data: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """Every (dotted path, key, value) of `data`'s dicts and lists (a list item's key is its index), depth first."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        where = f"{path}.{key}" if path else str(key)
        yield where, str(key), value
        yield from _leaves(value, where)


def secret_issues(spec: Spec) -> Iterator[SpecIssue]:
    """Every place a key would be written with the spec (the resolved spec, the trackers' configs): a key where a
    variable's name belongs (an ``*_env`` field that is not a variable's name), a secret in
    `backend.runtime_env.env_vars` (a variable named like one, or a value shaped like a key: Ray's runtime-env
    agent also logs it on every node), and a value shaped like a key by its issuer's prefix in any field. No
    message repeats the value."""
    for path, key, value in _leaves(spec.model_dump(mode="json")):
        if key.endswith(SECRET_FIELD_SUFFIX) and isinstance(value, str) and not VARIABLE_NAME.fullmatch(value):
            yield SpecIssue(path, "must name the environment variable that holds the key (e.g. OPENAI_API_KEY), not "
                                  "hold a key: the value given is not a variable's name (it is not repeated here)")
        elif ".runtime_env.env_vars." in f".{path}" and (SECRET_NAME.search(key) or looks_like_secret(value)):
            yield SpecIssue(path, "a secret here would be written to the resolved spec and to Ray's logs on every "
                                  "node: name its variable in the component's `api_key_env` instead (ctu hands the key "
                                  "to the rollouts in memory); the value is not repeated here")
        elif is_prefixed_key(value):
            yield SpecIssue(path, "looks like an API key, which a spec never holds (the resolved spec is written to "
                                  "the run directory and the trackers): export it and name its variable in the "
                                  "component's `api_key_env`; the value is not repeated here")


_KEYLIKE_WORD = re.compile(r"[^\s,{}\[\]:'\"=]+")


def redacted(text: str) -> str:
    """`text` (e.g. a command-line override, repeated in a message) with every word shaped like a key
    (`looks_like_secret`) replaced by ``***``."""
    return _KEYLIKE_WORD.sub(lambda word: "***" if looks_like_secret(word.group()) else word.group(), text)
