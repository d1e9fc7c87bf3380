//! The values a task definition's `secrets` refer to, read the way ECS reads
//! them when it starts a task: an SSM parameter (by name or ARN, a
//! SecureString decrypted) or a Secrets Manager secret, whole or one JSON key
//! of it, at a version stage or version id
//! (`arn:aws:secretsmanager:<region>:<account>:secret:<name>:<json-key>:<version-stage>:<version-id>`,
//! empty fields meaning the default). A parameter or secret in another
//! region is read in that region. Each parameter and secret version is read
//! once however many variables use it.
//!
//! SSM's `GetParameters` takes names and ARNs alike; an emulator that takes
//! only names is asked again for the ARNs it called invalid, by the name the
//! ARN carries.

use super::{AwsError, Session, refused};
use std::collections::HashMap;

/// What a `valueFrom` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ref {
    /// An SSM parameter: `id` as written (a name or an ARN), in `region`
    /// (the service's own unless the ARN says another).
    Parameter { region: Option<String>, id: String },
    /// A Secrets Manager secret (`arn` without the trailing fields).
    Secret {
        region: Option<String>,
        arn: String,
        json_key: Option<String>,
        stage: Option<String>,
        version_id: Option<String>,
    },
}

/// Why a `secrets` entry could not be read (besides AWS refusing).
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// What AWS answered does not give the value (no such parameter, no such
    /// JSON key, a binary secret).
    #[error("{0}")]
    Unusable(String),
}

impl Ref {
    /// Reads `valueFrom`: an ARN of SSM or Secrets Manager, or else an SSM
    /// parameter name.
    pub fn parse(value_from: &str) -> Result<Self, String> {
        let fields: Vec<&str> = value_from.split(':').collect();
        if fields.first() != Some(&"arn") {
            if value_from.is_empty() {
                return Err("an empty valueFrom".to_owned());
            }
            return Ok(Self::Parameter {
                region: None,
                id: value_from.to_owned(),
            });
        }
        let region = fields
            .get(3)
            .filter(|r| !r.is_empty())
            .map(|r| (*r).to_owned());
        match (fields.get(2), fields.get(5)) {
            (Some(&"ssm"), Some(resource)) if resource.starts_with("parameter") => {
                Ok(Self::Parameter {
                    region,
                    id: value_from.to_owned(),
                })
            }
            (Some(&"secretsmanager"), Some(&"secret")) if fields.len() >= 7 => {
                let field = |i: usize| {
                    fields
                        .get(i)
                        .filter(|f| !f.is_empty())
                        .map(|f| (*f).to_owned())
                };
                if fields.len() > 10 {
                    return Err(format!(
                        "{value_from:?} has more fields than <secret ARN>:<json-key>:<version-stage>:<version-id>"
                    ));
                }
                Ok(Self::Secret {
                    region,
                    arn: fields[..7].join(":"),
                    json_key: field(7),
                    stage: field(8),
                    version_id: field(9),
                })
            }
            _ => Err(format!(
                "{value_from:?} is neither an SSM parameter nor a Secrets Manager secret ARN"
            )),
        }
    }
}

/// The name an SSM parameter ARN carries: `parameter/app/db` is `/app/db`,
/// `parameter/db` is `db`.
fn parameter_name(arn: &str) -> Option<String> {
    let resource = arn.splitn(6, ':').nth(5)?;
    let path = resource.strip_prefix("parameter/")?;
    Some(if path.contains('/') {
        format!("/{path}")
    } else {
        path.to_owned()
    })
}

/// A secret's version: region, ARN, version stage and version id.
type SecretVersion = (Option<String>, String, Option<String>, Option<String>);

/// Reads every reference, `(variable, Ref)`, in order: the variables with
/// their values, or the first that could not be read (saying which variable
/// and what it refers to).
pub async fn resolve(
    session: &Session,
    refs: &[(String, Ref)],
) -> Result<Vec<(String, String)>, ValueError> {
    let parameters = read_parameters(session, refs).await?;
    let mut secrets: HashMap<SecretVersion, String> = HashMap::new();
    let mut out = Vec::with_capacity(refs.len());
    for (variable, r) in refs {
        let value = match r {
            Ref::Parameter { id, .. } => parameters.get(id).cloned().ok_or_else(|| {
                ValueError::Unusable(format!(
                    "{variable} refers to the SSM parameter {id}, which does not exist (or the role cannot see it)"
                ))
            })?,
            Ref::Secret {
                region,
                arn,
                json_key,
                stage,
                version_id,
            } => {
                let key = (region.clone(), arn.clone(), stage.clone(), version_id.clone());
                if !secrets.contains_key(&key) {
                    let text = read_secret(session, variable, r).await?;
                    secrets.insert(key.clone(), text);
                }
                let text = secrets.get(&key).map(String::as_str).unwrap_or_default();
                match json_key {
                    None => text.to_owned(),
                    Some(json_key) => json_field(text, json_key).ok_or_else(|| {
                        ValueError::Unusable(format!(
                            "{variable} refers to the key {json_key:?} of the secret {arn}, which is not a JSON object with that key"
                        ))
                    })?,
                }
            }
        };
        out.push((variable.clone(), value));
    }
    Ok(out)
}

