"""Python functions as a model's tools: a schema from the signature, words from the docstring."""

from __future__ import annotations

import asyncio
import enum
import threading
from typing import Any, Literal

import pytest

from coreagent_sdk.models import Skill, Tool, ToolSpec


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


def forecast(
    city: str,
    days: int = 1,
    unit: Unit = Unit.C,
    hourly: bool = False,
    note: str | None = None,
    tags: list[str] | None = None,
    mode: Literal["short", "long"] = "short",
    extra: dict[str, Any] | None = None,
    secrets: dict[str, str] | None = None,
) -> str:
    """The weather forecast of a city.

    Reads the national service.

    Args:
        city: The city's name,
            as people write it.
        days (int): How many days ahead.

    Returns:
        The forecast.
    """
    return city


def test_the_schema_comes_from_the_signature_and_the_docstring() -> None:
    tool = Tool.from_function(forecast)
    assert tool.name == "forecast"
    assert tool.description == "The weather forecast of a city.\n\nReads the national service."
    props = tool.parameters["properties"]
    assert props["city"] == {
        "type": "string",
        "description": "The city's name, as people write it.",
    }
    assert props["days"] == {"type": "integer", "description": "How many days ahead.", "default": 1}
    assert props["unit"] == {"enum": ["celsius", "fahrenheit"]}
    assert props["hourly"] == {"type": "boolean", "default": False}
    assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert props["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert props["mode"] == {"enum": ["short", "long"], "default": "short"}
    assert props["extra"]["anyOf"][0] == {"type": "object"}
    assert tool.parameters["required"] == ["city"]
    assert "secrets" not in props and tool.wants_secrets
    assert tool.spec == ToolSpec("forecast", tool.description, tool.parameters)


def test_a_function_without_annotations_takes_anything_and_a_name_can_be_given() -> None:
    def plain(a, b=2):  # type: ignore[no-untyped-def]
        return a

    tool = Tool.from_function(plain, name="renamed", description="Does it.")
    assert (tool.name, tool.description) == ("renamed", "Does it.")
    assert tool.parameters == {
        "type": "object",
        "properties": {"a": {}, "b": {"default": 2}},
        "required": ["a"],
    }


def test_what_cannot_be_described_to_a_model_is_refused() -> None:
    def star(*args: int) -> None:
        """Variadic."""

    with pytest.raises(TypeError, match=r"\*args cannot be described"):
        Tool.from_function(star)
    with pytest.raises(ValueError, match="'has space' is not a tool name"):
        Tool.from_function(forecast, name="has space")
    with pytest.raises(TypeError, match="is not a function"):
        Tool.from_function(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({}, "forecast: missing argument(s) 'city'"),
        ({"city": "Oslo", "town": "x"}, "forecast: unknown argument(s) 'town'"),
        ({"city": 3}, "forecast: argument 'city' must be string, got int 3"),
        ({"city": "Oslo", "days": True}, "forecast: argument 'days' must be integer, got bool"),
        ({"city": "Oslo", "days": 1.5}, "forecast: argument 'days' must be integer, got float"),
    ],
)
def test_arguments_outside_the_schema_are_refused_naming_them(
    arguments: dict[str, Any], error: str
) -> None:
    with pytest.raises(ValueError, match=r"^forecast: ") as caught:
        Tool.from_function(forecast).check(arguments)
    assert str(caught.value).startswith(error)


async def test_sync_tools_run_in_a_worker_thread_and_async_ones_on_the_loop() -> None:
    def where() -> int:
        """The thread it runs in."""
        return threading.get_ident()

    async def where_async() -> int:
        """The thread it runs in."""
        await asyncio.sleep(0)
        return threading.get_ident()

    assert await Tool.from_function(where).run({}) != threading.get_ident()
    assert await Tool.from_function(where_async).run({}) == threading.get_ident()


async def test_only_a_tool_that_asks_for_secrets_gets_them() -> None:
    def takes(secrets: dict[str, str]) -> list[str]:
        """Lists its secrets."""
        return sorted(secrets)

    assert await Tool.from_function(takes).run({}, secrets={"A": "1"}) == ["A"]
    assert await Tool.from_function(takes).run({}) == []


def test_a_skill_makes_tools_of_its_functions_and_takes_one_secret_name_as_a_string() -> None:
    skill = Skill("weather", tools=[forecast], secrets="WEATHER_KEY")
    assert [t.name for t in skill.tools] == ["forecast"] and skill.secrets == ("WEATHER_KEY",)
