"""What the agent says to a model and what a model says back, in no vendor's words.

Everything above agent/llm speaks these records; each provider translates them to its
own wire format (agent/llm/anthropic.py, agent/llm/openai.py) and back, and the session
store (agent/stores/sessions.py) to and from the session files. Plain data: this module
imports nothing of the agent, and no SDK.

    Request(messages=[Message("user", "What is my boat called?")], max_tokens=1000,
            system=[Text(PREAMBLE, cache=CacheHint())], tools=[Tool(name, about, schema)])
    reply = provider.stream(models, request, on_text=print)
    reply.text, reply.tool_calls, reply.usage, reply.model, reply.stop_reason

A message's content is a string or a list of blocks: `Text`, `ToolCall` (the model asks
for a tool), `ToolResult` (what the tool answered, sent back in a user message) and
`Opaque` (a part the agent passes on without reading it, such as an image of an imported
conversation). Any block may carry a `CacheHint`: the request up to and including it is a
prefix worth caching (providers without a prompt cache ignore it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union

# Why a reply stopped (Reply.stop_reason); a provider's other reasons pass through as
# its own words.
END = "end"                    # the model finished
TOOL_CALLS = "tool_calls"      # it asks for tools
MAX_TOKENS = "max_tokens"      # cut at the request's max_tokens
REFUSAL = "refusal"            # it declined to answer
STOPPED = "stopped"            # the caller ended the stream (on_text raised Stop)


@dataclass(frozen=True)
class CacheHint:
    """Cache the request up to and including the part that carries this: `ttl` None for
    the provider's default (about five minutes), or "1h"."""
    ttl: str | None = None


@dataclass(frozen=True)
class Text:
    text: str
    cache: CacheHint | None = None


@dataclass(frozen=True)
class ToolCall:
    """The model asks for tool `name` with `input` (the arguments, checked by the tool)."""
    id: str
    name: str
    input: dict[str, Any]
    cache: CacheHint | None = None


@dataclass(frozen=True)
class ToolResult:
    """What the tool of call `call_id` answered (its text, or blocks), and whether it
    failed."""
    call_id: str
    content: str | list[Block]
    is_error: bool = False
    cache: CacheHint | None = None

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else text_of(self.content)


@dataclass(frozen=True)
class Opaque:
    """A part of a stored message the agent does not read (an image of an imported
    conversation, a block of a kind it does not know): kept as it was stored and passed
    to a provider that knows it."""
    data: Any
    cache: CacheHint | None = None


Block = Union[Text, ToolCall, ToolResult, Opaque]


def text_of(blocks: list[Block], sep: str = "") -> str:
    """The text blocks' words, joined by `sep`."""
    return sep.join(b.text for b in blocks if isinstance(b, Text))


class _Said:
    """What a message or a reply says, read from its blocks."""

    @property
    def blocks(self) -> list[Block]:
        raise NotImplementedError

    @property
    def text(self) -> str:
        return text_of(self.blocks)

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [b for b in self.blocks if isinstance(b, ToolCall)]


@dataclass
class Message(_Said):
    """One message of the conversation: the person's side ("user": their words, the
    system's notes and tool results) or the model's ("assistant")."""
    role: Literal["user", "assistant"]
    content: str | list[Block]

    @property
    def blocks(self) -> list[Block]:
        """The content as blocks: the list itself when it is one (so what is added to it
        is added to the message), a new text block of a string."""
        return [Text(self.content)] if isinstance(self.content, str) else self.content

    @property
    def tool_results(self) -> list[ToolResult]:
        return [b for b in self.blocks if isinstance(b, ToolResult)]


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: `schema` is the JSON schema of its input."""
    name: str
    description: str
    schema: dict[str, Any]


@dataclass
class Request:
    """One call to a model. `system` is a string or text blocks (which may carry cache
    hints); `schema` asks for a reply that is one JSON object of that JSON schema;
    `tool_choice` None lets the model decide, "required" makes it call a tool, "none"
    forbids tools, and a tool's name makes it call that one. `deadline` (a
    time.monotonic() instant) ends a streamed reply there as a Stop from on_text does,
    even while the server sends nothing (agent.llm.deadline)."""
    messages: list[Message]
    max_tokens: int
    system: str | list[Text] = ""
    tools: list[Tool] = field(default_factory=list)
    schema: dict[str, Any] | None = None
    tool_choice: str | None = None
    deadline: float | None = None


USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens",
                "cache_creation_input_tokens")


@dataclass
class Usage:
    """The tokens a call took: input (not read from the cache), output, read from the
    prompt cache, written to it. The names are those of the Tokens trailer's record."""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, f) + getattr(other, f) for f in USAGE_FIELDS))

    def as_dict(self) -> dict[str, int]:
        return {f: int(getattr(self, f)) for f in USAGE_FIELDS}


@dataclass
class Reply(_Said):
    """A model's answer: its blocks (text and tool calls), the tokens it took, the model
    that answered (`provider/name` as the commit trailers say it) and why it stopped
    (END, TOOL_CALLS, MAX_TOKENS, REFUSAL, or the provider's own word)."""
    content: list[Block]
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    stop_reason: str | None = None

    @property
    def blocks(self) -> list[Block]:
        return self.content


class Stop(Exception):
    """Raised by a stream's `on_text` to end the reply where it stands, for a reason of
    the caller's (a bound of its turn: the reply repeats itself, the time is up). The
    provider closes the stream (a local server stops writing) and returns what had
    arrived as a `Reply` whose stop_reason is STOPPED: its text, without a tool call cut
    in half, and the tokens counted so far. `why` is the reason in the caller's words."""

    def __init__(self, why: str, line: str = "") -> None:
        super().__init__(line or why)
        self.why = why
        self.line = line


class Interrupted(KeyboardInterrupt):
    """A streamed reply stopped by Ctrl-C (or a cancel raised from `on_text`): what had
    arrived of it, its text and the tokens the provider had counted so far. Caught where
    a KeyboardInterrupt is; the interrupted turn records its usage from it."""

    def __init__(self, text: str = "", usage: Usage | None = None) -> None:
        super().__init__()
        self.text = text
        self.usage = usage or Usage()


# ---- batches --------------------------------------------------------------------------


@dataclass
class BatchRequest:
    """One request of a batch, named by `custom_id` (its result comes back under it)."""
    custom_id: str
    model: str
    request: Request


@dataclass
class Batch:
    """A batch of requests: status is `in_progress`, `canceling` or `ended`; counts has
    processing, succeeded, errored, canceled and expired."""
    id: str
    status: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.status == "ended"

    def describe(self) -> str:
        """`in_progress: 1 succeeded, 2 processing, 0 errored, 0 expired, 0 canceled`"""
        c = self.counts
        return (f"{self.status}: {c.get('succeeded', 0)} succeeded, "
                f"{c.get('processing', 0)} processing, {c.get('errored', 0)} errored, "
                f"{c.get('expired', 0)} expired, {c.get('canceled', 0)} canceled")


@dataclass
class BatchResult:
    """One request's result: type `succeeded` (with its reply), `errored` (with error,
    `type: message` in the API's words), `canceled` or `expired`."""
    type: str
    message: Reply | None = None
    error: str | None = None
