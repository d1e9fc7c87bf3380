//! Whole numbers in JSON request bodies as the OpenAPI document's JSON Schema
//! counts them: `{"type": "integer"}` is met by `8080` and by `8080.0` alike
//! (a number with a zero fractional part is an integer there), while serde
//! takes only the first for a Rust integer. Fields that are integers in the
//! document deserialize through these, so what the document allows the
//! server takes; a fraction or a value outside the type is still refused.
//!
//! Hand-written (a dozen lines): serde_with's number helpers convert through
//! strings, not JSON numbers.

use serde::de::{Error, Unexpected};
use serde::{Deserialize, Deserializer};
use serde_json::Number;

/// The value of `number` as a `T`, when it is whole and in `T`'s range.
fn whole<E: Error, T: TryFrom<u64>>(number: &Number) -> Result<T, E> {
    let value = number.as_u64().or_else(|| {
        number
            .as_f64()
            // 2^64 is exact as an f64; below it the cast is exact for whole values.
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 18_446_744_073_709_551_616.0)
            .map(|f| f as u64)
    });
    value.and_then(|v| T::try_from(v).ok()).ok_or_else(|| {
        E::invalid_value(
            Unexpected::Other(&number.to_string()),
            &"a whole number in the field's range",
        )
    })
}

/// For `#[serde(deserialize_with = "whole::required")]` on an integer field.
pub fn required<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    whole(&Number::deserialize(deserializer)?)
}

/// For `#[serde(default, deserialize_with = "whole::optional")]` on an
/// `Option` of an integer (null or absent is `None`).
pub fn optional<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    Option::<Number>::deserialize(deserializer)?
        .map(|n| whole(&n))
        .transpose()
}

/// For `#[serde(default, deserialize_with = "whole::optional_list")]` on an
/// `Option<Vec<_>>` of integers (null or absent is `None`).
pub fn optional_list<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    Option::<Vec<Number>>::deserialize(deserializer)?
        .map(|list| list.iter().map(whole).collect())
        .transpose()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Body {
        #[serde(deserialize_with = "super::required")]
        port: u16,
        #[serde(default, deserialize_with = "super::optional")]
        size: Option<u32>,
    }

    fn parse(json: &str) -> Result<Body, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn whole_floats_are_integers_and_the_rest_is_refused() {
        let body = |port, size| Body { port, size };
        assert_eq!(parse(r#"{"port": 8080}"#).unwrap(), body(8080, None));
        assert_eq!(
            parse(r#"{"port": 8966.0, "size": 2.0}"#).unwrap(),
            body(8966, Some(2))
        );
        assert_eq!(
            parse(r#"{"port": 1e3, "size": null}"#).unwrap(),
            body(1000, None)
        );
        for bad in [
            r#"{"port": 80.5}"#,
            r#"{"port": -1}"#,
            r#"{"port": -1.0}"#,
            r#"{"port": 65536}"#,
            r#"{"port": 65536.0}"#,
            r#"{"port": 1e300}"#,
            r#"{"port": "80"}"#,
            r#"{"port": 80, "size": 4294967296.0}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad} was taken");
        }
    }
}
