"""The process's thread pools and the bounded wait in front of them."""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from ragsite import executors
from ragsite.errors import ServerBusy


def test_a_pool_is_built_once_per_name_with_its_size_from_settings(settings):
    # given
    settings.RAG_RETRIEVAL_THREADS = 3
    executors._forget_pools()
    # when
    first, again = executors.pool(executors.RETRIEVAL), executors.pool(executors.RETRIEVAL)
    # then
    assert first is again
    assert first._max_workers == 3
    executors._forget_pools()


def test_a_job_taken_within_its_wait_runs_and_returns_its_value():
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert asyncio.run(executors.run_admitted(pool, lambda: 42, wait=1.0)) == 42


def test_a_job_finding_every_worker_busy_is_refused_and_never_runs():
    # given: the only worker blocked
    release = threading.Event()
    ran = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(release.wait)

        # when
        with pytest.raises(ServerBusy) as refused:
            asyncio.run(executors.run_admitted(pool, ran.set, wait=0.2))
        release.set()

    # then: refused with a time to come back; the job did not run once the worker was free
    assert refused.value.code == "server_busy"
    assert refused.value.extra["retry_after"] > 0
    assert not ran.is_set()


def test_a_caller_that_goes_away_while_waiting_leaves_no_job_behind():
    release = threading.Event()
    ran = threading.Event()

    async def ask_then_leave(pool):
        waiting = asyncio.ensure_future(executors.run_admitted(pool, ran.set, wait=30))
        await asyncio.sleep(0.1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(release.wait)
        asyncio.run(ask_then_leave(pool))
        release.set()
    assert not ran.is_set()


def test_a_forked_child_builds_its_own_pools():
    # given: a pool in this process
    parent = executors.pool(executors.RETRIEVAL)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a fresh pool that runs work
        ok = executors.pool(executors.RETRIEVAL) is not parent and executors.pool(executors.RETRIEVAL).submit(
            lambda: 1).result(timeout=5) == 1
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    # then
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)


def test_a_gate_lets_its_size_through_and_refuses_a_newcomer_after_its_wait():
    gate = executors.Gate(lambda: 2)

    async def scenario():
        inside = asyncio.Event()
        leave = asyncio.Event()

        async def hold():
            async with gate.passage(wait=1):
                inside.set()
                await leave.wait()

        holders = [asyncio.ensure_future(hold()) for _ in range(2)]
        await inside.wait()
        await asyncio.sleep(0)
        # when: a third comes while two are inside
        with pytest.raises(ServerBusy):
            async with gate.passage(wait=0.2):
                pass
        # then: once one leaves, the next gets in
        leave.set()
        await asyncio.gather(*holders)
        async with gate.passage(wait=0.2):
            return True

    assert asyncio.run(scenario()) is True


def test_what_a_job_returns_after_its_caller_left_is_discarded():
    # given: a job that takes a resource and is already running when its caller goes away
    running = threading.Event()
    finish = threading.Event()
    discarded = []

    def take_resource():
        running.set()
        finish.wait(5)
        return "slot-1"

    async def ask_then_leave(pool):
        waiting = asyncio.ensure_future(
            executors.run_admitted(pool, take_resource, wait=5, discard=discarded.append))
        await asyncio.get_running_loop().run_in_executor(None, running.wait, 5)
        await asyncio.sleep(0.05)  # the caller now waits for the job's result
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # when: the job ends after its caller left
        finish.set()
        for _ in range(100):
            if discarded:
                break
            await asyncio.sleep(0.01)

    with ThreadPoolExecutor(max_workers=1) as pool:
        asyncio.run(ask_then_leave(pool))
    # then: what it took is handed to `discard`, not lost
    assert discarded == ["slot-1"]


def test_a_job_failing_after_its_caller_left_is_logged_not_lost(caplog):
    # given: a job already running when its caller goes away, which then fails
    running = threading.Event()
    finish = threading.Event()

    def fail_later():
        running.set()
        finish.wait(5)
        raise RuntimeError("disk full while storing the answer")

    async def ask_then_leave(pool):
        waiting = asyncio.ensure_future(executors.run_admitted(pool, fail_later, wait=5))
        await asyncio.get_running_loop().run_in_executor(None, running.wait, 5)
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # when
        finish.set()
        for _ in range(100):
            if caplog.records:
                break
            await asyncio.sleep(0.01)

    with caplog.at_level("ERROR", logger="ragsite.executors"), ThreadPoolExecutor(max_workers=1) as pool:
        asyncio.run(ask_then_leave(pool))
    # then: the failure is in the log with its cause
    [record] = [r for r in caplog.records if r.name == "ragsite.executors"]
    assert "disk full" in str(record.exc_info[1])
