//! What answers need to know about this server beyond the request: its public
//! URL, the connector image operators publish, and where the AWS role
//! template for boxes lives. Built once at start-up from the configuration.

/// Shared by every worker as app data.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    /// How clients reach this server, without a trailing slash.
    pub public_url: String,
    /// This replica (`srv_...`).
    pub server_id: psbx_actors::ids::ServerId,
    /// The connector's container image, as `runCommand` names it.
    pub connector_image: String,
    /// Where the CloudFormation template of the boxes' AWS role is published
    /// (an S3 URL the console can read), if the operator published it.
    pub aws_box_role_template_url: Option<String>,
}

impl ServerInfo {
    /// The `docker run` line that starts a connector with `token`; the
    /// token names this server, so no `PSBX_URL` is needed.
    pub fn connector_run_command(&self, token: &str) -> String {
        format!(
            "docker run -d --name parallelsandbox-connector --restart=always \\\n  \
             -e PSBX_CONNECTOR_TOKEN={token} \\\n  {}",
            self.connector_image
        )
    }

    /// A CloudFormation quick-create link for an environment's box role:
    /// the stack trusts this server as the OIDC issuer for `subject` only.
    pub fn aws_box_role_quick_create_url(
        &self,
        env: &str,
        subject: &str,
        region: Option<&str>,
    ) -> Option<String> {
        let template = self.aws_box_role_template_url.as_deref()?;
        let issuer = crate::aws::templates::oidc_provider(&self.public_url);
        quick_create_url(
            template,
            &crate::aws::templates::box_role_stack(env),
            region,
            &[("OidcProvider", issuer), ("Subject", subject)],
        )
    }
}

/// A CloudFormation console link that creates stack `stack` from `template`
/// in `region` (default us-east-1) with `params` filled in.
pub fn quick_create_url(
    template: &str,
    stack: &str,
    region: Option<&str>,
    params: &[(&str, &str)],
) -> Option<String> {
    let mut console = url::Url::parse("https://console.aws.amazon.com/cloudformation/home").ok()?;
    console
        .query_pairs_mut()
        .append_pair("region", region.unwrap_or("us-east-1"));
    let mut fragment = url::form_urlencoded::Serializer::new(String::new());
    fragment
        .append_pair("templateURL", template)
        .append_pair("stackName", stack);
    for (name, value) in params {
        fragment.append_pair(&format!("param_{name}"), value);
    }
    console.set_fragment(Some(&format!("/stacks/quickcreate?{}", fragment.finish())));
    Some(console.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(template: Option<&str>) -> ServerInfo {
        ServerInfo {
            public_url: "https://psbx.example.com".into(),
            server_id: psbx_actors::ids::ServerId::parse("srv_test").unwrap(),
            connector_image: "registry.example.com/psbx/connector:1".into(),
            aws_box_role_template_url: template.map(str::to_owned),
        }
    }

    #[test]
    fn the_run_command_names_the_token_and_image() {
        let cmd = info(None).connector_run_command("psbx_conn_abc");
        assert!(cmd.starts_with("docker run -d --name parallelsandbox-connector --restart=always"));
        assert!(cmd.contains("-e PSBX_CONNECTOR_TOKEN=psbx_conn_abc"));
        // The token names the server: the spec's command has no PSBX_URL.
        assert!(!cmd.contains("PSBX_URL"));
        assert!(cmd.ends_with("registry.example.com/psbx/connector:1"));
    }

    #[test]
    fn the_quick_create_link_needs_a_published_template() {
        assert_eq!(
            info(None).aws_box_role_quick_create_url("dev", "s", None),
            None
        );
        let link = info(Some("https://b.s3.amazonaws.com/box-role.yaml"))
            .aws_box_role_quick_create_url("dev", "tenant:acct_1:env:dev", Some("ap-northeast-1"))
            .unwrap();
        assert!(link.starts_with("https://console.aws.amazon.com/cloudformation/home?region=ap-northeast-1#/stacks/quickcreate?"));
        assert!(link.contains("stackName=psbx-box-role-dev"));
        assert!(link.contains("param_Subject=tenant%3Aacct_1%3Aenv%3Adev"));
        assert!(link.contains("param_OidcProvider=psbx.example.com"));
    }
}
