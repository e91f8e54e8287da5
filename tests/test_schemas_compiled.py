"""lab.schemas.compiled: the quick check says a document is valid only where jsonschema says so too.

The documents are the ones a hand-in carries (the reference hand-in's workspace), and broken copies of them:
a value replaced by another type or an edge value, a key taken out or added, an item added.
"""
from __future__ import annotations

import copy
import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab import schemas
from lab.schemas.compiled import Unsupported, compile_schema

ODD_VALUES = [None, True, False, 0, 1, -1, 1.0, 2.0, 0.5, -0.5, 1e300, 2 ** 40, "", "x", "right", "QDQ",
              "0" * 64, "recipe/1", [], [1], ["x"], {}, {"a": 1}]


@pytest.fixture(scope="module")
def documents(reference_workspace, tmp_path_factory) -> list[tuple[str, object]]:
    """(schema name, document) for every JSON file of the reference hand-in that names a schema."""
    work = reference_workspace(tmp_path_factory.mktemp("compiled") / "workspace")
    docs = []
    for path in sorted(work.rglob("*.json")):
        obj = schemas.loads(path.read_text(encoding="utf-8"))
        declared = obj.get("schema") if isinstance(obj, dict) else None
        name = path.stem if path.stem in schemas.names() else str(declared or "").split("/")[0]
        if name in schemas.names():
            docs.append((name, obj))
    assert len({name for name, _ in docs}) >= 7, docs
    return docs


def jsonschema_says(name: str, obj: object) -> bool:
    return jsonschema.Draft202012Validator(schemas.load(name)).is_valid(obj)


def nodes(obj, path=()):
    """Every (path, value) in ``obj``, the document itself first."""
    yield path, obj
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        yield from nodes(value, path + (key,))


def broken(doc, path, how: str, value):
    """A copy of ``doc`` with the node at ``path`` replaced, removed, given a new key or a new item."""
    doc = copy.deepcopy(doc)
    *parent_path, key = path if path else (None,)
    parent = doc
    for k in parent_path:
        parent = parent[k]
    node = parent[key] if path else doc
    if how == "replace" and path:
        parent[key] = value
    elif how == "remove" and path and isinstance(parent, dict):
        del parent[key]
    elif how == "add" and isinstance(node, dict):
        node["unexpected_field"] = value
    elif how == "append" and isinstance(node, list):
        node.append(value if not node or value is not None else copy.deepcopy(node[0]))
    return doc


def test_every_schema_of_the_lab_is_compiled():
    assert {name: schemas._compiled(name) is not None for name in schemas.names()} == \
        dict.fromkeys(schemas.names(), True)


def test_what_is_not_compiled_is_left_to_jsonschema():
    for schema in ({"oneOf": [{"type": "string"}]}, {"$ref": "other.json#/x"}, {"enum": [[1, 2]]},
                   {"type": "object", "patternProperties": {"^a": {}}, "additionalProperties": False},
                   {"type": "thing"}):
        with pytest.raises(Unsupported):
            compile_schema(schema)


def test_enum_and_const_match_only_the_very_same_type():
    """jsonschema equates 1 and 1.0 and tells True from 1; the quick check says no to 1.0 as well (jsonschema then
    decides), and never equates True with 1."""
    check = compile_schema({"enum": [1, "a", True]})
    assert [check(v) for v in (1, "a", True, 1.0, False, 0)] == [True, True, True, False, False, False]
    assert [compile_schema({"const": 0})(v) for v in (0, False, 0.0)] == [True, False, False]


def test_the_quick_check_accepts_every_document_a_hand_in_carries(documents):
    for name, doc in documents:
        assert schemas._compiled(name)(doc), name
        assert jsonschema_says(name, doc), name


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_the_quick_check_agrees_with_jsonschema_on_broken_documents(documents, data):
    name, doc = data.draw(st.sampled_from(documents))
    path, _ = data.draw(st.sampled_from(list(nodes(doc))))
    how = data.draw(st.sampled_from(["replace", "remove", "add", "append"]))
    value = copy.deepcopy(data.draw(st.sampled_from(ODD_VALUES)))
    mutant = broken(doc, path, how, value)
    quick, full = schemas._compiled(name)(mutant), jsonschema_says(name, mutant)
    where = f"{name}: {how} at {'/'.join(map(str, path)) or '(top)'} with {json.dumps(value)}"
    assert not quick or full, f"the quick check accepted what jsonschema refuses ({where})"
    assert quick or not full, f"the quick check refused a valid document ({where}): correct, but slow"
