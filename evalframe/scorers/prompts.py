"""Prompt files: the only module that imports jinja2.

Templates are rendered in a sandbox with StrictUndefined, so a typo in a variable name fails at
validation time instead of sending a prompt with a hole in it. Dataset text only ever arrives as a
variable's value; Jinja2 never renders a value as template code, so `{{ 7*7 }}` in an answer stays
literally `{{ 7*7 }}`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

from evalframe.data.conversations import Conversation, transcript as _numbered
from evalframe.errors import PromptError
from evalframe.models.steps import Message
from evalframe.paths import PROMPTS_DIR


def fence(text: Any, label: str) -> str:
    """Wrap judged text in tags it cannot close itself.

    The tag carries a hash of the text, so the text would have to contain its own hash to forge the
    closing tag; the hash is deterministic, so identical prompts stay identical (and cacheable).
    """
    body = str(text)
    tag = f"{label}-{hashlib.sha256(body.encode()).hexdigest()[:8]}"
    return f"<{tag}>\n{body}\n</{tag}>"


def transcript(conversation: Conversation | None) -> str:
    """A conversation as numbered lines, `[N] role: content` and its tool calls (what a judge reads of
    a chat: its verdicts name turns by these numbers); empty without one."""
    return _numbered(conversation) if conversation is not None else ""


def _environment(directory: Path) -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        loader=jinja2.FileSystemLoader(str(directory)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
        # A prompt set lives for one run: its files are read once, not stat'ed again at every render.
        auto_reload=False,
    )
    env.filters["fence"] = fence
    env.globals["transcript"] = transcript
    return env


class PromptSet:
    """The prompt files of one scorer (or target): one Jinja2 file per step, plus an optional
    `system.j2` sent as the system message of every step."""

    def __init__(self, directory: str | Path | None, default: str):
        self.directory = Path(directory).expanduser().resolve() if directory else PROMPTS_DIR / default
        if not self.directory.is_dir():
            raise PromptError(f"prompt directory {self.directory} does not exist")
        self._env = _environment(self.directory)
        self._steps: dict[str, bool] = {}  # whether a step's file is there, looked at once per run

    def _template(self, name: str) -> jinja2.Template:
        try:
            return self._env.get_template(name)
        except jinja2.TemplateNotFound:
            raise PromptError(f"prompt file {self.directory / name} is missing") from None
        except jinja2.TemplateSyntaxError as e:
            raise PromptError(f"prompt file {self.directory / name}, line {e.lineno}: {e.message}") from None

    def text(self) -> str:
        """Every file of the folder, named, in name order, then every file of its subfolders that they
        include, import or extend: what its prompts say, wherever it lives."""
        files = sorted(p for p in self.directory.iterdir() if p.is_file())
        listed = [f"{p.name}\n{p.read_text(encoding='utf-8', errors='replace')}" for p in files]
        below = self.referenced(*(p.name for p in files))
        return "\n".join([*listed, *(f"{name}\n{source}" for name, source in below.items() if "/" in name)])

    def referenced(self, *names: str) -> dict[str, str]:
        """{name: text} of every template that templates `names` include, import or extend, at any
        depth, as this folder's loader finds them (Jinja2's own parse of each): what a judge reads
        beside its prompt files, so a verdict's digest covers it. A name computed at render time
        (`{% include var %}`) could be any template: then every one the folder holds. A file that
        cannot be found or parsed is left to rendering, which says what is wrong with it."""
        loader = self._env.loader
        assert loader is not None
        found: dict[str, str] = {}
        todo = list(names)
        while todo:
            name = todo.pop()
            try:
                source = loader.get_source(self._env, name)[0]
            except jinja2.TemplateNotFound:
                continue
            if name not in names:
                found[name] = source
            try:
                references = list(jinja2.meta.find_referenced_templates(self._env.parse(source)))
            except jinja2.TemplateSyntaxError:
                continue
            wanted = loader.list_templates() if None in references else references
            todo += [n for n in wanted if n and n not in found and n not in names and n not in todo]
        return dict(sorted(found.items()))

    def has(self, step: str) -> bool:
        if step not in self._steps:
            self._steps[step] = (self.directory / f"{step}.j2").is_file()
        return self._steps[step]

    def render(self, step: str, **variables: Any) -> list[Message]:
        """Render a step's messages: system.j2 (if present) then the step's user prompt."""
        messages = []
        if self.has("system"):
            messages.append({"role": "system", "content": self._render("system.j2", variables)})
        messages.append({"role": "user", "content": self._render(f"{step}.j2", variables)})
        return messages

    def _render(self, name: str, variables: dict[str, Any]) -> str:
        template = self._template(name)
        try:
            return template.render(**variables).strip()
        except jinja2.UndefinedError as e:
            known = ", ".join(sorted(variables)) or "none"
            raise PromptError(
                f"prompt file {self.directory / name}: {e.message}; the variables available are: {known}"
            ) from None
        except jinja2.TemplateNotFound as e:  # {% include %}, {% import %} or {% extends %} of another file
            raise PromptError(
                f"prompt file {self.directory / name}: it includes {e.name!r}, which is not a file in "
                f"{self.directory} (a prompt can include only the files of its own folder)"
            ) from None
        except jinja2.TemplateError as e:  # a sandbox violation, a syntax error in an included file
            raise PromptError(f"prompt file {self.directory / name}: {e}") from None


class PromptFile:
    """A single user-supplied template (the LLM target's prompt)."""

    def __init__(self, path: str | Path | None, default: str):
        self.path = Path(path).expanduser().resolve() if path else PROMPTS_DIR / default
        if not self.path.is_file():
            raise PromptError(f"prompt file {self.path} does not exist")
        self._prompts = PromptSet(self.path.parent, default="")

    def text(self) -> str:
        """The file's text, then that of every file it includes, imports or extends, named."""
        own = self.path.read_text(encoding="utf-8", errors="replace")
        included = self._prompts.referenced(self.path.name)
        return "\n".join([own, *(f"{name}\n{source}" for name, source in included.items())])

    def render(self, **variables: Any) -> list[Message]:
        return [{"role": "user", "content": self._prompts._render(self.path.name, variables)}]


class TextTemplate:
    """A one-line template from config (a value of the HTTP target's request body), compiled once and
    rendered in the same sandbox; `where` names the config key in errors."""

    def __init__(self, source: str, where: str):
        self.where = where
        env = ImmutableSandboxedEnvironment(
            loader=jinja2.DictLoader({}),  # a value includes no file: `{% include %}` finds nothing
            undefined=jinja2.StrictUndefined,
            autoescape=False,
        )
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise PromptError(f"{where}={source!r}: {e.message}") from None

    def render(self, **variables: Any) -> str:
        try:
            return self._template.render(**variables)
        except jinja2.UndefinedError as e:
            known = ", ".join(sorted(variables)) or "none"
            raise PromptError(f"{self.where}: {e.message}; the variables available are: {known}") from None
        except jinja2.TemplateNotFound as e:
            raise PromptError(
                f"{self.where}: it includes {e.name!r}; a config template cannot include files"
            ) from None
        except jinja2.TemplateError as e:  # a sandbox violation, a syntax error in an included file
            raise PromptError(f"{self.where}: {e}") from None
