"""The terse published schemas mean what pydantic's long ones meant."""

from __future__ import annotations

import jsonschema
from pydantic import BaseModel, Field

from nsight_agent.server.schemas import compact, compact_output, terse
from nsight_agent.views.common import dump


class Inner(BaseModel):
    title: str = Field(description="A field that happens to be called title")
    value: float | None = Field(default=None, description="Maybe a number. More words here.")


class Answer(BaseModel):
    """An answer."""

    name: str = Field(description="What it is called, e.g. 'x'. Then more.")
    inner: Inner | None = None
    items: list[Inner]
    share: float | None = Field(description="Required by pydantic, but None is left out")


def test_compact_drops_titles_and_null_unions_but_keeps_meaning() -> None:
    full = Answer.model_json_schema()
    small = compact_output(full, 30)
    text = str(small)
    assert "'title': 'Answer'" not in text and "'title': 'Name'" not in text
    assert "title" in small["$defs"]["Inner"]["properties"]  # a field named title stays
    assert small["properties"]["share"] == {
        "type": "number",
        "description": "Required by pydantic, but...",
    }
    assert "share" not in small["required"] and "name" in small["required"]
    assert "description" not in small["$defs"]["Inner"]["properties"]["value"]
    assert len(str(small)) < 0.6 * len(str(full))
    # What the server sends (empty fields dropped) validates against the small schema.
    for answer in (
        Answer(name="a", items=[Inner(title="t")], share=None),
        Answer(name="b", inner=Inner(title="u", value=1.5), items=[], share=2.0),
    ):
        jsonschema.validate(dump(answer), small)
    bad = {"name": "a", "items": [{"value": 1.0}]}  # Inner without its required title
    try:
        jsonschema.validate(bad, small)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("a missing required field must still fail")


def test_terse_keeps_the_first_sentence_and_abbreviations() -> None:
    assert terse("Label used in results, e.g. 'base'. Second sentence.", 80) == (
        "Label used in results, e.g. 'base'"
    )
    assert terse("one two three four five", 12) == "one two..."
    assert compact({"description": "Hello. World."}, 0) == {}
