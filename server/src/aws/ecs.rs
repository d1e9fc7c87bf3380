//! ECS, read with the account's role: the services it can see, and one
//! service's current settings (environments.txt, "Import service settings
//! from AWS"). A service's settings are those of one container of the task
//! definition the service runs now (`DescribeServices`, then
//! `DescribeTaskDefinition`): its `environment` as is, then its `secrets`
//! resolved (`values`); its S3 `environmentFiles` cannot be read and are
//! listed as skipped. With several containers the one asked for is read,
//! else the one named like the service, else the first essential one.

use super::values::{self, Ref, ValueError};
use super::{AwsError, Session, refused};
use aws_sdk_ecs::types::ContainerDefinition;
use psbx_actors::environments::service_settings::Skipped;

/// At most this many services are listed.
pub const MAX_LISTED: usize = 1000;

/// A service the role can see.
#[derive(Debug, Clone)]
pub struct EcsService {
    pub cluster: String,
    pub service: String,
    pub service_arn: String,
    /// The task definition it runs now.
    pub task_definition: Option<String>,
    /// `ACTIVE`, `DRAINING` or `INACTIVE`.
    pub status: Option<String>,
}

/// Why one service's settings could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// No such cluster or service in the region.
    #[error("{0}")]
    NotFound(String),
    /// The task definition does not give the settings (no such container,
    /// a secret that cannot be read as ECS would).
    #[error("{0}")]
    Unusable(String),
}

impl From<ValueError> for ReadError {
    fn from(e: ValueError) -> Self {
        match e {
            ValueError::Aws(e) => Self::Aws(e),
            ValueError::Unusable(message) => Self::Unusable(message),
        }
    }
}

/// One container's settings, as a task would get them.
#[derive(Debug, Clone)]
pub struct TaskSettings {
    /// The task definition's ARN (with its revision).
    pub task_definition: String,
    /// The container read.
    pub container: String,
    /// Every container of the task definition.
    pub containers: Vec<String>,
    /// The variables, in the task definition's order (`environment`, then
    /// `secrets`); a name given twice keeps its last value.
    pub vars: Vec<(String, String)>,
    pub skipped: Vec<Skipped>,
}

/// The last path segment of an ARN (`…:cluster/prod` is `prod`).
fn last_segment(arn: &str) -> &str {
    arn.rsplit('/').next().unwrap_or(arn)
}

