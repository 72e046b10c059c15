"""Chat-template policies: the one place ctu turns conversations (and tools) into text and token ids."""

from ctu.components.chat_templates.base import ChatTemplate

__all__ = ["ChatTemplate"]
