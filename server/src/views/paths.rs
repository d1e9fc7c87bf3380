//! The ids in the routes' paths, as the OpenAPI document lists them: one
//! shape per path, for every route's `params(...)`, so each id is described
//! and patterned once. The handlers read them with `ids::IdPath`, which
//! answers an id outside its pattern as one that names nothing (404).

use utoipa::IntoParams;

/// `/boxes/{id}/...`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct BoxPath {
    /// The box's id, `box_...`
    #[param(pattern = "^box_[A-Za-z0-9]{1,64}$")]
    pub id: String,
}

/// `/boxes/{id}/processes/{pid}...`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ProcessPath {
    /// The box's id, `box_...`
    #[param(pattern = "^box_[A-Za-z0-9]{1,64}$")]
    pub id: String,
    /// A background process's id, as `GET /v1/boxes/{id}/processes` lists it
    #[param(maximum = 4294967295.0)]
    pub pid: u32,
}

/// `/boxes/{id}/shots/{shot}...`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ShotPath {
    /// The box's id, `box_...`
    #[param(pattern = "^box_[A-Za-z0-9]{1,64}$")]
    pub id: String,
    /// The shot's id, `shot_...`, one of the box's
    #[param(pattern = "^shot_[A-Za-z0-9]{1,64}$")]
    pub shot: String,
}

/// `/reviews/{id}...`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ReviewPath {
    /// The review's id, `rev_...`
    #[param(pattern = "^rev_[A-Za-z0-9]{1,64}$")]
    pub id: String,
}

/// `/api-keys/{id}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ApiKeyPath {
    /// The key's id, `key_...`
    #[param(pattern = "^key_[A-Za-z0-9]{1,64}$")]
    pub id: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use psbx_actors::ids::{ApiKeyId, BoxId, ReviewId, ShotId};
    use utoipa::openapi::path::ParameterIn;

    /// The pattern `ids.rs`'s `parse` checks: the prefix, then 1 to 64
    /// letters and digits.
    fn id_pattern(prefix: &str) -> String {
        format!("^{prefix}[A-Za-z0-9]{{1,64}}$")
    }

    #[test]
    fn each_pattern_is_the_one_its_id_is_read_with() {
        let params = [
            BoxPath::into_params(|| Some(ParameterIn::Path)),
            ProcessPath::into_params(|| Some(ParameterIn::Path)),
            ShotPath::into_params(|| Some(ParameterIn::Path)),
            ReviewPath::into_params(|| Some(ParameterIn::Path)),
            ApiKeyPath::into_params(|| Some(ParameterIn::Path)),
        ];
        // The prefix of each parameter that is an id (a pid is none).
        let expected = [
            vec![Some(BoxId::PREFIX)],
            vec![Some(BoxId::PREFIX), None],
            vec![Some(BoxId::PREFIX), Some(ShotId::PREFIX)],
            vec![Some(ReviewId::PREFIX)],
            vec![Some(ApiKeyId::PREFIX)],
        ];
        for (params, prefixes) in params.iter().zip(expected) {
            assert_eq!(params.len(), prefixes.len());
            for (param, prefix) in params.iter().zip(prefixes) {
                let param = serde_json::to_value(param).unwrap();
                assert_eq!(param["in"], "path", "{param}");
                assert_eq!(param["required"], true, "{param}");
                let Some(prefix) = prefix else {
                    assert_eq!(param["schema"]["type"], "integer", "{param}");
                    continue;
                };
                assert_eq!(param["schema"]["pattern"], id_pattern(prefix), "{param}");
                assert!(
                    param["description"]
                        .as_str()
                        .is_some_and(|d| d.contains(prefix)),
                    "{param}"
                );
            }
        }
    }
}
