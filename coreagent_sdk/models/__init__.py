"""Models for model-driven agents: one small protocol, and the models that speak it.

    from coreagent_sdk.models import Message, Model, ModelReply, ToolSpec

    class Echo:
        async def complete(self, messages, tools):
            return ModelReply(text=messages[-1].text)

A model is anything with `async complete(messages, tools) -> ModelReply`. A
reply holds text and/or tool calls (`ToolCall`) and the tokens the model
reports (`Usage`); a failure is a `ModelError` whose `kind` is one of the
daemon's turn-error kinds. Vendor adapters and scripted models build on these
values; nothing here needs a network or an extra.
"""

from __future__ import annotations

from ._protocol import ROLES, Message, Model, ModelError, ModelReply, ToolCall, ToolSpec, Usage

__all__ = [
    "ROLES",
    "Message",
    "Model",
    "ModelError",
    "ModelReply",
    "ToolCall",
    "ToolSpec",
    "Usage",
]
