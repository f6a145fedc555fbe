"""`AnthropicModel`: the model protocol over Anthropic's Messages API.

The `anthropic` package is imported when a model is built, never when
`coreagent_sdk.models` is.

Translation, both ways:

- `system` messages become the request's top-level `system` text (joined
  by blank lines when there are several); the Messages API has no system role.
- An `assistant` message is a `text` block and one `tool_use` block per
  call (`input` is the arguments object); a `tool` message is a
  `tool_result` block answering `tool_use_id`, `is_error: true` when the
  tool failed.
- Consecutive messages of one role are merged into one message of blocks,
  so the results of parallel tool calls go back in one `user` message as
  the API requires (and a prompt that follows them joins it). A message
  that is one text block is sent as a plain string.
- `max_tokens`, which the API requires, is 4096 unless configured.
- A reply's `text` blocks are its text (joined by newlines), its `tool_use`
  blocks its tool calls, `stop_reason` as sent, `input_tokens` /
  `output_tokens` its usage. Blocks of other types (thinking, server tools)
  are skipped.
- A `tool_use` whose `input` is not an object (nor JSON text of one) is a
  call the loop answers with an error instead of running the tool, the same
  rule as the OpenAI adapter's; a call with no id gets one from the loop,
  which the model never sees. A reply cut at `max_tokens` inside a tool call
  is a `ModelError` naming `max_tokens`; a cut text answer is delivered,
  marked cut (`ModelReply.cut`).
"""

from __future__ import annotations

import functools
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
    from anthropic import AsyncAnthropic

__all__ = ["AnthropicModel"]

_COMPONENT = "AnthropicModel"
DEFAULT_MAX_TOKENS = 4096


