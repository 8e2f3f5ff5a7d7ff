"""TurnRunner's hand-over to the transports: deltas waiting together leave as one piece."""

from __future__ import annotations

import asyncio

from chat.pipeline.events import Delta, Status
from chat.streaming import COALESCE_MAX_DELTAS, Outcome, TurnRunner


async def _outcomes_after(delivered: list[Outcome]) -> list[Outcome]:
    runner = TurnRunner(query=None, requester=None, service=object())
    for outcome in delivered:
        runner._deliver(outcome)
    received = []
    while True:
        outcome = await runner.next_coalesced()
        received.append(outcome)
        if outcome.kind == "done":
            return received


def test_waiting_deltas_are_joined_up_to_the_limit_and_never_across_another_event():
    # given: more deltas than one piece may join, a status, two more deltas, the end
    pieces = [f"{n}," for n in range(COALESCE_MAX_DELTAS + 2)]
    delivered = [Outcome("event", Delta(p)) for p in pieces]
    delivered += [Outcome("event", Status("generation", "…")), Outcome("event", Delta("甲")),
                  Outcome("event", Delta("乙")), Outcome("done")]

    # when
    received = asyncio.run(_outcomes_after(delivered))

    # then: the same text in the same order, in fewer pieces, the status in its place
    texts = [o.value.text if isinstance(o.value, Delta) else o.value for o in received[:-1]]
    assert texts == ["".join(pieces[:COALESCE_MAX_DELTAS]), "".join(pieces[COALESCE_MAX_DELTAS:]),
                     Status("generation", "…"), "甲乙"]
    assert received[-1].kind == "done"


def test_a_delta_alone_is_handed_over_as_it_came():
    received = asyncio.run(_outcomes_after([Outcome("event", Delta("只有一段")), Outcome("done")]))
    assert received[0].value == Delta("只有一段")
