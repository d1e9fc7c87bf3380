//! What an operator does to a box without a server (`psbx boxes stop`).

use crate::box_state::BoxState;
use crate::error::BoxError;
use crate::ids::BoxId;
use crate::settings::BoxSettings;
use crate::store::{BoxRecord, Store};

/// `psbx boxes stop` without a server: removes the box's VM and files through
/// libvirt directly and records it stopped. A server supervising the box
/// notices on its next call. Only on the box's own host (`host_name`, or a
/// host an earlier version recorded by its URI): elsewhere its VM is out of
/// reach, and recording it stopped would leave it running.
pub fn stop_directly(
    store: &Store,
    settings: &BoxSettings,
    (host_name, libvirt_uri): (&str, &str),
    id: &str,
) -> Result<BoxRecord, BoxError> {
    let id = BoxId::parse(id).map_err(|e| BoxError::Invalid(e.to_string()))?;
    let record = store
        .box_by_id(&id)?
        .ok_or_else(|| BoxError::NotFound(id.to_string()))?;
    if record.state.is_terminal() {
        return Ok(record);
    }
    if record.host != host_name && record.host != libvirt_uri {
        return Err(BoxError::Invalid(format!(
            "box {id} runs on host {}, and this is host {host_name}: run `psbx boxes stop` on \
             that host's machine, with its node's configuration",
            record.host
        )));
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
