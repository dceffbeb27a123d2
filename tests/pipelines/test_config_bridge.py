"""Dagster configs are derived from the library's models (assets.config_bridge), not copied:
the launchpad shows the library's names, defaults and descriptions, and rejects what the
library rejects, with the library's message."""

from __future__ import annotations

import importlib
import pkgutil

import dagster as dg
import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evaluation.sweep_config import SweepConfig
from assets.config_bridge import DerivedConfig, dagster_config
from pipelines.config_flags import problems


def _schema_fields(asset) -> dict:
    """The config fields Dagster shows for ``asset`` (what the launchpad renders)."""
    return dict(asset.op.config_schema.as_field().config_type.fields)


def _asset_modules():
    import assets

    return [importlib.import_module(f"assets.{m.name}") for m in pkgutil.iter_modules(assets.__path__)]


def hand_written_configs(namespaces) -> list[str]:
    """``dg.Config`` classes in ``namespaces`` not built by :func:`dagster_config`, and derived
    ones with a field that has no description."""
    found = []
    for module in namespaces:
        for name, value in vars(module).items():
            if not (isinstance(value, type) and issubclass(value, dg.Config)) or value in (dg.Config, DerivedConfig):
                continue
            if issubclass(value, dg.ConfigurableResource):
                continue  # resources are chosen in assets.resources, not per run
            if not issubclass(value, DerivedConfig):
                found.append(f"{module.__name__}.{name}: hand-written dg.Config (derive it with dagster_config)")
            for field, info in value.model_fields.items():
                if not (info.description or "").strip():
                    found.append(f"{module.__name__}.{name}.{field}: no description")
    return found


def test_every_asset_config_is_derived_and_described():
    assert hand_written_configs(_asset_modules()) == []


def test_the_check_catches_a_hand_written_config():
    class HandWritten(dg.Config):
        limit: int = 3
        """An attribute docstring: the launchpad does not show it."""

    class Derived(dagster_config(SweepConfig, name="Derived")):
        extra: int = 1  # no description

    fake = type("module", (), {"__name__": "assets.fake", "HandWritten": HandWritten, "Derived": Derived})
    found = hand_written_configs([fake])
    assert any("HandWritten: hand-written" in f for f in found), found
    assert any("HandWritten.limit: no description" in f for f in found), found
    assert any("Derived.extra: no description" in f for f in found), found


def test_sweep_asset_schema_is_sweep_config():
    from assets.evaluation import checkpoint_sweep

    fields = _schema_fields(checkpoint_sweep)
    mirrored = {n: f for n, f in SweepConfig.model_fields.items() if n != "progress"}
    assert set(mirrored) <= set(fields)
    assert set(fields) - set(mirrored) == {"domains", "exclude_tags", "backend", "dtype"}
    for name, info in mirrored.items():
        shown = fields[name]
        assert shown.description == info.description, name
        assert shown.default_provided and shown.default_value == info.default, name
    for name in ("domains", "backend", "dtype"):
        assert fields[name].description, name


def test_fast_variant_schema_is_variant_config_plus_domains():
    from assets.variants import fast_variant
    from evaluation.variant_config import VariantConfig

    fields = _schema_fields(fast_variant)
    mirrored = {n: f for n, f in VariantConfig.model_fields.items() if n != "progress"}
    assert set(fields) - set(mirrored) == {"domains"} and set(mirrored) <= set(fields)
    for name, info in mirrored.items():
        assert fields[name].description == info.description and fields[name].default_value == info.default, name


