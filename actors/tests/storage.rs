//! The storage contract (`psbx_actors::storage`), one suite run against
//! both implementations: the directory on this machine, and a bucket of
//! moto's S3 server in a network namespace of its own (issue 33: files
//! every node can read). No fake: the S3 calls are the SDK's, over HTTP, to
//! a server that stands in for AWS.
//!
//! The suite: a missing key (read, opened, deleted), keys that would leave
//! the root or name the storage's own files, a put read back whole and in
//! pieces, a replace, an empty file, spooled files of several MiB taken in
//! (one above the S3 implementation's multipart threshold), what the spool
//! keeps, and a delete. The S3 test adds what only a bucket has: objects
//! under the prefix and nothing else (listed with boto3, not with the SDK
//! psbx uses), uploads above the threshold in parts, no multipart upload
//! left open, and the start check's answer for a bucket that does not exist
//! and for an endpoint that does not answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_actors::storage::{DirStorage, S3Settings, S3Storage, Storage, StorageError};
use psbx_tests::aws::Moto;
use std::path::Path;
use tokio::io::AsyncReadExt;

/// `len` bytes that do not repeat in any short period (xorshift), so a
/// part sent twice or out of order shows.
fn noise(len: usize, seed: u32) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        })
        .collect()
}

/// The file under `key`, read through `open` in pieces, and its announced length.
async fn opened(storage: &dyn Storage, key: &str) -> (u64, Vec<u8>) {
    let (len, mut reader) = storage.open(key).await.unwrap();
    let mut read = Vec::new();
    let mut piece = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut piece).await.unwrap();
        if n == 0 {
            break;
        }
        read.extend_from_slice(&piece[..n]);
    }
    (len, read)
}

/// Writes `bytes` to a new file in the storage's spool, as a shot's file
/// arrives; its path.
async fn spooled(storage: &dyn Storage, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = storage.spool().await.unwrap().join(name);
    tokio::fs::write(&path, bytes).await.unwrap();
    path
}

/// The keys the suite stores, and what each holds when it ends.
const SMALL: &str = "acct_a/box_b/shot_c.full";
const EMPTY: &str = "acct_a/box_b/shot_d.preview.png";
const BIG: &str = "acct_a/box_b/shot_e.full";
const BIGGER: &str = "acct_a/box_f/shot_g.full";

