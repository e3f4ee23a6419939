"""The fake server over real loopback sockets: slots, queue, faults, disconnects."""

import asyncio
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gridroute.fakeserver.server import FakeServerConfig, RunningFakeServer, start_fake_server

from .polling import eventually

CHAT = "/v1/chat/completions"


def chat_body(model: str = "fake-model", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


async def post(
    s: aiohttp.ClientSession, url: str, body: Any = None
) -> tuple[int, dict[str, Any], aiohttp.ClientResponse]:
    async with s.post(url, json=body if body is not None else chat_body()) as r:
        return r.status, await r.json(), r


def serve(**cfg: Any) -> "asyncio.Future[RunningFakeServer]":
    return asyncio.ensure_future(start_fake_server(FakeServerConfig(**cfg)))


def arrived(srv: RunningFakeServer) -> int:
    """Requests the server has seen so far (running, queued or answered)."""
    stats = srv.state.stats()
    return int(stats["running"] + stats["waiting"] + stats["served"])


def test_four_slots_serve_eight_requests_in_two_waves() -> None:
    async def main() -> None:
        service = 0.25
        async with await serve(slots=4, service_s=service) as srv, aiohttp.ClientSession() as s:
            loop = asyncio.get_running_loop()

            async def timed() -> float:
                t = loop.time()
                status, _, _ = await post(s, srv.url + CHAT)
                assert status == 200
                return loop.time() - t

            tasks = [asyncio.create_task(timed()) for _ in range(8)]
            await eventually(
                lambda: (srv.state.stats()["running"], srv.state.stats()["waiting"]) == (4, 4)
            )
            latencies = sorted(await asyncio.gather(*tasks))
            stats = srv.state.stats()
            assert (stats["served"], stats["overshoot"]) == (8, 4)
            assert (stats["running"], stats["waiting"]) == (0, 0)
            # The second wave waited for a whole first-wave service: never earlier.
            assert min(latencies[4:]) >= 2 * service * 0.95

    asyncio.run(main())


def test_queue_is_first_in_first_out() -> None:
    async def main() -> None:
        async with await serve(slots=1, service_s=0.15) as srv, aiohttp.ClientSession() as s:
            done: list[int] = []

            async def one(i: int) -> None:
                status, _, _ = await post(s, srv.url + CHAT)
                assert status == 200
                done.append(i)

            tasks = []
            for i in range(4):
                tasks.append(asyncio.create_task(one(i)))
                await eventually(lambda n=i + 1: arrived(srv) == n)
            await asyncio.gather(*tasks)
            assert done == [0, 1, 2, 3]

    asyncio.run(main())


def test_metrics_exposition_matches_admin_stats_under_load() -> None:
    async def main() -> None:
        cfg = dict(slots=2, service_s=0.01, models=["m1", "m2"], name="site-a")
        async with await serve(**cfg) as srv, aiohttp.ClientSession() as s:
            await post(s, srv.url + "/admin/pause", {})
            tasks = [
                asyncio.create_task(post(s, srv.url + CHAT, chat_body("m1"))) for _ in range(5)
            ]
            tasks.append(asyncio.create_task(post(s, srv.url + CHAT, chat_body("m2"))))
            await eventually(
                lambda: srv.state.stats()["running"] + srv.state.stats()["waiting"] == 6
            )
            async with s.get(srv.url + "/metrics") as r:
                assert r.headers["x-fake-server"] == "site-a"
                text = await r.text()
            async with s.get(srv.url + "/admin/stats") as r:
                stats = await r.json()
            assert stats["models"]["m1"]["running"] == 2
            assert stats["models"]["m1"]["waiting"] == 3
            assert stats["models"]["m2"]["running"] == 1
            families = {f.name: f for f in text_string_to_metric_families(text)}
            for metric in ("running", "waiting"):
                fam = families[f"vllm:num_requests_{metric}"]
                assert fam.type == "gauge"
                got = {smp.labels["model_name"]: smp.value for smp in fam.samples}
                assert got == {m: stats["models"][m][metric] for m in ("m1", "m2")}
                assert {smp.labels["engine"] for smp in fam.samples} == {"0"}
            for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
                usage = {smp.labels["model_name"]: smp.value for smp in families[name].samples}
                assert usage == {"m1": 0.7, "m2": 0.35}  # kv_at_full 0.7 x running / slots
            assert families["vllm:request_success"].type == "counter"
            assert families["vllm:time_to_first_token_seconds"].type == "histogram"
            assert families["vllm:e2e_request_latency_seconds"].type == "histogram"
            await post(s, srv.url + "/admin/recover", {})
            assert all(r[0] == 200 for r in await asyncio.gather(*tasks))
            async with s.get(srv.url + "/metrics") as r:
                families = {f.name: f for f in text_string_to_metric_families(await r.text())}
            success = {
                (smp.labels["model_name"], smp.labels["finished_reason"]): smp.value
                for smp in families["vllm:request_success"].samples
                if smp.name.endswith("_total")
            }
            assert success[("m1", "stop")] == 5
            assert success[("m2", "stop")] == 1

    asyncio.run(main())


def test_errors_are_openai_shaped() -> None:
    async def main() -> None:
        async with await serve(service_s=0) as srv, aiohttp.ClientSession() as s:
            status, body, _ = await post(s, srv.url + CHAT, chat_body("nope"))
            assert status == 404
            assert body["error"]["code"] == "model_not_found"
            assert set(body["error"]) >= {"message", "type", "code"}
            async with s.post(srv.url + CHAT, data=b"{not json") as r:
                assert r.status == 400
                assert (await r.json())["error"]["type"] == "invalid_request_error"
            async with s.post(srv.url + "/v1/embeddings", json={"model": "fake-model"}) as r:
                assert r.status == 400

    asyncio.run(main())


def test_full_queue_sheds_429_with_retry_after() -> None:
    async def main() -> None:
        async with (
            await serve(slots=1, max_queue=1, service_s=0.3, retry_after_s=2) as srv,
            aiohttp.ClientSession() as s,
        ):
            tasks = [asyncio.create_task(post(s, srv.url + CHAT)) for _ in range(3)]
            results = await asyncio.gather(*tasks)
            statuses = sorted(r[0] for r in results)
            assert statuses == [200, 200, 429]
            shed = next(r for r in results if r[0] == 429)
            assert shed[1]["error"]["code"] == "rate_limit_exceeded"
            assert shed[2].headers["Retry-After"] == "2"
            assert srv.state.stats()["rejected"] == 1

    asyncio.run(main())


def test_fail_and_recover() -> None:
    async def main() -> None:
        async with await serve(service_s=0) as srv, aiohttp.ClientSession() as s:
            await post(s, srv.url + "/admin/fail", {"status": 503})
            status, body, _ = await post(s, srv.url + CHAT)
            assert status == 503
            assert body["error"]["code"] == "injected_failure"
            async with s.get(srv.url + "/health") as r:
                assert r.status == 503
            async with s.get(srv.url + "/v1/models") as r:  # what health probes read
                assert r.status == 503
            stats = srv.state.stats()
            # Every failure counts; only the chat request counts as a request sent to it.
            assert (stats["failed"], stats["failed_requests"]) == (2, 1)
            await post(s, srv.url + "/admin/recover", {})
            assert (await post(s, srv.url + CHAT))[0] == 200
            async with s.get(srv.url + "/health") as r:
                assert r.status == 200
            async with s.post(srv.url + "/admin/fail", json={"status": 200}) as r:
                assert r.status == 400

    asyncio.run(main())


def test_pause_stalls_answers_until_recover() -> None:
    async def main() -> None:
        async with await serve(service_s=0) as srv, aiohttp.ClientSession() as s:
            await post(s, srv.url + "/admin/pause", {})
            task = asyncio.create_task(post(s, srv.url + CHAT))
            await asyncio.sleep(0.3)
            assert not task.done()
            assert srv.state.stats()["running"] == 1
            async with s.get(srv.url + "/metrics") as r:  # metrics keep answering
                assert r.status == 200
            await post(s, srv.url + "/admin/recover", {})
            assert (await task)[0] == 200

    asyncio.run(main())


def test_slots_change_live() -> None:
    async def main() -> None:
        async with await serve(slots=1, service_s=0) as srv, aiohttp.ClientSession() as s:
            await post(s, srv.url + "/admin/pause", {})
            tasks = [asyncio.create_task(post(s, srv.url + CHAT)) for _ in range(4)]
            await eventually(lambda: srv.state.stats()["waiting"] == 3)
            _, stats, _ = await post(s, srv.url + "/admin/slots", {"slots": 3})
            assert (stats["running"], stats["waiting"], stats["slots"]) == (3, 1, 3)
            await post(s, srv.url + "/admin/recover", {})
            await asyncio.gather(*tasks)
            async with s.post(srv.url + "/admin/slots", json={"slots": -1}) as r:
                assert r.status == 400

    asyncio.run(main())


def test_client_leaving_frees_its_queue_place_and_slot() -> None:
    async def main() -> None:
        async with await serve(slots=1, service_s=30) as srv, aiohttp.ClientSession() as s:
            running = asyncio.create_task(post(s, srv.url + CHAT))
            await eventually(lambda: srv.state.stats()["running"] == 1)
            queued = asyncio.create_task(post(s, srv.url + CHAT))
            await eventually(lambda: srv.state.stats()["waiting"] == 1)
            queued.cancel()
            await eventually(lambda: srv.state.stats()["waiting"] == 0)
            running.cancel()
            await eventually(lambda: srv.state.stats()["running"] == 0)
            assert srv.state.stats()["cancelled"] == 2
            assert srv.state.engines["fake-model"].finished["abort"] == 2

    asyncio.run(main())


def test_client_leaving_mid_stream_frees_its_slot() -> None:
    async def main() -> None:
        async with (
            await serve(slots=2, service_s=0, per_token_s=0.05, tokens=200) as srv,
            aiohttp.ClientSession() as s,
        ):
            async with s.post(srv.url + CHAT, json=chat_body(stream=True)) as r:
                assert r.headers["Content-Type"].startswith("text/event-stream")
                chunks = 0
                async for line in r.content:
                    chunks += line.startswith(b"data: ")
                    if chunks == 3:
                        break
                assert srv.state.stats()["running"] == 1
                r.close()
            await eventually(lambda: srv.state.stats()["running"] == 0)
            stats = srv.state.stats()
            assert (stats["cancelled"], stats["served"]) == (1, 0)

    asyncio.run(main())
