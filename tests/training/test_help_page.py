"""training/help_page.py: the field docstrings that `aogpt train --help` and the config reference show."""

from __future__ import annotations

import pytest

from aogpt_plugin.training.help_page import field_docs
from aogpt_plugin.training.sections import AOGPT, EMA


@pytest.mark.parametrize("cls", [AOGPT, EMA])
def test_every_key_has_help_text(cls):
    docs = field_docs(cls)
    assert set(docs) == {f for f in cls.__dataclass_fields__}
    assert all(text.splitlines()[0].strip() for text in docs.values())
