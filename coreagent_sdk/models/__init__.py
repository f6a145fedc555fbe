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

Two vendor adapters speak the protocol: `OpenAIChatModel` (OpenAI's Chat
Completions, or any server that speaks it through `base_url`) and
`AnthropicModel` (Anthropic's Messages API). Each imports its vendor package
only when built: install it with `pip install 'coreagent-sdk[openai]'` or
`'coreagent-sdk[anthropic]'`.
"""

from __future__ import annotations

from ._anthropic import AnthropicModel
from ._openai import OpenAIChatModel
from ._protocol import ROLES, Message, Model, ModelError, ModelReply, ToolCall, ToolSpec, Usage
from ._recorded import RecordingModel, ReplayModel
from ._scripted import Rule, ScriptedModel, ScriptState, when
from ._tools import Skill, Tool

__all__ = [
    "ROLES",
    "AnthropicModel",
    "Message",
    "Model",
    "ModelError",
    "ModelReply",
    "OpenAIChatModel",
    "RecordingModel",
    "ReplayModel",
    "Rule",
    "ScriptState",
    "ScriptedModel",
    "Skill",
    "Tool",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "when",
]