impl Session {
    /// The services of every cluster in the session's region, at most
    /// [`MAX_LISTED`]; true when there were more.
    pub async fn ecs_services(&self) -> Result<(Vec<EcsService>, bool), AwsError> {
        let ecs = aws_sdk_ecs::Client::new(&self.config);
        let clusters = ecs
            .list_clusters()
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| refused("ecs:ListClusters", e))?;
        let mut services = Vec::new();
        for cluster in clusters {
            let arns = ecs
                .list_services()
                .cluster(&cluster)
                .into_paginator()
                .items()
                .send()
                .try_collect()
                .await
                .map_err(|e| refused("ecs:ListServices", e))?;
            for chunk in arns.chunks(10) {
                let page = ecs
                    .describe_services()
                    .cluster(&cluster)
                    .set_services(Some(chunk.to_vec()))
                    .send()
                    .await
                    .map_err(|e| refused("ecs:DescribeServices", e))?;
                for s in page.services() {
                    if services.len() == MAX_LISTED {
                        return Ok((services, true));
                    }
                    let arn = s.service_arn().unwrap_or_default();
                    services.push(EcsService {
                        cluster: last_segment(&cluster).to_owned(),
                        service: s
                            .service_name()
                            .unwrap_or_else(|| last_segment(arn))
                            .to_owned(),
                        service_arn: arn.to_owned(),
                        task_definition: s.task_definition().map(str::to_owned),
                        status: s.status().map(str::to_owned),
                    });
                }
            }
        }
        Ok((services, false))
    }

    /// The settings `service` of `cluster` runs with now, from `container`
    /// (or the one chosen as the module says).
    pub async fn read_service(
        &self,
        cluster: &str,
        service: &str,
        container: Option<&str>,
    ) -> Result<TaskSettings, ReadError> {
        let ecs = aws_sdk_ecs::Client::new(&self.config);
        let region = self.region().to_owned();
        let listed =
            format!("GET /v1/aws/ecs/services?region={region} lists the services the role can see");
        let described = ecs
            .describe_services()
            .cluster(cluster)
            .services(service)
            .send()
            .await
            .map_err(|e| match refused("ecs:DescribeServices", e) {
                AwsError::Refused { code, .. } if code == "ClusterNotFoundException" => {
                    ReadError::NotFound(format!(
                        "there is no ECS cluster {cluster:?} in {region}: {listed}"
                    ))
                }
                other => ReadError::Aws(other),
            })?;
        let running = described
            .services()
            .iter()
            .find(|s| s.service_name() == Some(service) || s.service_arn() == Some(service))
            .filter(|s| s.status() != Some("INACTIVE"));
        let Some(task_definition) = running.and_then(|s| s.task_definition()) else {
            return Err(ReadError::NotFound(format!(
                "there is no ECS service {service:?} in cluster {cluster:?} of {region}: {listed}"
            )));
        };
        let answer = ecs
            .describe_task_definition()
            .task_definition(task_definition)
            .send()
            .await
            .map_err(|e| refused("ecs:DescribeTaskDefinition", e))?;
        let Some(definition) = answer.task_definition() else {
            return Err(ReadError::NotFound(format!(
                "the task definition {task_definition} of service {service:?} was not found"
            )));
        };
        let arn = definition
            .task_definition_arn()
            .unwrap_or(task_definition)
            .to_owned();
        let all = definition.container_definitions();
        let containers: Vec<String> = all
            .iter()
            .map(|c| c.name().unwrap_or_default().to_owned())
            .collect();
        let chosen = choose(all, container, service).ok_or_else(|| {
            ReadError::Unusable(format!(
                "the task definition {arn} has no container {:?}: its containers are {}; give one of them as container",
                container.unwrap_or_default(),
                containers.join(", ")
            ))
        })?;
        let mut vars: Vec<(String, String)> = chosen
            .environment()
            .iter()
            .map(|kv| {
                (
                    kv.name().unwrap_or_default().to_owned(),
                    kv.value().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let refs = chosen
            .secrets()
            .iter()
            .map(|s| {
                Ref::parse(s.value_from())
                    .map(|r| (s.name().to_owned(), r))
                    .map_err(|why| ReadError::Unusable(format!("secret {}: {why}", s.name())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        vars.extend(values::resolve(self, &refs).await?);
        let skipped = chosen
            .environment_files()
            .iter()
            .map(|f| Skipped {
                kind: "environmentFile".to_owned(),
                source: f.value().to_owned(),
                reason: format!(
                    "psbx does not read environmentFiles ({} files): upload this one as a .env under a second name \
                     (PUT /v1/environments/<env>/services/<name>-files) and give the service both files, that one first, \
                     so the task definition's own values win as they do on ECS",
                    f.r#type().as_str()
                ),
            })
            .collect();
        Ok(TaskSettings {
            task_definition: arn,
            container: chosen.name().unwrap_or_default().to_owned(),
            containers,
            vars: last_wins(vars),
            skipped,
        })
    }
}

/// The container to read: the one asked for; else the only one, the one
/// named like the service, or the first essential one.
fn choose<'a>(
    all: &'a [ContainerDefinition],
    wanted: Option<&str>,
    service: &str,
) -> Option<&'a ContainerDefinition> {
    if let Some(wanted) = wanted {
        return all.iter().find(|c| c.name() == Some(wanted));
    }
    all.iter()
        .find(|c| c.name() == Some(service))
        .or_else(|| all.iter().find(|c| c.essential() != Some(false)))
        .or_else(|| all.first())
}

/// Each name once, at the place and with the value of its last occurrence.
fn last_wins(vars: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(vars.len());
    for (name, value) in vars {
        out.retain(|(n, _)| *n != name);
        out.push((name, value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(name: &str, essential: Option<bool>) -> ContainerDefinition {
        ContainerDefinition::builder()
            .name(name)
            .set_essential(essential)
            .build()
    }

    #[test]
    fn the_container_is_the_one_asked_for_else_the_services_else_the_first_essential() {
        let all = [
            container("log-router", Some(false)),
            container("envoy", Some(true)),
            container("api", Some(true)),
        ];
        let name = |c: Option<&ContainerDefinition>| c.and_then(|c| c.name()).map(str::to_owned);
        assert_eq!(name(choose(&all, None, "api")).as_deref(), Some("api"));
        assert_eq!(name(choose(&all, None, "web")).as_deref(), Some("envoy"));
        assert_eq!(
            name(choose(&all, Some("log-router"), "api")).as_deref(),
            Some("log-router")
        );
        assert_eq!(name(choose(&all, Some("nope"), "api")), None);
        let only = [container("x", Some(false))];
        assert_eq!(name(choose(&only, None, "api")).as_deref(), Some("x"));
    }

    #[test]
    fn a_name_given_twice_keeps_its_last_value() {
        let vars = vec![
            ("A".to_owned(), "1".to_owned()),
            ("B".to_owned(), "2".to_owned()),
            ("A".to_owned(), "3".to_owned()),
        ];
        assert_eq!(
            last_wins(vars),
            vec![
                ("B".to_owned(), "2".to_owned()),
                ("A".to_owned(), "3".to_owned())
            ]
        );
        assert_eq!(last_segment("arn:aws:ecs:us-east-1:1:cluster/prod"), "prod");
    }
}
