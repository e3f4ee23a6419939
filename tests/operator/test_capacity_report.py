"""`GET /capacity/{provider}` answers the reference's `{servable, observedAt}`."""

from __future__ import annotations

import asyncio
import datetime as dt

import aiohttp
from operator_fixtures import MetricsServer, free_port, operator_config, vllm_provider

from gridroute.operator.service import Operator

PAGE = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{model_name="m",engine="0"} 1\n'
    'vllm:num_requests_running{model_name="m",engine="1"} 2\n'
)


def test_capacity_report_shape_unknown_provider_and_no_sample_yet() -> None:
    async def body() -> None:
        async with MetricsServer(PAGE) as metrics:
            port = free_port()
            cfg = operator_config(
                "hub",
                port,
                certs=None,
                providers=[
                    vllm_provider("pool", metrics.port),
                    {"name": "idle", "models": ["m"], "backendUrl": "http://127.0.0.1:1"},
                ],
                interval=0.1,
            )
            op = Operator(cfg)
            await op.start()
            try:
                for _ in range(100):
                    if op.store.latest():
                        break
                    await asyncio.sleep(0.02)
                base = f"http://127.0.0.1:{port}/capacity"
                async with aiohttp.ClientSession() as s:
                    async with s.get(f"{base}/pool") as r:
                        assert r.status == 200
                        report = await r.json()
                    async with s.get(f"{base}/nope") as r:
                        assert r.status == 404
                        assert (await r.json())["error"]["type"] == "not_found"
                    async with s.get(f"{base}/idle") as r:
                        assert r.status == 503  # unmeasured: no report, not a report of 0
                assert set(report) == {"servable", "observedAt"}
                assert report["servable"] == 2
                at = dt.datetime.fromisoformat(report["observedAt"].replace("Z", "+00:00"))
                assert abs(at.timestamp() - op.store.latest()["hub/pool"].at) < 1
            finally:
                await op.stop()

    asyncio.run(body())
