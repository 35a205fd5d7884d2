"""Anthropic prompt caching, on by default: a 50-turn tool loop run by ``opdsl run`` against a
loopback Anthropic server that caches prompts as Anthropic's documentation says it does, read
back by ``opdsl show``; the cost shown is what Anthropic's price rules give."""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from interpreters import SqliteJournal
from interpreters.cli._main import main
from interpreters.models import AnthropicModel
from interpreters.models._prices import Prices
from op import Message, Op, ToolSpec
from op.effects import ModelRequest
from programs.loop import tool_loop
from tests.servers import Reply, Request, ScriptedServer, _anthropic_events

TURNS = 50
KEPT = f"genai-prices {version('genai-prices')}"  # the table installed
SYSTEM = "You are a careful counter. " + " ".join(
    f"Rule {i}: count one step at a time." for i in range(300)
)


def fifty_turns() -> Op[str]:
    """Call ``step`` until the model stops (49 tool calls, then an answer)."""
    reply, _ = yield from tool_loop(
        [Message.system(SYSTEM), Message.user("Count to 49 with the step tool.")],
        tools=["step"],
        max_steps=TURNS + 5,
    )
    return reply.text


def step(n: int) -> str:
    """Take step ``n``."""
    return f"step {n} taken; " + "the counter moved on by one. " * 8


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class AnthropicCache:
    """Anthropic's prompt cache, as its documentation describes it: the prompt is its tools,
    then its system blocks, then its messages' blocks; a block marked ``cache_control`` ends a
    prefix that is written to the cache (when at least ``MIN_TOKENS`` long); a request reads
    the longest cached prefix that ends at one of its marks or up to ``LOOKBACK`` blocks
    before one. Bills cache reads, cache writes (the prompt from the read prefix to the last
    mark) and the rest as input, and keeps each request's bill."""

    MIN_TOKENS = 1024
    LOOKBACK = 20

    def __init__(self) -> None:
        self.cached: set[str] = set()
        self.bills: list[dict[str, int]] = []
        self.marks: list[int] = []

    def bill(self, req: Request) -> dict[str, int]:
        blocks: list[dict[str, Any]] = list(req.get("tools") or [])
        system = req.get("system")
        blocks += [{"type": "text", "text": system}] if isinstance(system, str) else system or []
        for m in req["messages"]:
            content = m["content"]
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
            blocks += [{"role": m["role"], **b} for b in parts]
        ids, sizes, digest = [], [], hashlib.sha256()
        for b in blocks:
            text = json.dumps({k: v for k, v in b.items() if k != "cache_control"}, sort_keys=True)
            digest.update(text.encode())
            ids.append(digest.copy().hexdigest())
            sizes.append(_tokens(text))
        upto = [sum(sizes[: i + 1]) for i in range(len(sizes))]
        marks = [i for i, b in enumerate(blocks) if "cache_control" in b]
        self.marks.append(len(marks))
        read_end = -1
        for m in marks:
            for j in range(m, max(-1, m - self.LOOKBACK - 1), -1):
                if ids[j] in self.cached:
                    read_end = max(read_end, j)
                    break
        read = upto[read_end] if read_end >= 0 else 0
        written = 0
        if marks and marks[-1] > read_end and upto[marks[-1]] >= self.MIN_TOKENS:
            written = upto[marks[-1]] - read
        for m in marks:
            if upto[m] >= self.MIN_TOKENS:
                self.cached.add(ids[m])
        bill = {
            "input_tokens": upto[-1] - read - written,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
            "output_tokens": 20,
        }
        self.bills.append(bill)
        return bill

    def answer(self, turn: int) -> Any:
        """The model's answer at ``turn`` (1-based): a call of ``step``, or at the last turn
        the final answer, streamed, billed as the cache says."""

        def reply(req: Request) -> Reply:
            bill = self.bill(req)
            uses = [] if turn == TURNS else [(f"toolu_{turn}", "step", {"n": turn})]
            text = "Done: 49 steps." if turn == TURNS else ""
            events = list(
                _anthropic_events(
                    text,
                    uses,
                    "tool_use" if uses else "end_turn",
                    (0, 20, 0),
                    "claude-sonnet-4-5",
                    f"msg_{turn}",
                )
            )
            start = json.loads(events[0].split("data: ", 1)[1])
            start["message"]["usage"] = {**bill, "output_tokens": 1}
            events[0] = f"event: message_start\ndata: {json.dumps(start)}\n\n"
            return Reply(chunks=events, content_type="text/event-stream")

        return reply


def _anthropic_cost(bills: list[dict[str, int]]) -> float:
    """What Anthropic's price rules charge for Claude Sonnet 4.5: $3 per million input tokens,
    a cache write 1.25 times that, a cache read a tenth of it, $15 per million output."""
    total = 0.0
    for b in bills:
        total += (
            b["input_tokens"] * 3.0
            + b["cache_creation_input_tokens"] * 3.0 * 1.25
            + b["cache_read_input_tokens"] * 3.0 * 0.1
            + b["output_tokens"] * 15.0
        ) / 1_000_000
    return total


