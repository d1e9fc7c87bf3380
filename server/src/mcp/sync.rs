//! `sandbox_sync` on the remote MCP server. The server cannot read the files
//! on the agent's machine, so the tool hands out a one-time upload URL (its
//! token is the only credential: single use, 15 minutes, bound to the account,
//! the box and the destination, stored hashed) and the exact shell command
//! that packs the working tree the way `psbx sync` does and uploads it there.
//! `psbx mcp`, the local stdio server, implements this tool itself instead.

use super::tools::PsbxMcp;
use crate::ids::RequestId;
use crate::views::exec::sync_dest;
use psbx_actors::boxes::Boxes;
use psbx_actors::ids::BoxId;
use psbx_actors::store::{Principal, Store};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use rmcp_actix_web::transport::on_request_extensions;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// How long an upload URL stays valid.
const UPLOAD_TTL_MINUTES: i64 = 15;

/// What the tool needs beyond the tools' shared state.
#[derive(Clone)]
pub struct SyncContext {
    pub boxes: Arc<Boxes>,
    pub store: Store,
    /// The server's public base URL (`https://psbx.example.com`), for the upload URLs.
    pub public_url: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SyncArgs {
    /// The box id, box_...
    pub id: String,
    /// Where under /work in the box to unpack, e.g. "repo" (default: /work itself).
    pub dest: Option<String>,
    /// Send only this commit's tree (any git revision, e.g. "HEAD"), instead of the working tree.
    pub commit: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct UploadView {
    /// Where to send the tar stream (PUT or POST, `Content-Type: application/x-tar`).
    upload_url: String,
    /// The shell command to run in the repository on the agent's machine.
    command: String,
    expires_at: String,
    box_id: String,
    dest: String,
    /// The alternative for machines with psbx installed.
    alternative: String,
}

/// `s` as one single-quoted shell word.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The shell pipeline (POSIX sh, git, tar) that writes to stdout the tar
/// `psbx sync` would send: the commit's tree, or the files git tracks plus
/// new files .gitignore does not exclude, minus tracked files deleted from
/// disk (and directories: submodules are their own business).
pub fn pack_command(commit: Option<&str>) -> String {
    let top = r#"cd "$(git rev-parse --show-toplevel)""#;
    match commit {
        Some(rev) => format!("{top} && git archive --format=tar {}", shell_quote(rev)),
        None => format!(
            "{top} && git ls-files -z --cached --others --exclude-standard \
             | xargs -0 sh -c 'for f do if [ -f \"$f\" ] || [ -L \"$f\" ]; then printf \"%s\\0\" \"$f\"; fi; done' sh \
             | COPYFILE_DISABLE=1 tar --null --no-recursion -T - -cf -"
        ),
    }
}

/// The whole command: pack, then upload to `url` with curl.
pub fn upload_command(commit: Option<&str>, url: &str) -> String {
    format!(
        "{} | curl -sS --fail-with-body -T - -H 'Content-Type: application/x-tar' -H 'Expect:' {}",
        pack_command(commit),
        shell_quote(url)
    )
}

/// Checks a destination under /work: relative, no `..`, one line.
pub fn checked_dest(dest: &str) -> Result<String, String> {
    let dest = sync_dest(dest.trim());
    if dest.split('/').any(|part| part == "..") || dest.chars().any(char::is_control) {
        return Err(format!(
            "dest {dest:?} must be a path under /work without '..', such as \"repo\""
        ));
    }
    Ok(dest.trim_end_matches('/').to_owned())
}

fn failed(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

#[tool_router(router = sync_router, vis = "pub(super)")]
impl PsbxMcp {
    #[tool(
        description = "Send a git working tree from the machine you run on into a box under /work/<dest>: \
                       the files git tracks plus new files .gitignore does not exclude, or one commit's tree. \
                       This server cannot read your files, so it returns a one-time upload URL (valid 15 minutes, \
                       one use) and the exact shell command to run in the repository (needs git, tar, curl); \
                       the command prints {\"files\", \"bytes\"} when the box has the files."
    )]
    pub(super) async fn sandbox_sync(
        &self,
        Parameters(a): Parameters<SyncArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(who) =
            on_request_extensions(&ctx.extensions).and_then(|e| e.get::<Principal>().cloned())
        else {
            return Ok(failed(
                "this request carries no account: send an API key as a bearer token",
            ));
        };
        let dest = match checked_dest(a.dest.as_deref().unwrap_or_default()) {
            Ok(dest) => dest,
            Err(message) => return Ok(failed(message)),
        };
        let commit = a.commit.as_deref().map(str::trim).filter(|c| !c.is_empty());
        if let Some(rev) = commit
            && (rev.starts_with('-') || rev.chars().any(char::is_control))
        {
            return Ok(failed(format!(
                "commit {rev:?} is not a git revision: give a commit id, branch or tag such as \"HEAD\""
            )));
        }
        let sync = &self.sync;
        // A malformed id fails as an unknown box does (`crate::ids`).
        let read = match BoxId::read(&a.id) {
            Ok(id) => sync.boxes.get(&who.account_id, &id, false).await,
            Err(e) => Err(e),
        };
        let box_id = match read {
            Ok(read) if read.snapshot.record.state.is_terminal() => {
                return Ok(failed(format!(
                    "box {} is {}: start a new one with sandbox_start",
                    a.id, read.snapshot.record.state
                )));
            }
            Ok(read) => read.snapshot.record.id,
            Err(e) => {
                return Ok(failed(format!(
                    "{e}. Call sandbox_list to see this account's boxes."
                )));
            }
        };
        let store = sync.store.clone();
        let (account, to) = (who.account_id.clone(), dest.clone());
        let made = psbx_actors::blocking::blocking(move || {
            store.create_upload(
                &account,
                &box_id,
                &to,
                chrono::Duration::minutes(UPLOAD_TTL_MINUTES),
            )
        })
        .await;
        let (token, expires_at) = match made {
            Ok(made) => made,
            Err(e) => {
                tracing::error!(error = %e, "making an upload token");
                return Ok(failed("could not make an upload URL; retry in a moment"));
            }
        };
        let url = format!(
            "{}/v1/uploads/{}",
            sync.public_url.trim_end_matches('/'),
            token.expose()
        );
        let command = upload_command(commit, &url);
        let mut alternative = format!("psbx sync {}", a.id);
        if !dest.is_empty() {
            alternative.push_str(&format!(" --dest {}", shell_quote(&dest)));
        }
        if let Some(rev) = commit {
            alternative.push_str(&format!(" --commit {}", shell_quote(rev)));
        }
        let view = UploadView {
            upload_url: url,
            command,
            expires_at: expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            box_id: a.id.clone(),
            dest: format!("/work/{dest}").trim_end_matches('/').to_owned(),
            alternative,
        };
        let summary = format!(
            "Run this in the repository on your machine (one use, valid {UPLOAD_TTL_MINUTES} minutes) \
             to send it into {} of box {}:\n{}\nWith psbx installed and PSBX_URL/PSBX_API_KEY set, \
             `{}` does the same.",
            view.dest, view.box_id, view.command, view.alternative
        );
        let mut result =
            CallToolResult::structured(serde_json::to_value(&view).unwrap_or_default());
        result.content = vec![ContentBlock::text(summary)];
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use psbx_tests::git::{sh, tar_names as names};

    #[test]
    fn the_shell_pipeline_packs_what_psbx_sync_packs() {
        let dir = tempfile::tempdir().unwrap();
        sh(
            dir.path(),
            "git init -q . && printf '.env\\nnode_modules/\\n' > .gitignore && echo tracked > a.txt \
             && mkdir -p 'src/with space' && echo code > 'src/with space/it'\"'\"'s.rs' \
             && echo gone > gone.txt && git add . && git commit -qm one && rm gone.txt \
             && echo new > untracked.txt && echo SECRET=1 > .env && mkdir node_modules \
             && echo x > node_modules/m.js && ln -s a.txt link",
        );
        // Run from a subdirectory: the whole work tree is sent.
        let tar = sh(&dir.path().join("src"), &pack_command(None));
        let expected = [
            ".gitignore",
            "a.txt",
            "link",
            "src/with space/it's.rs",
            "untracked.txt",
        ];
        assert_eq!(names(&tar), expected);
        let mut packed = Vec::new();
        crate::pack::pack_work_tree(dir.path(), &mut packed).unwrap();
        assert_eq!(names(&packed), expected, "the same set as psbx sync");

        sh(
            dir.path(),
            "git add -A && git commit -qm two && echo dirty > a.txt",
        );
        let tar = sh(dir.path(), &pack_command(Some("HEAD~1")));
        assert_eq!(
            names(&tar),
            [".gitignore", "a.txt", "gone.txt", "src/with space/it's.rs"]
        );
    }

    #[test]
    fn urls_and_revisions_are_quoted_and_dest_stays_under_work() {
        let cmd = upload_command(Some("it's"), "http://h/v1/uploads/psbxup_x");
        assert!(cmd.contains(r"git archive --format=tar 'it'\''s'"), "{cmd}");
        assert!(cmd.ends_with("'http://h/v1/uploads/psbxup_x'"), "{cmd}");
        assert_eq!(checked_dest("/work/repo/").unwrap(), "repo");
        assert_eq!(checked_dest("").unwrap(), "");
        assert!(checked_dest("../etc").is_err());
        assert!(checked_dest("a/../../b").is_err());
    }
}
