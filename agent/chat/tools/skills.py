"""The load_skill tool."""

from __future__ import annotations

from agent.stores import skills
from agent.chat.tools.registry import ToolError, current_context, tool


@tool
def load_skill(name: str) -> str:
    """Load a skill's full instructions (the skills are listed in the prompt).

    Args:
        name: The skill's name as listed.
    """
    try:
        skill = skills.find(current_context().vault.root, name.strip())
    except skills.SkillError as e:
        raise ToolError(str(e)) from None
    if skill.problem:
        raise ToolError(f"Skill {skill.name} cannot be read: {skill.problem}")
    missing = skill.missing()
    used = current_context().used
    if used is not None:
        used.skill(skill.name)
    note = f"(Note: this skill needs {', '.join(missing)}, missing here.)\n\n" if missing else ""
    return note + skill.text()
