//! `/v1/openapi.json`: the JSON API described from the same descriptors
//! that read and write its bodies, with the proto's comments as the
//! descriptions. Each method is a `POST /v1/<Method>`; each message a
//! schema of its proto3 JSON form (names in lowerCamelCase, enums by name,
//! 64-bit integers as strings or numbers, bytes in base64).

use prost_reflect::{
    DescriptorPool, FieldDescriptor, FileDescriptor, Kind, MessageDescriptor, ServiceDescriptor,
};
use serde_json::{Map, Value, json};

use super::calls::BUNDLE_TYPE;
use super::json::SERVICE;

/// The document, built once from `pool`.
pub fn document(pool: &DescriptorPool) -> Value {
    let service = pool
        .get_service_by_name(SERVICE)
        .expect("the descriptor set has the service");
    let mut schemas = Map::new();
    for message in pool.all_messages() {
        schemas.insert(message.full_name().to_owned(), message_schema(&message));
    }
    schemas.insert("Error".into(), error_schema());
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Engram JSON API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Every RPC of engram.v1.MemoryService as POST /v1/<Method>, \
                the request and the answer in the proto3 JSON mapping. A refusal is an \
                HTTP status with an Error body; `status` names the gRPC code.",
        },
        "paths": paths(&service),
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token of auth.tokens; needed when the server has tokens.",
                }
            },
        },
        "security": [{"bearer": []}, {}],
    })
}

fn reference(message: &MessageDescriptor) -> Value {
    json!({"$ref": format!("#/components/schemas/{}", message.full_name())})
}

fn paths(service: &ServiceDescriptor) -> Value {
    let mut paths = Map::new();
    for method in service.methods() {
        let name = method.name();
        let comments = comments(&service.parent_file(), method.path());
        let json_body =
            |m: &MessageDescriptor| json!({"application/json": {"schema": reference(m)}});
        let bundle = json!({BUNDLE_TYPE: {"schema": {
            "type": "string",
            "description": "A memory bundle: JSON lines, as docs/EXPORT.md describes them.",
        }}});
        let mut request = json_body(&method.input());
        let mut answer = json_body(&method.output());
        let mut parameters = vec![];
        match name {
            "ExportMemory" => answer = bundle,
            "ImportMemory" => {
                request[BUNDLE_TYPE] = bundle[BUNDLE_TYPE].clone();
                parameters.push(json!({
                    "name": "replace",
                    "in": "query",
                    "required": false,
                    "schema": {"type": "boolean"},
                    "description": "With a bundle as the body: replace what exists under its ids.",
                }));
            }
            _ => {}
        }
        let error = json!({"description": "Refused", "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
        }});
        paths.insert(
            format!("/v1/{name}"),
            json!({"post": {
                "operationId": name,
                "summary": comments.lines().next().unwrap_or(name),
                "description": comments,
                "parameters": parameters,
                "requestBody": {"required": false, "content": request},
                "responses": {
                    "200": {"description": "The answer", "content": answer},
                    "default": error,
                },
            }}),
        );
    }
    Value::Object(paths)
}

fn error_schema() -> Value {
    json!({
        "type": "object",
        "required": ["error"],
        "properties": {"error": {
            "type": "object",
            "required": ["code", "status", "message"],
            "properties": {
                "code": {"type": "integer", "description": "The HTTP status."},
                "status": {"type": "string", "description": "The gRPC code's name, e.g. NOT_FOUND."},
                "message": {"type": "string"},
            },
        }},
    })
}

fn message_schema(message: &MessageDescriptor) -> Value {
    match message.full_name() {
        // The well-known types' JSON forms.
        "google.protobuf.Struct" => return json!({"type": "object"}),
        "google.protobuf.Value" => return json!({}),
        "google.protobuf.ListValue" => return json!({"type": "array"}),
        _ => {}
    }
    let mut properties = Map::new();
    for field in message.fields() {
        let mut schema = field_schema(&field);
        let text = comments(&message.parent_file(), field.path());
        if !text.is_empty() && !schema.as_object().is_some_and(|o| o.contains_key("$ref")) {
            schema["description"] = Value::String(text);
        }
        properties.insert(field.json_name().to_owned(), schema);
    }
    let mut schema = json!({
        "type": "object",
        "properties": properties,
        "additionalProperties": false,
    });
    let text = comments(&message.parent_file(), message.path());
    if !text.is_empty() {
        schema["description"] = Value::String(text);
    }
    schema
}

fn field_schema(field: &FieldDescriptor) -> Value {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else {
            unreachable!("a map's field is its entry message");
        };
        return json!({
            "type": "object",
            "additionalProperties": kind_schema(&entry.map_entry_value_field().kind()),
        });
    }
    let one = kind_schema(&field.kind());
    if field.is_list() {
        json!({"type": "array", "items": one})
    } else {
        one
    }
}

fn kind_schema(kind: &Kind) -> Value {
    match kind {
        Kind::Double | Kind::Float => json!({"type": "number"}),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            json!({"type": "integer", "format": "int32"})
        }
        Kind::Uint32 | Kind::Fixed32 => json!({"type": "integer", "minimum": 0}),
        // Written as strings (JSON numbers lose precision past 2^53), read
        // either way.
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            json!({"type": ["string", "integer"], "format": "int64"})
        }
        Kind::Uint64 | Kind::Fixed64 => {
            json!({"type": ["string", "integer"], "format": "uint64"})
        }
        Kind::Bool => json!({"type": "boolean"}),
        Kind::String => json!({"type": "string"}),
        Kind::Bytes => json!({"type": "string", "contentEncoding": "base64"}),
        Kind::Enum(e) => {
            let names: Vec<String> = e.values().map(|v| v.name().to_owned()).collect();
            json!({"type": "string", "enum": names})
        }
        Kind::Message(m) => reference(m),
    }
}

/// The leading comments of the element at `path` in `file`, trimmed.
fn comments(file: &FileDescriptor, path: &[i32]) -> String {
    let proto = file.file_descriptor_proto();
    let Some(info) = &proto.source_code_info else {
        return String::new();
    };
    info.location
        .iter()
        .find(|l| l.path == path)
        .and_then(|l| l.leading_comments.as_deref())
        .map(|c| {
            c.lines()
                .map(str::trim)
                .collect::<Vec<_>>()
                .join("\n")
                .trim()
                .to_owned()
        })
        .unwrap_or_default()
}
