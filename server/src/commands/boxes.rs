//! `psbx boxes list|stop` and `psbx hosts list`: operators' views of boxes and
//! libvirt hosts, straight from the database (and libvirt, for a stop).

use crate::config::Config;
use crate::database::{Database, Opener};
use psbx_actors::store::BoxRecord;

#[derive(Debug, clap::Subcommand)]
pub enum BoxesCommand {
    /// List boxes of every account, newest first.
    List {
        /// Include stopped and failed boxes.
        #[arg(long)]
        all: bool,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Stop a box for good (its VM, disk and saved memory are deleted).
    Stop {
        /// The box id, `box_...`.
        id: String,
    },
}

pub(super) fn time(t: Option<chrono::DateTime<chrono::Utc>>) -> String {
    t.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| "-".to_owned())
}

pub fn run_boxes(config: &Config, command: BoxesCommand) -> anyhow::Result<()> {
    let database = Database::open(config, Opener::Command)?;
    let store = &database.store;
    match command {
        BoxesCommand::List { all, json } => {
            if !json {
                println!(
                    "{:<26} {:<9} {:>4} {:<24} {:<21} {:<21} NAME",
                    "ID", "STATE", "SIZE", "ACCOUNT", "CREATED", "LAST ACTIVITY"
                );
            }
            let mut before = None;
            loop {
                let (page, next) = store.list_boxes(None, before.as_ref(), 200)?;
                for b in page.iter().filter(|b| all || !b.state.is_terminal()) {
                    print_box(b, json);
                }
                match next {
                    Some(n) => before = Some(n),
                    None => break,
                }
            }
        }
        BoxesCommand::Stop { id } => {
            let settings = config.boxes.settings(config.shared_dir())?;
            let host = (config.cluster.host_name()?, config.libvirt_uri.as_str());
            let record = psbx_actors::boxes::stop_directly(
                store,
                &settings,
                (host.0.as_str(), host.1),
                &id,
            )?;
            println!("{} is {}", record.id, record.state);
        }
    }
    Ok(())
}

fn print_box(b: &BoxRecord, json: bool) {
    let account = b
        .account_id
        .as_ref()
        .map(|a| a.to_string())
        .unwrap_or_default();
    if json {
        let line = serde_json::json!({
            "id": b.id, "state": b.state.as_str(), "size": b.size, "account": account,
            "name": b.name, "createdAt": time(Some(b.created_at)),
            "lastActivityAt": time(Some(b.last_activity_at)), "failure": b.failure,
        });
        println!("{line}");
    } else {
        println!(
            "{:<26} {:<9} {:>4} {:<24} {:<21} {:<21} {}",
            b.id.as_str(),
            b.state.as_str(),
            b.size,
            account,
            time(Some(b.created_at)),
            time(Some(b.last_activity_at)),
            b.name.as_deref().unwrap_or("")
        );
    }
}
