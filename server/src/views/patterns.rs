//! The shapes of the API's text fields, as regular expressions the OpenAPI
//! document publishes (`pattern`), and the checks that hold the server to
//! exactly them: what a pattern allows, the server takes; what it refuses,
//! the server refuses (with 400).
//!
//! Durations (`keep`, `timeout`) are bounded by value, which a pattern can
//! say too: [`duration_pattern`] spells out every whole number of each unit
//! from 1 up to the bound, and [`strict_duration`] takes exactly those.

use crate::error::ApiError;
use serde_json::{Value, json};
use std::time::Duration;

/// A secret's (an environment variable's) name; at most 128 characters.
pub const ENV_NAME: &str = "^[A-Za-z_][A-Za-z0-9_]*$";
/// An environment's, a connection's or a service's name; at most 64 characters.
pub const RESOURCE_NAME: &str = "^[A-Za-z0-9][A-Za-z0-9._-]*$";
/// One line without control characters (a box's or a key's name).
pub const ONE_LINE: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";
/// A name that is not blank once trimmed, on one line (an API key's name).
pub const ONE_LINE_NOT_BLANK: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$";
/// Text without NUL, with something besides white space (a command line).
pub const COMMAND: &str = "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$";
/// Text without NUL (an environment variable's value).
pub const NO_NUL: &str = "^[^\\u0000]*$";
/// Text with a character Rust's `trim` keeps (one not Unicode White_Space).
pub const NOT_BLANK: &str = "[^\\t\\n\\u000b\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
/// An absolute path in the box.
pub const ABSOLUTE_PATH: &str = "^/[^\\u0000]*$";
/// A box id.
pub const BOX_ID: &str = "^box_[0-9a-z]+$";

