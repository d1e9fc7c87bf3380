//! Typed identifiers with their prefixed string forms (`acct_…`, `key_…`, `srv_…`),
//! stored as text columns and read back typed (diesel `ToSql`/`FromSql`), read
//! from outside through their `parse` (`FromStr`, and `Deserialize`, so a request
//! body or a route's path can carry one typed), and the random secrets psbx hands
//! out (API keys).

use std::fmt;

/// Letters of generated ids and secrets: lower-case letters and digits, easy to
/// read aloud and safe in URLs, file names and shell lines.
const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// `len` random characters of [`ALPHABET`], from the operating system's generator.
pub fn random_token(len: usize) -> Result<String, getrandom::Error> {
    // 252 is the largest multiple of 36 below 256: rejecting larger bytes keeps the
    // characters uniform.
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 64];
    while out.len() < len {
        getrandom::fill(&mut buf)?;
        for b in buf.iter().filter(|b| **b < 252) {
            if out.len() == len {
                break;
            }
            out.push(char::from(ALPHABET[usize::from(*b % 36)]));
        }
    }
    Ok(out)
}

/// Why a string is not an id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not a valid {kind} id: it must look like {prefix}… (letters and digits)")]
pub struct BadId {
    pub kind: &'static str,
    pub prefix: &'static str,
    pub given: String,
}

macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize,
            diesel::AsExpression, diesel::FromSqlRow,
        )]
        #[serde(transparent)]
        #[diesel(sql_type = diesel::sql_types::Text)]
        pub struct $name(String);

        impl $name {
            /// The prefix of this kind of id, underscore included.
            pub const PREFIX: &'static str = $prefix;

            /// A fresh random id.
            pub fn generate() -> Result<Self, getrandom::Error> {
                Ok(Self(format!("{}{}", $prefix, random_token(20)?)))
            }

            /// Checks the prefix and the characters of an id received from outside.
            pub fn parse(s: &str) -> Result<Self, BadId> {
                let ok = s.strip_prefix($prefix).is_some_and(|rest| {
                    !rest.is_empty()
                        && rest.len() <= 64
                        && rest.bytes().all(|b| b.is_ascii_alphanumeric())
                });
                if ok {
                    Ok(Self(s.to_owned()))
                } else {
                    Err(BadId { kind: $kind, prefix: $prefix, given: s.to_owned() })
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        // Stored as text; the database only ever holds ids this type generated.
        impl diesel::serialize::ToSql<diesel::sql_types::Text, diesel::pg::Pg> for $name {
            fn to_sql<'b>(
                &'b self,
                out: &mut diesel::serialize::Output<'b, '_, diesel::pg::Pg>,
            ) -> diesel::serialize::Result {
                <str as diesel::serialize::ToSql<diesel::sql_types::Text, diesel::pg::Pg>>::to_sql(
                    &self.0, out,
                )
            }
        }

        impl diesel::deserialize::FromSql<diesel::sql_types::Text, diesel::pg::Pg> for $name {
            fn from_sql(
                bytes: diesel::pg::PgValue<'_>,
            ) -> diesel::deserialize::Result<Self> {
                <String as diesel::deserialize::FromSql<
                    diesel::sql_types::Text,
                    diesel::pg::Pg,
                >>::from_sql(bytes)
                .map(Self)
            }
        }

        // Read through `parse`, so a value from outside (a request body, a
        // route's path) is checked as any other id received.
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::parse(&s).map_err(serde::de::Error::custom)
            }
        }

        impl std::str::FromStr for $name {
            type Err = BadId;
            fn from_str(s: &str) -> Result<Self, BadId> {
                Self::parse(s)
            }
        }
    };
}

