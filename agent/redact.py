"""The secret filter at the door: credentials become `[secret:KIND]` before they reach
the vault or the model.

    text, kept = redact.scrub("my key is sk-ant-api03-...")
    # "my key is [secret:anthropic]", ["anthropic"]

The patterns are `detect-secrets`' own (its regex-based plugins, read through its
plugin API), not a hand list: AWS, GitHub, Slack, Telegram bot tokens, JWTs, passwords
in URLs (basic auth), Stripe, GitLab, npm, PyPI, SendGrid, Twilio, Discord and more. Its
full scan (`scan_line`) runs every plugin through its filter machinery and costs about
20x more per message (scripts/bench_redact.py measures both), so the door compiles the
plugins' regexes once and runs them directly. Three kinds of plugin are left out on
purpose: the high-entropy and keyword plugins (in chat they flag ordinary words, hashes
and commit ids) and the public IP plugin (an address is no credential).

`EXTRA` adds what the library lacks, each a provider's documented key shape:
Anthropic keys (`sk-ant-…`), OpenAI's project and service keys (`sk-proj-…`,
`sk-svcacct-…`: the library knows only the old `…T3BlbkFJ…` shape), Google API keys
(`AIza…`), GitHub fine-grained tokens (`github_pat_…`), a whole private key block
(the library flags only its BEGIN line; the door must remove the key itself), one cut
before its END line or the rest of one after its BEGIN line was cut off, and a whole
JWT (the library's pattern stops before the signature).

A key cannot pass by being written differently (`_ENCODED`: JSON and URL escapes,
escaped once more where JSON holds JSON, written line breaks) or split: a provider's
prefix marks a key however little follows, and the rest split off it (`_CONTINUED`) is
taken in with it. A JSONL line holding a backslash is scrubbed string by string as it
decodes too (`scrub_json_line`): how the model's own tool input is stored.

`[security] redact_secrets = false` in agent.toml turns the filter off (`enabled`).
"""

from __future__ import annotations

import dataclasses

import bisect
import contextlib
import json
import os
import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

# Ours, matched before the library's (an Anthropic key also looks like an OpenAI one).
# The provider keys start at their prefix, with no \b before it: a key may follow a
# written line break (`...\nsk-ant-...` in JSON text), and a pattern that starts with a
# literal is scanned for at memchr speed (about 100x faster than one starting with \b).
_BEGIN = r"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----"
_END = r"-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----"
# The lines of a key: a line of base64, or a header (`Proc-Type: 4,ENCRYPTED`); between
# them one line break (raw, or as JSON writes it) or spaces, and a blank line at most once,
# after the headers.
_NL = r"(?:\r?\n|(?:\\r)?\\n)"
_PEM_BREAK = rf"[ \t]*(?:{_NL}|[ \t])[ \t]*"
_PEM_BASE64 = r"(?=[a-z]*[A-Z0-9+/])[A-Za-z0-9+/=]{8,}"     # not a lowercase word
_PEM_HEADER = r"[A-Z][A-Za-z-]{1,30}: [^\r\n\\]{1,200}"
_PEM_BODY = (rf"(?:{_PEM_BREAK}{_PEM_HEADER}){{0,4}}"
             rf"(?:{_PEM_BREAK}(?:{_NL}[ \t]*)?{_PEM_BASE64}(?:{_PEM_BREAK}{_PEM_BASE64})*)?")
