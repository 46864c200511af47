"""docs/config-reference.md is generated from the schema's field docstrings and must match it."""

import schema
from tools import config_reference
from schema.project import ROOT


def test_committed_reference_is_the_generated_one():
    committed = (ROOT / "docs" / "config-reference.md").read_text()
    assert committed == config_reference.render(), "run `rocm-stack config-reference --write` and commit the page"


def test_reference_lists_every_key_with_its_docstring():
    page = config_reference.render()
    for name, field in schema.StackConfig.model_fields.items():
        assert f"## `rocm-stack:{field.alias or name}`" in page
    described = schema.StackConfig.model_fields["gpu_fleet"].description
    assert described and " ".join(described.split()) in page
    assert "| `hosts[].containers[].gpuCount` | integer (≥ 1, ≤ 64) |" in page


def test_check_fails_on_a_stale_page(tmp_path, capsys):
    stale = tmp_path / "config-reference.md"
    stale.write_text(config_reference.render().replace("required", "optional", 1))
    assert config_reference.main(["--check", "--out", str(stale)]) == 1
    assert "is stale" in capsys.readouterr().err
    assert config_reference.main(["--out", str(stale)]) == 2, "an existing file is only overwritten with --write"
    assert "pass --write to overwrite it" in capsys.readouterr().err
    assert config_reference.main(["--write", "--out", str(stale)]) == 0
    assert capsys.readouterr().err == f"wrote {stale}\n"
    assert config_reference.main(["--check", "--out", str(stale)]) == 0
