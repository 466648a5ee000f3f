"""Frontmatter files (archive entries, heartbeats, skills): read with python-frontmatter,
written by our own split so the bytes a person wrote stay as they were."""

from __future__ import annotations

import errno
from pathlib import Path


from agent.errors import UserError


class FrontmatterError(UserError):
    """A file whose frontmatter cannot be read; the message names the file."""


def load(path: Path, rel: str | None = None, root: Path | None = None) -> tuple[dict, str]:
    """(metadata, body) of a file with YAML frontmatter (see read_text)."""
    return loads(read_text(path, rel, root), rel or str(path))


def read_text(path: Path, rel: str | None = None, root: Path | None = None) -> str:
    """The text of a frontmatter file; FrontmatterError names it when it cannot be read.

    `root` is the folder the file must stay inside (the vault, or the package's data):
    the read goes through agent.fs.safe, so a link out of it, a FIFO or a huge file
    is refused; without it, the file's own folder.
    """
    from agent.fs import safe

    name = rel or str(path)
    path = Path(path)
    base = Path(root) if root is not None else path.parent
    try:
        inner = path.relative_to(base).as_posix()
    except ValueError:
        raise FrontmatterError(f"{name}: outside {base}") from None
    try:
        data = safe.read_bytes(base, inner, limit=safe.MAX_BYTES)
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", name)
        text = safe.decode(data, name, errors="strict")
    except UserError as e:
        raise FrontmatterError(str(e)) from None
    return text


def loads(text: str, name: str) -> tuple[dict, str]:
    """(metadata, body) of a frontmatter text; FrontmatterError names `name`."""
    import frontmatter  # imported here: yaml costs start-up time most commands never need
    import yaml

    try:
        post = frontmatter.loads(text)
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as e:
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
