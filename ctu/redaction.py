"""Secrets scrubbed at the writer: whatever text carries a secret's value back (an endpoint that echoes the
request's key in its error body, a traceback, a library's log line) has it replaced before the text reaches a file,
a page or the console.

Each process remembers the values of the environment variables its specs name as secrets (`remember_secrets`, from
the composition root with `ctu.spec.secrets.secret_variables`), and every writer of text ctu owns (trajectory lines,
an evaluation's files, the log files, the console, `ctu view`'s page) passes its text through `scrub`. Light: the
consoles of every command import it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TextIO

MIN_SECRET_LENGTH = 6
"""A value shorter than this is not scrubbed (a test's "x" would blank every x in a log)."""
_REMEMBERED: dict[str, str] = {}
"""This process's secrets to scrub: each value by its variable's name (`remember_secrets`)."""


def remember_secrets(variables: Iterable[str]) -> None:
    """Remember, for `scrub`, the values of the environment variables `variables` (the ones set in this process,
    of at least `MIN_SECRET_LENGTH` characters)."""
    _REMEMBERED.update({name: os.environ[name] for name in variables if len(os.environ.get(name, "")) >= MIN_SECRET_LENGTH})


def scrub(text: str) -> str:
    """`text` with every remembered secret's value (`remember_secrets`) replaced by ``<NAME>``, its variable's name."""
    for name, value in _REMEMBERED.items():
        if value in text:
            text = text.replace(value, f"<{name}>")
    return text


class ScrubbedStream:
    """A text stream writing through `scrub` to the stream `target()` returns, looked up at each write (a redirected
    ``sys.stderr`` is followed); every other attribute is the target's."""

    def __init__(self, target: Callable[[], TextIO]) -> None:
        self._target = target

    def write(self, text: str) -> int:
        """Write `text`, scrubbed; returns the length of `text` as given."""
        self._target().write(scrub(text))
        return len(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._target(), name)
