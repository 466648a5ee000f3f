"""The provider the agent is given: it sends each model of a fallback chain to the
service that model names (agent.llm.spec), so one chain may cross providers:

    ["local/qwen3:8b", "anthropic/claude-haiku-4-5"]

A model fails over to the next when the error says another may work: the model is
overloaded, unknown or rate limited there, or (for a model of another provider) its
service could not be reached. `Message.model` is the full name of the model that
answered, provider included, as the commit trailers record it.

A structured reply (`parse=` a pydantic model) that does not fit is asked for once more,
with what was wrong; what the second answer says is returned either way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from agent.llm.base import (Batch, BatchResult, Message, NotFound, Provider, ProviderError,
                            TooLarge, add_usage, check_request, zero_usage)
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
               call: Callable[[Provider, str, ProviderSpec], Message]) -> Message:
        chain = [models] if isinstance(models, str) else list(models)
        chain = [m for i, m in enumerate(chain) if m and m not in chain[:i]]
        if not chain:
            raise ValueError("no model to call")
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

    def stream(self, models: str | Sequence[str], *,
               on_text: Callable[[str], None] | None = None, parse: Any = None,
               **params: Any) -> Message:
        def one(p: Provider, model: str, spec: ProviderSpec) -> Message:
            check_request(params, spec.window(model))
            return p.stream(model, on_text=on_text, **{**spec.sampling, **params})
        return self._chain(models, one)

    def create(self, models: str | Sequence[str], *, parse: Any = None, **params: Any) -> Message:
        def one(p: Provider, model: str, spec: ProviderSpec) -> Message:
            check_request(params, spec.window(model))
            msg = p.create(model, parse=parse, **{**spec.sampling, **params})
            problem = misfit(parse, msg.text) if parse is not None else None
            if problem is None:
                return msg
            again = dict(params)
            again["messages"] = [*params.get("messages", []),
                                 {"role": "assistant", "content": msg.text or "(nothing)"},
                                 {"role": "user", "content": RETRY.format(problem=problem)}]
            second = p.create(model, parse=parse, **again)
            second.usage = add_usage(add_usage(zero_usage(), msg.usage), second.usage)
            return second
        return self._chain(models, one)

    def count_tokens(self, model: str, **params: Any) -> int:
        spec = self.spec(model)
        return self.backend(spec.name).count_tokens(split(model)[1], **params)

    def list_models(self) -> list[str]:
        return self.backend("anthropic").list_models()

    # -- batches (only an Anthropic-API provider has them)

    def _batch_home(self, batch_id: str) -> tuple[Provider, str, str]:
        name, sep, rest = batch_id.partition(":")
        if sep and name in self.specs:
            return self.backend(name), rest, f"{name}:"
        return self.backend("anthropic"), batch_id, ""

    def batch_create(self, requests: list[dict[str, Any]]) -> Batch:
        model = (requests[0].get("params") or {}).get("model", "") if requests else ""
        spec = self.spec(model)
        if spec.api != "anthropic":
            raise NotFound(f"The provider {spec.name} has no Batches API.", kind="no_batches")
        bare = []
        for r in requests:
            params = dict(r.get("params") or {})
            check_request(params, spec.window(split(params.get("model", ""))[1]))
            params["model"] = split(params.get("model", ""))[1]
            bare.append({**r, "params": params})
        batch = self.backend(spec.name).batch_create(bare)
        if spec.name != "anthropic":
            batch.id = f"{spec.name}:{batch.id}"
        return batch

    def batch_retrieve(self, batch_id: str) -> Batch:
        p, bid, prefix = self._batch_home(batch_id)
        batch = p.batch_retrieve(bid)
        batch.id = prefix + batch.id
        return batch

    def batch_results(self, batch_id: str) -> dict[str, BatchResult]:
        p, bid, _ = self._batch_home(batch_id)
        return p.batch_results(bid)

    def batch_cancel(self, batch_id: str) -> Batch:
        p, bid, prefix = self._batch_home(batch_id)
        batch = p.batch_cancel(bid)
        batch.id = prefix + batch.id
        return batch