/// The constraints the document gives request fields beyond their types and
/// lengths (which the DTOs' `#[schema]` attributes carry): a schema name, a
/// JSON pointer in it and what to merge there. The checks beside them hold the
/// server to the same (exec's `timeout` pattern is added with its bound).
pub fn constraints() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("StartBox", "/properties/name", json!({"pattern": ONE_LINE})),
        ("StartBox", "/properties/goal", json!({"pattern": NO_NUL})),
        (
            "StartBox",
            "/properties/size",
            json!({"enum": [1, 2, 4, 8, null]}),
        ),
        (
            "StartBox",
            "/properties/secrets/items",
            json!({"pattern": ENV_NAME, "maxLength": 128}),
        ),
        (
            "StartBox",
            "/properties/urlPorts/items",
            json!({"minimum": 1, "maximum": 65535}),
        ),
        (
            "StartBox",
            "/properties/environment",
            json!({"pattern": RESOURCE_NAME, "maxLength": 64}),
        ),
        (
            "ServiceSpec",
            "/properties/name",
            json!({"pattern": NO_NUL}),
        ),
        (
            "ServiceSpec",
            "/properties/version",
            json!({"pattern": NO_NUL}),
        ),
        ("ExecBody", "/properties/cmd", json!({"pattern": COMMAND})),
        (
            "ExecBody",
            "/properties/cwd",
            json!({"pattern": ABSOLUTE_PATH}),
        ),
        (
            "ExecBody",
            "/properties/timeout",
            json!({"pattern": duration_pattern(MAX_EXEC_TIMEOUT)}),
        ),
        (
            "ExecBody",
            "/properties/env",
            json!({
                "propertyNames": {"pattern": ENV_NAME, "maxLength": 128},
                "additionalProperties": {"type": "string", "pattern": NO_NUL},
            }),
        ),
        (
            "CreateApiKey",
            "/properties/name",
            json!({"pattern": ONE_LINE_NOT_BLANK}),
        ),
        (
            "CreateEnvironment",
            "/properties/name",
            json!({"pattern": RESOURCE_NAME}),
        ),
        (
            "CreateConnection",
            "/properties/name",
            json!({"pattern": RESOURCE_NAME}),
        ),
        ("PutSecret", "/properties/value", json!({"pattern": NO_NUL})),
        (
            "PutEndpoints",
            "/properties/endpoints",
            json!({"uniqueItems": true}),
        ),
        (
            "EndpointInput",
            "/properties/host",
            json!({"pattern": psbx_wire::HOST_NAME_PATTERN}),
        ),
        (
            "PutService",
            "/properties/dotenv",
            json!({"pattern": NO_NUL, "maxLength": 512 * 1024}),
        ),
        (
            "PutBoxAccess",
            "/properties/entries/items",
            json!({"pattern": psbx_actors::box_access::entry_pattern()}),
        ),
        (
            "TakeShot",
            "/properties/url",
            json!({"pattern": psbx_wire::boxd::PAGE_URL_PATTERN}),
        ),
        (
            "TakeShot",
            "/properties/kind",
            json!({"enum": ["screenshot", "recording", null]}),
        ),
        (
            "TakeShot",
            "/properties/format",
            json!({"enum": ["webm", "mp4", null]}),
        ),
        // fullPage: a screenshot of a page only.
        (
            "TakeShot",
            "",
            json!({
                "if": {"properties": {"fullPage": {"const": true}}, "required": ["fullPage"]},
                "then": {
                    "required": ["url"],
                    "properties": {"url": {"type": "string"}, "kind": {"enum": ["screenshot", null]}},
                },
            }),
        ),
        // What `WireBody::change` refuses as a whole: mode, port, targetPort
        // and version change a service, so they come with `service`; and a
        // change changes something (a service, or at least one link).
        (
            "WireBody",
            "",
            json!({
                "allOf": [
                    {"anyOf": [
                        {"required": ["service"], "properties": {"service": {"type": "string"}}},
                        {"properties": {
                            "mode": {"type": "null"},
                            "port": {"type": "null"},
                            "targetPort": {"type": "null"},
                            "version": {"type": "null"},
                        }},
                    ]},
                    {"anyOf": [
                        {"required": ["service"], "properties": {"service": {"type": "string"}}},
                        {"required": ["links"], "properties": {"links": {"minItems": 1}}},
                    ]},
                ],
            }),
        ),
        ("HandOver", "/properties/title", json!({"pattern": COMMAND})),
        (
            "HandOver",
            "/properties/summary",
            json!({"pattern": NO_NUL}),
        ),
        (
            "HandOver",
            "/properties/urls/items",
            json!({"pattern": psbx_wire::boxd::PAGE_URL_PATTERN, "maxLength": 2048}),
        ),
        // An answer that does not approve says something: an item whose
        // text is not blank once trimmed, or that carries an image.
        (
            "Answer",
            "",
            json!({
                "anyOf": [
                    {"required": ["approved"], "properties": {"approved": {"const": true}}},
                    {"required": ["items"], "properties": {"items": {"contains": {"anyOf": [
                        {"required": ["text"], "properties": {"text": {"type": "string", "pattern": NOT_BLANK}}},
                        {"required": ["image"], "properties": {"image": {"type": "string", "pattern": "[A-Za-z0-9+/]"}}},
                    ]}}}},
                ],
            }),
        ),
        ("AnswerItem", "/properties/text", json!({"pattern": NO_NUL})),
        (
            "AnswerItem",
            "/properties/image",
            json!({"contentEncoding": "base64", "contentMediaType": "image/png"}),
        ),
    ]
}

/// The longest exec `timeout`.
pub const MAX_EXEC_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Refuses text with NUL, which neither PostgreSQL's text nor an exec takes.
pub fn no_nul(field: &str, value: &str) -> Result<(), ApiError> {
    if value.contains('\0') {
        Err(ApiError::bad_request(
            "invalid_request",
            format!("{field} contains NUL (\\u0000): send text without it"),
        ))
    } else {
        Ok(())
    }
}

/// The units of a duration, in seconds.
const UNITS: [(char, u64); 4] = [('s', 1), ('m', 60), ('h', 3600), ('d', 86_400)];

/// A pattern for the whole numbers 1 to `max` without leading zeros (`max` > 0).
fn up_to(max: u64) -> String {
    let digits: Vec<u32> = max
        .to_string()
        .chars()
        .filter_map(|c| c.to_digit(10))
        .collect();
    let n = digits.len();
    let mut alternatives = Vec::new();
    // Every number with fewer digits than `max`.
    match n {
        0 | 1 => {}
        2 => alternatives.push("[1-9]".to_owned()),
        _ => alternatives.push(format!("[1-9][0-9]{{0,{}}}", n - 2)),
    }
    // Numbers of `max`'s length: a prefix of `max`, one smaller digit, then any digits.
    for (i, &d) in digits.iter().enumerate() {
        let low = u32::from(i == 0);
        if d > low {
            let prefix: String = digits[..i].iter().map(|d| d.to_string()).collect();
            let rest = n - i - 1;
            let tail = match rest {
                0 => String::new(),
                1 => "[0-9]".to_owned(),
                _ => format!("[0-9]{{{rest}}}"),
            };
            alternatives.push(format!("{prefix}[{low}-{}]{tail}", d - 1));
        }
    }
    alternatives.push(max.to_string());
    alternatives.join("|")
}

