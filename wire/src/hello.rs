//! The hello each side sends as its first frame (a `CONTROL` message on
//! stream 0), and the protocol-version negotiation it carries.
//!
//! Both sides send their hello at once, without waiting for the other's, and
//! both pick the same version: the highest one in both ranges. Without one
//! the session ends with [`HelloError::NoCommonVersion`] on both sides.
//! Unknown fields are ignored, so that later versions can add some.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::PROTOCOL_VERSION;

/// The longest `software` string and feature name, in bytes.
pub const MAX_NAME_LEN: usize = 256;
/// The most features a hello may list.
pub const MAX_FEATURES: usize = 64;

/// A side's introduction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "hello", rename_all = "camelCase")]
pub struct Hello {
    /// The protocol versions this side speaks.
    pub versions: Versions,
    /// Name and version of the software, for logs (`"boxd 0.1.0"`).
    pub software: String,
    /// Capabilities beyond the negotiated version's baseline.
    #[serde(default)]
    pub features: Vec<String>,
}

/// An inclusive range of protocol versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versions {
    pub min: u32,
    pub max: u32,
}

/// Why a hello was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    #[error("the peer's hello is not valid: {0}")]
    Malformed(String),
    #[error("invalid hello: {0}")]
    Invalid(&'static str),
    #[error(
        "no common protocol version: this side speaks {ours}, the peer ({software}) speaks {theirs}"
    )]
    NoCommonVersion {
        ours: Versions,
        theirs: Versions,
        software: String,
    },
}

impl Hello {
    /// A hello speaking versions 1 to [`PROTOCOL_VERSION`], without features.
    pub fn new(software: impl Into<String>) -> Self {
        Self {
            versions: Versions {
                min: 1,
                max: PROTOCOL_VERSION,
            },
            software: software.into(),
            features: Vec::new(),
        }
    }

    /// The same hello listing `features`.
    pub fn with_features<I, S>(mut self, features: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.features = features.into_iter().map(Into::into).collect();
        self
    }

    /// Whether the hello lists `feature`.
    pub fn has_feature(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }

    /// Refuses a hello outside the limits (both for sending and receiving).
    pub fn validate(&self) -> Result<(), HelloError> {
        if self.versions.min == 0 || self.versions.min > self.versions.max {
            return Err(HelloError::Invalid(
                "the version range is empty or starts at 0",
            ));
        }
        if self.software.len() > MAX_NAME_LEN {
            return Err(HelloError::Invalid("software name longer than 256 bytes"));
        }
        if self.features.len() > MAX_FEATURES
            || self.features.iter().any(|f| f.len() > MAX_NAME_LEN)
        {
            return Err(HelloError::Invalid(
                "more than 64 features, or one longer than 256 bytes",
            ));
        }
        Ok(())
    }

    /// Parses and validates the peer's hello.
    pub fn from_json(payload: &[u8]) -> Result<Self, HelloError> {
        let hello: Self =
            serde_json::from_slice(payload).map_err(|e| HelloError::Malformed(e.to_string()))?;
        hello.validate()?;
        Ok(hello)
    }
}

impl fmt::Display for Versions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "version {}", self.min)
        } else {
            write!(f, "versions {}..={}", self.min, self.max)
        }
    }
}

/// The version both sides use: the highest one in both hellos' ranges.
pub fn negotiate(ours: &Hello, theirs: &Hello) -> Result<u32, HelloError> {
    let low = ours.versions.min.max(theirs.versions.min);
    let high = ours.versions.max.min(theirs.versions.max);
    if low <= high {
        Ok(high)
    } else {
        Err(HelloError::NoCommonVersion {
            ours: ours.versions,
            theirs: theirs.versions,
            software: theirs.software.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn speaking(min: u32, max: u32) -> Hello {
        Hello {
            versions: Versions { min, max },
            ..Hello::new("test")
        }
    }

    #[test]
    fn the_highest_common_version_wins_on_both_sides() {
        assert_eq!(negotiate(&speaking(1, 3), &speaking(2, 5)), Ok(3));
        assert_eq!(negotiate(&speaking(2, 5), &speaking(1, 3)), Ok(3));
        assert_eq!(negotiate(&speaking(1, 1), &speaking(1, 1)), Ok(1));
    }

    #[test]
    fn disjoint_ranges_fail_clearly() {
        let err = negotiate(&speaking(1, 2), &speaking(3, 4)).unwrap_err();
        assert!(matches!(err, HelloError::NoCommonVersion { .. }));
        assert_eq!(
            err.to_string(),
            "no common protocol version: this side speaks versions 1..=2, the peer (test) speaks versions 3..=4"
        );
    }

    #[test]
    fn json_has_a_type_and_tolerates_new_fields() {
        let hello = Hello::new("boxd 0.1.0").with_features(["exec"]);
        let json = serde_json::to_value(&hello).unwrap();
        assert_eq!(json["type"], "hello");
        assert_eq!(json["versions"]["max"], PROTOCOL_VERSION);
        let extended =
            br#"{"type":"hello","versions":{"min":1,"max":9},"software":"x","features":[],"bootId":"b"}"#;
        assert_eq!(Hello::from_json(extended).unwrap().versions.max, 9);
        assert!(Hello::from_json(br#"{"type":"exec"}"#).is_err());
        assert!(
            Hello::from_json(br#"{"type":"hello","versions":{"min":2,"max":1},"software":""}"#)
                .is_err()
        );
        assert!(Hello::from_json(b"not json").is_err());
    }
}