def _run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    run_id: str,
    spec: str,
) -> tuple[ScriptedServer, AnthropicCache]:
    cache = AnthropicCache()
    srv = ScriptedServer([cache.answer(turn) for turn in range(1, TURNS + 1)])
    monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.delenv("OPDSL_PRICES", raising=False)
    here = "tests.interpreters.models.test_prompt_cache"
    try:
        code = main(
            ["run", f"{here}:fifty_turns", "--tools", f"{here}:step", "--model", spec,
             "--db", str(tmp_path / "runs.db"), "--run-id", run_id, "--quiet"]
        )  # fmt: skip
    finally:
        srv.close()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip() == "Done: 49 steps."
    return srv, cache


def test_a_fifty_turn_tool_loop_reads_its_prompt_from_anthropic_s_cache_and_costs_what_anthropic_bills(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "runs.db")
    srv, cache = _run(monkeypatch, capsys, tmp_path, "cached", "anthropic:claude-sonnet-4-5")
    assert len(srv.requests) == TURNS
    # every request marks the tools, the system prompt and the conversation, within Anthropic's 4
    assert all(0 < n <= 4 for n in cache.marks) and cache.marks[1:] == [4] * (TURNS - 1)
    last = srv.requests[-1]
    assert last["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert last["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert last["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    # the first call writes the prompt to the cache; every later one reads what the one before wrote
    assert cache.bills[0]["cache_creation_input_tokens"] > 1024
    assert all(b["cache_read_input_tokens"] > 0 for b in cache.bills[1:])

    # the journal records what Anthropic billed, call by call
    journal = SqliteJournal(db)
    infers = [e for e in journal.entries("cached") if e.kind == "infer"]
    journal.close()
    assert len(infers) == TURNS
    for e, bill in zip(infers, cache.bills, strict=True):
        usage = json.loads(e.usage_json or "{}")
        assert usage["cached_tokens"] == bill["cache_read_input_tokens"]
        assert usage["cache_write_tokens"] == bill["cache_creation_input_tokens"]
        assert usage["input_tokens"] == (
            bill["input_tokens"]
            + bill["cache_read_input_tokens"]
            + bill["cache_creation_input_tokens"]
        )
        assert usage["price_source"] == f"{KEPT}: anthropic claude-sonnet-4-5"

    # the rates are Anthropic's rules: a cache write 1.25 times the input price, a read a tenth
    price = Prices().price("claude-sonnet-4-5", provider="anthropic")
    assert price is not None
    assert price.cache_write == pytest.approx(1.25 * price.input)
    assert price.cache_read == pytest.approx(0.1 * price.input)

    # opdsl show: the cache reads and writes, and the cost Anthropic's rules give
    expected = _anthropic_cost(cache.bills)
    reads = sum(b["cache_read_input_tokens"] for b in cache.bills)
    writes = sum(b["cache_creation_input_tokens"] for b in cache.bills)
    assert main(["show", "cached", "--db", db]) == 0
    shown = capsys.readouterr().out
    assert f"({reads} cached, {writes} written to the cache)" in shown
    assert f"{TURNS} model calls, {TURNS - 1} tool calls; cost ${expected:.4f}" in shown
    assert f"priced by {KEPT}: anthropic claude-sonnet-4-5" in shown
    assert main(["show", "cached", "--db", db, "--json"]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    assert totals["cost_usd"] == pytest.approx(expected)
    assert (totals["cached_tokens"], totals["cache_write_tokens"]) == (reads, writes)

    # the same run without caching: no marks, no reads, and it costs more
    srv, uncached = _run(
        monkeypatch, capsys, tmp_path, "uncached", "anthropic:claude-sonnet-4-5?prompt_cache=false"
    )
    assert not any("cache_control" in json.dumps(r) for r in srv.requests)
    assert sum(b["cache_read_input_tokens"] for b in uncached.bills) == 0
    assert main(["show", "uncached", "--db", db, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)["totals"]
    assert plain["cost_usd"] == pytest.approx(_anthropic_cost(uncached.bills))
    assert plain["cost_usd"] > 3 * totals["cost_usd"]
    print(
        f"{TURNS} turns: cached ${totals['cost_usd']:.4f} ({reads} tokens read, {writes} written), "
        f"uncached ${plain['cost_usd']:.4f}"
    )


def test_breakpoints_never_pass_anthropic_s_four_and_one_call_can_turn_them_off() -> None:
    model = AnthropicModel("claude-sonnet-4-5", base_url="http://127.0.0.1:9")
    history = [Message.system("S"), Message.user("u1")]
    for i in range(30):
        history += [Message(role="assistant", content=f"a{i}"), Message.user(f"u{i + 2}")]
    request = ModelRequest(messages=tuple(history), tools=(ToolSpec(name="t"), ToolSpec(name="v")))
    body = model.body(request, stream=False)
    text = json.dumps(body)
    assert text.count("cache_control") == 4
    assert "cache_control" not in json.dumps(body["tools"][0])  # only the last tool ends a prefix
    off = ModelRequest(messages=tuple(history), params={"prompt_cache": False})
    body = model.body(off, stream=False)
    assert "cache_control" not in json.dumps(body) and "prompt_cache" not in body
    with pytest.raises(ValueError, match="prompt_cache='maybe': expected true or false"):
        model.configure({"prompt_cache": "maybe"})
