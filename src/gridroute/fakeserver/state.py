"""The live state of one fake server: engines, injected faults, and its stats.

Tests and the demo flip faults through `/admin/*`; the request path reads them here
with one attribute check, so an unfaulted server pays nothing for the controls.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

from aiohttp import web

from gridroute.fakeserver import openai_shapes as shapes
from gridroute.fakeserver.answer_log import AnswerLog
from gridroute.fakeserver.metrics import make_registry
from gridroute.fakeserver.prefix_cache import PrefixCache
from gridroute.fakeserver.served_model import FakeEngine
from gridroute.fakeserver.servicetime import ServiceTime
from gridroute.fakeserver.settings import FakeServerConfig


class ServerState:
    """Everything one app instance shares between its handlers."""

    def __init__(self, cfg: FakeServerConfig) -> None:
        self.cfg = cfg
        self.engines = {m: FakeEngine(m, cfg.slots, cfg.max_queue) for m in cfg.models}
        self.default_model = cfg.models[0]
        self.timing = ServiceTime(
            cfg.service_s,
            cfg.distribution,
            sigma=cfg.sigma,
            per_token_s=cfg.per_token_s,
            rng=random.Random(cfg.seed),
        )
        self.registry = make_registry(self.engines.values, kv_at_full=cfg.kv_at_full)
        self.ids = itertools.count(1)
        self.fail_status: int | None = None
        """When set, every model request answers this status (`/admin/fail`)."""
        self.fail_retry_after_s: int | None = None
        self.failed = 0
        """Requests answered with the injected failure status."""
        self.failed_requests = 0
        """Of those, model requests: all but the model list (`GET /v1/models`), which is
        what health probes read. The demo counts "requests sent to a dead site" here."""
        self.paused = False
        """When set, answers stall until `/admin/recover` (`/admin/pause`)."""
        self.pause_metrics = False
        """Whether `/metrics` and `/health` stall too (a site gone silent, not just slow)."""
        self.metrics_status: int | None = None
        """When set, `/metrics` answers this status while the model API keeps serving
        (`/admin/metrics`: a failing scrape in front of a healthy backend)."""
        self._resume = asyncio.Event()
        self._resume.set()
        self.prefixes = PrefixCache()
        """Chat prefixes seen: the `cached_tokens` a chat answer reports."""
        self.answers = AnswerLog(cfg.answer_log) if cfg.answer_log else None
        """Where answers begun are logged (`FakeServerConfig.answer_log`), if anywhere."""

    def next_id(self) -> str:
        return f"fake{next(self.ids):012x}"

    async def gate(self) -> None:
        """Hang here while paused; call only after checking `paused` (keeps the fast path)."""
        await self._resume.wait()

    def fail(self, status: int, retry_after_s: int | None) -> None:
        self.fail_status = status
        self.fail_retry_after_s = retry_after_s

    def pause(self, metrics: bool) -> None:
        self.paused = True
        self.pause_metrics = metrics
        self._resume.clear()

    def recover(self) -> None:
        """Clear every injected fault; stalled requests resume and finish."""
        self.fail_status = None
        self.fail_retry_after_s = None
        self.paused = False
        self.pause_metrics = False
        self.metrics_status = None
        self._resume.set()

    def failure_response(self, model_request: bool = True) -> web.Response:
        """The injected failure, OpenAI-shaped, with `Retry-After` when one was given.
        `model_request` is false for the model list (a health probe's read)."""
        status = self.fail_status or 503
        self.failed += 1
        if model_request:
            self.failed_requests += 1
        headers = {}
        if self.fail_retry_after_s:
            headers["Retry-After"] = str(self.fail_retry_after_s)
        body = shapes.error(
            f"injected failure: fake server {self.cfg.name!r} answers {status}",
            "rate_limit_error" if status == 429 else "server_error",
            "injected_failure",
        )
        return web.Response(
            status=status, body=body, content_type="application/json", headers=headers
        )

    def stats(self) -> dict[str, Any]:
        """`/admin/stats`: totals over every model, and each model's own counts."""
        per_model = {m: e.stats() for m, e in self.engines.items()}
        totals = {
            key: sum(s[key] for s in per_model.values())
            for key in ("slots", "running", "waiting", "served", "cancelled", "overshoot",
                        "rejected")
        }  # fmt: skip
        return {
            "name": self.cfg.name,
            **totals,
            "failed": self.failed,
            "failed_requests": self.failed_requests,
            "failing": self.fail_status,
            "paused": self.paused,
            "models": per_model,
        }


STATE = web.AppKey("gridroute_fake_state", ServerState)
