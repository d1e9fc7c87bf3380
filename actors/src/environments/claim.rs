//! What a box started in an environment takes with it, and what is kept of
//! that with the box: the files boxd writes (each service's `.env` and `.sh`),
//! the values to mask in output (secret-looking settings), and a summary
//! stored in the box's spec under `claimed` — names, counts, file paths,
//! addresses per connection, notable settings; never a secret value. The mask
//! values are kept sealed beside it, so a server restart masks what the box
//! actually received. The summary's types (`Claimed` and its parts) are the
//! stored spec's, in `spec.rs`: the store reads them back without this
//! façade.

use super::BoxEnvironment;
use super::service_settings::secret_values;
use crate::secrets::vault::Vault;
use crate::spec::{Claimed, ClaimedService, SealedMask, ServiceFiles};
use psbx_wire::Endpoint;
use psbx_wire::boxd::{BoxAws, ConfigFile};

/// Everything a box start needs from its environment.
pub struct EnvironmentClaim {
    pub summary: Claimed,
    pub files: Vec<ConfigFile>,
    pub mask: Vec<String>,
    /// Every address of every connection, for boxd's entries.
    pub endpoints: Vec<Endpoint>,
    /// The role's variables for boxd, when the environment names a role.
    pub aws: Option<BoxAws>,
}

impl EnvironmentClaim {
    /// The claim of `env`; `authorization` is what requests for the AWS
    /// role's credentials in the box must carry (used when it names a role).
    pub fn new(env: BoxEnvironment, authorization: String) -> Self {
        let aws = env.aws.as_ref().map(|role| BoxAws {
            authorization,
            region: role.region.clone(),
        });
        let mut files = Vec::new();
        let mut mask = Vec::new();
        let mut services = Vec::new();
        for service in &env.services {
            let [(env_path, env_text), (sh_path, sh_text)] = match &aws {
                Some(aws) => service.with_aws(aws).files(),
                None => service.files(),
            };
            files.push(ConfigFile {
                path: env_path.clone(),
                contents: env_text,
            });
            files.push(ConfigFile {
                path: sh_path.clone(),
                contents: sh_text,
            });
            mask.extend(secret_values(&service.vars));
            services.push(ClaimedService {
                name: service.name.clone(),
                keys_count: service.vars.len(),
                files: ServiceFiles {
                    env: env_path,
                    sh: sh_path,
                },
                notable: service.notable(),
            });
        }
        let endpoints = env
            .connections
            .iter()
            .flat_map(|c| &c.addresses)
            .cloned()
            .collect();
        Self {
            endpoints,
            summary: Claimed {
                name: env.name,
                external_base_url: env.external_base_url,
                connections: env.connections,
                services,
                aws: env.aws,
            },
            files,
            mask,
            aws,
        }
    }
}

/// The associated data of a box's sealed mask values.
fn mask_owner(account: &str) -> String {
    format!("{account}\0environment-mask")
}

/// Seals the mask values for the box's spec (`environmentMask`).
pub fn seal_mask(vault: &Vault, account: &str, mask: &[String]) -> Option<SealedMask> {
    let plain = serde_json::to_vec(mask).ok()?;
    let sealed = vault.seal(&mask_owner(account), &plain).ok()?;
    Some(SealedMask {
        nonce: crate::secrets::hex(&sealed.nonce),
        ciphertext: crate::secrets::hex(&sealed.ciphertext),
    })
}

/// The mask values kept in a box's spec, if any (and readable).
pub fn open_mask(vault: &Vault, account: &str, sealed: Option<&SealedMask>) -> Vec<String> {
    let Some((Some(nonce), Some(ciphertext))) = sealed.map(|s| {
        (
            crate::secrets::unhex(&s.nonce),
            crate::secrets::unhex(&s.ciphertext),
        )
    }) else {
        return Vec::new();
    };
    vault
        .open(&mask_owner(account), &nonce, &ciphertext)
        .ok()
        .and_then(|plain| serde_json::from_slice(&plain).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ClaimedAws;

    #[test]
    fn the_mask_survives_a_round_trip_and_only_for_its_account() {
        let vault = Vault::from_key(&[7u8; 32]);
        let sealed = seal_mask(&vault, "acct_a", &["s3cretpass".into()]).unwrap();
        assert_eq!(open_mask(&vault, "acct_a", Some(&sealed)), ["s3cretpass"]);
        assert!(open_mask(&vault, "acct_b", Some(&sealed)).is_empty());
        assert!(open_mask(&vault, "acct_a", None).is_empty());
    }

    #[test]
    fn a_role_adds_its_variables_to_every_settings_file_and_nothing_to_the_mask() {
        let env = BoxEnvironment {
            name: "dev".into(),
            external_base_url: None,
            connections: vec![],
            services: vec![super::super::BoxService {
                name: "api".into(),
                vars: vec![("DB_PASSWORD".into(), "hunter22secret".into())],
            }],
            aws: Some(ClaimedAws {
                role_arn: "arn:aws:iam::123456789012:role/box".into(),
                region: Some("us-east-1".into()),
                environment_id: None,
            }),
        };
        let claim = EnvironmentClaim::new(env, "tok123".into());
        let env_file = &claim.files[0].contents;
        assert_eq!(
            env_file,
            concat!(
                "DB_PASSWORD=hunter22secret\n",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://169.254.170.2/v1/credentials\n",
                "AWS_CONTAINER_AUTHORIZATION_TOKEN=tok123\n",
                "AWS_REGION=us-east-1\n",
                "AWS_DEFAULT_REGION=us-east-1\n",
            )
        );
        assert!(
            claim.files[1]
                .contents
                .contains("export AWS_REGION='us-east-1'\n")
        );
        assert_eq!(claim.mask, ["hunter22secret"]);
        assert_eq!(claim.summary.services[0].keys_count, 1);
        assert_eq!(claim.aws.unwrap().authorization, "tok123");
        assert_eq!(
            claim.summary.aws.unwrap().role_arn,
            "arn:aws:iam::123456789012:role/box"
        );
    }
}