class AnthropicModel:
    """A model behind Anthropic's Messages API.

        model = AnthropicModel("claude-haiku-4-5")  # the key from $ANTHROPIC_API_KEY
        model = AnthropicModel("claude-haiku-4-5", client=AsyncAnthropic(...))  # your client

    Built from a model name, the client reads its key from the environment
    variable `api_key_env` (never from an argument), the key is registered
    with the scrubber so no error, repr or log line shows it, and the SDK's
    own retries are off (`max_retries=0`): a `ModelError` says whether a retry
    may help and the loop or the caller decides. A client you pass is used as
    you configured it (its retries included); its key is registered with the
    scrubber too.

    Args:
        model: The model's name, as the API knows it.
        client: Your own `anthropic.AsyncAnthropic`; then `api_key_env`,
            `base_url`, `timeout`, `max_retries` and `http_client` are not used.
        api_key_env: The environment variable holding the key.
        base_url: The API's URL; Anthropic's own when None.
        max_tokens: The most tokens one reply may have (the API requires a bound).
        timeout: Seconds for one whole request: connecting, waiting and reading
            every byte (a server trickling its answer is cut here).
        max_retries: The SDK's own retries of a failed request.
        http_client: An `httpx2.AsyncClient` the SDK sends through, e.g. one
            with an in-process transport for tests.
        options: More request fields sent as they are (`temperature`,
            `tool_choice`, ...); not `stream`, which asks for an answer this
            adapter does not read.
        max_response_bytes: The largest answer read into a reply; reading
            stops there (at most this plus one chunk is held).

    Attributes:
        model: The model's name, as sent.
        max_tokens: The bound sent as `max_tokens` with every request.
        base_url: The URL requests go to (a userinfo password masked in the repr).
    """

    def __init__(
        self,
        model: str,
        *,
        client: AsyncAnthropic | None = None,
        api_key_env: str = "ANTHROPIC_API_KEY",
        base_url: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout: float = 60.0,
        max_retries: int = 0,
        http_client: Any = None,
        options: Mapping[str, Any] | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"{_COMPONENT}: model {model!r} must be a non-empty model name")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(
                f"{_COMPONENT}: max_tokens {max_tokens!r} must be a positive integer, "
                f"such as {DEFAULT_MAX_TOKENS}"
            )
        refuse_streaming(dict(options or {}), _COMPONENT)
        anthropic = load_package("anthropic", component=_COMPONENT, extra="anthropic")
        self.model = model
        self.max_tokens = max_tokens
        self._options = dict(options or {})
        self._limit = max_response_bytes
        self._anthropic = anthropic
        if client is not None:
            for attribute in ("api_key", "auth_token"):
                secret = getattr(client, attribute, None)
                register(secret if isinstance(secret, str) else None)
            build: Any = None
            self._key_env: str | None = None
            self._timeout = given_timeout(client)
        else:
            key = read_key(api_key_env, component=_COMPONENT)
            url = checked_base_url(base_url, _COMPONENT) if base_url is not None else None
            build = functools.partial(
                anthropic.AsyncAnthropic,
                api_key=key,
                base_url=url,
                timeout=timeout,
                max_retries=max_retries,
                http_client=http_client,
            )
            self._key_env = api_key_env
            self._timeout = float(timeout)
        self._vendor = VendorClient(client, build)
        self.base_url = str(self._vendor.client.base_url).rstrip("/")

    def __repr__(self) -> str:
        return f"AnthropicModel(model={self.model!r}, base_url={shown_url(self.base_url)!r})"

    async def aclose(self) -> None:
        """Close the HTTP client this adapter built; a client you passed stays yours to close.

        A closed adapter still works: its next request builds a fresh client
        (a fleet closes its models as it stops; the next fleet reuses them).
        """
        await self._vendor.aclose()

    async def __aenter__(self) -> AnthropicModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """Ask the model once: the conversation and the tools it may call."""
        body = self.request_body(messages, tools)
        data = await ask(
            self._vendor.open().messages.with_streaming_response.create,
            body,
            vendor=self._anthropic,
            base_error=self._anthropic.AnthropicError,
            component=_COMPONENT,
            where=self._where(),
            on_status=self._status_failure,
            limit=self._limit,
            timeout=self._timeout,
            expected="content",
        )
        return check_reply(self._reply(data), component=_COMPONENT, limit_option="max_tokens=")

    def _status_failure(self, exc: Any) -> ModelError:
        return status_failure(
            _COMPONENT,
            status=int(exc.response.status_code),
            body=exc.body,
            raw=exc.response.content,
            model=self.model,
            where=self._where(),
            key_env=self._key_env,
        )

    def request_body(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The Messages API request this adapter sends for `messages` and `tools`."""
        system = "\n\n".join(m.text for m in messages if m.role == "system" and m.text)
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens}
        if system:
            body["system"] = system
        body["messages"] = _merged([m for m in messages if m.role != "system"])
        if tools:
            body["tools"] = [_tool(t) for t in tools]
        body.update(self._options)
        return body

    def _where(self) -> str:
        return f"the Messages API at {shown_url(self.base_url)!r}"

    def _reply(self, data: dict[str, Any]) -> ModelReply:
        shape = Shape(_COMPONENT, "a message")
        blocks = shape.get(data, "content", "content", list, "a list of content blocks")
        stop = shape.get(
            data, "stop_reason", "stop_reason", str, "a string or null", required=False, default=""
        )
        texts: list[str] = []
        calls: list[ToolCall] = []
        for i, block in enumerate(blocks):
            path = f"content[{i}]"
            if not isinstance(block, dict):
                raise shape.fail(path, "a content block object", block)
            kind = shape.get(block, "type", f"{path}.type", str, "a string")
            if kind == "text":
                texts.append(shape.get(block, "text", f"{path}.text", str, "a string"))
            elif kind == "tool_use":
                # A missing or empty id is the loop's to mint (as ADK does).
                call_id = shape.get(block, "id", f"{path}.id", str, "a string", required=False)
                name = shape.get(block, "name", f"{path}.name", str, "a string")
                raw = block.get("input")
                calls.append(arguments_call(call_id or "", name, {} if raw is None else raw))
        usage = shape.get(data, "usage", "usage", dict, "an object", required=False, default={})
        model = shape.get(data, "model", "model", str, "a string", required=False, default="")
        return ModelReply(
            text="\n".join(texts),
            tool_calls=calls,
            usage=Usage(
                shape.count(usage, "input_tokens", "usage.input_tokens"),
                shape.count(usage, "output_tokens", "usage.output_tokens"),
            ),
            model=model,
            stop_reason=stop,
        )


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        block: dict[str, Any] = {"type": "tool_result"}
        if message.tool_call_id:  # a server that gave its call no id is answered without one
            block["tool_use_id"] = message.tool_call_id
        block["content"] = message.text
        if message.is_error:
            block["is_error"] = True
        return [block]
    # The API refuses an empty text block; a message of tool calls alone has none.
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text else []
    for c in message.tool_calls:
        use: dict[str, Any] = {"type": "tool_use"}
        if c.id:
            use["id"] = c.id
        blocks.append({**use, "name": c.name, "input": dict(c.arguments)})
    return blocks


def _merged(messages: Sequence[Message]) -> list[dict[str, Any]]:
    merged: list[tuple[str, list[dict[str, Any]]]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if merged and merged[-1][0] == role:
            merged[-1][1].extend(blocks)
        else:
            merged.append((role, blocks))
    out: list[dict[str, Any]] = []
    for role, blocks in merged:
        if len(blocks) == 1 and blocks[0]["type"] == "text":
            out.append({"role": role, "content": blocks[0]["text"]})
        else:
            out.append({"role": role, "content": blocks})
    return out


def _tool(tool: ToolSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": tool.name}
    if tool.description:
        spec["description"] = tool.description
    spec["input_schema"] = dict(tool.parameters)
    return spec
