"""The live view: tiers, replicas, breakers, queues, traffic over the last minute, recent decisions.

``/admin/live`` renders it whole; ``/admin/live/panel`` renders the panel alone, which the
page fetches every ``admin_ui.refresh_s`` seconds; ``/admin/data/live`` is the same as JSON.
"""

from __future__ import annotations

import time
from typing import Any

from litestar import Response, get
from litestar.di import NamedDependency
from litestar.response import Template

from admin_ui._context import SECURITY_HEADERS, UI, page, services
from admin_ui._guard import AnyRequest, operator
from gateway.wire.chat import encode

WINDOW_S = 60.0
RECENT = 25


def live_state(request: AnyRequest) -> dict[str, Any]:
    running = services(request)
    tiers, activity = running.tiers, running.activity
    summary = activity.summary(WINDOW_S)
    states = activity.with_spend(tiers.states())
    replicas = [dict(r, tier=t["name"]) for t in states for r in t.get("instances", ())]
    return {
        "time": time.time(),
        "tiers": states,
        "replicas": replicas,
        "breakers": tiers.breaker_states(),
        "summary": summary.as_dict(),
        "recent": [d.as_dict() for d in activity.recent(RECENT)],
    }


@get("/live", name="admin_ui:live")
async def live_page(request: AnyRequest, ui: NamedDependency[UI]) -> Template:
    op = await operator(request, ui.sessions)
    return page(
        op, "live.html", title="Live", nav="live", live=live_state(request), refresh_s=ui.settings.refresh_s
    )


@get("/live/panel", name="admin_ui:live_panel")
async def live_panel(request: AnyRequest, ui: NamedDependency[UI]) -> Template:
    await operator(request, ui.sessions, page=False)
    return page(None, "live_panel.html", title="Live", live=live_state(request))


@get("/data/live", name="admin_ui:live_data")
async def live_data(request: AnyRequest, ui: NamedDependency[UI]) -> Response[bytes]:
    await operator(request, ui.sessions, page=False)
    return Response(encode(live_state(request)), media_type="application/json", headers=SECURITY_HEADERS)


LIVE_ROUTES = [live_page, live_panel, live_data]
