"""A text notation of an `AnswerRequest`, for test fixtures and the benchmark's saved cases: the
evidence written as a chat prompt carries it.

    <knowledge_context>
    [来源 1] 可选标题
    正文……
    | 表头 | 表头 |
    | --- | --- |
    | 单元格 | 单元格 |
    ![图片说明](asset://17)

    [来源 2]
    正文……
    </knowledge_context>

    问题：用户的问题

Text after `[来源 N]` on its line is the title when more lines follow, else the source's text;
`![说明](asset://ID)` lines are the source's images. `write` gives the notation of a request
(what `chat.answering.model.user_prompt` sends a model, without the history); `parse` reads it back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from engines.ports import ChatMessage

from .request import AnswerRequest, AnswerSource, SourceImage

_CONTEXT_BLOCK = re.compile(r"<knowledge_context>(.*?)</knowledge_context>", re.S)
_SOURCE_MARKER = re.compile(r"^[ \t]*\[来源\s*(\d+)\][ \t]*(.*)$", re.M)
_QUESTION = re.compile(r"问题[：:][ \t]*(.+?)(?:\n[ \t]*\n|\Z)", re.S)
_ASSET_LINE = re.compile(r"^!\[([^\]\n]*)\]\(asset://(\d+)\)$")


def parse(messages: Sequence[ChatMessage] | str) -> AnswerRequest:
    text = messages if isinstance(messages, str) else next(
        m.content for m in reversed(messages) if m.role == "user" and "<knowledge_context>" in m.content
    )
    block = _CONTEXT_BLOCK.search(text)
    assert block is not None, "no <knowledge_context> block"
    after, before = text[block.end():], text[:block.start()]
    match = _QUESTION.search(after) or _QUESTION.search(before)
    question = match.group(1).strip() if match else after.strip()
    return AnswerRequest(question=question, sources=tuple(_sources(block.group(1))))


def _sources(block: str) -> list[AnswerSource]:
    markers = list(_SOURCE_MARKER.finditer(block))
    sources = []
    for i, marker in enumerate(markers):
        end = markers[i + 1].start() if i + 1 < len(markers) else len(block)
        body = block[marker.end():end].strip()
        rest = marker.group(2).strip()
        title, text = (rest, body) if body else ("", rest)
        if not text:
            continue
        lines, images = [], []
        for line in text.splitlines():
            asset = _ASSET_LINE.match(line.strip())
            if asset:
                images.append(SourceImage(int(asset.group(2)), asset.group(1)))
            else:
                lines.append(line)
        sources.append(AnswerSource(number=int(marker.group(1)), kind="chunk", title=title,
                                    text="\n".join(lines).strip(), images=tuple(images)))
    return sources


def write(request: AnswerRequest) -> str:
    blocks = []
    for source in request.sources:
        head = f"[来源 {source.number}] {source.title}".rstrip()
        blocks.append("\n".join([head, source.text, *(image.line for image in source.images)]))
    return "<knowledge_context>\n" + "\n\n".join(blocks) + "\n</knowledge_context>\n\n问题：" + request.question