EXTRA: tuple[tuple[str, str], ...] = (
    ("private-key", _BEGIN + r"(?:(?!-----END)[\s\S]){0,20000}?" + _END),
    # A block without its END line (cut short, or the rest sent apart): the BEGIN line
    # and every line of key after it.
    ("private-key", _BEGIN + _PEM_BODY),
    # A provider's prefix says what follows is a key, however little of it is here (the
    # first half of a key split in two; the rest is caught by _CONTINUED).
    ("anthropic", r"sk-ant-[A-Za-z0-9_\-]+"),
    ("openai", r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]+"),
    ("google", r"AIza[0-9A-Za-z_\-]{35}"),
    ("github", r"github_pat_[A-Za-z0-9_]{22,}"),
    # The library's JWT regex ends lazily (`*?`): alone it leaves the signature behind.
    ("jwt", r"eyJ[A-Za-z0-9_\-=]+\.eyJ[A-Za-z0-9_\-=]+\.[A-Za-z0-9_\-+/=]*"),
    # An AWS secret access key (40 characters of base64) written near its key id, or
    # after a word saying what it is; the library knows it only quoted after `aws...key`.
    ("aws", (r"(?:AKIA|ASIA)[0-9A-Z]{16}\b[^\n]{0,80}?(?<![A-Za-z0-9/+])"
             r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")),
    ("aws", (r"(?i:secret[_ ]?(?:access[_ ]?)?key|aws[_ ]?secret)[\"' ]{0,2}[:=]?[\"' ]{0,2}"
             r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")),
)
# The rest of a key found just before, split off it (a space, a blank line, `" + "`, the
# next string of a JSON array or object, an escaped line break): a run of key characters
# holding a digit and a letter, as a key's do and words seldom. Such runs are taken one
# after another into the key's span.
_CONTINUED = re.compile(
    r"(?:[ \t]|\r?\n|\\{1,2}[nrt]|[\"'`+,;|]|\"\s*[,:]\s*(?:\"[A-Za-z0-9_\-]{1,32}\"\s*:\s*)?\"){1,8}"
    r"(?=[A-Za-z0-9_\-+/=]{0,200}?[0-9])(?=[A-Za-z0-9_\-+/=]{0,200}?[A-Za-z])"
    r"[A-Za-z0-9_\-+/=]{10,}")
_UNSPLIT = {"password", "private-key"}       # kinds whose neighbours are not their rest
# A private key's END line, and the lines of key before it (a block whose BEGIN line
# was cut off or sent apart).
_PEM_END = re.compile(_END)
_PEM_BEFORE = re.compile(rf"(?:{_PEM_BASE64}|{_PEM_HEADER}[ \t]*{_NL}?){_PEM_BREAK}$")

# What the door decodes before it matches, so a key cannot pass by being written
# differently: a JSON escape (`\u002d`, or `\\u002d` when JSON holds JSON, as a tool's
# input or a request's text does), a URL escape (`%2D`), and a line break inside a run of
# key characters (a key wrapped or split over lines, raw or as JSON's `\n`, escaped once
# more or not). (Any other written `\n` is left: the patterns take a key after one.)
_KEYCHAR = r"[A-Za-z0-9_\-+/=]"
_ENCODED = re.compile(r"\\{1,2}u([0-9A-Fa-f]{4})|%([0-9A-Fa-f]{2})"
                      rf"|(?<={_KEYCHAR}{{8}})(?:\r?\n|(?:\\{{1,2}}r)?\\{{1,2}}n)[ \t]*"
                      rf"(?={_KEYCHAR}{{8}})")

# detect-secrets' secret types, by the short kind a person reads in `[secret:KIND]`.
KINDS = {
    "AWS Access Key": "aws", "GitHub Token": "github", "Slack Token": "slack",
    "Telegram Bot Token": "telegram", "JSON Web Token": "jwt", "OpenAI Token": "openai",
    "Basic Auth Credentials": "password", "Private Key": "private-key",
    "Stripe Access Key": "stripe", "GitLab Token": "gitlab", "NPM tokens": "npm",
    "PyPI Token": "pypi", "SendGrid API Key": "sendgrid", "Twilio API Key": "twilio",
    "Discord Bot Token": "discord", "Mailchimp Access Key": "mailchimp",
    "Azure Storage Account access key": "azure",
}
# Not credentials, or too noisy in conversation (see the module's docstring).
SKIPPED = {"Public IP (ipv4)"}

SETTING = "security.redact_secrets"


def _kind(secret_type: str) -> str:
    return KINDS.get(secret_type) or re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


def _library_patterns() -> list[tuple[str, str, int]]:
    """(kind, regex source, flags) of detect-secrets' regex plugins."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    out: list[tuple[str, str, int]] = []
    plugins: dict[str, Any] = get_mapping_from_secret_type_to_class()
    for secret_type, cls in sorted(plugins.items()):
        if secret_type in SKIPPED or not issubclass(cls, RegexBasedDetector):
            continue
        if cls.__name__ == "PrivateKeyDetector":
            continue                      # the whole block is ours (EXTRA)
        # A class attribute of each plugin, which the base declares as a property.
        denylist: Any = cls.denylist
        out.extend((_kind(secret_type), rx.pattern, rx.flags) for rx in denylist)
    return out


def _cache_file() -> Path:
    from importlib.metadata import version
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "agent" / f"secret-patterns-{version('detect-secrets')}.json"


@lru_cache(maxsize=1)
def patterns() -> tuple[tuple[str, re.Pattern], ...]:
    """(kind, compiled regex) in the order they are tried: ours, then the library's.

    Importing detect-secrets costs about 0.2 s (it pulls in `requests` to verify keys
    online, which the door never does); its patterns are kept in a cache file per
    library version, so `agent note` and the commands that must start fast pay it once.
    """
    cache, lib = None, None
    try:
        cache = _cache_file()
        lib = [(str(k), str(rx), int(f)) for k, rx, f in
               json.loads(cache.read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError, ImportError):
        pass                              # no cache yet (or a broken one): ask the library
    if lib is None:
        lib = _library_patterns()
        if cache is not None:
            with contextlib.suppress(OSError):
                cache.parent.mkdir(parents=True, exist_ok=True)
                tmp = cache.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(lib), encoding="utf-8")
                os.replace(tmp, cache)
    out = [(kind, re.compile(rx)) for kind, rx in EXTRA]
    out += [(kind, re.compile(rx, flags)) for kind, rx, flags in lib]
    return tuple(out)


def _decoded(text: str) -> tuple[str, list[tuple[int, int, int, int]]] | None:
    """`text` decoded (see _ENCODED), and each escape's place: (start in the decoded
    text, characters it decoded to (1, or 0 for a line break inside a key), start in
    `text`, end in `text`); None when there is nothing to decode."""
    pieces: list[str] = []
    marks: list[tuple[int, int, int, int]] = []
    at = out_len = 0
    for m in _ENCODED.finditer(text):
        plain = text[at:m.start()]
        code = m.group(1) or m.group(2)
        char = chr(int(code, 16)) if code else ""
        pieces += [plain, char]
        out_len += len(plain)
        marks.append((out_len, len(char), m.start(), m.end()))
        out_len += len(char)
        at = m.end()
    if not marks:
        return None
    pieces.append(text[at:])
    return "".join(pieces), marks


def _source(marks: list[tuple[int, int, int, int]], starts: list[int], pos: int
            ) -> tuple[int, int]:
    """Where the character at `pos` of the decoded text came from in the original."""
    i = bisect.bisect_right(starts, pos) - 1
    if i < 0:
        return pos, pos + 1
    out_at, width, src, src_end = marks[i]
    if pos < out_at + width:
        return src, src_end                   # the escape itself
    at = src_end + pos - out_at - width
    return at, at + 1


def _spans(text: str) -> list[tuple[int, int, str]]:
    """Where the secrets of `text` are, as written or once decoded: (start, end, kind),
    not overlapping."""
    found = _raw_spans(text)
    decoded = _decoded(text)
    if decoded is None:
        return found
    plain, marks = decoded
    starts = [m[0] for m in marks]
    for start, end, kind in _raw_spans(plain):
        start, end = _source(marks, starts, start)[0], _source(marks, starts, end - 1)[1]
        if not any(s < end and start < e for s, e, _ in found):
            found.append((start, end, kind))
    return sorted(found)


def _raw_spans(text: str) -> list[tuple[int, int, str]]:
    """Where the secrets of `text` are: (start, end, kind), not overlapping."""
    found: list[tuple[int, int, str]] = []
    for kind, rx in patterns():
        for m in rx.finditer(text):
            # As the library's analyze_string: the groups that matched are the secret
            # (the password of a URL, not the whole URL), else the whole match.
            # (GitHub's group is only its `ghp` prefix: a group that short is no secret,
            # the whole match is; a password in a URL may be short and still count.)
            groups = [i for i in range(1, (rx.groups or 0) + 1) if m.group(i)
                      and (kind == "password" or len(m.group(i)) >= 8)]
            for start, end in ([m.span(i) for i in groups] if groups else [m.span()]):
                if end - start < 8 and kind != "password":
                    continue
                if any(s < end and start < e for s, e, _ in found):
                    continue
                found.append((start, end, kind))
    found += _pem_tails(text, found)
    return _continued(text, sorted(found))


def _pem_tails(text: str, found: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """A private key's END line no span holds, with the lines of key before it."""
    out = []
    for m in _PEM_END.finditer(text):
        if any(s <= m.start() < e for s, e, _ in found):
            continue
        start = m.start()
        while start > 0:
            before = _PEM_BEFORE.search(text, max(0, start - 300), start)
            if before is None:
                break
            start = before.start()
        out.append((start, m.end(), "private-key"))
    return out


def _continued(text: str, spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """`spans` (sorted), each key's span taking in the rest of the key split off it
    (_CONTINUED), the spans it then reaches merged into it."""
    out: list[tuple[int, int, str]] = []
    for start, end, kind in spans:
        if out and start < out[-1][1]:
            continue                            # taken in by the span before
        if kind not in _UNSPLIT:
            while (m := _CONTINUED.match(text, end)) is not None:
                end = m.end()
        out.append((start, end, kind))
    return out


def scrub(text: str) -> tuple[str, list[str]]:
    """`text` with each credential replaced by `[secret:KIND]`, and the kinds replaced."""
    if not text or len(text) < 8:
        return text, []
    spans = _spans(text)
    if not spans:
        return text, []
    out, at = [], 0
    for start, end, kind in spans:
        out.append(text[at:start])
        out.append(f"[secret:{kind}]")
        at = end
    out.append(text[at:])
    return "".join(out), [k for _, _, k in spans]


def scrub_json_line(line: str) -> tuple[str, list[str]]:
    """A JSONL line with the secrets of its strings replaced; still one valid JSON line.

    The text is scrubbed as it is (bytes kept). Its strings are scrubbed as they decode
    too when the text alone cannot show them: a match took part of an escape (the line
    no longer parses), or a string holds a backslash (written `\\\\` in the line, which
    hides a key the writer escaped as `\\u002d` or split with a written `\\n`: what
    the model puts in its own tool input). Then the line is dumped again.
    """
    new, kinds = scrub(line)
    if not kinds and "\\\\" not in line:
        return line, []
    broken = False
    try:
        data = json.loads(new)
    except ValueError:
        try:
            data = json.loads(line)
        except ValueError:
            return new, kinds             # not JSON to begin with: the text is what counts
        broken, kinds = True, []
    more: list[str] = []

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            s, k = scrub(v)
            more.extend(k)
            return s
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v
    cleaned = walk(data)
    if not more and not broken:
        return new, kinds
    return json.dumps(cleaned, ensure_ascii=False, separators=(",", ":")), kinds + more


def scrub_value(value: Any, memo: dict[str, str] | None = None) -> Any:
    """A JSON-like value, or records holding one (the messages of a request), with its
    strings scrubbed. `memo` (text -> scrubbed) is kept by a caller that scrubs the same
    text many times: every request of a dream repeats the memory files, which a scan
    per request made cost the run's requests times memory's size."""
    if isinstance(value, str):
        if memo is None:
            return scrub(value)[0]
        done = memo.get(value)
        if done is None:
            done = memo[value] = scrub(value)[0]
        return done
    if isinstance(value, list):
        return [scrub_value(x, memo) for x in value]
    if isinstance(value, dict):
        return {k: scrub_value(x, memo) for k, x in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: scrub_value(getattr(value, f.name), memo)
                                             for f in dataclasses.fields(value) if f.init})
    return value


# ---- the setting ---------------------------------------------------------------------

_cache: dict[Path, tuple[float, bool]] = {}
_cache_lock = threading.Lock()


def enabled(root: Path | str) -> bool:
    """Whether the vault at `root` filters secrets (`[security] redact_secrets`, default
    true). Read again only when agent.toml changes; a broken file keeps the filter on."""
    from agent.config import path_of, read_data, table_of, SettingsError

    path = path_of(Path(root))
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return True
    with _cache_lock:
        hit = _cache.get(path)
        if hit and hit[0] == mtime:
            return hit[1]
    try:
        data, _ = read_data(Path(root))
        value = (table_of(data, "security") or {}).get("redact_secrets", True)
    except SettingsError:
        value = True
    on = value is not False
    with _cache_lock:
        _cache[path] = (mtime, on)
    return on


def door(root: Path | str, text: str) -> tuple[str, list[str]]:
    """`scrub(text)` when the vault filters secrets, else (text, [])."""
    if not text or not enabled(root):
        return text, []
    return scrub(text)


def scrub_file_text(rel: str, text: str) -> tuple[str, list[str]]:
    """A file's text with its secrets replaced (JSONL line by line, keeping it valid)."""
    if rel.endswith(".jsonl"):
        kinds: list[str] = []
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if line:
                lines[i], k = scrub_json_line(line)
                kinds.extend(k)
        return ("\n".join(lines), kinds) if kinds else (text, [])
    return scrub(text)


NOTICE = "Kept out of the vault and the model"


def with_notice(reply: str, notes: list[str]) -> str:
    """A reply a channel sends (Telegram, the gateway), with the filter's one line when
    the turn kept a secret out, so the person there hears of it too."""
    line = next((n for n in notes if n.startswith(NOTICE)), "")
    return f"{reply}\n\n({line})" if line else reply


def summary(kinds: list[str]) -> str:
    """The one line that tells the person what was kept out, or ""."""
    if not kinds:
        return ""
    counts: dict[str, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    what = ", ".join(f"{n} {k}" if n > 1 else k for k, n in counts.items())
    n = len(kinds)
    return (f"{NOTICE}: {n} secret{'s' * (n != 1)} ({what}), "
            f"replaced by [secret:…]. ([security] redact_secrets = false turns this off.)")


def scrub_files(root: Path, rels: list[str]) -> list[str]:
    """Replace the secrets in the vault files `rels` (files the agent is about to commit,
    such as what a sandboxed command wrote); the kinds replaced."""
    if not rels or not enabled(root):
        return []
    kinds: list[str] = []
    for rel in rels:
        path = Path(root) / rel
        from agent.errors import UserError
        from agent.fs import safe
        try:
            data = safe.read_bytes(root, rel, limit=5_000_000)
        except (OSError, UserError):
            continue                      # a link, a FIFO, too big: not the agent's text
        if data is None:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue                      # a binary file: not text a key is pasted into
        new, k = scrub_file_text(rel, text)
        if k:
            from agent.fs import atomic
            atomic.write_text(path, new)
            kinds.extend(k)
    return kinds


# ---- the vault's writes (agent.vault.repo calls these) -------------------------------


def guard(root: Path, rel: str, text: str) -> tuple[str, list[str]]:
    """A file's new text as the vault writes it, without secrets when the filter is on,
    and the kinds taken out."""
    if not text or not enabled(root):
        return text, []
    return scrub_file_text(rel, text)


def guard_lines(root: Path, rel: str, lines: list[str]) -> tuple[list[str], list[str]]:
    """Lines the vault appends, without secrets when the filter is on, and the kinds
    taken out."""
    if not lines or not enabled(root):
        return lines, []
    out, kept = [], []
    for line in lines:
        new, kinds = scrub_file_text(rel, line)
        kept.extend(kinds)
        out.append(new)
    return out, kept
