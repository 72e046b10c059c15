"""Task generators: propose training tasks for a domain (`ctu tasks generate`); `ctu.tasks.verify` decides which
are kept. A generator of one's own implements `base.TaskGenerator` and registers with
``@registry.task_generators.register("name")``."""

from ctu.components.task_generators import llm as llm  # registers "llm"
from ctu.components.task_generators import template as template  # registers "template"
