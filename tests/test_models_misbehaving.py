"""Both vendor adapters against a model server on 127.0.0.1 that misbehaves byte by byte.

Each case is one way real models, proxies and gateways get it wrong (a lone
surrogate, a 400 MB answer, a trickle, an error in a 200, a call with no id,
arguments that are not JSON, a reply cut at the output limit), and both
adapters answer it the same way where the fault is the same. Cases that need
the loop run a `ModelAgent` on a host in-process, with the adapter talking to
the server over real sockets.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from typing import Any

import pytest

from coreagent_sdk.host import ModelAgent
from coreagent_sdk.models import AnthropicModel, Message, ModelError, OpenAIChatModel, ToolSpec

from .canary import CANARY
from .misbehaving_model_server import (
    Answer,
    MisbehavingServer,
    chunked,
    json_answer,
    raw_answer,
    trickle,
)
from .model_wire import no_network  # noqa: F401  (the fixture, used by pytestmark)
from .test_model_agent import hosted, run_turn

pytest.importorskip("openai")
pytest.importorskip("anthropic")
pytest.importorskip("uvicorn")

KINDS = ["openai", "anthropic"]
ASKED = [Message.system("Be brief."), Message.user("look it up")]
CONVERSATION_TOOLS = [ToolSpec("lookup", "Look a word up.", {"type": "object", "properties": {}})]


pytestmark = pytest.mark.usefixtures("no_network")


@pytest.fixture
async def server() -> Any:
    async with MisbehavingServer() as server:
        yield server


def build(kind: str, server: MisbehavingServer, mp: pytest.MonkeyPatch, **options: Any) -> Any:
    options.setdefault("timeout", 10)
    if kind == "openai":
        mp.setenv("OPENAI_API_KEY", CANARY)
        return OpenAIChatModel("m", base_url=server.openai_url, **options)
    mp.setenv("ANTHROPIC_API_KEY", CANARY)
    return AnthropicModel("m", base_url=server.anthropic_url, **options)


def text_answer(kind: str, text: str, *, stop: str = "", usage: Any = None) -> dict[str, Any]:
    """A vendor's answer of text (`usage`: the vendor's usage object, None to leave it out)."""
    if kind == "openai":
        body: dict[str, Any] = {
            "choices": [
                {"message": {"role": "assistant", "content": text}, "finish_reason": stop or "stop"}
            ]
        }
    else:
        body = {
            "type": "message",
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop or "end_turn",
        }
    if usage is not None:
        body["usage"] = usage
    return body


def calls_answer(
    kind: str, calls: list[tuple[str | None, str, Any]], *, stop: str = ""
) -> dict[str, Any]:
    """A vendor's answer of tool calls: (id or None for no id, name, arguments as sent)."""
    if kind == "openai":
        made = []
        for call_id, name, arguments in calls:
            call: dict[str, Any] = {"type": "function", "function": {"name": name}}
            call["function"]["arguments"] = arguments
            if call_id is not None:
                call["id"] = call_id
            made.append(call)
        return {
            "choices": [
                {
                    "message": {"role": "assistant", "content": None, "tool_calls": made},
                    "finish_reason": stop or "tool_calls",
                }
            ]
        }
    blocks = []
    for call_id, name, arguments in calls:
        block: dict[str, Any] = {"type": "tool_use", "name": name, "input": arguments}
        if call_id is not None:
            block["id"] = call_id
        blocks.append(block)
    return {"type": "message", "content": blocks, "stop_reason": stop or "tool_use"}


def args(kind: str, value: dict[str, Any]) -> Any:
    """Arguments as each vendor sends them: a JSON string (OpenAI), an object (Anthropic)."""
    return json.dumps(value) if kind == "openai" else value


def usage(kind: str, read: Any, wrote: Any) -> dict[str, Any]:
    if kind == "openai":
        return {"prompt_tokens": read, "completion_tokens": wrote}
    return {"input_tokens": read, "output_tokens": wrote}


