"""Skills: instructions the agent loads when a task needs them.

A skill is `skills/<name>/SKILL.md` with frontmatter::

    ---
    name: memory
    description: How to keep MEMORY.md, USER.md and the daily notes tidy.
    requires:
      bins: [git]          # programs that must be on PATH
      env: [SOME_TOKEN]    # environment variables that must be set
    always: false          # true: the whole text goes into every prompt
    ---
    (the instructions)

The vault's `skills/` come first; a built-in skill (the repository's top-level
`skills/`, shipped with the package) of the same name is shadowed by the vault's.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from agent.errors import UserError
from agent.stores.frontmatter_io import FrontmatterError, loads, read_text
from agent.package import package_data

SKILLS = "skills"
SKILL_FILE = "SKILL.md"


class SkillError(UserError):
    pass


@dataclass
class Skill:
    name: str
    description: str
    path: Path
    where: str                         # "vault" or "built-in"
    bins: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    always: bool = False
    body: str = ""
    problem: str | None = None         # why the file could not be read
    raw: str = ""                      # the whole file as read (frontmatter and body)

    def missing(self) -> list[str]:
        """What this machine lacks to use the skill (programs and variables)."""
        out = [f"program {b}" for b in self.bins if shutil.which(b) is None]
        out += [f"${e}" for e in self.env if not os.environ.get(e)]
        return out

    @property
    def available(self) -> bool:
        return self.problem is None and not self.missing()

    def text(self) -> str:
        return self.raw


def _strings(value, where: str, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise SkillError(f"{where}: requires.{key} must be a list of names")


def read_skill(path: Path, where: str, rel: str, root: Path | None = None) -> Skill:
    """One skill file; a broken one comes back with `problem` set (never raises).

    Read through agent.fs.safe inside `root` (the vault or the package's skills), so
    a SKILL.md linking out of it is refused, not read.
    """
    fallback = path.parent.name
    try:
        raw = read_text(path, rel, root=root)
        meta, body = loads(raw, rel)
        name = str(meta.get("name") or fallback)
        description = " ".join(str(meta.get("description") or "").split())
        requires = meta.get("requires") or {}
        if not isinstance(requires, dict):
            raise SkillError(f"{rel}: requires must be a mapping with bins and env")
        bins = _strings(requires.get("bins"), rel, "bins")
        env = _strings(requires.get("env"), rel, "env")
        always = meta.get("always", False)
        if not isinstance(always, bool):
            raise SkillError(f"{rel}: always must be true or false")
    except (FrontmatterError, SkillError, OSError) as e:
        return Skill(fallback, "", path, where, problem=str(e))
    return Skill(name, description, path, where, bins, env, always, body.strip(), raw=raw)


def discover(root: Path) -> list[Skill]:
    """Every skill, the vault's first, then built-ins not shadowed, each group by name."""
    found: dict[str, Skill] = {}
    sources = [(Path(root) / SKILLS, "vault")]
    try:
        sources.append((package_data("skills"), "built-in"))
    except UserError:
        pass
    for base, where in sources:
        if not base.is_dir():
            continue
        for path in sorted(base.glob(f"*/{SKILL_FILE}")):
            rel = (f"{SKILLS}/{path.parent.name}/{SKILL_FILE}" if where == "vault"
                   else f"built-in skill {path.parent.name}/{SKILL_FILE}")
            skill = read_skill(path, where, rel, root=Path(root) if where == "vault" else base)
            found.setdefault(skill.name, skill)
    return list(found.values())


def find(root: Path, name: str) -> Skill:
    for skill in discover(root):
        if skill.name == name:
            return skill
    names = ", ".join(s.name for s in discover(root)) or "none"
    raise SkillError(f"No skill named {name!r}; the skills are: {names}.")


def summary(skills: list[Skill]) -> str:
    """The prompt's list of skills with their availability; `always` skills inlined."""
    if not skills:
        return ""
    lines = ["# Skills", "",
             "Load a skill's full instructions with the load_skill tool before a task it covers.",
             ""]
    for s in skills:
        if s.problem:
            lines.append(f"- {s.name}: unusable ({s.problem})")
            continue
        missing = s.missing()
        state = "" if not missing else f" (unavailable: needs {', '.join(missing)})"
        lines.append(f"- {s.name}: {s.description or '(no description)'}{state}")
    for s in skills:
        if s.always and s.available:
            lines += ["", f"## Skill: {s.name}", "", s.body]
    return "\n".join(lines).rstrip() + "\n"