/// The contract every storage keeps; `sizes` are the two spooled files'
/// (one below and one above the S3 implementation's multipart threshold).
async fn keeps_the_contract(storage: &dyn Storage, sizes: (usize, usize)) {
    // Missing: not found to read or open, fine to delete.
    assert!(matches!(
        storage.get(SMALL).await,
        Err(StorageError::NotFound(k)) if k == SMALL
    ));
    assert!(matches!(
        storage.open(SMALL).await,
        Err(StorageError::NotFound(_))
    ));
    storage.delete(SMALL).await.unwrap();

    // Keys that leave the root or name the storage's own files: refused
    // by every call, before anything is stored.
    let bad_file = spooled(storage, ".bad", b"x").await;
    for key in [
        "",
        "../x",
        "a/../../x",
        "/etc/passwd",
        "a//b",
        ".spool/x",
        "a/.b",
        "a b",
    ] {
        let bad = |r: Result<(), StorageError>| matches!(r, Err(StorageError::BadKey(_)));
        assert!(bad(storage.put(key, b"x".to_vec()).await), "put {key:?}");
        assert!(
            bad(storage.put_file(key, &bad_file).await),
            "put_file {key:?}"
        );
        assert!(bad(storage.delete(key).await), "delete {key:?}");
        assert!(
            matches!(storage.get(key).await, Err(StorageError::BadKey(_))),
            "get {key:?}"
        );
        assert!(
            matches!(storage.open(key).await, Err(StorageError::BadKey(_))),
            "open {key:?}"
        );
    }
    tokio::fs::remove_file(&bad_file).await.unwrap();

    // A put, read back whole and in pieces; then replaced.
    storage.put(SMALL, b"first".to_vec()).await.unwrap();
    assert_eq!(storage.get(SMALL).await.unwrap(), b"first");
    storage.put(SMALL, b"the second".to_vec()).await.unwrap();
    assert_eq!(storage.get(SMALL).await.unwrap(), b"the second");
    assert_eq!(opened(storage, SMALL).await, (10, b"the second".to_vec()));

    // An empty file is a file.
    storage.put(EMPTY, Vec::new()).await.unwrap();
    assert_eq!(opened(storage, EMPTY).await, (0, Vec::new()));

    // Spooled files taken in, gone from the spool, read back the same.
    let big = noise(sizes.0, 1);
    let from = spooled(storage, ".shot-big", &big).await;
    storage.put_file(BIG, &from).await.unwrap();
    assert!(!from.exists(), "{} stayed in the spool", from.display());
    let (len, read) = opened(storage, BIG).await;
    assert_eq!(len, big.len() as u64);
    assert!(read == big, "{BIG} read back other bytes");
    let bigger = noise(sizes.1, 2);
    let from = spooled(storage, ".shot-bigger", &bigger).await;
    storage.put_file(BIGGER, &from).await.unwrap();
    let (len, read) = opened(storage, BIGGER).await;
    assert_eq!(len, bigger.len() as u64);
    assert!(read == bigger, "{BIGGER} read back other bytes");
    assert!(storage.get(BIGGER).await.unwrap() == bigger);
    // A spooled file replaces a stored one.
    let from = spooled(storage, ".shot-small", b"spooled").await;
    storage.put_file(SMALL, &from).await.unwrap();
    assert_eq!(storage.get(SMALL).await.unwrap(), b"spooled");

    // The spool loses old files only, and the stored files stay.
    let left = spooled(storage, ".shot-left", b"left").await;
    let day = std::time::Duration::from_secs(86_400);
    assert_eq!(storage.clean_spool(day).await.unwrap(), 0);
    assert!(left.exists());
    assert_eq!(
        storage
            .clean_spool(std::time::Duration::ZERO)
            .await
            .unwrap(),
        1
    );
    assert!(!left.exists());
    assert_eq!(storage.get(SMALL).await.unwrap(), b"spooled");

    // Deleted, twice.
    storage.delete(EMPTY).await.unwrap();
    storage.delete(EMPTY).await.unwrap();
    assert!(matches!(
        storage.get(EMPTY).await,
        Err(StorageError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_directory_keeps_the_storage_contract() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("shots");
    let storage = DirStorage::new(&root);
    keeps_the_contract(&storage, (3 << 20, 20 << 20)).await;
    let files = |key: &str| root.join(key).is_file();
    assert!(files(SMALL) && files(BIG) && files(BIGGER) && !files(EMPTY));
}

/// The storage on `bucket` of the S3 server at `url` (moto's, in a
/// namespace) under `prefix`, with a test key (moto takes any), its spool in
/// `spool`.
async fn on_moto(url: &str, bucket: &str, prefix: Option<&str>, spool: &Path) -> S3Storage {
    S3Storage::with_credentials(
        S3Settings {
            bucket: bucket.to_owned(),
            region: "us-east-1".to_owned(),
            endpoint_url: Some(url.to_owned()),
            prefix: prefix.map(str::to_owned),
        },
        spool.to_owned(),
        aws_credential_types::Credentials::new("testing", "testing", None, None, "tests"),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn an_s3_bucket_keeps_the_storage_contract() {
    let moto = Moto::start_in_netns();
    moto.bucket("psbx-files");
    let spool = tempfile::tempdir().unwrap();
    let storage = on_moto(&moto.url, "psbx-files", Some("psbx/test"), spool.path()).await;
    storage.check().await.unwrap();
    let above = usize::try_from(S3Storage::MULTIPART_ABOVE).unwrap();
    keeps_the_contract(&storage, (3 << 20, above + (5 << 20) + 12_345)).await;

    // In the bucket: the files under the prefix, and nothing else (the
    // check's object deleted, no multipart upload left open).
    let bucket = moto.objects("psbx-files");
    let bigger = (above + (5 << 20) + 12_345) as u64;
    let listed: Vec<(&str, u64)> = bucket.sizes.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        listed,
        [
            ("psbx/test/acct_a/box_b/shot_c.full", 7),
            ("psbx/test/acct_a/box_b/shot_e.full", 3 << 20),
            ("psbx/test/acct_a/box_f/shot_g.full", bigger),
        ]
    );
    // The one above the threshold went up in parts of 8 MiB, the others in one PUT.
    let parts = |key: &str| {
        bucket.etags[&format!("psbx/test/{key}")]
            .split_once('-')
            .map(|p| p.1.to_owned())
    };
    assert_eq!(parts(BIGGER).as_deref(), Some("3"), "{:?}", bucket.etags);
    assert_eq!(parts(BIG), None, "{:?}", bucket.etags);
    assert!(
        bucket.uploads.is_empty(),
        "multipart uploads left open: {:?}",
        bucket.uploads
    );

    // A bucket that is not there: the start check says so, and what to do.
    let missing = on_moto(&moto.url, "psbx-missing", None, spool.path()).await;
    let why = missing.check().await.unwrap_err();
    assert!(
        why.contains("s3://psbx-missing") && why.contains("NoSuchBucket"),
        "{why}"
    );
    assert!(why.contains("create the bucket"), "{why}");
    assert!(matches!(
        missing.get(SMALL).await,
        Err(StorageError::Service { .. })
    ));
    // An endpoint that does not answer: the check says to look at it.
    let silent = on_moto(&moto.silent_url(), "psbx-files", None, spool.path()).await;
    let why = silent.check().await.unwrap_err();
    assert!(
        why.contains("Connection refused") && why.contains("storage.s3.endpoint_url"),
        "{why}"
    );
}
