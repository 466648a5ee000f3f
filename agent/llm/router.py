"""The provider the agent is given: it sends each model of a fallback chain to the
service that model names (agent.llm.spec), so one chain may cross providers:

    ["local/qwen3:8b", "anthropic/claude-haiku-4-5"]

A model fails over to the next when the error says another may work: the model is
overloaded, unknown or rate limited there, or (for a model of another provider) its
service could not be reached. `Reply.model` is the full name of the model that
answered, provider included, as the commit trailers record it.

A structured reply (`parse=` a pydantic model) that does not fit is asked for once more,
with what was wrong; what the second answer says is returned either way.

Each provider lists its own models (`list_models` asks every configured one), and a batch
API is offered per model: `batching(model)` is the Batching of that model's provider, or
None when it has none.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from agent.llm.base import Batching, Provider, ProviderError, TooLarge, model_chain
from agent.llm.records import (Batch, BatchRequest, BatchResult, Message, Reply, Request)
from agent.llm.size import check_request
from agent.llm.spec import NoApiKey, ProviderSpec, split
from agent.llm.structured import misfit

log = logging.getLogger("agent.llm")

RETRY = ("That reply does not fit the JSON schema: {problem}. Answer again with only the "
         "JSON object, matching the schema exactly.")


class Router(Provider):
    """One Provider over every configured provider (made lazily, at first use)."""

    name = "router"

    def __init__(self, specs: dict[str, ProviderSpec], *, max_retries: int = 2,
                 timeout: float | None = None) -> None:
        self.specs = specs
        self._max_retries = max_retries
        self._timeout = timeout
        self._made: dict[str, Provider] = {}
        self._lock = threading.Lock()

    def spec(self, model: str) -> ProviderSpec:
        """The provider of `model` (ProviderError when agent.toml defines none)."""
        name, _ = split(model)
        spec = self.specs.get(name)
        if spec is None:
            raise ProviderError(f"No provider {name!r} for the model {model!r}: add a "
                                f"[providers.{name}] table to agent.toml (agent config check "
                                f"lists the providers).", kind="no_provider")
        return spec

    def backend(self, name: str) -> Provider:
        """The provider called `name`, made at the first use (its SDK loaded at its first
        call)."""
        with self._lock:
            made = self._made.get(name)
            if made is None:
                spec = self.specs[name]
                if spec.api == "anthropic":
                    from agent.llm.anthropic import AnthropicProvider
                    made = AnthropicProvider(max_retries=self._max_retries,
                                             timeout=self._timeout, lazy=True, spec=spec)
                else:
                    from agent.llm.openai import OpenAIProvider
                    made = OpenAIProvider(spec, max_retries=self._max_retries,
                                          timeout=self._timeout)
                self._made[name] = made
        return made

    def check_key(self, model: str) -> None:
        """NoApiKey now when `model`'s provider needs a key that is not set."""
        self.spec(model).key()

    def load(self, model: str) -> None:
        """Load `model`'s SDK and make its client now (a long-running process pays at
        start, not in its first job)."""
        spec = self.spec(model)
        _ = self.backend(spec.name).client     # type: ignore[attr-defined]

    # -- calls

    def _chain(self, models: str | Sequence[str],
               call: Callable[[Provider, str, ProviderSpec], Reply]) -> Reply:
        chain = model_chain(models)
        for i, model in enumerate(chain):
            try:
                spec = self.spec(model)
                msg = call(self.backend(spec.name), split(model)[1], spec)
            except NoApiKey as e:
                if i == 0:
                    raise
                err = ProviderError(str(e), kind="no_key")
            except ProviderError as e:
                err = e
            else:
                msg.model = model
                return msg
            nxt = chain[i + 1] if i + 1 < len(chain) else None
            if nxt is None or not self._may_fall(err, model, nxt):
                raise err
            log.warning("%s failed (%s); trying %s", model, err.problem(), nxt)
        raise AssertionError("unreachable")

    @staticmethod
    def _may_fall(e: ProviderError, model: str, nxt: str) -> bool:
        if isinstance(e, TooLarge):
            return False
        elsewhere = split(model)[0] != split(nxt)[0]
        return e.fallback or (elsewhere and (e.status in (None, 429) or e.kind == "no_key"))

    def stream(self, models: str | Sequence[str], request: Request, *,
               on_text: Callable[[str], None] | None = None) -> Reply:
        def one(p: Provider, model: str, spec: ProviderSpec) -> Reply:
            check_request(request, spec.window(model))
            return p.stream(model, request, on_text=on_text)
        return self._chain(models, one)

    def create(self, models: str | Sequence[str], request: Request, *,
               parse: Any = None) -> Reply:
        def one(p: Provider, model: str, spec: ProviderSpec) -> Reply:
            check_request(request, spec.window(model))
            msg = p.create(model, request, parse=parse)
            problem = misfit(parse, msg.text) if parse is not None else None
            if problem is None:
                return msg
            again = dataclasses.replace(request, messages=[
                *request.messages, Message("assistant", msg.text or "(nothing)"),
                Message("user", RETRY.format(problem=problem))])
            second = p.create(model, again, parse=parse)
            second.usage = msg.usage + second.usage
            return second
        return self._chain(models, one)

    def count_tokens(self, model: str, request: Request) -> int:
        spec = self.spec(model)
        return self.backend(spec.name).count_tokens(split(model)[1], request)

    def list_models(self) -> list[str]:
        """Every configured provider's models, as `provider/model` (a provider whose key
        is not set is not configured, and is left out)."""
        out: list[str] = []
        for name, spec in self.specs.items():
            try:
                spec.key()
            except NoApiKey:
                continue
            out += [f"{name}/{m}" for m in self.backend(name).list_models()]
        return out

    def batching(self, model: str) -> Batching | None:
        spec = self.spec(model)
        own = self.backend(spec.name).batching(split(model)[1])
        return None if own is None else _Routed(own, spec)


class _Routed:
    """The batch API of one provider, as the Router offers it: requests name models as
    the agent does (`provider/model`), and the batch ids of a provider other than
    "anthropic" carry its name (`name:id`), so a saved id says where it lives."""

    def __init__(self, batches: Batching, spec: ProviderSpec) -> None:
        self._batches = batches
        self._spec = spec
        self._prefix = "" if spec.name == "anthropic" else f"{spec.name}:"

    def _own(self, batch_id: str) -> str:
        return batch_id.removeprefix(self._prefix) if self._prefix else batch_id

    def _named(self, batch: Batch) -> Batch:
        batch.id = self._prefix + batch.id
        return batch

    def batch_create(self, requests: list[BatchRequest]) -> Batch:
        bare = []
        for r in requests:
            model = split(r.model)[1]
            check_request(r.request, self._spec.window(model))
            bare.append(dataclasses.replace(r, model=model))
        return self._named(self._batches.batch_create(bare))

    def batch_retrieve(self, batch_id: str) -> Batch:
        return self._named(self._batches.batch_retrieve(self._own(batch_id)))

    def batch_results(self, batch_id: str) -> dict[str, BatchResult]:
        return self._batches.batch_results(self._own(batch_id))

    def batch_cancel(self, batch_id: str) -> Batch:
        return self._named(self._batches.batch_cancel(self._own(batch_id)))
