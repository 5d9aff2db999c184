"""The judges' reply schemas carry every constraint the validator checks, and what LiteLLM sends of
them on each provider's wire (the README's table of structured-output constraints is this test)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

from evalframe.models.llm import response_format
from evalframe.models.loader import lib
from evalframe.scorers.answer_relevancy import verdicts_reply
from evalframe.scorers.answer_similarity import analysis_reply
from evalframe.scorers.conversational import Checklist, IntentionList, Turns, turn_reply, turns_reply
from evalframe.scorers.ground_truth_similarity import comparisons_reply
from evalframe.scorers.grounded import Claims, Ranking
from evalframe.scorers.judge import parse_output
from tests.testserver import FakeLLMServer

# The README's wires: model string, and whether it goes to the OpenAI base (/v1) or the bare server.
WIRES = {
    "openai": "openai/gpt-4o-mini",  # response_format.json_schema, strict
    "anthropic": "anthropic/claude-sonnet-4-5",  # output_format (native structured outputs)
    "anthropic-tool": "anthropic/claude-3-5-haiku-20241022",  # a forced tool's input_schema
    "gemini": "gemini/gemini-2.5-flash",  # generationConfig.response_json_schema
    "ollama": "ollama_chat/llama3.1",  # format
}


def keywords(schema: Any, found: set[str] | None = None) -> set[str]:
    """The constraint keywords used anywhere in a schema."""
    found = set() if found is None else found
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("minItems", "maxItems", "minimum", "maximum", "enum", "anyOf", "$ref", "required"):
                found.add(key)
            if key == "additionalProperties" and value is False:
                found.add("additionalProperties:false")
            if key == "description" and "Note:" in str(value):
                found.add("moved to description")
            keywords(value, found)
    elif isinstance(schema, list):
        for value in schema:
            keywords(value, found)
    return found


PROBE = {  # every keyword evalframe's schemas could use
    "type": "object",
    "properties": {
        "matches": {
            "type": "object",
            "properties": {"0": {"$ref": "#/$defs/Entry"}},
            "required": ["0"],
            "additionalProperties": False,
        },
        "listed": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
    },
    "required": ["matches", "listed"],
    "additionalProperties": False,
    "$defs": {
        "Entry": {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": ["a", "b"]},
                "index": {"anyOf": [{"type": "integer", "enum": [0, 1]}, {"type": "null"}]},
                "rating": {"type": "number", "minimum": 1, "maximum": 5},
            },
            "required": ["kind", "index", "rating"],
            "additionalProperties": False,
        }
    },
}


def sent(wire: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as the server received it from LiteLLM on `wire`."""
    fmt = {"type": "json_schema", "json_schema": {"name": "Probe", "schema": schema, "strict": True}}
    with FakeLLMServer() as server:
        base = server.openai_base if wire == "openai" else server.base_url
        asyncio.run(
            lib().acompletion(
                model=WIRES[wire],
                messages=[{"role": "user", "content": "hi"}],
                response_format=fmt,
                api_base=base,
                api_key="k",
                timeout=10,
                max_retries=0,
            )
        )
        [request] = server.requests
    assert request.schema is not None
    return request.schema


ALL = {
    "required",
    "additionalProperties:false",
    "enum",
    "anyOf",
    "$ref",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
}
# What LiteLLM 1.106.2 sends of PROBE on each wire (the README's table).
EXPECTED = {
    "openai": ALL,
    "gemini": ALL,
    "ollama": ALL,
    "anthropic-tool": ALL,  # verbatim, but the $refs lose their "#" (a tool schema is not enforced)
    # $defs inlined; minItems/maxItems/minimum/maximum become a "Note: ..." in the description
    "anthropic": {"required", "additionalProperties:false", "enum", "anyOf", "moved to description"},
}


@pytest.mark.parametrize("wire", list(WIRES))
def test_what_litellm_sends_of_each_keyword(wire: str) -> None:
    assert keywords(sent(wire, PROBE)) == EXPECTED[wire]


def test_judge_schemas_use_only_keywords_every_wire_keeps_for_counts_and_indices() -> None:
    """Counts and indices rest on required keys and enums, which every wire keeps (not on
    minItems/maxItems, which Anthropic's does not)."""
    for model in (analysis_reply(3, 2), verdicts_reply(2), comparisons_reply(2, 4)):
        schema = response_format(model)["json_schema"]["schema"]
        assert keywords(schema) <= {"required", "additionalProperties:false", "enum", "anyOf", "$ref"}
        assert keywords(sent("anthropic", schema)) == keywords(schema) - {"$ref"}


def test_every_object_is_closed_and_fully_required() -> None:
    forms = [
        {"type": "choice", "choices": {"a": 1.0}},
        {"type": "number", "min": 1, "max": 5},
        {"type": "verdicts", "verdicts": {"yes": 1.0, "no": 0.0}},
    ]
    models: list[type[BaseModel]] = [analysis_reply(3, 2), verdicts_reply(2), comparisons_reply(2, 4)]
    for form in forms:
        parsed = parse_output(form, "k")
        assert not isinstance(parsed, Claims | Ranking | Turns | Checklist)
        models.append(parsed.reply_model())
    # The judges checked against contexts: the statements step and one verdict per position.
    models += [
        *Claims("output", {"yes": 1.0, "no": 0.0}).reply_models(3),
        *Ranking("output", {"a": 1.0}).reply_models(2),
    ]
    # The conversation judges: one verdict per numbered assistant turn, one turn's, the intentions.
    models += [turns_reply(("yes", "no"), (2, 4, 6)), turn_reply(("yes",)), IntentionList]
    for model in models:
        text = json.dumps(model.model_json_schema())
        objects = [o for o in _walk(json.loads(text)) if o.get("type") == "object"]
        assert objects and all(o["additionalProperties"] is False for o in objects)
        assert all(set(o["required"]) == set(o["properties"]) for o in objects)
        assert '"const"' not in text  # a one-value enum stays an enum


def _walk(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        return [node, *(o for v in node.values() for o in _walk(v))]
    if isinstance(node, list):
        return [o for v in node for o in _walk(v)]
    return []
