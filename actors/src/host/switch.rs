//! The switch of the streams a box's boxd opens to the server: each link
//! to boxd ([`Switch::link`]) is made with a handler that routes them by
//! target: `dns:` to the platform's resolvers (`boxnet`), `env:` to the
//! connection of the box's environment (`connectors::Router`), `link:` to a
//! port of another box of the account (`links.rs`), `aws:token` to the
//! signer of the role its environment named (`box_role`). And
//! [`Switch::masker_for`], the mask of a box's output after a restart.
//!
//! It is the host's, not the machine's: it reaches the live actors (a
//! linked box is woken through its actor) and the services above the
//! machine; the BoxActor gets its links from here through the host
//! (`box_actor::Hosting::link`), so it names neither.

use super::links::{LinkBook, Links};
use super::registry::Registry;
use crate::box_role::{Asker, BoxRole};
use crate::boxd_link::{BoxdLink, StreamHandler};
use crate::connectors::Router;
use crate::connectors::route::BoxRoute;
use crate::exec::mask::Masker;
use crate::ids::{AccountId, BoxId};
use crate::machine::Machine;
use crate::spec::BoxSpec;
use crate::store::BoxRecord;
use psbx_wire::boxd::Outbound;
use psbx_wire::frame::code;
use psbx_wire::mux::Incoming;
use std::sync::Arc;

/// What a host's box links need beyond the machine.
pub struct Switch {
    pub machine: Arc<Machine>,
    /// Where boxes' streams to environment addresses go.
    pub router: Router,
    /// Signs the identity tokens of boxes whose environment names an AWS role.
    pub box_role: Option<BoxRole>,
    /// The boxes' links as last stored (`wire` replaces them).
    pub links: Arc<LinkBook>,
    /// The live actors, for links to another box.
    pub registry: Arc<Registry>,
}

impl Switch {
    /// The link to a box's boxd: the DNS queries it forwards go to the
    /// platform's resolvers, its environment streams are routed for the
    /// account that holds it (none while pooled) and the environment its
    /// spec names.
    pub fn link(&self, id: &BoxId, account: Option<&AccountId>, spec: &BoxSpec) -> BoxdLink {
        let environment = account.map(|account| {
            self.router.for_box(BoxRoute {
                box_id: id.clone(),
                account: account.clone(),
                environment: spec.environment.clone(),
            })
        });
        let relay = self.machine.network.as_ref().map(|n| n.relay());
        let links = account.map(|account| {
            Links::new(
                id.clone(),
                account.clone(),
                self.machine.store.clone(),
                self.registry.clone(),
                self.links.clone(),
            )
        });
        let role = match (&self.box_role, account, &spec.environment, &spec.claimed) {
            (Some(signer), Some(account), Some(environment), Some(claimed)) => {
                claimed.aws.clone().map(|role| {
                    let asker = Asker::new(id.clone(), account.clone(), environment.clone(), role);
                    (signer.clone(), Arc::new(asker))
                })
            }
            _ => None,
        };
        let streams: StreamHandler = Arc::new(move |incoming: Incoming| {
            match (Outbound::parse(incoming.target()), &relay, &environment) {
                (Ok(Outbound::Dns(transport)), Some(relay), _) => {
                    let relay = relay.clone();
                    tokio::spawn(async move { relay.serve(incoming, transport).await });
                }
                (Ok(Outbound::Dns(_)), None, _) => incoming.refuse(
                    code::UNAVAILABLE,
                    "this box has no network: psbx answers no names for it",
                ),
                (Ok(Outbound::Env(endpoint)), _, Some(environment)) => {
                    environment.spawn(incoming, endpoint)
                }
                (Ok(Outbound::Env(_)), _, None) => incoming.refuse(
                    code::FORBIDDEN,
                    "this box was not started in an environment",
                ),
                (Ok(Outbound::Link(endpoint)), _, _) => match &links {
                    Some(links) => links.spawn(incoming, endpoint),
                    None => incoming.refuse(code::NOT_FOUND, "a pooled box has no links"),
                },
                (Ok(Outbound::AwsToken), _, _) => match &role {
                    Some((signer, asker)) => {
                        let (signer, asker) = (signer.clone(), asker.clone());
                        tokio::spawn(async move { signer.serve(incoming, &asker).await });
                    }
                    None => incoming.refuse(
                        code::NOT_FOUND,
                        "this box's environment named no AWS role when the box started",
                    ),
                },
                (Err(e), _, _) => incoming.refuse(code::BAD_REQUEST, &e.to_string()),
            }
        });
        let socket = self.machine.socket(id);
        let dial = self.machine.host.channel(&socket);
        BoxdLink::over(socket, dial, Some(streams))
    }

    /// [`Switch::link`] for a box as stored.
    pub fn link_of(&self, record: &BoxRecord) -> BoxdLink {
        self.link(&record.id, record.account_id.as_ref(), &record.spec)
    }

    /// The mask of a box's output after a server restart: the values sealed
    /// into its spec at the start (what boxd still holds, also of a secret
    /// changed or deleted since), and the current values of the secrets it
    /// names (boxes started before the values were sealed).
    pub async fn masker_for(&self, record: &BoxRecord) -> Arc<Masker> {
        let (secrets, Some(account)) = (&self.machine.secrets, &record.account_id) else {
            return Arc::new(Masker::default());
        };
        let mut values = Vec::new();
        for name in &record.spec.secrets {
            // A secret deleted since the start is simply no longer known here.
            if let Ok(mut v) = secrets.values(account, std::slice::from_ref(name)).await {
                values.append(&mut v);
            }
        }
        let sealed = crate::environments::claim::open_mask(
            &secrets.vault(),
            account.as_str(),
            record.spec.mask.as_ref(),
        );
        Arc::new(Masker::new(
            values
                .iter()
                .map(|(_, v)| v.as_str())
                .chain(sealed.iter().map(String::as_str)),
        ))
    }
}
