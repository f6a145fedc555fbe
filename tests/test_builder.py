"""AgentBuilder: persona, defaults, the agent's own skills, and secrets scoped to one agent."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from coreagent_sdk import (
    AgentBuilder,
    AgentConfig,
    BuilderConfig,
    ModelDefaults,
    RuntimeCache,
    RuntimeSpec,
)


class Vault:
    """A SecretSource holding secrets per (agent, skill); records every question asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, tuple[str, ...]]] = []
        self.store = {
            ("ops", "kubectl"): {"KUBECONFIG": "ops-kube"},
            ("ops", "pager"): {"PAGER_KEY": "ops-pager"},
            ("sales", "crm"): {"CRM_KEY": "sales-crm"},
            ("sales", "kubectl"): {"KUBECONFIG": "sales-kube"},
        }

    async def resolve_secrets(
        self, agent_id: str, skill_names: tuple[str, ...]
    ) -> Mapping[str, str]:
        self.asked.append((agent_id, tuple(skill_names)))
        out: dict[str, str] = {}
        for skill in skill_names:
            out.update(self.store.get((agent_id, skill), {}))
        return out


def spec_factory(spec: RuntimeSpec) -> RuntimeSpec:
    return spec


OPS = AgentConfig(
    id="ops",
    slug="ops",
    name="Ops",
    persona="  You run the cluster.  ",
    skills=("kubectl", "pager", "kubectl"),
)
SALES = AgentConfig(id="sales", slug="sales", model="big-model", provider="vendor", skills=("crm",))


async def test_the_persona_becomes_the_system_prompt_and_defaults_fill_the_model() -> None:
    builder = AgentBuilder(BuilderConfig(spec_factory, ModelDefaults("small-model", "local")))
    ops = await builder.build(OPS)
    assert ops.system_prompt == "You run the cluster."
    assert (ops.model, ops.provider) == ("small-model", "local")
    sales = await builder.build(SALES)
    assert (sales.model, sales.provider) == ("big-model", "vendor")
    assert sales.system_prompt == "You are sales."


async def test_only_the_agents_own_skills_are_selected_from_the_catalog() -> None:
    catalog = {"kubectl": "k-def", "pager": "p-def", "crm": "c-def"}
    builder = AgentBuilder(BuilderConfig(spec_factory, skill_catalog=catalog))
    ops = await builder.build(OPS)
    assert ops.skills == ("kubectl", "pager")
    assert dict(ops.skill_defs) == {"kubectl": "k-def", "pager": "p-def"}


async def test_an_unknown_skill_is_an_error_naming_the_available_ones() -> None:
    builder = AgentBuilder(BuilderConfig(spec_factory, skill_catalog={"crm": 1}))
    with pytest.raises(
        ValueError, match=r"unknown skill\(s\) 'kubectl', 'pager' \(available: crm\)"
    ):
        await builder.build(OPS)


async def test_two_agents_receive_disjoint_secrets_asked_with_their_own_skills_only() -> None:
    vault = Vault()
    builder = AgentBuilder(BuilderConfig(spec_factory, secrets=vault))
    ops, sales = await builder.build(OPS), await builder.build(SALES)
    assert dict(ops.secrets) == {"KUBECONFIG": "ops-kube", "PAGER_KEY": "ops-pager"}
    assert dict(sales.secrets) == {"CRM_KEY": "sales-crm"}
    assert set(ops.secrets.values()).isdisjoint(sales.secrets.values())
    assert vault.asked == [("ops", ("kubectl", "pager")), ("sales", ("crm",))]


async def test_a_secret_map_is_copied_into_its_instance_alone() -> None:
    shared: dict[str, str] = {"TOKEN": "one"}

    class Leaky:
        async def resolve_secrets(self, agent_id: str, skill_names: tuple[str, ...]):
            return shared

    builder = AgentBuilder(BuilderConfig(spec_factory, secrets=Leaky()))
    first = await builder.build(OPS)
    shared["TOKEN"] = "changed"
    assert first.secrets["TOKEN"] == "one"
    with pytest.raises(TypeError):
        first.secrets["TOKEN"] = "x"  # type: ignore[index]


async def test_secret_values_never_appear_in_the_specs_repr() -> None:
    builder = AgentBuilder(BuilderConfig(spec_factory, secrets=Vault()))
    shown = repr(await builder.build(OPS))
    assert "ops-kube" not in shown and "KUBECONFIG" in shown


async def test_an_async_factory_is_awaited_and_the_builder_plugs_into_the_cache() -> None:
    async def factory(spec: RuntimeSpec) -> str:
        return f"runtime:{spec.agent_id}:{spec.model}"

    class Loader:
        async def agent_slug(self, agent_id: str) -> str:
            return agent_id

        async def load_config(self, agent_id: str) -> AgentConfig:
            return {"ops": OPS, "sales": SALES}[agent_id]

    cache = RuntimeCache(Loader(), AgentBuilder(BuilderConfig(factory, ModelDefaults("m"))))
    assert await cache.processor("ops") == "runtime:ops:m"
    assert await cache.processor("sales") == "runtime:sales:big-model"


async def test_base_options_reach_every_instance_read_only() -> None:
    builder = AgentBuilder(BuilderConfig(spec_factory, base_options={"temperature": 0.2}))
    spec = await builder.build(OPS)
    assert spec.options["temperature"] == 0.2
    with pytest.raises(TypeError):
        spec.options["temperature"] = 1  # type: ignore[index]