def sent_messages(kind: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    return list(body["messages"])


# ------------------------------------------------------------------ text the wire cannot carry


@pytest.mark.parametrize("kind", KINDS)
async def test_a_lone_surrogate_in_the_models_text_and_arguments_becomes_u_fffd_as_go_reads_it(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Escaped as the JSON text a model's server writes: half of a pair, alone.
    split = b"half \\ud83d pair"
    if kind == "openai":
        arguments = b'"{\\"word\\": \\"a \\\\ud800 b\\"}"'
        call = b'{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '
        body = (
            b'{"choices": [{"message": {"role": "assistant", "content": "' + split + b'", '
            b'"tool_calls": [' + call + arguments + b"}}]}, "
            b'"finish_reason": "tool_calls"}]}'
        )
    else:
        body = (
            b'{"type": "message", "stop_reason": "tool_use", "content": ['
            b'{"type": "text", "text": "' + split + b'"}, '
            b'{"type": "tool_use", "id": "c1", "name": "lookup", '
            b'"input": {"word": "a \\ud800 b"}}]}'
        )
    server.queue(raw_answer(body))
    async with build(kind, server, monkeypatch) as model:
        reply = await model.complete(ASKED, CONVERSATION_TOOLS)
    assert reply.text == "half \ufffd pair"
    assert dict(reply.tool_calls[0].arguments) == {"word": "a \ufffd b"}
    reply.text.encode()  # what no frame could carry before


@pytest.mark.parametrize("kind", KINDS)
async def test_a_hosted_model_answering_with_a_lone_surrogate_completes_its_turn(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind == "openai":
        body = (
            b'{"choices": [{"message": {"content": "ok \\udc00 done"}, "finish_reason": "stop"}]}'
        )
    else:
        body = (
            b'{"content": [{"type": "text", "text": "ok \\udc00 done"}], "stop_reason": "end_turn"}'
        )
    server.queue(raw_answer(body))
    async with build(kind, server, monkeypatch) as model:
        host, _ = hosted(ModelAgent(model, call_peer=False))
        outcome = await run_turn(host, "say it")
        await host.aclose()
    assert outcome.error is None
    assert outcome.answer == "ok \ufffd done"


# ------------------------------------------------------------------ bounds: bytes and time


@pytest.mark.parametrize("kind", KINDS)
async def test_a_400_mb_chunked_answer_is_refused_after_max_response_bytes_plus_one_chunk(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit, chunk = 1 << 20, 64 * 1024
    answer = Answer(chunked(400 << 20, chunk))
    server.queue(answer)
    async with build(kind, server, monkeypatch, max_response_bytes=limit) as model:
        tracemalloc.start()
        try:
            with pytest.raises(ModelError, match=f"passed max_response_bytes={limit}") as caught:
                await model.complete(ASKED, [])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    read = int(str(caught.value).split("refused after reading ")[1].split()[0])
    assert limit < read <= limit + chunk
    # What the process held at its peak is the bound's order, not the answer's (400 MB): the
    # server runs in this process too, and its write buffers count (7 MB on Python 3.10).
    assert peak < 16 * limit
    assert (caught.value.kind, caught.value.retryable) == ("unknown", False)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_failure_with_a_huge_body_is_read_only_far_enough_for_its_words(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = Answer(chunked(400 << 20, 64 * 1024, head=b'{"error": {"message": "overloaded'), 503)
    server.queue(answer)
    async with build(kind, server, monkeypatch) as model:
        tracemalloc.start()
        try:
            with pytest.raises(ModelError, match=r"HTTP 503.*overloaded") as caught:
                await model.complete(ASKED, [])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert (caught.value.kind, caught.value.retryable) == ("transient_network", True)
    # Read to 64 KiB for the words, not 400 MB (the in-process server's buffers count too).
    assert peak < 16 << 20


@pytest.mark.parametrize("kind", KINDS)
async def test_a_server_trickling_a_byte_at_a_time_is_cut_at_the_whole_request_timeout(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each byte comes well inside the timeout, so only a whole-request bound can end it.
    answer = Answer(trickle(every=0.1, count=600))
    server.queue(answer)
    async with build(kind, server, monkeypatch, timeout=1.0) as model:
        started = time.monotonic()
        with pytest.raises(ModelError, match=r"did not answer within timeout=1s") as caught:
            await model.complete(ASKED, [])
        took = time.monotonic() - started
    assert 1.0 <= took < 30  # the trickle alone lasts a minute
    assert answer.sent >= len(b'{"choices": [') and not answer.finished
    assert (caught.value.kind, caught.value.retryable) == ("transient_network", True)


# ------------------------------------------------------------------ token counts


@pytest.mark.parametrize("kind", KINDS)
async def test_token_counts_past_int64_go_onto_the_wire_clamped_to_int64(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    huge = 2**63
    server.queue(
        json_answer(
            calls_answer(kind, [("c1", "lookup", args(kind, {}))])
            | {"usage": usage(kind, huge, huge)}
        ),
        json_answer(text_answer(kind, "done", usage=usage(kind, huge - 1, 5))),
    )
    async with build(kind, server, monkeypatch) as model:
        host, _ = hosted(ModelAgent(model, call_peer=False, tools=[lookup]))
        outcome = await run_turn(host, "count")
        await host.aclose()
    assert outcome.error is None and outcome.complete is not None and outcome.usage is not None
    assert (outcome.complete.tokens_in, outcome.complete.tokens_out) == (2**63 - 1, 2**63 - 1)
    assert outcome.usage.tokens_in_total == 2**63 - 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("read", "wrote", "counted"),
    [
        (-5, 3.9, (0, 3)),
        (12.5, "many", (12, 0)),
        (True, None, (0, 0)),
        (2**64, 1e300, (2**63 - 1, 2**63 - 1)),
    ],
)
async def test_negative_fractional_huge_or_odd_token_counts_do_not_fail_a_fine_answer(
    kind: str,
    read: Any,
    wrote: Any,
    counted: tuple[int, int],
    server: MisbehavingServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server.queue(json_answer(text_answer(kind, "fine", usage=usage(kind, read, wrote))))
    async with build(kind, server, monkeypatch) as model:
        reply = await model.complete(ASKED, [])
    assert reply.text == "fine"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == counted


@pytest.mark.parametrize("kind", KINDS)
async def test_an_answer_without_usage_keeps_the_hosts_estimate(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.queue(json_answer(text_answer(kind, "an answer of some forty characters, or so")))
    async with build(kind, server, monkeypatch) as model:
        host, _ = hosted(ModelAgent(model, call_peer=False))
        outcome = await run_turn(host, "a question long enough to be estimated " * 4)
        await host.aclose()
    assert outcome.complete is not None
    # The host's estimates (a token per four characters), not the 0 nobody reported.
    assert outcome.complete.tokens_in > 0 and outcome.complete.tokens_out == 41 // 4


# ------------------------------------------------------------------ tool calls


def lookup(word: str = "") -> str:
    """Look a word up."""
    lookup.runs += 1  # type: ignore[attr-defined]
    return f"looked up {word!r}"


lookup.runs = 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("given", [None, ""])
async def test_calls_without_ids_get_adk_ids_in_the_events_and_the_model_never_sees_them(
    kind: str, given: str | None, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.queue(
        json_answer(
            calls_answer(
                kind,
                [(given, "lookup", args(kind, {"word": "a"})), (given, "lookup", args(kind, {}))],
            )
        ),
        json_answer(text_answer(kind, "both looked up")),
    )
    async with build(kind, server, monkeypatch) as model:
        host, _ = hosted(ModelAgent(model, call_peer=False, tools=[lookup]))
        outcome = await run_turn(host, "look both up")
        await host.aclose()
    assert outcome.error is None and outcome.answer == "both looked up"
    calls, responses = outcome.calls(), outcome.responses()
    ids = [c.id for c in calls]
    assert len(set(ids)) == 2 and all(i.startswith("adk-") and len(i) == 40 for i in ids)
    assert [r.id for r in responses] == ids  # each response answers its own call
    assert [r.response["result"] for r in responses] == ["looked up 'a'", "looked up ''"]
    # The model is shown its calls and their results as it wrote them: no minted id.
    second = json.dumps(server.requests[1][1])
    assert "adk-" not in second


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("broken", ['{"word": "a', "[1, 2]", '"word"'])
async def test_arguments_that_are_not_a_json_object_are_answered_with_an_error_not_run(
    kind: str, broken: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = lookup.runs  # type: ignore[attr-defined]
    server.queue(
        json_answer(calls_answer(kind, [("c1", "lookup", broken)])),
        json_answer(text_answer(kind, "sorry, I will write JSON")),
    )
    async with build(kind, server, monkeypatch) as model:
        host, _ = hosted(ModelAgent(model, call_peer=False, tools=[lookup]))
        outcome = await run_turn(host, "look it up")
        await host.aclose()
    # One rule for both vendors: the model reads why, the tool never runs, the turn goes on.
    assert outcome.error is None and outcome.answer == "sorry, I will write JSON"
    assert lookup.runs == before  # type: ignore[attr-defined]
    (response,) = outcome.responses()
    assert "the arguments are not a JSON object" in response.response["error"]
    assert "the tool did not run" in response.response["error"]
    assert "not a JSON object" in json.dumps(server.requests[1][1])


@pytest.mark.parametrize("kind", KINDS)
async def test_a_reply_cut_at_the_output_limit_inside_a_tool_call_says_it_was_cut(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = "length" if kind == "openai" else "max_tokens"
    server.queue(json_answer(calls_answer(kind, [("c1", "lookup", '{"word": "abc')], stop=stop)))
    async with build(kind, server, monkeypatch) as model:
        with pytest.raises(ModelError, match="cut at its output limit") as caught:
            await model.complete(ASKED, CONVERSATION_TOOLS)
    option = "max_completion_tokens" if kind == "openai" else "max_tokens="
    assert option in str(caught.value) and "asking again would be cut again" in str(caught.value)
    assert (caught.value.kind, caught.value.retryable) == ("config_error", False)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_text_answer_cut_at_the_output_limit_is_delivered_marked_cut(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = "length" if kind == "openai" else "max_tokens"
    server.queue(json_answer(text_answer(kind, "The answer is long and", stop=stop)))
    async with build(kind, server, monkeypatch) as model:
        host, _ = hosted(ModelAgent(model, call_peer=False))
        outcome = await run_turn(host, "tell me all")
        await host.aclose()
    assert outcome.error is None and outcome.answer == "The answer is long and"
    final = [e for e in outcome.events if e.author != "user"][-1]
    assert final.finish_reason == "MAX_TOKENS"  # as ADK copies genai's FinishReasonMaxTokens


@pytest.mark.parametrize("kind", KINDS)
async def test_one_reply_asking_for_more_local_tool_calls_than_max_tool_calls_ends_the_turn(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = lookup.runs  # type: ignore[attr-defined]
    many = [(f"c{i}", "lookup", args(kind, {})) for i in range(1000)]
    server.queue(json_answer(calls_answer(kind, many)))
    async with build(kind, server, monkeypatch) as model:
        host, _ = hosted(ModelAgent(model, call_peer=False, tools=[lookup], max_tool_calls=999))
        outcome = await run_turn(host, "look it all up")
        await host.aclose()
    assert outcome.error is not None and outcome.error.code == "max_tool_calls"
    assert "1000 tool calls in one reply, over max_tool_calls=999" in outcome.error.message
    assert lookup.runs == before  # type: ignore[attr-defined]  # none ran


# ------------------------------------------------------------------ unclear answers, made clear


@pytest.mark.parametrize("kind", KINDS)
async def test_a_200_with_an_error_in_place_of_an_answer_keeps_the_servers_words(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    error = {"type": "overloaded_error", "message": f"Overloaded, key {CANARY}"}
    server.queue(json_answer({"type": "error", "error": error}))
    async with build(kind, server, monkeypatch) as model:
        with pytest.raises(ModelError, match=r"answered 200 with an error.*'Overloaded, key ") as c:
            await model.complete(ASKED, [])
    assert CANARY not in str(c.value) and "[redacted]" in str(c.value)
    assert (c.value.kind, c.value.retryable) == ("transient_network", True)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_body_cut_short_keeps_the_servers_words_and_may_be_retried(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.queue(raw_answer(b'{"error": {"message": "upstream overloaded, retry'))
    async with build(kind, server, monkeypatch) as model:
        with pytest.raises(ModelError, match=r"JSON cut short.*upstream overloaded") as caught:
            await model.complete(ASKED, [])
    assert "web page" not in str(caught.value)
    assert (caught.value.kind, caught.value.retryable) == ("transient_network", True)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_connection_that_breaks_off_mid_answer_keeps_what_came(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = b'{"note": "gateway restarting'
    server.queue(Answer(head, headers=(("content-length", "4000"),)))
    async with build(kind, server, monkeypatch) as model:
        with pytest.raises(ModelError, match=r"broke off in the middle.*gateway restarting") as c:
            await model.complete(ASKED, [])
    assert (c.value.kind, c.value.retryable) == ("transient_network", True)


@pytest.mark.parametrize("kind", KINDS)
async def test_invalid_utf8_in_an_answer_reads_as_u_fffd_as_go_reads_it(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = json.dumps(text_answer(kind, "caf@ ok")).encode().replace(b"@", b"\xe9")
    server.queue(raw_answer(body))
    async with build(kind, server, monkeypatch) as model:
        assert (await model.complete(ASKED, [])).text == "caf\ufffd ok"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stream", [True, "yes"])
def test_options_asking_for_a_stream_are_refused_when_the_adapter_is_built(
    kind: str, stream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    adapter = OpenAIChatModel if kind == "openai" else AnthropicModel
    with pytest.raises(ValueError, match=r"options=\{'stream': .*leave 'stream' out of options"):
        adapter("m", options={"stream": stream})


@pytest.mark.parametrize("kind", KINDS)
async def test_an_answer_with_nothing_in_it_is_an_error_not_an_empty_answer(
    kind: str, server: MisbehavingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind == "openai":
        empty: dict[str, Any] = {
            "choices": [{"message": {"content": None}, "finish_reason": "stop"}]
        }
    else:
        empty = {"type": "message", "content": [], "stop_reason": "end_turn"}
    server.queue(json_answer(empty))
    async with build(kind, server, monkeypatch) as model:
        with pytest.raises(ModelError, match="answered with nothing") as caught:
            await model.complete(ASKED, [])
    assert (caught.value.kind, caught.value.retryable) == ("unknown", True)
