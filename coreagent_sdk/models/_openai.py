"""`OpenAIChatModel`: the model protocol over OpenAI's Chat Completions API.

Any server that speaks Chat Completions (a local one included) works
through `base_url`. The `openai` package is imported when a model is built,
never when `coreagent_sdk.models` is.

Translation, both ways:

- `system`/`user` messages are chat messages of that role; an `assistant`
  message carries its tool calls as `tool_calls` of `type: function` with the
  arguments as a JSON string; a `tool` message answers its call by
  `tool_call_id` (Chat Completions has no error flag: the result's JSON text,
  `{"error": ...}` for a failed tool, says it).
- Tools are offered as function tools; no `tool_choice` is sent, so the
  model decides (the API's default, `auto`).
- A reply's `content` is its text (its `refusal` when there is no content),
  `finish_reason` its stop reason as sent, `prompt_tokens`/`completion_tokens`
  its usage (0 when a compatible server reports none).
- Arguments that are not a JSON object make a call the loop answers with an
  error instead of running the tool (`ToolCall.error`), so the model reads
  why and calls again; empty arguments (`""`), which some compatible servers
  send for a tool without parameters, are `{}`. A call with no id (or an
  empty one) gets one from the loop, which the model never sees.
- A reply cut at the output limit (`finish_reason: "length"`) in the middle
  of a tool call is a `ModelError` naming the option to raise; a cut text
  answer is delivered, marked cut (`ModelReply.cut`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._http._endpoint import checked_base_url, shown_url
from .._scrub import register
from ._adapter import (
    MAX_RESPONSE_BYTES,
    Shape,
    VendorClient,
    arguments_call,
    ask,
    check_reply,
    given_timeout,
    load_package,
    read_key,
    refuse_streaming,
    status_failure,
)
from ._protocol import Message, ModelError, ModelReply, ToolCall, ToolSpec, Usage

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIChatModel"]

_COMPONENT = "OpenAIChatModel"
_DEFAULT_URL = "https://api.openai.com/v1"


class OpenAIChatModel:
    """A model behind OpenAI's Chat Completions API, or any server that speaks it.

        model = OpenAIChatModel("gpt-4o-mini")  # the key from $OPENAI_API_KEY
        model = OpenAIChatModel("llama3.2", base_url="http://127.0.0.1:11434/v1",
                                api_key_env=None)  # a local server, no key
        model = OpenAIChatModel("gpt-4o-mini", client=AsyncOpenAI(...))  # your own client

    Built from a model name, the client reads its key from the environment
    variable `api_key_env` (never from an argument), the key is registered
    with the scrubber so no error, repr or log line shows it, and the SDK's
    own retries are off (`max_retries=0`): a `ModelError` says whether a retry
    may help and the loop or the caller decides. A client you pass is used as
    you configured it (its retries included); its key is registered with the
    scrubber too.

    Args:
        model: The model's name, as the API knows it.
        client: Your own `openai.AsyncOpenAI`; then `api_key_env`, `base_url`,
            `timeout`, `max_retries` and `http_client` are not used.
        api_key_env: The environment variable holding the key; None for a
            server that needs none.
        base_url: The API's URL (`.../v1`); OpenAI's own when None.
        timeout: Seconds for one whole request: connecting, waiting and reading
            every byte (a server trickling its answer is cut here).
        max_retries: The SDK's own retries of a failed request.
        http_client: An `httpx.AsyncClient` (or `httpx2.AsyncClient`) the SDK
            sends through, e.g. one with an in-process transport for tests.
        options: More request fields sent as they are (`temperature`,
            `max_completion_tokens`, `tool_choice`, ...); not `stream`, which
            asks for an answer this adapter does not read.
        max_response_bytes: The largest answer read into a reply; reading
            stops there (at most this plus one chunk is held).

    Attributes:
        model: The model's name, as sent.
        base_url: The URL requests go to (a userinfo password masked in the repr).
    """

    def __init__(
        self,
        model: str,
        *,
        client: AsyncOpenAI | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 0,
        http_client: Any = None,
        options: Mapping[str, Any] | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"{_COMPONENT}: model {model!r} must be a non-empty model name")
        refuse_streaming(dict(options or {}), _COMPONENT)
        openai = load_package("openai", component=_COMPONENT, extra="openai")
        self.model = model
        self._options = dict(options or {})
        self._limit = max_response_bytes
        self._openai = openai
        if client is not None:
            # A key the user configured is theirs to keep out of sight too.
            key = getattr(client, "api_key", None)
            register(key if isinstance(key, str) else None)
            build: Any = None
            self._key_env = None
            self._timeout = given_timeout(client)
        else:
            key_env = api_key_env
            key = read_key(key_env, component=_COMPONENT) if key_env else "no-key"
            url = checked_base_url(base_url, _COMPONENT) if base_url is not None else None
            build = functools.partial(
                openai.AsyncOpenAI,
                api_key=key,
                base_url=url,
                timeout=timeout,
                max_retries=max_retries,
                http_client=http_client,
            )
            self._key_env = key_env
            self._timeout = float(timeout)
        self._vendor = VendorClient(client, build)
        self.base_url = str(self._vendor.client.base_url).rstrip("/") or _DEFAULT_URL

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={shown_url(self.base_url)!r})"

    async def aclose(self) -> None:
        """Close the HTTP client this adapter built; a client you passed stays yours to close.

        A closed adapter still works: its next request builds a fresh client
        (a fleet closes its models as it stops; the next fleet reuses them).
        """
        await self._vendor.aclose()

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """Ask the model once: the conversation and the tools it may call."""
        body = self.request_body(messages, tools)
        data = await ask(
            self._vendor.open().chat.completions.with_streaming_response.create,
            body,
            vendor=self._openai,
            base_error=self._openai.OpenAIError,
            component=_COMPONENT,
            where=self._where(),
            on_status=self._status_failure,
            limit=self._limit,
            timeout=self._timeout,
            expected="choices",
        )
        return check_reply(
            self._reply(data),
            component=_COMPONENT,
            limit_option="max_completion_tokens in options=",
        )

    def request_body(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The Chat Completions request this adapter sends for `messages` and `tools`."""
        body: dict[str, Any] = {"model": self.model, "messages": [_message(m) for m in messages]}
        if tools:
            body["tools"] = [_tool(t) for t in tools]
        body.update(self._options)
        return body

    def _where(self) -> str:
        return f"the Chat Completions API at {shown_url(self.base_url)!r}"

    def _status_failure(self, exc: Any) -> ModelError:
        response = exc.response
        return status_failure(
            _COMPONENT,
            status=int(response.status_code),
            body=exc.body,
            raw=response.content,
            model=self.model,
            where=self._where(),
            key_env=self._key_env,
        )

    def _reply(self, data: dict[str, Any]) -> ModelReply:
        shape = Shape(_COMPONENT, "a chat completion")
        choices = shape.get(data, "choices", "choices", list, "a non-empty list")
        if not choices:
            raise shape.fail("choices", "a non-empty list", choices)
        choice = choices[0]
        if not isinstance(choice, dict):
            raise shape.fail("choices[0]", "an object", choice)
        message = shape.get(choice, "message", "choices[0].message", dict, "an object")
        text = shape.get(
            message,
            "content",
            "choices[0].message.content",
            str,
            "a string or null",
            required=False,
            default="",
        )
        if not text:
            text = shape.get(
                message,
                "refusal",
                "choices[0].message.refusal",
                str,
                "a string or null",
                required=False,
                default="",
            )
        raw_calls = shape.get(
            message,
            "tool_calls",
            "choices[0].message.tool_calls",
            list,
            "a list or null",
            required=False,
            default=[],
        )
        stop = shape.get(
            choice,
            "finish_reason",
            "choices[0].finish_reason",
            str,
            "a string or null",
            required=False,
            default="",
        )
        usage = shape.get(
            data, "usage", "usage", dict, "an object or null", required=False, default={}
        )
        model = shape.get(data, "model", "model", str, "a string", required=False, default="")
        calls = tuple(
            _call(shape, c, f"choices[0].message.tool_calls[{i}]") for i, c in enumerate(raw_calls)
        )
        return ModelReply(
            text=text,
            tool_calls=calls,
            usage=Usage(
                shape.count(usage, "prompt_tokens", "usage.prompt_tokens"),
                shape.count(usage, "completion_tokens", "usage.completion_tokens"),
            ),
            model=model,
            stop_reason=stop,
        )


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        # A server that gave its call no id is answered without one, as it wrote it.
        answer = {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
        return answer if message.tool_call_id else _without(answer, "tool_call_id")
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            # The API wants null, not "", beside tool calls with nothing said.
            "content": message.text or None,
            "tool_calls": [
                _without(
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": json.dumps(dict(call.arguments)),
                        },
                    },
                    "" if call.id else "id",
                )
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.text}


def _without(data: dict[str, Any], key: str) -> dict[str, Any]:
    data.pop(key, None)
    return data


def _tool(tool: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = dict(tool.parameters)
    return {"type": "function", "function": function}


def _call(shape: Shape, raw: object, path: str) -> ToolCall:
    if not isinstance(raw, dict):
        raise shape.fail(path, "an object", raw)
    # A missing or empty id is the loop's to mint (as ADK does), not a broken answer.
    call_id = shape.get(raw, "id", f"{path}.id", str, "a string", required=False, default="")
    function = shape.get(raw, "function", f"{path}.function", dict, "an object")
    name = shape.get(function, "name", f"{path}.function.name", str, "a string")
    arguments = function.get("arguments")
    return arguments_call(call_id, name, "" if arguments is None else arguments)
