"""docs/training.md's generated blocks (config reference, multi-node batch table) match the code: the
default suite fails when a `[aogpt]`/`[ema]` field, a check, a recipe or the sbatch arithmetic changes
without `python scripts/config_reference.py --write`."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

import config_reference as ref  # noqa: E402

from aogpt_plugin.training.sections import AOGPT, EMA  # noqa: E402

DOC = ROOT / "docs" / "training.md"


def test_training_doc_is_current(capsys):
    code = ref.main(["--check"])
    assert code == 0, capsys.readouterr().err + " -> run: python scripts/config_reference.py --write"


def test_a_stale_doc_is_one_line_and_write_repairs_it(tmp_path, capsys):
    fresh = DOC.read_text()
    doc = tmp_path / "training.md"
    stale = fresh.replace("| `ema.decay` | float | `0.9999` |", "| `ema.decay` | float | `0.999` |")
    assert stale != fresh
    doc.write_text(stale)
    assert ref.main(["--check", "--doc", str(doc)]) == 1
    (err,) = capsys.readouterr().err.splitlines()
    assert err.startswith("error: ") and "is stale" in err and "--write" in err
    assert ref.main(["--write", "--doc", str(doc)]) == 0
    assert doc.read_text() == fresh  # only the block changed, back to what the code says


def test_missing_markers_are_one_line(tmp_path, capsys):
    doc = tmp_path / "training.md"
    doc.write_text("# Training\n\nno generated blocks\n")
    assert ref.main(["--check", "--doc", str(doc)]) == 2
    (err,) = capsys.readouterr().err.splitlines()
    assert err.startswith("error: ") and "<!-- config-reference:start -->" in err


def test_allowed_values_are_what_the_checks_say():
    assert ref.allowed_values(AOGPT, "conditioning", str) == "adaln, concat, none"
    assert ref.allowed_values(AOGPT, "order", str) == "mixture, random, l2r, fixed_random, blockwise:K"
    assert ref.allowed_values(AOGPT, "p_l2r", float) == "[0, 1]"
    assert ref.allowed_values(AOGPT, "target_pe_dim", int) == ">= 1"
    assert ref.allowed_values(AOGPT, "order_seed", int) == "any integer"  # no check: any value passes
    assert ref.allowed_values(EMA, "decay", float) == "[0, 1)"
    assert ref.allowed_values(EMA, "enable", bool) == "true, false"


def test_every_recipe_key_has_a_row_with_its_value():
    import tomllib

    table = "\n".join(ref.recipe_table())
    for path in ROOT.glob(ref.RECIPES):
        for key, value in ref.flatten(tomllib.loads(path.read_text())).items():
            row = next(r for r in table.splitlines() if r.startswith(f"| `{key}` |"))
            assert ref.code(value) in row, (path.name, key)
    assert "| `training.global_batch_size` | `-1` |" in table  # torchtitan's default, read from its source
