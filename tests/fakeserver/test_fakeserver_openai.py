"""The official `openai` client parses every fake server answer."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import openai
import pytest

from gridroute.fakeserver.server import FakeServerConfig, start_fake_server


def run_with_client(check: Callable[[openai.AsyncOpenAI], Awaitable[None]], **cfg: Any) -> None:
    async def main() -> None:
        srv = await start_fake_server(FakeServerConfig(service_s=0.0, **cfg))
        async with srv:
            client = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
            try:
                await check(client)
            finally:
                await client.close()

    asyncio.run(main())


def test_chat_completion_plain_and_streamed() -> None:
    async def check(client: openai.AsyncOpenAI) -> None:
        msgs = [{"role": "user", "content": "hello"}]
        out = await client.chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
        assert out.choices[0].message.content == "lorem ipsum dolor sit amet "
        assert out.choices[0].finish_reason == "stop"
        assert out.usage is not None and out.usage.completion_tokens == 5
        stream = await client.chat.completions.create(
            model="m", messages=msgs, stream=True, max_tokens=7,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        )  # fmt: skip
        pieces, finish, usage = [], None, None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                finish = choice.finish_reason or finish
        assert len(pieces) == 7
        assert finish == "length"
        assert usage is not None and usage.completion_tokens == 7

    run_with_client(check, models=["m"], tokens=5, per_token_s=0.001)


def test_completions_plain_and_streamed() -> None:
    async def check(client: openai.AsyncOpenAI) -> None:
        out = await client.completions.create(model="fake-model", prompt="hi", max_tokens=3)
        assert out.choices[0].text == "lorem ipsum dolor "
        assert out.choices[0].finish_reason == "length"
        stream = await client.completions.create(model="fake-model", prompt="hi", stream=True)
        texts = [c.choices[0].text async for c in stream]
        assert len(texts) == 4

    run_with_client(check, tokens=4)


def test_embeddings_responses_and_models() -> None:
    async def check(client: openai.AsyncOpenAI) -> None:
        emb = await client.embeddings.create(model="fake-model", input=["a", "b"])
        assert [len(d.embedding) for d in emb.data] == [8, 8]
        again = await client.embeddings.create(
            model="fake-model", input="a", encoding_format="float"
        )
        assert again.data[0].embedding == pytest.approx(emb.data[0].embedding)
        resp = await client.responses.create(model="fake-model", input="hi", max_output_tokens=2)
        assert resp.output_text == "lorem ipsum "
        models = [m.id async for m in client.models.list()]
        assert models == ["fake-model"]

    run_with_client(check, embedding_dim=8)


def test_unknown_model_raises_not_found() -> None:
    async def check(client: openai.AsyncOpenAI) -> None:
        with pytest.raises(openai.NotFoundError) as err:
            await client.chat.completions.create(
                model="ghost", messages=[{"role": "user", "content": "x"}]
            )
        assert err.value.code == "model_not_found"

    run_with_client(check)
