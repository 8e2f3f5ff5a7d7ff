"""Citation links written as the reader sees them ("[来源 N]"), whole or as the answer streams."""

from __future__ import annotations

import pytest

from chat.pipeline.citations import ReadableMarkerStream, readable_markers

ANSWER = "星河X3 的保修期为 24 个月[来源 1](citation://1)，配件 1 年[来源 12](citation://12)。见 [附表] 与 [来源"


def test_links_become_markers_and_other_brackets_stay():
    assert readable_markers(ANSWER) == "星河X3 的保修期为 24 个月[来源 1]，配件 1 年[来源 12]。见 [附表] 与 [来源"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 11, 64])
def test_a_streamed_answer_cut_anywhere_reads_as_the_whole_one(size):
    # given: the answer in deltas of `size` characters (every cut through a link, at some size)
    deltas = [ANSWER[i:i + size] for i in range(0, len(ANSWER), size)]
    stream = ReadableMarkerStream()
    # when
    out = [stream.feed(delta) for delta in deltas] + [stream.flush()]
    # then: the same text, and no delta ever showed half a link
    assert "".join(out) == readable_markers(ANSWER)
    assert not any("citation" in piece or "](" in piece for piece in out)