@pytest.mark.parametrize("module, asset_name, library", [
    ("assets.ingest", "domain_samples", "quality.ingest:IngestSettings"),
    ("assets.quality", "gated_samples", "quality.batch_gates:GateSettings"),
    ("assets.difficulty", "policy_pass_rates", "quality.difficulty_settings:DifficultySettings"),
    ("assets.training", "policy_checkpoint", "training.config:TrainRequest"),
    ("assets.regression", "regression_report", "evaluation.promotion_policy:PromotionSettings"),
    ("assets.regression", "champion_promotion", "evaluation.promotion_policy:PromotionSettings"),
])
def test_other_asset_schemas_are_their_library_models(module, asset_name, library):
    asset = getattr(importlib.import_module(module), asset_name)
    lib_module, lib_name = library.split(":")
    model = getattr(importlib.import_module(lib_module), lib_name)
    fields = _schema_fields(asset)
    assert set(fields) == set(model.model_fields)
    for name, info in model.model_fields.items():
        assert fields[name].description == info.description, name
        assert fields[name].default_value == info.get_default(call_default_factory=True), name


def _library_message(model, **values) -> str:
    with pytest.raises(ValidationError) as caught:
        model(**values)
    return problems(caught.value)


def test_a_bad_launchpad_value_fails_with_the_library_message(assay_home):
    from assets.evaluation import checkpoint_sweep
    from assets.resources import default_resources

    expected = _library_message(SweepConfig, batch_items=0)
    assert "batch_items must be a positive integer" in expected
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoint", ["some-step000001"])
        result = dg.materialize([checkpoint_sweep], partition_key="some-step000001", instance=instance,
                                resources=default_resources(str(assay_home)), raise_on_error=False,
                                run_config={"ops": {"checkpoint_sweep": {"config": {"batch_items": 0}}}})
    assert not result.success
    (failure,) = result.get_step_failure_events()
    error = failure.step_failure_data.error
    text = error.message + (error.cause.message if error.cause else "")
    assert expected in text, text
    assert not (assay_home / "lake" / "results").exists()  # refused before the asset body ran


def test_a_value_only_a_library_validator_rejects_fails_too():
    # max_new_tokens has no pydantic constraint in the mirrored field: the library's validator
    # is what refuses it, and its words are in the error.
    from assets.evaluation import SweepAssetConfig

    with pytest.raises(ValidationError, match="max_new_tokens must be a positive integer, got 0"):
        SweepAssetConfig(max_new_tokens=0)
    with pytest.raises(ValidationError, match="copies of the greedy completion"):
        SweepAssetConfig(samples=4, temperature=0.0)
    config = SweepAssetConfig(samples=2, top_p=0.5, domains=["a"])
    assert config.to_library() == SweepConfig(samples=2, top_p=0.5)
    assert config.to_library(progress=False).progress is False


class _Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int = Field(3, description="how many")
    names: list[str] = Field(default_factory=list, description="which ones")
    mode: str = Field("fast", description="fast or slow")

    @field_validator("mode")
    @classmethod
    def _known(cls, value):
        if value not in ("fast", "slow"):
            raise ValueError(f"mode {value!r} is not fast or slow; pick one of those")
        return value


def test_dagster_config_mirrors_types_defaults_and_descriptions():
    derived = dagster_config(_Knobs, name="KnobsConfig", exclude={"names"})
    assert issubclass(derived, dg.Config) and set(derived.model_fields) == {"count", "mode"}
    assert derived().to_library() == _Knobs()
    fields = dict(derived.to_config_schema().as_field().config_type.fields)
    assert fields["count"].default_value == 3 and fields["count"].description == "how many"
    with pytest.raises(ValidationError, match="mode 'medium' is not fast or slow; pick one of those"):
        derived(mode="medium")
    with pytest.raises(ValidationError):
        derived(count="many")
    assert dagster_config(_Knobs, name="All")(names=["x"]).to_library().names == ["x"]


def test_dagster_config_refuses_undescribed_fields_and_unknown_excludes():
    class Bare(BaseModel):
        count: int = 3

    with pytest.raises(TypeError, match="Bare.count has no Field"):
        dagster_config(Bare, name="BareConfig")
    with pytest.raises(ValueError, match="no field"):
        dagster_config(_Knobs, name="K", exclude={"cuont"})
