"""Shared base for every section of the stack configuration schema."""
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ConfigModel(BaseModel):
    """Stack config keys are camelCase (Pulumi convention); Python fields are snake_case.

    Unknown keys are errors: a typo in a stack file must never be silently ignored.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        # The docstring under a field is its description: docs/config-reference.md is generated from it.
        use_attribute_docstrings=True,
        frozen=True,
    )
