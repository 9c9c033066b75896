"""The JSON API from a client that is not Rust: /v1/openapi.json is a
valid OpenAPI 3.1 document naming every RPC, and real answers (and a
refusal) validate against the schemas it gives."""

import json
import urllib.error
import urllib.request

import jsonschema
import referencing
from openapi_spec_validator import validate

from engram.v1 import service_pb2

METHODS = [m.name for m in service_pb2.DESCRIPTOR.services_by_name["MemoryService"].methods]


def post(base, method, body):
    """(HTTP status, JSON answer) of POST /v1/<method>."""
    request = urllib.request.Request(
        f"{base}/v1/{method}", data=json.dumps(body).encode(),
        headers={"content-type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


def test_the_description_is_valid_and_answers_match_it(start_engramd_http):
    _, base = start_engramd_http()
    with urllib.request.urlopen(f"{base}/v1/openapi.json", timeout=30) as answer:
        doc = json.load(answer)
    validate(doc)
    assert sorted(p.removeprefix("/v1/") for p in doc["paths"]) == sorted(METHODS)

    schemas = doc["components"]["schemas"]
    registry = referencing.Registry().with_resource(
        "urn:engram", referencing.Resource.from_contents(
            doc, default_specification=referencing.jsonschema.DRAFT202012))

    def check(name, answer):
        schema = {"$ref": f"urn:engram#/components/schemas/{name}"}
        jsonschema.Draft202012Validator(schema, registry=registry).validate(answer)

    status, ingested = post(base, "Ingest", {
        "agentId": "oa", "events": [
            {"traceType": "TRACE_TYPE_USER", "content": "Plan a trip to Porto"},
            {"traceType": "TRACE_TYPE_TOOL_CALL", "toolName": "search", "toolCallId": "c1",
             "toolArgs": {"q": "Porto", "days": 3}},
            {"traceType": "TRACE_TYPE_TOOL_RESULT", "toolCallId": "c1",
             "toolResult": {"hotels": ["A", "B"]}}]})
    assert status == 200, ingested
    check("engram.v1.IngestResponse", ingested)
    for method, body in [
        ("PrepareRequest", {"agentId": "oa", "model": "gpt-4o",
                            "renderFormat": "RENDER_FORMAT_OPENAI_CHAT"}),
        ("Retrieve", {"agentId": "oa"}),
        ("SearchHistory", {"agentId": "oa", "query": "Porto"}),
        ("GetContextStats", {"agentId": "oa"}),
        ("AddMemories", {"scope": {"agentId": "oa"}, "memories": [{"text": "Likes trains"}]}),
        ("ListMemories", {"scope": {"agentId": "oa"}}),
        ("ListAgents", {}),
    ]:
        status, answer = post(base, method, body)
        assert status == 200, (method, answer)
        output = doc["paths"][f"/v1/{method}"]["post"]["responses"]["200"]["content"]
        name = output["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        assert name in schemas
        check(name, answer)

    status, refused = post(base, "Retrieve", {"agentId": "nobody"})
    assert status == 404
    check("Error", refused)
    assert refused["error"]["status"] == "NOT_FOUND"
