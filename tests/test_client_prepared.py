"""ReplayClient._send: the SDK builds the first request to a path; later ones put the same head back on
the wire with their own body. What the server receives, and what errors become, must not change."""

from __future__ import annotations

import asyncio

import openai
import pytest

from harness.client.stream import ReplayClient, ReplayRequest
from tests.test_client import REQ, ScriptServer, server, spec_stream, sse, status  # noqa: F401 (fixture)


def _without_length(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if k.lower() != "content-length"]


def _counting_builds(c: ReplayClient) -> list[int]:
    """Count the requests the SDK builds itself."""
    calls = [0]
    build = c._client._build_request

    def counted(*a, **k):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return build(*a, **k)

    c._client._build_request = counted  # type: ignore[method-assign]
    return calls


async def test_later_requests_carry_the_sdks_head_and_their_own_body(server: ScriptServer) -> None:  # noqa: F811
    server.scripts = [sse(spec_stream([1, 2]))]
    c = ReplayClient(server.url, "default", api_key="sk-secret", timeout_s=30)
    built = _counting_builds(c)
    try:
        reqs = [ReplayRequest(f"r{i}", [{"role": "user", "content": "x" * i}], None, max_tokens=8 + i)
                for i in range(1, 6)]
        results = [await c.stream(r) for r in reqs]
        results += await asyncio.gather(*(c.stream(r) for r in reqs))
    finally:
        await c.aclose()
    assert all(r.ok and r.chunk_tokens == [1, 2] for r in results)
    assert built[0] == 1  # only the first request went through the SDK's request builder
    first = server.heads[0]
    assert first[0] == "POST" and first[1] == "/v1/chat/completions"
    assert ("Authorization", "Bearer sk-secret") in first[2]
    for method, path, headers in server.heads[1:]:
        assert (method, path, _without_length(headers)) == (first[0], first[1], _without_length(first[2]))
    # each body is its own request's, with the right length (aiohttp parsed it as JSON)
    bodies = [body for _, body, _ in server.requests]
    assert [b["max_tokens"] for b in bodies] == [9, 10, 11, 12, 13] * 2
    assert [b["messages"][0]["content"] for b in bodies[:5]] == ["x" * i for i in range(1, 6)]


@pytest.mark.parametrize(("code", "error_class"), [(500, openai.InternalServerError),
                                                  (429, openai.RateLimitError),
                                                  (400, openai.BadRequestError)])
async def test_an_error_answer_after_the_first_request_is_what_the_sdk_makes_of_it(
        server: ScriptServer, code: int, error_class: type) -> None:  # noqa: F811
    body = {"object": "error", "message": f"boom {code}", "type": "X", "code": code}
    server.scripts = [sse(spec_stream([1])), status(code, body), sse(spec_stream([3]))]
    c = ReplayClient(server.url, "default", timeout_s=30)
    raised: list[BaseException] = []
    send = c._send

    async def spy(path, body):  # type: ignore[no-untyped-def]
        try:
            return await send(path, body)
        except BaseException as exc:
            raised.append(exc)
            raise

    c._send = spy  # type: ignore[method-assign]
    try:
        ok1, bad, ok2 = [await c.stream(REQ) for _ in range(3)]
    finally:
        await c.aclose()
    assert ok1.ok and ok2.ok and ok2.chunk_tokens == [3]  # the connection and the head still serve
    assert not bad.ok and bad.http_status == code and bad.error is not None
    assert bad.error.startswith(f"http {code}: ") and f"boom {code}" in bad.error
    assert len(raised) == 1 and type(raised[0]) is error_class
    assert raised[0].status_code == code and raised[0].body["message"] == f"boom {code}"  # type: ignore[attr-defined]


async def test_a_user_http_client_keeps_the_sdk_path(server: ScriptServer) -> None:  # noqa: F811
    server.scripts = [sse(spec_stream([1]))]
    c = ReplayClient(server.url, "default", timeout_s=30, http_client=openai.DefaultAsyncHttpxClient())
    built = _counting_builds(c)
    try:
        assert all([(await c.stream(REQ)).ok for _ in range(3)])
    finally:
        await c.aclose()
    assert built[0] == 3


async def test_per_request_connections_open_one_connection_each(server: ScriptServer) -> None:  # noqa: F811
    server.scripts = [sse(spec_stream([1, 1]))]
    fresh = ReplayClient(server.url, "default", timeout_s=30, keepalive=False)
    pooled = ReplayClient(server.url, "default", timeout_s=30)
    try:
        assert all([(await fresh.stream(REQ)).ok for _ in range(4)])
        assert all([(await pooled.stream(REQ)).ok for _ in range(4)])
        assert fresh._fast is not None and not any(fresh._fast._idle.values())  # nothing left open
    finally:
        await fresh.aclose()
        await pooled.aclose()
    peers = [peer for _, _, peer in server.requests]
    assert len(set(peers[:4])) == 4  # a new client port for every request
    assert len(set(peers[4:])) == 1  # keep-alive: one connection for all four
    assert all(body == server.requests[0][1] for _, body, _ in server.requests)