/// A pattern for durations from 1s to `max`, each unit with its own bound.
pub fn duration_pattern(max: Duration) -> String {
    let max = max.as_secs();
    let units: Vec<String> = UNITS
        .iter()
        .filter(|(_, secs)| max / secs > 0)
        .map(|(unit, secs)| format!("(?:{}){unit}", up_to(max / secs)))
        .collect();
    format!("^(?:{})$", units.join("|"))
}

/// A duration as [`duration_pattern`] admits it: a whole number without
/// leading zeros and a unit, from 1s to `max`.
pub fn strict_duration(field: &str, text: &str, max: Duration) -> Result<Duration, ApiError> {
    let bad = || {
        ApiError::bad_request(
            "invalid_request",
            format!(
                "{field} {text:?} is not a duration from 1s to {}: write a whole number and a unit, \
                 like \"90m\", \"36h\" or \"3d\" (units s, m, h, d)",
                psbx_actors::duration::format(max)
            ),
        )
    };
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    if number.starts_with('0') {
        return Err(bad());
    }
    let n: u64 = number.parse().map_err(|_| bad())?;
    let secs = UNITS
        .iter()
        .find(|(u, _)| unit.len() == 1 && unit.starts_with(*u))
        .and_then(|(_, secs)| n.checked_mul(*secs))
        .ok_or_else(bad)?;
    let d = Duration::from_secs(secs);
    if d.is_zero() || d > max {
        return Err(bad());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `text` is in `up_to(max)`, by a small matcher of its alternatives
    /// (the pattern's own semantics, checked against every number).
    fn matches_number(pattern: &str, text: &str) -> bool {
        pattern.split('|').any(|alt| matches_alt(alt, text))
    }

    fn matches_alt(alt: &str, text: &str) -> bool {
        // Alternatives are: digits, `[a-b]`, `[0-9]{k}` or `[0-9]{0,k}` pieces.
        let mut t = text.chars().peekable();
        let mut a = alt.chars().peekable();
        while let Some(c) = a.next() {
            if c == '[' {
                let lo = a.next().unwrap();
                a.next();
                let hi = a.next().unwrap();
                a.next();
                let (min, max) = if a.peek() == Some(&'{') {
                    a.next();
                    let spec: String = a.by_ref().take_while(|c| *c != '}').collect();
                    match spec.split_once(',') {
                        Some((x, y)) => (x.parse().unwrap(), y.parse().unwrap()),
                        None => (spec.parse().unwrap(), spec.parse().unwrap()),
                    }
                } else {
                    (1, 1)
                };
                let mut seen = 0;
                while seen < max && t.peek().is_some_and(|d| (lo..=hi).contains(d)) {
                    t.next();
                    seen += 1;
                }
                if seen < min {
                    return false;
                }
            } else if t.next() != Some(c) {
                return false;
            }
        }
        t.next().is_none()
    }

    #[test]
    fn the_number_pattern_is_exactly_one_to_max() {
        for max in [
            1, 7, 9, 10, 24, 60, 99, 100, 168, 1440, 10_080, 86_400, 604_800,
        ] {
            let pattern = up_to(max);
            for n in 0..=max + 20 {
                assert_eq!(
                    matches_number(&pattern, &n.to_string()),
                    (1..=max).contains(&n),
                    "{n} against {pattern} (max {max})"
                );
            }
            assert!(!matches_number(&pattern, "01"), "{pattern}");
        }
    }

    #[test]
    fn strict_durations_take_what_the_pattern_says() {
        let week = Duration::from_secs(7 * 86_400);
        assert_eq!(
            duration_pattern(Duration::from_secs(90)),
            "^(?:(?:[1-9]|[1-8][0-9]|90)s|(?:1)m)$"
        );
        for ok in ["1s", "3d", "7d", "168h", "10080m", "604800s", "90m"] {
            assert!(strict_duration("keep", ok, week).is_ok(), "{ok}");
        }
        for bad in [
            "0s", "8d", "169h", "604801s", "07d", " 3d", "3d ", "3", "d", "3D", "3dd", "",
        ] {
            assert!(strict_duration("keep", bad, week).is_err(), "{bad}");
        }
    }
}
