"""The test servers are honest: the official openai and anthropic clients talk to them,
streaming and tool calls included. A fake that drifted from the real protocol fails here."""

from __future__ import annotations

from typing import Any

import anthropic as anthropic_sdk
import openai as openai_sdk

from tests.servers import ScriptedServer, anthropic, openai, status

TOOLS_OPENAI = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def test_openai_sdk_plain_streaming_and_tool_calls() -> None:
    with ScriptedServer() as srv:
        # Any: the SDK's overloads for create() are not what this test is about
        client: Any = openai_sdk.OpenAI(base_url=f"{srv.url}/v1", api_key="sk-test", max_retries=0)
        srv.add(openai("Hello!"))
        plain = client.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}]
        )
        assert plain.choices[0].message.content == "Hello!" and plain.usage is not None
        assert plain.usage.prompt_tokens == 10

        srv.add(openai("", [("call_1", "read_file", '{"path": "a.py"}')]))
        stream = client.chat.completions.create(
            model="gpt-4.1-mini",
            messages=[{"role": "user", "content": "read a.py"}],
            tools=TOOLS_OPENAI,
            stream=True,
            stream_options={"include_usage": True},
        )
        args, name, cid, usage = "", None, None, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for choice in chunk.choices:
                for tc in choice.delta.tool_calls or []:
                    cid = tc.id or cid
                    if tc.function and tc.function.name:
                        name = tc.function.name
                    args += (tc.function.arguments or "") if tc.function else ""
        assert (cid, name, args) == ("call_1", "read_file", '{"path": "a.py"}')
        assert usage is not None and usage.completion_tokens == 5
        assert srv.headers[-1]["authorization"] == "Bearer sk-test"

        srv.add(status(401, "Incorrect API key provided"))
        try:
            client.chat.completions.create(
                model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}]
            )
        except openai_sdk.AuthenticationError as exc:
            assert "Incorrect API key" in str(exc)
        else:  # pragma: no cover
            raise AssertionError("the SDK accepted a 401")


def test_anthropic_sdk_plain_streaming_and_tool_use() -> None:
    with ScriptedServer() as srv:
        client = anthropic_sdk.Anthropic(base_url=srv.url, api_key="sk-ant-test", max_retries=0)
        srv.add(anthropic("Hi there"))
        msg = client.messages.create(
            model="claude-test", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        )
        assert msg.content[0].type == "text" and msg.content[0].text == "Hi there"

        srv.add(
            anthropic("Reading.", [("toolu_1", "read_file", {"path": "a.py"})], usage=(20, 7, 3))
        )
        with client.messages.stream(
            model="claude-test",
            max_tokens=100,
            messages=[{"role": "user", "content": "read a.py"}],
            tools=[
                {"name": "read_file", "description": "Read", "input_schema": {"type": "object"}}
            ],
        ) as stream:
            final = stream.get_final_message()
        assert final.stop_reason == "tool_use"
        tool_use = [b for b in final.content if b.type == "tool_use"][0]
        assert tool_use.input == {"path": "a.py"} and tool_use.id == "toolu_1"
        assert final.usage.output_tokens == 7 and final.usage.cache_read_input_tokens == 3
        sent = srv.headers[-1]
        # the SDK authenticates with x-api-key or a bearer token, depending on its version
        assert (
            sent.get("x-api-key") == "sk-ant-test"
            or sent.get("authorization") == "Bearer sk-ant-test"
        )
        assert "anthropic-version" in sent
