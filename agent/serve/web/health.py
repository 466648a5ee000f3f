"""The Health page: memory health over time (agent/ops/stats.py, as `agent stats` shows
it), a table of the totals and charts drawn by uPlot, which ships in static/uplot/.

`/health` is the page (readable without JavaScript: the totals and each day in a table);
`/health.json` is the same ops function's JSON, which static/health.js draws."""

from __future__ import annotations

from agent.errors import UserError
from agent.serve.web.pages import _now


def _stats(page, request):
    from agent.config import load_settings
    from agent.ops import stats
    from agent.ops.search import parse_day

    since = request.query_params.get("since") or None
    vault = page.vault
    return stats.stats(vault, load_settings(vault.root), _now(),
                       parse_day(vault, since, "since"))


def health_page(page, request):
    from agent.ops import stats

    since = request.query_params.get("since") or ""
    try:
        found = _stats(page, request)
    except UserError as e:
        return page.render(request, "health.html", 400, nav="health", since=since,
                           problem=str(e), found=None)
    return page.render(request, "health.html", nav="health", since=since, found=found,
                       summary=stats.line(found), money=stats.money, rate=stats.rate,
                       unknown=stats.unknown_models(found), parts=stats.PARTS)


def health_json(page, request):
    from starlette.responses import JSONResponse

    try:
        found = _stats(page, request)
    except UserError as e:
        return JSONResponse({"error": str(e)}, 400)
    return JSONResponse(found.to_json(), headers={"Cache-Control": "no-store"})


def routes(page, sync) -> list:
    from starlette.routing import Route

    return [Route("/health", sync(health_page)), Route("/health.json", sync(health_json))]
