//! Where imported settings came from (`sourceRef`, environments.txt "Import
//! service settings from AWS"): the ECS service and region they were read
//! from, the task definition and container read, every container it has (to
//! choose another), and what could not be read, with the reason (`skipped`:
//! S3 `environmentFiles`). `sync` reads the same service and container
//! again. It holds names and ARNs, never values.

use serde::{Deserialize, Serialize};

/// The ECS service a service's settings were imported from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceRef {
    /// Always `ecs` for now.
    pub kind: String,
    pub region: String,
    /// The cluster's name.
    pub cluster: String,
    /// The ECS service's name.
    pub service: String,
    /// The task definition read (its ARN, with the revision).
    pub task_definition: String,
    /// The container whose settings these are.
    pub container: String,
    /// Every container of that task definition, in its order.
    pub containers: Vec<String>,
    /// What the task definition refers to that could not be read.
    pub skipped: Vec<Skipped>,
}

/// One thing an import could not read, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    /// `environmentFile`.
    pub kind: String,
    /// Where it is, as the task definition names it (`arn:aws:s3:::bucket/app.env`).
    pub source: String,
    pub reason: String,
}

impl SourceRef {
    pub const ECS: &'static str = "ecs";

    /// The stored form (a JSON column).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The stored form read back; `None` for settings that were uploaded.
    pub fn from_value(value: Option<&serde_json::Value>) -> Option<Self> {
        value.and_then(|v| serde_json::from_value(v.clone()).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_ref_reads_back_what_was_stored() {
        let source = SourceRef {
            kind: SourceRef::ECS.into(),
            region: "ap-northeast-1".into(),
            cluster: "prod".into(),
            service: "api".into(),
            task_definition: "arn:aws:ecs:ap-northeast-1:123456789012:task-definition/api:7".into(),
            container: "api".into(),
            containers: vec!["api".into(), "envoy".into()],
            skipped: vec![Skipped {
                kind: "environmentFile".into(),
                source: "arn:aws:s3:::cfg/api.env".into(),
                reason: "S3".into(),
            }],
        };
        let stored = source.to_value();
        assert_eq!(stored["taskDefinition"], source.task_definition.as_str());
        assert_eq!(SourceRef::from_value(Some(&stored)), Some(source));
        assert_eq!(SourceRef::from_value(None), None);
    }
}
