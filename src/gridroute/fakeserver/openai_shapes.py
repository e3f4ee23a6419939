"""OpenAI-shaped bodies the fake server answers with, as plain dicts.

Just enough of each object (ids, `object`, `created`, `model`, choices or data, usage)
for the official `openai` client to parse it, built from dict literals rather than
validated models: the fake server is the backend of proxy benchmarks and must stay cheap.
"""

from __future__ import annotations

import base64
import json
import zlib
from array import array
from typing import Any

WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit")


def token(i: int) -> str:
    """The text of output token `i` (one word and a space), so streams can be counted."""
    return WORDS[i % len(WORDS)] + " "


def text(tokens: int) -> str:
    """The whole output of `tokens` tokens: the concatenation of every streamed chunk."""
    return "".join(token(i) for i in range(tokens))


def error(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    """An OpenAI error body: `{"error": {"message", "type", "param", "code"}}`."""
    return json.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    ).encode()


def estimate_tokens(value: Any) -> int:
    """A rough prompt-token count (4 characters a token) over any nested prompt shape."""
    if isinstance(value, str):
        return len(value) // 4 + 1
    if isinstance(value, list):
        if value and all(isinstance(v, int) for v in value):
            return len(value)  # already token ids
        return sum(estimate_tokens(v) for v in value)
    if isinstance(value, dict):
        return sum(estimate_tokens(value.get(k)) for k in ("content", "text") if k in value)
    return 0


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}  # fmt: skip


def chat_completion(
    rid: str, created: int, model: str, tokens: int, prompt: int, finish: str, cached: int = 0
) -> dict[str, Any]:
    """A chat answer; `cached` prompt tokens were a prefix this server had seen (vLLM's
    `usage.prompt_tokens_details.cached_tokens`)."""
    message = {"role": "assistant", "content": text(tokens)}
    return {
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {**usage(prompt, tokens), "prompt_tokens_details": {"cached_tokens": cached}},
    }  # fmt: skip


def chat_chunk(
    rid: str, created: int, model: str, delta: dict[str, str], finish: str | None
) -> dict[str, Any]:
    return {
        "id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }  # fmt: skip


def completion(
    rid: str, created: int, model: str, tokens: int, prompt: int, finish: str
) -> dict[str, Any]:
    return {
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text(tokens), "finish_reason": finish,
                     "logprobs": None}],
        "usage": usage(prompt, tokens),
    }  # fmt: skip


def completion_chunk(
    rid: str, created: int, model: str, piece: str, finish: str | None
) -> dict[str, Any]:
    return {
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": piece, "finish_reason": finish, "logprobs": None}],
    }  # fmt: skip


def usage_chunk(
    rid: str, created: int, model: str, obj: str, prompt: int, tokens: int
) -> dict[str, Any]:
    """The trailing chunk sent when the request asked `stream_options.include_usage`."""
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [],
            "usage": usage(prompt, tokens)}  # fmt: skip


def embedding_inputs(value: Any) -> list[Any] | None:
    """The list of inputs in an embeddings request (str, [str], [int] or [[int]])."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(v, int) for v in value):
            return [value]
        if all(isinstance(v, str | list) for v in value):
            return value
    return None


def embeddings(model: str, inputs: list[Any], dim: int, as_base64: bool) -> dict[str, Any]:
    """Deterministic vectors (the same input always embeds the same), float or base64."""
    data = []
    for i, item in enumerate(inputs):
        seed = zlib.crc32(repr(item).encode())
        vec = array("f", (((seed >> (k % 24)) & 0xFF) / 255.0 - 0.5 for k in range(dim)))
        emb: Any = base64.b64encode(vec.tobytes()).decode() if as_base64 else vec.tolist()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    prompt = estimate_tokens(inputs)
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt}}  # fmt: skip


def response(rid: str, created: int, model: str, tokens: int, prompt: int) -> dict[str, Any]:
    """A `/v1/responses` object holding one assistant message."""
    content = [{"type": "output_text", "text": text(tokens), "annotations": []}]
    return {
        "id": "resp_" + rid, "object": "response", "created_at": created, "model": model,
        "status": "completed", "error": None, "incomplete_details": None,
        "instructions": None, "metadata": {}, "parallel_tool_calls": True,
        "temperature": 1.0, "top_p": 1.0, "tool_choice": "auto", "tools": [],
        "output": [{"type": "message", "id": "msg_" + rid, "status": "completed",
                    "role": "assistant", "content": content}],
        "usage": {"input_tokens": prompt, "output_tokens": tokens,
                  "total_tokens": prompt + tokens,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }  # fmt: skip


def models_list(models: list[str], created: int) -> dict[str, Any]:
    return {"object": "list", "data": [
        {"id": m, "object": "model", "created": created, "owned_by": "gridroute-fake"}
        for m in models
    ]}  # fmt: skip
