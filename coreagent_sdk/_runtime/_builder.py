"""`AgentBuilder`: the production `Builder` (persona, model defaults, skills, scoped secrets)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import attrs

from ._runtime_cache import AgentConfig

__all__ = ["AgentBuilder", "BuilderConfig", "ModelDefaults", "RuntimeSpec", "SecretSource"]


@runtime_checkable
class SecretSource(Protocol):
    """Where agent-scoped secrets come from (a vault, a database, the environment)."""

    async def resolve_secrets(
        self, agent_id: str, skill_names: tuple[str, ...]
    ) -> Mapping[str, str]:
        """The secrets of agent `agent_id` for these skills, by name."""
        ...


@attrs.frozen
class ModelDefaults:
    """Model and provider for agents whose config leaves them empty.

    Attributes:
        model: The model an agent without one gets.
        provider: The provider an agent without one gets.
    """

    model: str = ""
    provider: str = ""


def _secrets_repr(value: Mapping[str, str]) -> str:
    # Secret values never reach a repr; the names are enough to debug with.
    return f"<{len(value)} secrets: {', '.join(sorted(value))}>"


@attrs.frozen
class RuntimeSpec:
    """Everything the factory needs to make one agent's runtime instance.

    Attributes:
        agent_id: The agent's id.
        slug: The agent's slug.
        name: The agent's display name.
        system_prompt: The persona, or a short default naming the agent.
        model: The model, the defaults' when the agent has none.
        provider: The provider, the defaults' when the agent has none.
        skills: The agent's own skill names.
        skill_defs: The definitions of those skills, from the catalog.
        secrets: This agent's secrets, by name (never shown in a repr).
        options: The builder's base options, read-only.
    """

    agent_id: str
    slug: str
    name: str
    system_prompt: str
    model: str
    provider: str
    skills: tuple[str, ...]
    skill_defs: Mapping[str, Any] = attrs.field(factory=dict)
    secrets: Mapping[str, str] = attrs.field(factory=dict, repr=_secrets_repr)
    options: Mapping[str, Any] = attrs.field(factory=dict)


Factory = Callable[[RuntimeSpec], Any]


@attrs.frozen
class BuilderConfig:
    """How `AgentBuilder` turns an `AgentConfig` into an instance.

    ``factory(spec)`` makes the instance (sync or async). ``skill_catalog``,
    when given, is every skill there is: an agent's own subset is selected
    from it and an unknown name is an error.

    Attributes:
        factory: Makes the instance from a `RuntimeSpec` (sync or async).
        defaults: The `ModelDefaults` for agents without a model or provider.
        base_options: Options every spec carries.
        secrets: The `SecretSource` asked for each agent's secrets (None: no secrets).
        skill_catalog: Every skill there is, by name (None: skills are not checked).
    """

    factory: Factory
    defaults: ModelDefaults = ModelDefaults()
    base_options: Mapping[str, Any] = attrs.field(factory=dict)
    secrets: SecretSource | None = None
    skill_catalog: Mapping[str, Any] | None = None


class AgentBuilder:
    """Builds one agent's instance from its config; see `BuilderConfig`.

    - persona -> system prompt (a short default naming the agent when empty);
    - model and provider fall back to the defaults;
    - only the agent's own skills are selected;
    - the `SecretSource` is asked with the agent's id and its own skill names,
      and the map it returns is copied into that instance's spec alone.

    Attributes:
        config: The `BuilderConfig` it builds with.
    """

    def __init__(self, config: BuilderConfig) -> None:
        self.config = config

    def __repr__(self) -> str:
        return f"AgentBuilder(factory={getattr(self.config.factory, '__name__', '?')})"

    async def spec(self, cfg: AgentConfig) -> RuntimeSpec:
        """The `RuntimeSpec` for `cfg` (what `build` hands the factory)."""
        c = self.config
        skills = tuple(dict.fromkeys(cfg.skills))  # de-duplicated, order kept
        defs: dict[str, Any] = {}
        if c.skill_catalog is not None:
            unknown = [s for s in skills if s not in c.skill_catalog]
            if unknown:
                raise ValueError(
                    f"builder: agent {cfg.id!r} enables unknown skill(s) "
                    f"{', '.join(map(repr, unknown))} "
                    f"(available: {', '.join(sorted(c.skill_catalog)) or 'none'}); "
                    "remove them from the agent or add them to skill_catalog"
                )
            defs = {s: c.skill_catalog[s] for s in skills}
        secrets: Mapping[str, str] = {}
        if c.secrets is not None:
            resolved = await c.secrets.resolve_secrets(cfg.id, skills)
            secrets = MappingProxyType(dict(resolved))
        label = cfg.name or cfg.slug or cfg.id
        return RuntimeSpec(
            agent_id=cfg.id,
            slug=cfg.slug,
            name=cfg.name,
            system_prompt=cfg.persona.strip() or f"You are {label}.",
            model=cfg.model or c.defaults.model,
            provider=cfg.provider or c.defaults.provider,
            skills=skills,
            skill_defs=MappingProxyType(defs),
            secrets=secrets,
            options=MappingProxyType(dict(c.base_options)),
        )

    async def build(self, cfg: AgentConfig) -> Any:
        """The instance the factory makes from `cfg`'s spec (awaited when async), started.

        An instance with an ``astart()`` (a `ModelAgent` whose skills carry MCP
        servers) is started here, so its servers run from the moment the runtime is
        built; one that fails to start is closed, not leaked.
        """
        made = self.config.factory(await self.spec(cfg))
        if inspect.isawaitable(made):
            made = await made
        start = getattr(made, "astart", None)
        if callable(start):
            try:
                await start()
            except BaseException:
                close = getattr(made, "aclose", None)
                if callable(close):
                    await close()
                raise
        return made
