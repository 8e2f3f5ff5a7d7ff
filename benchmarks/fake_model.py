"""A fake OpenAI-compatible model server for load benchmarks: answers stream at human speed.

    python -m benchmarks.fake_model --port 9001 --first-delay 0.3 --tokens-per-second 30 --tokens 150

`POST /v1/chat/completions` with `"stream": true` sends the response headers at once, waits
`--first-delay` seconds (the model reading its prompt), then `--tokens` chunks at
`--tokens-per-second`, then `data: [DONE]`; without `stream` it answers the same text at once
after the first delay. The text is Chinese with a citation marker of the first source, so the
answer filter and citation checks do their usual work. `POST /v1/rerank` (and `/rerank`) scores
documents by character overlap, instantly. `GET /stats` returns the streams open now and the
most there ever were (`POST /stats/reset` starts counting again).

asyncio (aiohttp) rather than a thread per stream: a thousand streams at 30 tokens/s are 30,000
chunks a second, which a thread per connection could not send on time on a small machine. Chunks
due in the same tick (`--tick`, 50 ms) are written together, as a real server's network buffers
would deliver them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import web

TEXT = (
    "根据知识库中的资料，这个问题的答案如下[来源 1]：相关规定已在制度文件中写明，"
    "员工应按照流程提交申请，并由直属主管审批后生效。如有特殊情况，请联系人力资源部门确认。"
)


class Stats:
    def __init__(self) -> None:
        self.open = 0
        self.max_open = 0
        self.streams = 0

    def opened(self) -> None:
        self.open += 1
        self.streams += 1
        self.max_open = max(self.max_open, self.open)

    def closed(self) -> None:
        self.open -= 1


def _chunk(index: int, piece: str, *, finish: bool) -> bytes:
    body = {
        "id": f"fake-{index}", "object": "chat.completion.chunk", "created": int(time.time()), "model": "fake",
        "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": "stop" if finish else None}],
    }
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


def build_app(*, first_delay: float, tokens_per_second: float, tokens: int, tick: float) -> web.Application:
    stats = Stats()
    pieces = [TEXT[i % len(TEXT)] for i in range(tokens)]

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            await asyncio.sleep(first_delay)
            return web.json_response({
                "id": "fake", "object": "chat.completion", "created": int(time.time()), "model": "fake",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(pieces)},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1},
            })
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        stats.opened()
        try:
            await asyncio.sleep(first_delay)
            started = time.monotonic()
            sent = 0
            while sent < len(pieces):
                due = min(len(pieces), 1 + int((time.monotonic() - started) * tokens_per_second))
                if due > sent:
                    await response.write(b"".join(
                        _chunk(i, pieces[i], finish=i == len(pieces) - 1) for i in range(sent, due)))
                    sent = due
                if sent < len(pieces):
                    await asyncio.sleep(tick)
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the client hung up: what a cancelled answer looks like from here
        finally:
            stats.closed()
        return response

    async def rerank(request: web.Request) -> web.Response:
        body = await request.json()
        query = set(str(body.get("query", "")))
        documents = [str(d.get("text", d) if isinstance(d, dict) else d) for d in body.get("documents", [])]
        scores = [len(query & set(d)) / len(query) if query else 0.0 for d in documents]
        order = sorted(range(len(documents)), key=lambda i: -scores[i])[: int(body.get("top_n") or len(documents))]
        return web.json_response({"id": "fake", "results": [{"index": i, "relevance_score": scores[i]} for i in order],
                                  "usage": {"total_tokens": 1}})

    async def stats_view(request: web.Request) -> web.Response:
        return web.json_response({"open": stats.open, "max_open": stats.max_open, "streams": stats.streams})

    async def reset_stats(request: web.Request) -> web.Response:
        stats.max_open = stats.open
        stats.streams = 0
        return web.json_response({"open": stats.open})

    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/rerank", rerank)
    app.router.add_post("/rerank", rerank)
    app.router.add_get("/stats", stats_view)
    app.router.add_post("/stats/reset", reset_stats)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--first-delay", type=float, default=0.3, help="seconds to the first token")
    parser.add_argument("--tokens-per-second", type=float, default=30.0)
    parser.add_argument("--tokens", type=int, default=150, help="tokens (one character each) per answer")
    parser.add_argument("--tick", type=float, default=0.05, help="seconds between writes of the tokens due")
    args = parser.parse_args()
    app = build_app(first_delay=args.first_delay, tokens_per_second=args.tokens_per_second, tokens=args.tokens,
                    tick=args.tick)
    web.run_app(app, host=args.host, port=args.port, print=None, backlog=4096, access_log=None)


if __name__ == "__main__":
    main()
