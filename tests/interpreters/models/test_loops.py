"""A model object's clients belong to the event loop that made them. One model used from two
loops at once (two threads, each running its own run) keeps a pool for each: neither loop's
end, nor the collector, closes the clients the other is using. On trio, one run's calls share
one pool (and its kept-alive connections), as on asyncio."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import warnings

import pytest

from interpreters import LiveInterpreter, MemoryJournal, run
from interpreters.models import OpenAIModel
from op import Op, infer
from tests.servers import Reply, Request, ScriptedServer, openai


def ask(text: str) -> Op[str]:
    return (yield from infer(text)).text


def asks(n: int) -> Op[list[str]]:
    out = []
    for i in range(n):
        out.append((yield from infer(f"question {i}")).text)
    return out


def test_a_run_on_another_loop_meanwhile_does_not_close_this_runs_clients() -> None:
    gate = threading.Event()

    def held(req: Request) -> Reply:
        gate.wait(10)  # the answer comes once the other run is over
        return openai("from the first")(req)

    with ScriptedServer([held, openai("from the second")]) as srv:
        model = OpenAIModel("gpt-4.1-mini", base_url=f"{srv.url}/v1", api_key="sk-test")
        first: list[object] = []
        thread = threading.Thread(
            target=lambda: first.append(run(ask, "one", model=model, db=MemoryJournal()).value)
        )
        thread.start()
        deadline = time.monotonic() + 10
        while not srv.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert srv.requests, "the first run's request never came"
        # the same model, from this thread's own loop, while the first run's call waits
        second = run(ask, "two", model=model, db=MemoryJournal()).value
        gc.collect()  # what the second loop left behind is collected now, not by chance later
        time.sleep(0.2)  # time for anything that would close the first loop's clients
        gate.set()
        thread.join(20)
        # one request each: the first run's connection was never cut (a cut one is retried)
        assert (first, second, len(srv.requests)) == (["from the first"], "from the second", 2)


def test_two_threads_runs_at_once_on_one_model_make_no_request_twice() -> None:
    calls = 25
    with ScriptedServer([openai("ok") for _ in range(2 * calls)]) as srv:
        model = OpenAIModel("gpt-4.1-mini", base_url=f"{srv.url}/v1", api_key="sk-test")
        values: list[object] = []
        done = threading.Event()

        def collect() -> None:
            while not done.is_set():
                gc.collect()
                time.sleep(0.005)

        collector = threading.Thread(target=collect)
        collector.start()
        threads = [
            threading.Thread(
                target=lambda: values.append(
                    run(asks, calls, model=model, db=MemoryJournal()).value
                )
            )
            for _ in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        done.set()
        collector.join()
        assert values == [["ok"] * calls] * 2
        assert len(srv.requests) == 2 * calls, "a request was sent again: its connection was cut"


def test_a_trio_runs_calls_share_one_pool_and_its_connections() -> None:
    pytest.importorskip("trio")
    with ScriptedServer([openai("ok") for _ in range(4)]) as srv:
        model = OpenAIModel(
            "gpt-4.1-mini", base_url=f"{srv.url}/v1", api_key="sk-test", stream=False
        )
        assert run(asks, 4, model=model, db=MemoryJournal(), backend="trio").value == ["ok"] * 4
        assert len(set(srv.peers)) == 1, f"a new connection for each call: {srv.peers}"


def test_loops_closed_without_ending_their_generators_are_not_kept() -> None:
    """``run_until_complete`` then ``close`` (no ``shutdown_asyncgens``): nothing closes such
    a loop's clients, and the model forgets them once another loop makes its own."""
    with ScriptedServer([openai("ok") for _ in range(5)]) as srv:
        model = OpenAIModel("gpt-4.1-mini", base_url=f"{srv.url}/v1", api_key="sk-test")
        interp = LiveInterpreter(model=model, journal=MemoryJournal())
        for _ in range(5):
            loop = asyncio.new_event_loop()
            try:
                assert loop.run_until_complete(interp.arun(ask, "hi")).value == "ok"
            finally:
                loop.close()
        assert len(model._pools) == 1, "a closed loop's clients are kept"


def test_loops_left_open_after_their_run_keep_only_a_few_pools() -> None:
    """``run_until_complete`` alone, the loop dropped: the model keeps the clients of the last
    few such loops, not of every one (a pool keeps its loop alive)."""
    with ScriptedServer([openai("ok") for _ in range(8)]) as srv:
        model = OpenAIModel("gpt-4.1-mini", base_url=f"{srv.url}/v1", api_key="sk-test")
        interp = LiveInterpreter(model=model, journal=MemoryJournal())
        loops = []
        for _ in range(8):
            loop = asyncio.new_event_loop()
            loops.append(loop)
            assert loop.run_until_complete(interp.arun(ask, "hi")).value == "ok"
        assert 1 <= len(model._pools) <= 4, "every open loop's clients are kept"
        for loop in loops:
            loop.close()


def test_a_trio_runs_clients_are_closed_as_it_ends() -> None:
    pytest.importorskip("trio")
    with ScriptedServer([openai("ok") for _ in range(6)]) as srv:
        model = OpenAIModel(
            "gpt-4.1-mini", base_url=f"{srv.url}/v1", api_key="sk-test", stream=False
        )
        gc.collect()  # what earlier tests left is not this test's
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", ResourceWarning)
            for _ in range(3):
                assert run(asks, 2, model=model, db=MemoryJournal(), backend="trio").value == [
                    "ok",
                    "ok",
                ]
            gc.collect()
        assert not model._pools and model._clients is None, "an ended run's clients are kept"
        unclosed = [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
        assert not unclosed, unclosed


def test_a_pool_forgotten_while_its_loop_was_idle_takes_no_later_pool_with_it() -> None:
    """A loop left idle long enough has its pool forgotten; run again, it gets a new one. When
    the old pool's clients are closed at last (its closers collected, then run on that loop),
    the loop's new pool is kept: the old closer forgets only its own."""
    with ScriptedServer([openai("ok") for _ in range(8)]) as srv:
        model = OpenAIModel("gpt-4.1-mini", base_url=f"{srv.url}/v1", api_key="sk-test")
        interp = LiveInterpreter(model=model, journal=MemoryJournal())
        first = asyncio.new_event_loop()
        loops = [first]
        assert first.run_until_complete(interp.arun(ask, "hi")).value == "ok"
        held = [model._pools[first]]  # the old pool, alive until the new one is made
        for _ in range(5):  # enough idle loops that the first one's pool is forgotten
            loop = asyncio.new_event_loop()
            loops.append(loop)
            assert loop.run_until_complete(interp.arun(ask, "hi")).value == "ok"
        assert first not in model._pools

        async def again() -> bool:
            assert (await interp.arun(ask, "hi")).value == "ok"
            new = model._pools[first]
            held.clear()  # the old pool's closers go: they are run on this loop
            gc.collect()
            for _ in range(5):
                await asyncio.sleep(0)
            return model._pools.get(first) is new

        try:
            assert first.run_until_complete(again()), "an old pool's closer forgot the new pool"
        finally:
            for loop in loops:
                loop.close()
