//! psbx's own CloudFormation templates (`deploy/aws/`), built into the binary
//! and served at `<public url>/aws/templates/<file>` with no credential, and
//! the AWS CLI lines that create a stack from them (issue 31).
//!
//! Why served and not only published to S3: a fresh installation has no
//! bucket, so a user could not create the read-only role at all (the console
//! quick-create link needs an S3 template URL the operator set). The CLI reads
//! a template from a local file, so `createStackCommand` downloads psbx's copy
//! with curl and passes it as `--template-body`, with every parameter psbx
//! knows filled in; `roleArnCommand` waits for the stack and prints its
//! `RoleArn` output, the value `PUT /v1/aws` (or an environment's
//! `awsRoleArn`) takes. Served from the binary, the template always matches
//! the running version.
//!
//! Every value is shell-quoted ([`word`]) and, inside `--parameters`,
//! quoted for the CLI's shorthand syntax too ([`shorthand`]): an IAM name may
//! hold a comma, which would otherwise split the parameter.

use crate::shell::word;
use std::borrow::Cow;

/// The read-only role psbx assumes to import ECS settings.
pub const READONLY_ROLE: &str = include_str!("../../../deploy/aws/readonly-role.yaml");
/// The role of one environment's boxes (OIDC web identity).
pub const BOX_ROLE: &str = include_str!("../../../deploy/aws/box-role.yaml");
/// The connector on ECS/Fargate, as written (see [`connector_ecs`]).
pub const CONNECTOR_ECS: &str = include_str!("../../../deploy/aws/connector-ecs.yaml");

/// The served file names, under `/aws/templates/`.
pub const READONLY_ROLE_FILE: &str = "readonly-role.yaml";
pub const BOX_ROLE_FILE: &str = "box-role.yaml";
pub const CONNECTOR_ECS_FILE: &str = "connector-ecs.yaml";

/// The `Image` default `connector-ecs.yaml` is written with: the default of
/// the `connector_image` setting.
pub const WRITTEN_CONNECTOR_IMAGE: &str = "psbx-connector:latest";

/// The stack `createStackCommand` makes for the read-only role.
pub const READONLY_STACK: &str = "psbx-readonly";

/// The region a command names when psbx knows none (the console's default).
const DEFAULT_REGION: &str = "us-east-1";

/// Where this server serves `file`.
pub fn template_url(public_url: &str, file: &str) -> String {
    format!("{}/aws/templates/{file}", public_url.trim_end_matches('/'))
}

/// `connector-ecs.yaml` with `image` (the server's `connector_image`) as the
/// `Image` parameter's default; as written when `image` is the written one.
pub fn connector_ecs(image: &str) -> Cow<'static, str> {
    let written = format!("Default: {}", json_string(WRITTEN_CONNECTOR_IMAGE));
    if image == WRITTEN_CONNECTOR_IMAGE || !CONNECTOR_ECS.contains(&written) {
        return Cow::Borrowed(CONNECTOR_ECS);
    }
    Cow::Owned(CONNECTOR_ECS.replacen(&written, &format!("Default: {}", json_string(image)), 1))
}

/// A YAML double-quoted scalar (JSON's escapes are YAML's).
fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// What a user runs to create a stack from one of psbx's templates, and to
/// read the role it made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackCommands {
    /// curl the template from psbx, then `aws cloudformation create-stack`.
    pub create: String,
    /// Waits for the stack, then prints its `RoleArn` output.
    pub role_arn: String,
}

/// The commands for stack `stack` from psbx's `file` in `region` (default
/// us-east-1), `params` filled in.
pub fn stack_commands(
    public_url: &str,
    file: &str,
    stack: &str,
    region: Option<&str>,
    params: &[(&str, &str)],
) -> StackCommands {
    let region = word(region.unwrap_or(DEFAULT_REGION));
    let stack = word(stack);
    let local = format!("/tmp/psbx-{file}");
    let parameters: Vec<String> = params
        .iter()
        .map(|(key, value)| {
            word(&format!(
                "ParameterKey={key},ParameterValue={}",
                shorthand(value)
            ))
            .into_owned()
        })
        .collect();
    let create = format!(
        "curl -fsSL {url} -o {local} && \\\n  \
         aws cloudformation create-stack --stack-name {stack} --region {region} \\\n  \
         --template-body {body} \\\n  \
         --capabilities CAPABILITY_NAMED_IAM \\\n  \
         --parameters {parameters}",
        url = word(&template_url(public_url, file)),
        local = word(&local),
        body = word(&format!("file://{local}")),
        parameters = parameters.join(" "),
    );
    let role_arn = format!(
        "aws cloudformation wait stack-create-complete --stack-name {stack} --region {region} && \\\n  \
         aws cloudformation describe-stacks --stack-name {stack} --region {region} \\\n  \
         --query 'Stacks[0].Outputs[?OutputKey==`RoleArn`].OutputValue' --output text"
    );
    StackCommands { create, role_arn }
}

