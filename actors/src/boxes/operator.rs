//! What an operator does to a box without a server (`psbx boxes stop`).

use crate::box_state::BoxState;
use crate::error::BoxError;
use crate::ids::BoxId;
use crate::settings::BoxSettings;
use crate::store::{BoxRecord, Store};

/// `psbx boxes stop` without a server: removes the box's VM and files through
/// libvirt directly and records it stopped. A server supervising the box
/// notices on its next call.
pub fn stop_directly(
    store: &Store,
    settings: &BoxSettings,
    libvirt_uri: &str,
    id: &str,
) -> Result<BoxRecord, BoxError> {
    let id = BoxId::parse(id).map_err(|e| BoxError::Invalid(e.to_string()))?;
    let record = store
        .box_by_id(&id)?
        .ok_or_else(|| BoxError::NotFound(id.to_string()))?;
    if record.state.is_terminal() {
        return Ok(record);
    }
    let host = psbx_libvirt::Host::connect(libvirt_uri)?;
    crate::machine::teardown(&host, &settings.boxes_dir, &id)?;
    if record.state == BoxState::Pooled {
        store.delete_pooled_box(&id)?;
        return Ok(record);
    }
    let to = if matches!(record.state, BoxState::Running | BoxState::Frozen) {
        BoxState::Stopped
    } else {
        BoxState::Failed
    };
    let detail = crate::store::Transition {
        failure: (to == BoxState::Failed)
            .then(|| "stopped by an operator while starting".to_owned()),
        ..Default::default()
    };
    store
        .transition_box(&id, record.state, to, detail)?
        .ok_or_else(|| BoxError::Internal("the box changed state meanwhile; try again".into()))
}
