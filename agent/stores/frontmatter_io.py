"""Frontmatter files (archive entries, heartbeats, skills): read with python-frontmatter,
written by our own split so the bytes a person wrote stay as they were."""

from __future__ import annotations

from pathlib import Path


from agent.errors import UserError


class FrontmatterError(UserError):
    """A file whose frontmatter cannot be read; the message names the file."""


def load(path: Path, rel: str | None = None) -> tuple[dict, str]:
    """(metadata, body) of a file with YAML frontmatter."""
    import frontmatter  # imported here: yaml costs start-up time most commands never need
    import yaml

    name = rel or str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise FrontmatterError(f"{name}: not UTF-8 text") from None
    try:
        post = frontmatter.loads(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{name}:{mark.line + 2}" if mark is not None else name
        raise FrontmatterError(f"{where}: broken frontmatter: "
                               f"{getattr(e, 'problem', None) or e}") from None
    if not isinstance(post.metadata, dict):
        raise FrontmatterError(f"{name}: frontmatter must be a mapping of keys to values")
    return dict(post.metadata), post.content


def dump(metadata: dict, body: str) -> str:
    """A new file's text: `---`, the metadata as YAML in the given key order, `---`, body."""
    import yaml

    head = yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True, width=1000)
    return f"---\n{head}---\n{body.rstrip()}\n"