/// The read-only role's commands: trusting `principal` with `external_id`;
/// none while psbx has no principal (a role trusting nothing would be made).
pub fn readonly_role(
    public_url: &str,
    principal: Option<&str>,
    external_id: &str,
    region: Option<&str>,
) -> Option<StackCommands> {
    let principal = principal?;
    Some(stack_commands(
        public_url,
        READONLY_ROLE_FILE,
        READONLY_STACK,
        region,
        &[("TrustedPrincipal", principal), ("ExternalId", external_id)],
    ))
}

/// The stack name of environment `env`'s box role: CloudFormation takes
/// letters, digits and '-' only, so another character becomes '-'.
pub fn box_role_stack(env: &str) -> String {
    let safe: String = env
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("psbx-box-role-{safe}")
}

/// This server as an OIDC issuer, the way IAM names a provider: the public
/// URL without its scheme.
pub fn oidc_provider(public_url: &str) -> &str {
    let url = public_url.trim_end_matches('/');
    url.split_once("://").map_or(url, |(_, rest)| rest)
}

/// The box role's commands for environment `env` (its OIDC `subject`); the
/// stack creates psbx's OIDC provider too (`CreateProvider` "true", to be
/// changed to "false" when the AWS account has it already).
pub fn box_role(public_url: &str, env: &str, subject: &str, region: Option<&str>) -> StackCommands {
    stack_commands(
        public_url,
        BOX_ROLE_FILE,
        &box_role_stack(env),
        region,
        &[
            ("OidcProvider", oidc_provider(public_url)),
            ("Subject", subject),
            ("CreateProvider", "true"),
        ],
    )
}

/// `value` as one value of the AWS CLI's shorthand syntax
/// (`Key=value,Key=value`): as is when it holds nothing the syntax reads,
/// else double-quoted with `"` and `\` escaped.
pub fn shorthand(value: &str) -> Cow<'_, str> {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@+=*".contains(c));
    if plain {
        Cow::Borrowed(value)
    } else {
        let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
        Cow::Owned(format!("\"{escaped}\""))
    }
}

