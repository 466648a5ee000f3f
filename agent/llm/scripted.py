"""A provider that answers from a script, in-process: the test double at the seam.

    p = ScriptedProvider(reply(tool_use("list_dir", {})), reply("Done."))
    run_turn(vault, p, "cli/default", "tidy up", now)
    [r.model for r in p.requests], p.requests[1].params["messages"]

Each call takes the next item of the queue (`p.add(...)` adds more; `p.default` answers
when it is empty, else the call fails with AssertionError):
- a `Message` (see `reply`), or a str: a text reply;
- an exception (e.g. `failure(529, "overloaded_error")`, KeyboardInterrupt): raised;
- a callable: called with the `Request`, its return value (or exception) is the answer.

`requests` records every attempt: a fallback to the next model is a second request. Model
fallback works as with the real provider: a ProviderError with `fallback=True` moves on
to the next model. End-to-end tests use tests/fakeanthropic.py (real SDK, real HTTP)
instead; this one is for unit tests where the HTTP round trip adds nothing.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.llm.base import (check_request, Batch, BatchResult, Message, NotFound, Provider, ProviderError,
                            usage_dict, with_fallbacks)


def text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def tool_use(name: str, input: dict[str, Any] | None = None, id: str | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": id or f"toolu_{name}_{next(_ids)}", "name": name,
            "input": dict(input or {})}


def reply(*parts: str | dict[str, Any], usage: dict[str, Any] | None = None, stop_reason: str | None = None,
          model: str = "") -> Message:
    """A Message of text (str) and block (dict) parts; stop_reason `tool_use` when it
    calls a tool, else `end_turn`; usage 10 in, 5 out unless given."""
    blocks = [text(p) if isinstance(p, str) else dict(p) for p in parts]
    if stop_reason is None:
        stop_reason = "tool_use" if any(b.get("type") == "tool_use" for b in blocks) else "end_turn"
    return Message(blocks, usage_dict(usage or {"input_tokens": 10, "output_tokens": 5}),
                   model, stop_reason)


def json_reply(obj: Any, **kw: Any) -> Message:
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
class Request:
    """One call the provider got: kind `stream`, `create`, `count_tokens` or `batch`
    (one per request of a batch, with its custom_id), the model tried, the parameters."""
    kind: str
    model: str
    params: dict[str, Any]
    custom_id: str | None = None
    on_text: Callable[[str], None] | None = field(default=None, repr=False, compare=False)


class ScriptedProvider(Provider):
    name = "scripted"

    def __init__(self, *replies: Any, default: Any = None) -> None:
        self.replies: deque[Any] = deque(replies)
        self.default = default
        self.requests: list[Request] = []
        self.batches: dict[str, tuple[Batch, dict[str, BatchResult]]] = {}
        self.models: list[str] | None = None
        self._lock = threading.Lock()

    def add(self, *replies: Any) -> "ScriptedProvider":
        self.replies.extend(replies)
        return self

    def _answer(self, request: Request) -> Message:
        request.params = copy.deepcopy(request.params)    # as sent: callers mutate theirs
        with self._lock:
            self.requests.append(request)
            if self.replies:
                item = self.replies.popleft()
            elif self.default is not None:
                item = self.default
            else:
                raise AssertionError(f"ScriptedProvider: no reply left for request "
                                     f"{len(self.requests)} ({request.kind}, {request.model})")
        if callable(item) and not isinstance(item, (Message, BaseException, type)):
            item = item(request)
        if isinstance(item, BaseException) or (isinstance(item, type) and issubclass(item, BaseException)):
            raise item
        msg = reply(item) if isinstance(item, str) else item
        if not isinstance(msg, Message):
            raise TypeError(f"ScriptedProvider: a reply must be a Message, str, exception "
                            f"or callable, not {type(msg).__name__}")
        return Message(list(msg.content), dict(msg.usage), msg.model or request.model,
                       msg.stop_reason)

    def stream(self, models: str | Sequence[str], *,
               on_text: Callable[[str], None] | None = None, parse: Any = None,
               **params: Any) -> Message:
        check_request(params)

        def one(model: str) -> Message:
            msg = self._answer(Request("stream", model, params, on_text=on_text))
            if on_text is not None:
                for b in msg.content:
                    if b.get("type") == "text" and b.get("text"):
                        on_text(b["text"])
            return msg
        return with_fallbacks(models, one)

    def create(self, models: str | Sequence[str], *, parse: Any = None, **params: Any) -> Message:
        check_request(params)
        return with_fallbacks(models, lambda model: self._answer(Request("create", model, params)))

    def count_tokens(self, model: str, **params: Any) -> int:
        with self._lock:
            self.requests.append(Request("count_tokens", model, copy.deepcopy(params)))
        return max(1, len(json.dumps(params, ensure_ascii=False)) // 4)

    def list_models(self) -> list[str]:
        """The models of `self.models` (set it; by default the models asked for so far)."""
        with self._lock:
            self.requests.append(Request("list_models", "", {}))
        if self.models is not None:
            return list(self.models)
        return sorted({r.model for r in self.requests if r.model})

    def batch_create(self, requests: list[dict[str, Any]]) -> Batch:
        """Every request is answered at once (the batch has ended); a reply that is an
        exception becomes an `errored` result."""
        results: dict[str, BatchResult] = {}
        for r in requests:
            params = dict(r["params"])
            try:
                msg = self._answer(Request("batch", params.pop("model", ""), params,
                                           custom_id=r["custom_id"]))
            except ProviderError as e:
                results[r["custom_id"]] = BatchResult("errored", error=f"{e.kind}: {e.detail}")
            else:
                results[r["custom_id"]] = BatchResult("succeeded", message=msg)
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
