//! Sync into a box, in-process (was `tests/tests/work.rs`'s VM story): `psbx
//! sync` sends what git would (tracked and untracked files, not ignored
//! ones; a commit's tree when asked), unpacked by boxd's real unpacking
//! under the box's /work; a hostile archive is refused with its entry named.
//! The same path on a real box: `tests/tests/stdio.rs` (a repository synced
//! through `psbx mcp` and through an upload URL, then listed in the box).

use crate::world::{World, stdout};
use serde_json::{Value, json};
use std::process::Command;

fn git(dir: &std::path::Path, script: &str) {
    psbx_tests::git::sh(dir, script);
}

#[test]
fn sync_sends_what_git_would_and_refuses_escapes() {
    let w = World::start();
    let (status, started) = w.call("POST", "/v1/boxes", Some(json!({"name": "sync"})));
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let work = w.work_of(&id);

    let repo = tempfile::tempdir().unwrap();
    git(
        repo.path(),
        "git init -q . && echo .env > .gitignore && echo tracked > tracked.txt && git add . \
         && git commit -qm one && echo v2 > tracked.txt && echo second > later.txt && git add . \
         && git commit -qm two && echo new > untracked.txt && echo SECRET=1 > .env",
    );
    let sync = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_psbx"))
            .arg("sync")
            .arg(&id)
            .args(args)
            .arg("--dir")
            .arg(repo.path())
            .env("PSBX_URL", &w.url)
            .env("PSBX_API_KEY", &w.key)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // (Commands run in the box's /work: its directory here.)
    sync(&["--dest", "repo"]);
    let r = w.exec(&id, json!({"cmd": "ls -A repo; cat repo/tracked.txt"}));
    assert_eq!(
        stdout(&r),
        ".gitignore\nlater.txt\ntracked.txt\nuntracked.txt\nv2\n",
        "{r}"
    );

    sync(&["--dest", "first", "--commit", "HEAD~1"]);
    let r = w.exec(&id, json!({"cmd": "ls -A first; cat first/tracked.txt"}));
    assert_eq!(stdout(&r), ".gitignore\ntracked.txt\ntracked\n", "{r}");

    // A hostile archive is refused with the entry named.
    let mut header = tar::Header::new_gnu();
    header.set_size(1);
    header.set_entry_type(tar::EntryType::Symlink);
    header.set_path("escape").unwrap();
    header.set_link_name("../../etc").unwrap();
    header.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&header, &b"x"[..]).unwrap();
    let evil = b.into_inner().unwrap();
    let res = reqwest::blocking::Client::new()
        .post(format!("{}/v1/boxes/{id}/sync?dest=evil", w.url))
        .bearer_auth(&w.key)
        .body(evil)
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 400);
    let body: Value = res.json().unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("escape"),
        "{body}"
    );
    // Nothing of it was written.
    assert!(
        std::fs::symlink_metadata(work.join("evil/escape")).is_err(),
        "the refused link was made"
    );
    let (status, _) = w.call("DELETE", &format!("/v1/boxes/{id}"), None);
    assert_eq!(status, 200);
}