/// The `Parameters` a template declares, in order (the keys indented two
/// spaces under `Parameters:`): what the tests check every command fills.
pub fn declared_parameters(template: &str) -> Vec<&str> {
    template
        .lines()
        .skip_while(|l| l.trim_end() != "Parameters:")
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .filter_map(|l| {
            let key = l.strip_prefix("  ")?;
            (!key.starts_with(' ')).then(|| key.trim_end().strip_suffix(':'))?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUBLIC: &str = "https://psbx.example.com";

    /// The `ParameterKey`s a command fills, in order.
    fn filled(command: &str) -> Vec<&str> {
        command
            .split("ParameterKey=")
            .skip(1)
            .filter_map(|p| p.split(',').next())
            .collect()
    }

    #[test]
    fn the_read_only_role_command_fills_every_parameter_and_reads_the_arn() {
        let c = readonly_role(
            PUBLIC,
            Some("arn:aws:iam::111122223333:role/psbx"),
            "psbx-0123",
            Some("ap-northeast-1"),
        )
        .unwrap();
        assert_eq!(
            c.create,
            "curl -fsSL https://psbx.example.com/aws/templates/readonly-role.yaml -o /tmp/psbx-readonly-role.yaml && \\\n  \
             aws cloudformation create-stack --stack-name psbx-readonly --region ap-northeast-1 \\\n  \
             --template-body file:///tmp/psbx-readonly-role.yaml \\\n  \
             --capabilities CAPABILITY_NAMED_IAM \\\n  \
             --parameters ParameterKey=TrustedPrincipal,ParameterValue=arn:aws:iam::111122223333:role/psbx \
             ParameterKey=ExternalId,ParameterValue=psbx-0123"
        );
        assert_eq!(filled(&c.create), declared_parameters(READONLY_ROLE));
        assert_eq!(
            c.role_arn,
            "aws cloudformation wait stack-create-complete --stack-name psbx-readonly --region ap-northeast-1 && \\\n  \
             aws cloudformation describe-stacks --stack-name psbx-readonly --region ap-northeast-1 \\\n  \
             --query 'Stacks[0].Outputs[?OutputKey==`RoleArn`].OutputValue' --output text"
        );
        // The template's output is the one read.
        assert!(READONLY_ROLE.contains("Outputs:\n  RoleArn:"));
        // No region known: the console's default.
        let c = readonly_role(PUBLIC, Some("arn:aws:iam::1:root"), "x", None).unwrap();
        assert!(c.create.contains("--region us-east-1"), "{}", c.create);
    }

    #[test]
    fn without_a_principal_there_is_no_read_only_role_command() {
        assert_eq!(readonly_role(PUBLIC, None, "psbx-0123", None), None);
    }

    #[test]
    fn the_box_role_command_fills_every_parameter() {
        let c = box_role(
            "https://psbx.example.com/",
            "dev.v2_x",
            "tenant:acct_1:env:dev.v2_x",
            None,
        );
        assert_eq!(filled(&c.create), declared_parameters(BOX_ROLE));
        assert!(
            c.create
                .contains("--stack-name psbx-box-role-dev-v2-x --region us-east-1"),
            "{}",
            c.create
        );
        assert!(
            c.create.contains(
                "ParameterKey=OidcProvider,ParameterValue=psbx.example.com \
                 ParameterKey=Subject,ParameterValue=tenant:acct_1:env:dev.v2_x \
                 ParameterKey=CreateProvider,ParameterValue=true"
            ),
            "{}",
            c.create
        );
        assert!(
            c.create
                .starts_with("curl -fsSL https://psbx.example.com/aws/templates/box-role.yaml "),
            "{}",
            c.create
        );
        assert!(c.role_arn.contains("--stack-name psbx-box-role-dev-v2-x"));
        assert!(BOX_ROLE.contains("Outputs:\n  RoleArn:"));
    }

    #[test]
    fn values_are_quoted_for_the_shell_and_the_shorthand() {
        assert_eq!(
            shorthand("arn:aws:iam::1:role/x+=@"),
            "arn:aws:iam::1:role/x+=@"
        );
        assert_eq!(shorthand("a,b"), "\"a,b\"");
        assert_eq!(shorthand("q\"\\"), "\"q\\\"\\\\\"");
        // A principal whose role name holds a comma (IAM allows it): one
        // shell word, its value one shorthand value.
        let c = readonly_role(
            PUBLIC,
            Some("arn:aws:iam::111122223333:role/a,b"),
            "psbx-0",
            Some("eu-west-1"),
        )
        .unwrap();
        assert!(
            c.create.contains(
                "'ParameterKey=TrustedPrincipal,ParameterValue=\"arn:aws:iam::111122223333:role/a,b\"'"
            ),
            "{}",
            c.create
        );
        // A public URL a shell would read is quoted too.
        let c = box_role("https://h.example/p s", "dev", "s", None);
        assert!(
            c.create
                .starts_with("curl -fsSL 'https://h.example/p s/aws/templates/box-role.yaml' "),
            "{}",
            c.create
        );
    }

    #[test]
    fn the_connector_template_defaults_to_the_configured_image() {
        assert_eq!(
            crate::config::Config::default().connector_image,
            WRITTEN_CONNECTOR_IMAGE,
            "connector-ecs.yaml's Image default is the setting's default"
        );
        assert_eq!(connector_ecs(WRITTEN_CONNECTOR_IMAGE), CONNECTOR_ECS);
        let served = connector_ecs("registry.example.com/psbx/connector:1");
        assert!(
            served.contains("Default: \"registry.example.com/psbx/connector:1\""),
            "{served}"
        );
        assert!(!served.contains(WRITTEN_CONNECTOR_IMAGE), "{served}");
        // Only the default changed.
        assert_eq!(served.lines().count(), CONNECTOR_ECS.lines().count());
    }

    #[test]
    fn the_connector_template_takes_its_token_from_a_secret() {
        let declared = declared_parameters(CONNECTOR_ECS);
        for p in [
            "TokenSecretArn",
            "Image",
            "Subnets",
            "SecurityGroups",
            "Cluster",
            "LogGroup",
        ] {
            assert!(declared.contains(&p), "{p} not in {declared:?}");
        }
        assert!(
            !declared
                .iter()
                .any(|p| *p == "Token" || *p == "ConnectorToken"),
            "{declared:?}"
        );
        assert!(CONNECTOR_ECS.contains("ValueFrom: !Ref TokenSecretArn"));
        assert!(CONNECTOR_ECS.contains("NetworkMode: awsvpc"));
        assert!(CONNECTOR_ECS.contains("Default: 1"));
        assert!(CONNECTOR_ECS.contains("ServiceName:"));
    }
}
