//! Tool input schemas in the subset of JSON Schema every MCP client accepts
//! (Gemini is the strictest): rmcp generates them with schemars (draft 2020-12:
//! `$ref`/`$defs`, `anyOf [X, null]`, `type: [T, "null"]`, `format: uint32`,
//! `oneOf` of consts), which some clients refuse. This flattens them once,
//! when the tool router is built: references inlined, nullable forms reduced
//! to the plain type (optional fields stay optional by being absent from
//! `required`), `oneOf` of consts turned into `enum`, `format`, `default: null`
//! and boolean `additionalProperties` removed. No crate does this rewrite.

use serde_json::{Map, Value};

type Object = Map<String, Value>;

/// How deep a schema may nest (recursive types are not used by psbx's tools).
const MAX_DEPTH: usize = 32;

pub fn flatten(root: &Object) -> Object {
    let defs = root
        .get("$defs")
        .or_else(|| root.get("definitions"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut value = Value::Object(root.clone());
    fix(&mut value, &defs, 0);
    match value {
        Value::Object(mut m) => {
            for key in ["$defs", "definitions", "$schema"] {
                m.remove(key);
            }
            m
        }
        _ => root.clone(),
    }
}

fn is_null(v: &Value) -> bool {
    v.get("type") == Some(&Value::String("null".into()))
}

fn fix(value: &mut Value, defs: &Object, depth: usize) {
    let Value::Object(m) = value else { return };
    if depth > MAX_DEPTH {
        return;
    }
    loop {
        let mut changed = false;
        if let Some(Value::String(reference)) = m.remove("$ref") {
            let name = reference.rsplit('/').next().unwrap_or_default();
            if let Some(Value::Object(def)) = defs.get(name) {
                for (k, v) in def {
                    m.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            changed = true;
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(options)) = m.get(key).cloned() {
                let kept: Vec<Value> = options.iter().filter(|o| !is_null(o)).cloned().collect();
                if kept.len() == 1 {
                    m.remove(key);
                    if let Value::Object(only) = &kept[0] {
                        for (k, v) in only {
                            m.entry(k.clone()).or_insert_with(|| v.clone());
                        }
                    }
                    changed = true;
                } else if !kept.is_empty() && kept.iter().all(|o| o.get("const").is_some()) {
                    m.remove(key);
                    let values: Vec<Value> = kept
                        .iter()
                        .filter_map(|o| o.get("const").cloned())
                        .collect();
                    m.insert("enum".into(), Value::Array(values));
                    if let Some(t) = kept[0].get("type") {
                        m.entry("type".to_owned()).or_insert_with(|| t.clone());
                    }
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    if let Some(Value::Array(types)) = m.get("type").cloned() {
        let kept: Vec<Value> = types.into_iter().filter(|t| t != "null").collect();
        if kept.len() == 1 {
            m.insert("type".into(), kept[0].clone());
        }
    }
    if let Some(Value::Array(values)) = m.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    // The keyword (a string); a property named `format` (an object) stays.
    if matches!(m.get("format"), Some(Value::String(_))) {
        m.remove("format");
    }
    if m.get("default") == Some(&Value::Null) {
        m.remove("default");
    }
    if matches!(m.get("additionalProperties"), Some(Value::Bool(_))) {
        m.remove("additionalProperties");
    }
    for child in m.values_mut() {
        match child {
            Value::Object(_) => fix(child, defs, depth + 1),
            Value::Array(items) => items.iter_mut().for_each(|i| fix(i, defs, depth + 1)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nullable_refs_and_formats_become_plain() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "size": {"type": ["integer", "null"], "format": "uint32", "default": null},
                "mode": {"anyOf": [{"$ref": "#/$defs/Mode"}, {"type": "null"}]},
                "names": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["names"],
            "additionalProperties": false,
            "$defs": {"Mode": {"oneOf": [{"const": "a", "type": "string"}, {"const": "b", "type": "string"}]}}
        });
        let flat = Value::Object(flatten(schema.as_object().unwrap()));
        let text = flat.to_string();
        for banned in [
            "$ref",
            "$defs",
            "$schema",
            "anyOf",
            "oneOf",
            "null",
            "format",
            "additionalProperties",
        ] {
            assert!(!text.contains(banned), "{banned} left in {text}");
        }
        assert_eq!(flat["properties"]["size"], json!({"type": "integer"}));
        assert_eq!(
            flat["properties"]["mode"],
            json!({"enum": ["a", "b"], "type": "string"})
        );
        assert_eq!(flat["required"], json!(["names"]));
    }
}
