//! The boxes' URLs: their keys (derived or stored, rotated), the box a URL
//! names, and the byte pipe to a port in it with the lease that keeps the box
//! awake while its connection has traffic.

use super::{Awake, BoxReading, Boxes, SERVICE, Traffic, over, send};
use crate::blocking::blocking;
use crate::box_actor::{Channel, Lease};
use crate::box_urls::{Admitted, BoxAddress, BoxUrls, Crowded, Found, Slot, Slots, UrlLimits};
use crate::error::BoxError;
use crate::ids::{AccountId, BoxId};
use crate::store::BoxRecord;
use psbx_wire::boxd::Service;
use psbx_wire::mux::Stream;
use std::sync::Arc;

impl Boxes {
    /// Gives the boxes URLs (`url` in their snapshots, and the box URL proxy),
    /// with the stored keys of the boxes that are not over (a blocking read:
    /// at start-up). A failed read is logged: those boxes' URLs answer the
    /// constant 404 until the server restarts or their keys are rotated (a
    /// box whose stored key is unknown here is taken to have none, and its
    /// derived key is refused once the database says it has one).
    pub fn with_urls(mut self, urls: BoxUrls) -> Self {
        match self.store.live_url_keys() {
            Ok(rows) => {
                let unreadable = urls.load(rows);
                if unreadable > 0 {
                    tracing::warn!(
                        boxes = unreadable,
                        "box URL keys the master key cannot open: those boxes' URLs still work \
                         but cannot be shown until their keys are rotated \
                         (POST /v1/boxes/{{id}}/url-key)"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading the boxes' URL keys"),
        }
        self.urls = Some(urls);
        self
    }

    /// Sets the limits of box-URL requests per box and per client.
    pub fn with_url_limits(mut self, limits: UrlLimits) -> Self {
        self.url_slots = Arc::new(Slots::new(limits));
        self
    }

    /// The limits of box-URL requests.
    pub fn url_limits(&self) -> UrlLimits {
        self.url_slots.limits()
    }

    /// A place for one more box-URL request of `client` to box `id`, unless
    /// the box or the client has as many open as allowed.
    pub fn url_slot(&self, id: &BoxId, client: std::net::IpAddr) -> Result<Slot, Crowded> {
        self.url_slots.take(id, client)
    }

    /// Gives box `id` a new random URL key (stored hashed and sealed, then
    /// taken by this server); its former key stops working.
    pub(super) async fn new_url_key(&self, id: &BoxId) -> Result<(), BoxError> {
        let Some(urls) = &self.urls else {
            return Ok(());
        };
        let new = urls.new_key(id).map_err(BoxError::Internal)?;
        let (store, box_id, stored) = (self.store.clone(), id.clone(), new.stored.clone());
        blocking(move || store.set_url_key(&box_id, &stored)).await?;
        urls.remember(id, &new.key);
        self.url_boxes.drop_box(id);
        Ok(())
    }

    /// Rotates the URL key of the account's live box: its URLs change, and
    /// the old ones answer the constant 404 (requests open now go on to
    /// their end). Answers the box with its new URLs.
    pub async fn rotate_url_key(
        &self,
        account: &AccountId,
        id: &BoxId,
    ) -> Result<BoxReading, BoxError> {
        if self.urls.is_none() {
            return Err(BoxError::NoHost(
                "this server gives boxes no URLs".to_owned(),
            ));
        }
        let record = match self.actor(account, id).await? {
            Err(record) => return Err(over(&record)),
            Ok(_) => self.record(account, id).await?,
        };
        self.new_url_key(&record.id).await?;
        self.get(account, id, false).await
    }

    pub fn urls(&self) -> Option<&BoxUrls> {
        self.urls.as_ref()
    }

    /// The live box a box URL names, if its key is right (checked first,
    /// without reading anything) and the box is neither over nor pooled.
    /// A box found is remembered for [`URL_BOXES_FOR`]: a box stopped
    /// meanwhile is refused by its actor ([`Boxes::open_port`]).
    pub async fn for_url(&self, address: &BoxAddress) -> Result<Option<BoxRecord>, BoxError> {
        let Some(urls) = &self.urls else {
            return Ok(None);
        };
        let admitted = urls.check(address);
        if admitted == Admitted::No {
            return Ok(None);
        }
        let found = match self.url_boxes.get(&address.id) {
            Some(found) => found,
            None => {
                let (store, id) = (self.store.clone(), address.id.clone());
                let (record, stored_key) = blocking(move || {
                    let record = store.box_by_id(&id)?;
                    let stored = store.url_key(&id)?.is_some();
                    Ok::<_, BoxError>((record, stored))
                })
                .await?;
                let Some(record) =
                    record.filter(|r| r.account_id.is_some() && !r.state.is_terminal())
                else {
                    urls.forget(&address.id);
                    return Ok(None);
                };
                let found = Found { record, stored_key };
                self.url_boxes.put(found.clone());
                found
            }
        };
        // A derived key is the box's only while it has no stored one.
        if admitted == Admitted::Derived && found.stored_key {
            return Ok(None);
        }
        Ok(Some(found.record))
    }

    /// A byte pipe to `port` on the loopback of a box [`Boxes::for_url`]
    /// found, thawing it first (this counts as activity), and a guard that
    /// keeps the box awake while its connection has traffic ([`Traffic`])
    /// and holds the request's `slot`. boxd refuses with 502 when nothing
    /// listens there. The box's actor says whether it is still live.
    pub async fn open_port(
        &self,
        record: &BoxRecord,
        port: u16,
        slot: Slot,
    ) -> Result<(Stream, Awake), BoxError> {
        let gone = || BoxError::NotFound(record.id.to_string());
        let addr = self.host()?.registry.actor(&record.id).ok_or_else(gone)?;
        let (link, _) = send(
            addr.send(Channel {
                thaw: true,
                touch: true,
            })
            .await,
        )??;
        let stream = link.open(Service::Port(port), SERVICE).await?;
        let traffic = Traffic::default();
        Ok((
            stream,
            Awake {
                _lease: Lease::take(addr, Some(traffic.clone())),
                traffic: Some(traffic),
                _slot: Some(slot),
            },
        ))
    }
}
