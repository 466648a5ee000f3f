"""The Schedules and Settings pages (see pages.py for how a page works)."""

from __future__ import annotations


def routes(page, sync) -> list:
    return []