/// One key of a JSON object: a string as is, anything else as its JSON text
/// (what ECS passes).
fn json_field(text: &str, key: &str) -> Option<String> {
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text).ok()?;
    Some(match object.get(key)? {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// Every SSM parameter the references name, by the id they name it with
/// (decrypted), ten at a time per region.
async fn read_parameters(
    session: &Session,
    refs: &[(String, Ref)],
) -> Result<HashMap<String, String>, AwsError> {
    const ACTION: &str = "ssm:GetParameters";
    let mut by_region: HashMap<String, Vec<String>> = HashMap::new();
    for (_, r) in refs {
        if let Ref::Parameter { region, id } = r {
            let region = region
                .clone()
                .unwrap_or_else(|| session.region().to_owned());
            let ids = by_region.entry(region).or_default();
            if !ids.contains(id) {
                ids.push(id.clone());
            }
        }
    }
    let mut found = HashMap::new();
    for (region, ids) in by_region {
        let ssm = aws_sdk_ssm::Client::new(&session.in_region(&region));
        let get = |names: Vec<String>| {
            ssm.get_parameters()
                .set_names(Some(names))
                .with_decryption(true)
                .send()
        };
        for chunk in ids.chunks(10) {
            let answer = get(chunk.to_vec()).await.map_err(|e| refused(ACTION, e))?;
            for p in answer.parameters() {
                let value = p.value().unwrap_or_default().to_owned();
                for id in chunk {
                    if Some(id.as_str()) == p.name() || Some(id.as_str()) == p.arn() {
                        found.insert(id.clone(), value.clone());
                    }
                }
            }
            // ARNs an emulator did not take, asked again by name.
            let retry: Vec<(String, String)> = answer
                .invalid_parameters()
                .iter()
                .filter_map(|id| Some((id.clone(), parameter_name(id)?)))
                .collect();
            if retry.is_empty() {
                continue;
            }
            let names = retry.iter().map(|(_, n)| n.clone()).collect();
            let again = get(names).await.map_err(|e| refused(ACTION, e))?;
            for p in again.parameters() {
                for (id, name) in &retry {
                    if Some(name.as_str()) == p.name() {
                        found.insert(id.clone(), p.value().unwrap_or_default().to_owned());
                    }
                }
            }
        }
    }
    Ok(found)
}

/// A Secrets Manager secret's text at the version the reference names.
async fn read_secret(session: &Session, variable: &str, r: &Ref) -> Result<String, ValueError> {
    let Ref::Secret {
        region,
        arn,
        stage,
        version_id,
        ..
    } = r
    else {
        return Err(ValueError::Unusable(format!("{variable} is not a secret")));
    };
    let region = region.as_deref().unwrap_or(session.region());
    let answer = aws_sdk_secretsmanager::Client::new(&session.in_region(region))
        .get_secret_value()
        .secret_id(arn)
        .set_version_stage(stage.clone())
        .set_version_id(version_id.clone())
        .send()
        .await
        .map_err(|e| refused("secretsmanager:GetSecretValue", e))?;
    answer.secret_string().map(str::to_owned).ok_or_else(|| {
        ValueError::Unusable(format!(
            "{variable} refers to the secret {arn}, which holds binary data: ECS passes only text secrets"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_froms_name_parameters_and_secrets_with_their_fields() {
        assert_eq!(
            Ref::parse("/app/db_pass"),
            Ok(Ref::Parameter {
                region: None,
                id: "/app/db_pass".into()
            })
        );
        let arn = "arn:aws:ssm:eu-west-1:123456789012:parameter/app/db_pass";
        assert_eq!(
            Ref::parse(arn),
            Ok(Ref::Parameter {
                region: Some("eu-west-1".into()),
                id: arn.into()
            })
        );
        let secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:app/creds-XoSxEy";
        assert_eq!(
            Ref::parse(secret),
            Ok(Ref::Secret {
                region: Some("us-east-1".into()),
                arn: secret.into(),
                json_key: None,
                stage: None,
                version_id: None
            })
        );
        assert_eq!(
            Ref::parse(&format!("{secret}:password::")),
            Ok(Ref::Secret {
                region: Some("us-east-1".into()),
                arn: secret.into(),
                json_key: Some("password".into()),
                stage: None,
                version_id: None
            })
        );
        assert_eq!(
            Ref::parse(&format!("{secret}:password:AWSPREVIOUS:0f1e")),
            Ok(Ref::Secret {
                region: Some("us-east-1".into()),
                arn: secret.into(),
                json_key: Some("password".into()),
                stage: Some("AWSPREVIOUS".into()),
                version_id: Some("0f1e".into())
            })
        );
        assert!(Ref::parse("arn:aws:s3:::bucket/key").is_err());
        assert!(Ref::parse(&format!("{secret}:a:b:c:d")).is_err());
        assert!(Ref::parse("").is_err());
    }

    #[test]
    fn parameter_arns_carry_their_names() {
        assert_eq!(
            parameter_name("arn:aws:ssm:us-east-1:123456789012:parameter/app/db").as_deref(),
            Some("/app/db")
        );
        assert_eq!(
            parameter_name("arn:aws:ssm:us-east-1:123456789012:parameter/db").as_deref(),
            Some("db")
        );
        assert_eq!(parameter_name("/app/db"), None);
    }

    #[test]
    fn json_keys_give_strings_as_is_and_other_values_as_json() {
        let text = r#"{"user": "admin", "port": 5432, "tls": {"on": true}}"#;
        assert_eq!(json_field(text, "user").as_deref(), Some("admin"));
        assert_eq!(json_field(text, "port").as_deref(), Some("5432"));
        assert_eq!(json_field(text, "tls").as_deref(), Some(r#"{"on":true}"#));
        assert_eq!(json_field(text, "nope"), None);
        assert_eq!(json_field("not json", "user"), None);
    }
}
