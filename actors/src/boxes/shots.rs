//! The `shot` call into a box (placeholder until the in-box service lands).

use super::Boxes;
use crate::error::BoxError;
use crate::ids::AccountId;
use psbx_wire::boxd::{ShotHeader, ShotRequest};

/// A shot as boxd sent it.
pub struct ShotFile {
    pub header: ShotHeader,
    pub file: Vec<u8>,
    pub poster: Option<Vec<u8>>,
}

impl Boxes {
    /// Takes a screenshot or recording in the box.
    pub async fn shot(
        &self,
        account: &AccountId,
        id: &str,
        _request: &ShotRequest,
    ) -> Result<ShotFile, BoxError> {
        let _ = self.channel(account, id).await?;
        Err(BoxError::Invalid("shots are not served yet".into()))
    }
}