prefixed_id!(
    /// An account: the owner of keys, boxes, environments and secrets.
    AccountId, "acct_", "account"
);
prefixed_id!(
    /// An API key (its id, never its secret).
    ApiKeyId, "key_", "API key"
);
prefixed_id!(
    /// A box; its libvirt domain is `psbx-<id>`.
    BoxId, "box_", "box"
);
prefixed_id!(
    /// An environment (addressed by its name in the API).
    EnvironmentId, "env_", "environment"
);
prefixed_id!(
    /// A connection of an environment: one network, one connector token.
    ConnectionId, "conn_", "connection"
);
prefixed_id!(
    /// One running replica of the psbx server.
    ServerId, "srv_", "server"
);
prefixed_id!(
    /// A screenshot or recording of a box, or an image a reviewer annotated.
    ShotId, "shot_", "shot"
);
prefixed_id!(
    /// A review: a box handed to a person ("Ready for you").
    ReviewId, "rev_", "review"
);
prefixed_id!(
    /// One item of a review's feedback (text, maybe an annotated image).
    FeedbackId, "fb_", "feedback item"
);
prefixed_id!(
    /// An OAuth client registered with this server (`POST /oauth/register`);
    /// a client known by its metadata document is named by its URL instead.
    OAuthClientId, "client_", "OAuth client"
);
prefixed_id!(
    /// A takeover terminal open on this server (`boxes::terminals`).
    TerminalId, "term_", "terminal"
);

/// The secret of an API key, `psbx_` and 40 random characters (about 206 bits).
/// Shown once when created; only its SHA-256 is stored. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKeySecret(String);

impl ApiKeySecret {
    pub const PREFIX: &'static str = "psbx_";

    pub fn generate() -> Result<Self, getrandom::Error> {
        Ok(Self(format!("{}{}", Self::PREFIX, random_token(40)?)))
    }

    /// The key as the user must send it (`Authorization: Bearer <this>`).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// The token a connector authenticates with:
/// `psbx_conn_<issuer>.<40 random characters>`, where `<issuer>` is the
/// server's public URL in unpadded base64url, so that a connector given only
/// the token knows where to connect (its `PSBX_URL` defaults to it). Shown
/// when created or rotated; only its SHA-256 is stored.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectorToken(String);

impl ConnectorToken {
    pub const PREFIX: &'static str = "psbx_conn_";

    pub fn generate(issuer: &str) -> Result<Self, getrandom::Error> {
        use base64::Engine as _;
        let issuer = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(issuer);
        Ok(Self(format!(
            "{}{issuer}.{}",
            Self::PREFIX,
            random_token(40)?
        )))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ConnectorToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConnectorToken(****)")
    }
}

impl fmt::Debug for ApiKeySecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKeySecret(****)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_parse_back() {
        let id = ApiKeyId::generate().unwrap();
        assert!(id.as_str().starts_with("key_"));
        assert_eq!(id.as_str().len(), 24);
        assert_eq!(ApiKeyId::parse(id.as_str()).unwrap(), id);
    }

    #[test]
    fn foreign_or_malformed_ids_are_refused() {
        for bad in ["", "key_", "acct_abc", "key_a/b", "key_ä", "KEY_abc"] {
            let err = ApiKeyId::parse(bad).unwrap_err();
            assert_eq!(err.prefix, "key_", "{bad}");
        }
        assert!(AccountId::parse("acct_abc123").is_ok());
    }

    #[test]
    fn ids_deserialize_through_their_parse() {
        let id: BoxId = serde_json::from_str("\"box_abc123\"").unwrap();
        assert_eq!(id.as_str(), "box_abc123");
        let err = serde_json::from_str::<BoxId>("\"shot_abc\"").unwrap_err();
        assert!(err.to_string().contains("not a valid box id"), "{err}");
    }

    #[test]
    fn secrets_are_long_random_and_hidden_from_debug() {
        let a = ApiKeySecret::generate().unwrap();
        let b = ApiKeySecret::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 45);
        assert!(a.expose().starts_with("psbx_"));
        assert!(!format!("{a:?}").contains(&a.expose()[5..]));
    }

    #[test]
    fn random_tokens_use_the_whole_alphabet() {
        let t = random_token(5000).unwrap();
        for c in ALPHABET {
            assert!(t.as_bytes().contains(c), "{} never drawn", char::from(*c));
        }
    }
}
