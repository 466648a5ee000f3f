"""A provider that answers from a script, in-process: the test double at the seam. It
speaks only the seam's records.

    p = ScriptedProvider(reply(tool_call("list_dir", {})), reply("Done."))
    run_turn(vault, p, "cli/default", "tidy up", now)
    [c.model for c in p.requests], p.requests[1].request.messages

Each call takes the next item of the queue (`p.add(...)` adds more; `p.default` answers
when it is empty, else the call fails with AssertionError):
- a `Reply` (see `reply`), or a str: a text reply;
- an exception (e.g. `failure(529, "overloaded_error")`, KeyboardInterrupt): raised;
- a callable: called with the `Call`, its return value (or exception) is the answer.

`requests` records every attempt: a fallback to the next model is a second call. Model
fallback works as with the real provider: a ProviderError with `fallback=True` moves on
to the next model. It has a batch API (every batch ends at once). End-to-end tests use
tests/fakeanthropic.py and tests/fakeopenai.py (real SDKs, real HTTP) instead; this one
is for unit tests where the HTTP round trip adds nothing.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.llm.base import NotFound, Provider, ProviderError, with_fallbacks
from agent.llm.records import (END, STOPPED, TOOL_CALLS, Batch, BatchRequest, BatchResult,
                               Block, Reply, Request, Stop, Text, ToolCall, Usage)
from agent.llm.size import check_request, estimate_request


def tool_call(name: str, input: dict[str, Any] | None = None, id: str | None = None) -> ToolCall:
    return ToolCall(id or f"toolu_{name}_{next(_ids)}", name, dict(input or {}))


def reply(*parts: str | Block, usage: dict[str, int] | None = None,
          stop_reason: str | None = None, model: str = "") -> Reply:
    """A Reply of text (str) and block parts; stop_reason TOOL_CALLS when it calls a tool,
    else END; usage 10 in, 5 out unless given."""
    blocks: list[Block] = [Text(p) if isinstance(p, str) else p for p in parts]
    if stop_reason is None:
        stop_reason = TOOL_CALLS if any(isinstance(b, ToolCall) for b in blocks) else END
    return Reply(blocks, Usage(**(usage or {"input_tokens": 10, "output_tokens": 5})),
                 model, stop_reason)


def json_reply(obj: Any, **kw: Any) -> Reply:
    """A structured-output reply holding `obj` as JSON."""
    return reply(json.dumps(obj), **kw)


def failure(status: int | None = 500, kind: str = "api_error", message: str = "failed") -> ProviderError:
    """The ProviderError the real provider raises for such an API answer (529, 503 and 404
    fall back to the next model)."""
    cls = NotFound if status == 404 else ProviderError
    where = f"HTTP {status}" if status else "unreachable"
    return cls(f"The Anthropic API failed ({where}, {kind}): {message}", status=status,
               kind=kind, detail=message,
               fallback=status in (404, 503, 529) or kind in ("overloaded_error", "not_found_error"))


class _Counter:
    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def __next__(self) -> int:
        with self.lock:
            self.n += 1
            return self.n


_ids = _Counter()


@dataclass
class Call:
    """One call the provider got: kind `stream`, `create`, `count_tokens`, `list_models`
    or `batch` (one per request of a batch, with its custom_id), the model tried and the
    request as it was sent."""
    kind: str
    model: str
    request: Request | None
    custom_id: str | None = None
    on_text: Callable[[str], None] | None = field(default=None, repr=False, compare=False)


class ScriptedProvider(Provider):
    name = "scripted"

    def __init__(self, *replies: Any, default: Any = None) -> None:
        self.replies: deque[Any] = deque(replies)
        self.default = default
        self.requests: list[Call] = []
        self.batches: dict[str, tuple[Batch, dict[str, BatchResult]]] = {}
        self.models: list[str] | None = None
        self._lock = threading.Lock()

    def add(self, *replies: Any) -> "ScriptedProvider":
        self.replies.extend(replies)
        return self

    def _answer(self, call: Call) -> Reply:
        call.request = copy.deepcopy(call.request)    # as sent: callers change theirs
        with self._lock:
            self.requests.append(call)
            if self.replies:
                item = self.replies.popleft()
            elif self.default is not None:
                item = self.default
            else:
                raise AssertionError(f"ScriptedProvider: no reply left for request "
                                     f"{len(self.requests)} ({call.kind}, {call.model})")
        if callable(item) and not isinstance(item, (Reply, BaseException, type)):
            item = item(call)
        if isinstance(item, BaseException) or (isinstance(item, type) and issubclass(item, BaseException)):
            raise item
        msg = reply(item) if isinstance(item, str) else item
        if not isinstance(msg, Reply):
            raise TypeError(f"ScriptedProvider: a reply must be a Reply, str, exception "
                            f"or callable, not {type(msg).__name__}")
        return Reply(list(msg.content), Usage(**msg.usage.as_dict()),
                     msg.model or call.model, msg.stop_reason)

    def stream(self, models: str | Sequence[str], request: Request, *,
               on_text: Callable[[str], None] | None = None) -> Reply:
        check_request(request)

        def one(model: str) -> Reply:
            msg = self._answer(Call("stream", model, request, on_text=on_text))
            heard: list[str] = []
            if on_text is not None:
                try:
                    for b in msg.content:
                        if isinstance(b, Text) and b.text:
                            on_text(b.text)
                            heard.append(b.text)
                except Stop:
                    return Reply([Text("".join(heard))] if heard else [], msg.usage,
                                 msg.model, STOPPED)
            return msg
        return with_fallbacks(models, one)

    def create(self, models: str | Sequence[str], request: Request, *,
               parse: Any = None) -> Reply:
        check_request(request)
        return with_fallbacks(models, lambda model: self._answer(Call("create", model, request)))

    def count_tokens(self, model: str, request: Request) -> int:
        with self._lock:
            self.requests.append(Call("count_tokens", model, copy.deepcopy(request)))
        return max(1, estimate_request(request))

    def list_models(self) -> list[str]:
        """The models of `self.models` (set it; by default the models asked for so far)."""
        with self._lock:
            self.requests.append(Call("list_models", "", None))
        if self.models is not None:
            return list(self.models)
        return sorted({r.model for r in self.requests if r.model})

    # -- Batching

    def batch_create(self, requests: list[BatchRequest]) -> Batch:
        """Every request is answered at once (the batch has ended); a reply that is an
        exception becomes an `errored` result."""
        results: dict[str, BatchResult] = {}
        for r in requests:
            try:
                msg = self._answer(Call("batch", r.model, r.request, custom_id=r.custom_id))
            except ProviderError as e:
                results[r.custom_id] = BatchResult("errored", error=f"{e.kind}: {e.detail}")
            else:
                results[r.custom_id] = BatchResult("succeeded", message=msg)
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        for res in results.values():
            counts[res.type] += 1
        batch = Batch(f"msgbatch_scripted_{next(_ids)}", "ended", counts)
        self.batches[batch.id] = (batch, results)
        return batch

    def _batch(self, batch_id: str) -> tuple[Batch, dict[str, BatchResult]]:
        if batch_id not in self.batches:
            raise NotFound(f"No batch {batch_id}", status=404, kind="not_found_error",
                           detail=f"No batch {batch_id}")
        return self.batches[batch_id]

    def batch_retrieve(self, batch_id: str) -> Batch:
        return self._batch(batch_id)[0]

    def batch_results(self, batch_id: str) -> dict[str, BatchResult]:
        return dict(self._batch(batch_id)[1])

    def batch_cancel(self, batch_id: str) -> Batch:
        return self._batch(batch_id)[0]
