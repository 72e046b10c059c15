"""Chat-template policies: the one place ctu turns conversations (and tools) into text and token ids."""

from ctu.components.chat_templates import builtin as builtin  # registers the built-in policies
