//! Screenshots and recordings of boxes, kept by psbx (`sandbox_shot`,
//! `/v1/boxes/{id}/shots`), and the images reviewers annotate.
//!
//! [`Shots::take`] asks the box (boxd's `shot` service, through
//! [`Boxes::shot`]) for the file, makes its preview ([`preview`]: at most
//! 1280 px on the long side), puts the files in the storage
//! ([`crate::storage`]: a directory, or S3-compatible object storage) and
//! records the shot with its sizes (metering). A box URL of the box itself is taken
//! as the port in the box it leads to (`http://127.0.0.1:<port>/path`): the
//! box's browser cannot reach psbx's listener.
//!
//! A box's shots are deleted when it stops ([`Shots::sweep`], on every
//! heartbeat), except those a review keeps (`crate::reviews`); those go
//! once the review has been answered for the review retention.
//!
//! What a box can make the server spend on shots is bounded (security
//! review 2, M1 and M2): the files are written to the storage's spool as
//! they arrive (`crate::boxes::shots`), decoded off the async threads with
//! limits ([`preview`]), checked for what was asked for ([`ingest`]: the
//! media type is psbx's own), counted against the account's
//! `quotas.max_shot_bytes` under its lock, and at most
//! [`SHOTS_PER_ACCOUNT`] of an account's and [`SHOTS_PER_SERVER`] in all
//! are taken at once on a server.

pub mod ingest;
pub mod preview;

use crate::blocking::{TaskFailed, blocking};
use crate::box_urls::port_in_box;
use crate::boxes::Boxes;
use crate::error::BoxError;
use crate::ids::{AccountId, BoxId, ReviewId, ShotId};
use crate::storage::{FileReader, Storage, StorageError};
use crate::store::{ShotRow, Store, StoreError, read_enum};
use chrono::{DateTime, Utc};
use psbx_wire::boxd::{ShotKind, ShotRequest};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Shots one account may be taking at once on a server.
pub const SHOTS_PER_ACCOUNT: usize = 4;
/// Shots being taken at once on a server, all accounts together.
pub const SHOTS_PER_SERVER: usize = 16;
/// How old a file in the storage's spool is when no shot can be writing it
/// any more (a shot takes minutes at most).
const SPOOL_AGE: Duration = Duration::from_secs(3600);
/// How long an answered review keeps its files unless configured.
pub const REVIEW_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// What a stored shot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredKind {
    Screenshot,
    Recording,
    /// An image a reviewer drew on, sent with their feedback.
    Annotation,
}

impl StoredKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Screenshot => "screenshot",
            Self::Recording => "recording",
            Self::Annotation => "annotation",
        }
    }

    /// The kind a row's name stands for; `None` for any other.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "screenshot" => Some(Self::Screenshot),
            "recording" => Some(Self::Recording),
            "annotation" => Some(Self::Annotation),
            _ => None,
        }
    }
}

/// A stored shot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shot {
    pub id: ShotId,
    pub box_id: BoxId,
    pub kind: StoredKind,
    pub mime: String,
    pub width: u32,
    pub height: u32,
    pub duration_ms: Option<u64>,
    /// The file's size (its preview and poster not counted).
    pub bytes: u64,
    /// Everything stored for it: the file, its preview and its poster.
    pub stored_bytes: u64,
    pub has_poster: bool,
    /// The page it shows as it was asked for; `None` for the virtual display.
    pub source: Option<String>,
    /// The review that keeps it past its box's stop.
    pub review_id: Option<ReviewId>,
    pub created_at: DateTime<Utc>,
}

/// A row read back: an unknown kind is [`StoreError::Unreadable`].
impl TryFrom<ShotRow> for Shot {
    type Error = StoreError;

    fn try_from(row: ShotRow) -> Result<Self, StoreError> {
        let size = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(Self {
            kind: read_enum(
                || format!("the kind of shot {}", row.id),
                &row.kind,
                StoredKind::parse,
            )?,
            width: u32::try_from(row.width).unwrap_or(0),
            height: u32::try_from(row.height).unwrap_or(0),
            duration_ms: row.duration_ms.map(size),
            bytes: size(row.bytes),
            stored_bytes: size(row.bytes) + size(row.preview_bytes) + size(row.poster_bytes),
            has_poster: row.poster_bytes > 0,
            id: row.id,
            box_id: row.box_id,
            mime: row.mime,
            source: row.source,
            review_id: row.review_id,
            created_at: row.created_at,
        })
    }
}

/// Which of a shot's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The file as taken.
    Full,
    /// A PNG at most 1280 px on its long side (a recording's: its poster's).
    Preview,
    /// A recording's first frame, PNG.
    Poster,
}

impl Part {
    fn suffix(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Preview => "preview.png",
            Self::Poster => "poster.png",
        }
    }
}

/// What can go wrong with shots.
#[derive(Debug, thiserror::Error)]
pub enum ShotError {
    #[error("no shot {0} in this account")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Box(#[from] BoxError),
    #[error(transparent)]
    Image(#[from] preview::ImageError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// boxd sent something that is not what was asked for (nothing stored).
    #[error("the shot in box {id} was not stored: {why}")]
    BadFile { id: String, why: String },
    /// Too many shots in flight (the account's, or the server's).
    #[error("{0}")]
    Busy(String),
}

impl From<TaskFailed> for ShotError {
    fn from(e: TaskFailed) -> Self {
        Self::Store(e.into())
    }
}

/// The sizes of a new shot's files.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    full: u64,
    preview: u64,
    poster: u64,
}

impl Sizes {
    fn total(self) -> u64 {
        self.full
            .saturating_add(self.preview)
            .saturating_add(self.poster)
    }
}

/// A file on its way into the storage: in memory, or spooled.
enum Incoming<'a> {
    Bytes(Vec<u8>),
    File(&'a crate::boxes::shots::Spooled),
}

/// The bytes of a new shot, before they are stored.
pub struct NewFiles {
    pub full: Vec<u8>,
    pub preview: Option<Vec<u8>>,
    pub poster: Option<Vec<u8>>,
}

/// The shots of every box, and their storage.
#[derive(Clone)]
pub struct Shots {
    store: Store,
    boxes: Arc<Boxes>,
    storage: Arc<dyn Storage>,
    in_flight: Arc<InFlight>,
    review_retention: Duration,
}

/// The shots being taken on this server, per account.
#[derive(Default)]
struct InFlight {
    accounts: Mutex<HashMap<String, usize>>,
}

/// One shot in flight; counted until dropped.
struct Slot {
    in_flight: Arc<InFlight>,
    account: String,
}

impl InFlight {
    /// A slot for one more shot of `account`, or why not.
    fn enter(self: &Arc<Self>, account: &AccountId) -> Result<Slot, ShotError> {
        let mut accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        let total: usize = accounts.values().sum();
        if total >= SHOTS_PER_SERVER {
            return Err(ShotError::Busy(format!(
                "this server is taking {total} shots already, its most at once: try again when one has finished"
            )));
        }
        let mine = accounts.entry(account.to_string()).or_default();
        if *mine >= SHOTS_PER_ACCOUNT {
            return Err(ShotError::Busy(format!(
                "this account is taking {SHOTS_PER_ACCOUNT} shots already, its most at once: \
                 wait for one to finish"
            )));
        }
        *mine += 1;
        Ok(Slot {
            in_flight: self.clone(),
            account: account.to_string(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut accounts = self
            .in_flight
            .accounts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = accounts.get_mut(&self.account) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                accounts.remove(&self.account);
            }
        }
    }
}

fn key(row: &ShotRow, part: Part) -> String {
    format!("{}.{}", row.storage_key, part.suffix())
}

impl Shots {
    pub fn new(store: Store, boxes: Arc<Boxes>, storage: Arc<dyn Storage>) -> Self {
        Self {
            store,
            boxes,
            storage,
            in_flight: Arc::default(),
            review_retention: REVIEW_RETENTION,
        }
    }

    /// How long an answered or approved review keeps its files.
    pub fn with_review_retention(mut self, retention: Duration) -> Self {
        self.review_retention = retention;
        self
    }

    /// Takes a screenshot or recording in the box and stores it.
    pub async fn take(
        &self,
        account: &AccountId,
        id: &BoxId,
        request: ShotRequest,
    ) -> Result<Shot, ShotError> {
        request.check().map_err(ShotError::Invalid)?;
        let _slot = self.in_flight.enter(account)?;
        let record = self.boxes.record(account, id).await?;
        // A quick refusal when the account has no room left at all; the
        // insert checks the shot's own bytes under the account's lock.
        {
            let (store, account) = (self.store.clone(), account.clone());
            blocking(move || store.check_shot_quota(&account, 1)).await?;
        }
        let mut in_box = request.clone();
        in_box.url = request
            .url
            .as_deref()
            .map(|url| self.as_seen_in_box(&record.id, &record.spec.services, url));
        let spool = self.storage.spool().await?;
        let taken = self.boxes.shot(account, id, &in_box, &spool).await?;
        let header = &taken.header;
        let bad = |why: String| ShotError::BadFile {
            id: record.id.to_string(),
            why,
        };
        let mime = ingest::checked_mime(
            &request,
            header,
            &taken.file.head,
            taken.poster.as_ref().map(|p| p.head.as_slice()),
        )
        .map_err(bad)?;
        let previewed = |path: &std::path::Path| preview::preview_file(path.to_owned());
        let (kind, poster, previewed) = match request.kind {
            ShotKind::Screenshot => (
                StoredKind::Screenshot,
                // A screenshot has no poster: what boxd sent as one is dropped.
                None,
                previewed(&taken.file.path).await,
            ),
            ShotKind::Recording => match &taken.poster {
                Some(poster) => (
                    StoredKind::Recording,
                    Some(poster),
                    previewed(&poster.path).await,
                ),
                None => (
                    StoredKind::Recording,
                    None,
                    Ok(((header.width, header.height), None)),
                ),
            },
        };
        let (size, preview) = previewed.map_err(|e| match e {
            preview::ImageError::Io(_) => ShotError::Image(e),
            e => bad(e.to_string()),
        })?;
        let sizes = Sizes {
            full: taken.file.bytes,
            preview: preview.as_ref().map_or(0, |p| p.len() as u64),
            poster: poster.map_or(0, |p| p.bytes),
        };
        let row = self.row_of(account, &record.id, kind, mime, size, sizes)?;
        let row = ShotRow {
            duration_ms: header.duration_ms.and_then(|d| i64::try_from(d).ok()),
            source: request.url.clone(),
            ..row
        };
        {
            let (store, account, adding) = (self.store.clone(), account.clone(), sizes.total());
            blocking(move || store.check_shot_quota(&account, adding)).await?;
        }
        let parts = [
            (Part::Full, Some(Incoming::File(&taken.file))),
            (Part::Preview, preview.map(Incoming::Bytes)),
            (Part::Poster, poster.map(Incoming::File)),
        ];
        self.put_parts(&row, parts).await?;
        let inserted = {
            let (store, row) = (self.store.clone(), row.clone());
            blocking(move || store.insert_shot(&row)).await
        };
        if let Err(e) = inserted {
            self.delete_files(&row).await;
            return Err(e.into());
        }
        Ok(Shot::try_from(row)?)
    }

    /// The URL the box's browser opens for `url`: the box's own box URL
    /// becomes the port in the box it leads to; anything else is as given.
    fn as_seen_in_box(
        &self,
        id: &BoxId,
        services: &[crate::spec::ServiceSpec],
        url: &str,
    ) -> String {
        let Some(urls) = self.boxes.urls() else {
            return url.to_owned();
        };
        let Ok(parsed) = url::Url::parse(url) else {
            return url.to_owned();
        };
        let host = match (parsed.host_str(), parsed.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            (None, _) => return url.to_owned(),
        };
        match urls.parse(&host) {
            Some(address) if address.id == *id && urls.admits(&address) => {
                let port = port_in_box(&address, services);
                let mut in_box = format!("http://127.0.0.1:{port}{}", parsed.path());
                if let Some(query) = parsed.query() {
                    in_box = format!("{in_box}?{query}");
                }
                in_box
            }
            _ => url.to_owned(),
        }
    }

    /// A row for new files (not stored yet): a fresh id and key, the sizes.
    pub fn new_row(
        &self,
        account: &AccountId,
        box_id: &BoxId,
        kind: StoredKind,
        mime: &str,
        size: (u32, u32),
        files: &NewFiles,
    ) -> Result<ShotRow, ShotError> {
        let len = |b: &[u8]| b.len() as u64;
        let sizes = Sizes {
            full: len(&files.full),
            preview: files.preview.as_deref().map_or(0, len),
            poster: files.poster.as_deref().map_or(0, len),
        };
        self.row_of(account, box_id, kind, mime, size, sizes)
    }

    fn row_of(
        &self,
        account: &AccountId,
        box_id: &BoxId,
        kind: StoredKind,
        mime: &str,
        (width, height): (u32, u32),
        sizes: Sizes,
    ) -> Result<ShotRow, ShotError> {
        let id =
            ShotId::generate().map_err(|e| ShotError::Invalid(format!("no random id: {e}")))?;
        let len = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        Ok(ShotRow {
            storage_key: format!("{account}/{box_id}/{id}"),
            id,
            account_id: account.clone(),
            box_id: box_id.clone(),
            kind: kind.as_str().to_owned(),
            mime: mime.to_owned(),
            width: i32::try_from(width).unwrap_or(i32::MAX),
            height: i32::try_from(height).unwrap_or(i32::MAX),
            duration_ms: None,
            bytes: len(sizes.full),
            preview_bytes: len(sizes.preview),
            poster_bytes: len(sizes.poster),
            source: None,
            review_id: None,
            created_at: Utc::now(),
        })
    }

    /// Stores a new row's files; on a failure, none of them stays.
    pub async fn put_files(&self, row: &ShotRow, files: NewFiles) -> Result<(), ShotError> {
        let parts = [
            (Part::Full, Some(Incoming::Bytes(files.full))),
            (Part::Preview, files.preview.map(Incoming::Bytes)),
            (Part::Poster, files.poster.map(Incoming::Bytes)),
        ];
        self.put_parts(row, parts).await
    }

    async fn put_parts(
        &self,
        row: &ShotRow,
        parts: [(Part, Option<Incoming<'_>>); 3],
    ) -> Result<(), ShotError> {
        for (part, incoming) in parts {
            let put = match incoming {
                None => continue,
                Some(Incoming::Bytes(bytes)) => self.storage.put(&key(row, part), bytes).await,
                Some(Incoming::File(spooled)) => {
                    self.storage.put_file(&key(row, part), &spooled.path).await
                }
            };
            if let Err(e) = put {
                self.delete_files(row).await;
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Deletes a row's files (failures are logged: the row is gone already).
    pub async fn delete_files(&self, row: &ShotRow) {
        for part in [Part::Full, Part::Preview, Part::Poster] {
            if let Err(e) = self.storage.delete(&key(row, part)).await {
                tracing::warn!(shot = %row.id, error = %e, "could not delete a shot's file");
            }
        }
    }

    /// The box's own shots, oldest first, and the bytes the account's shots take.
    pub async fn list(
        &self,
        account: &AccountId,
        id: &BoxId,
    ) -> Result<(Vec<Shot>, u64), ShotError> {
        // The box must be the account's (stopped ones too: a review keeps theirs).
        self.boxes.record(account, id).await?;
        let (store, account, box_id) = (self.store.clone(), account.clone(), id.clone());
        let (rows, total) = blocking(move || {
            Ok::<_, StoreError>((
                store.box_shots(&account, &box_id)?,
                store.account_shot_bytes(&account)?,
            ))
        })
        .await?;
        Ok((
            rows.into_iter()
                .map(Shot::try_from)
                .collect::<Result<_, StoreError>>()?,
            u64::try_from(total).unwrap_or(0),
        ))
    }

    /// One of the account's shots.
    pub async fn get(&self, account: &AccountId, id: &ShotId) -> Result<Shot, ShotError> {
        Ok(Shot::try_from(self.row(account, id).await?)?)
    }

    async fn row(&self, account: &AccountId, id: &ShotId) -> Result<ShotRow, ShotError> {
        let (store, account, shot) = (self.store.clone(), account.clone(), id.clone());
        blocking(move || store.shot(&account, &shot))
            .await?
            .ok_or_else(|| ShotError::NotFound(id.to_string()))
    }

    /// A file of one of the account's shots, with its media type.
    pub async fn file(
        &self,
        account: &AccountId,
        id: &ShotId,
        part: Part,
    ) -> Result<(Shot, String, Vec<u8>), ShotError> {
        let row = self.row(account, id).await?;
        let (part, mime) = Self::served_part(&row, id, part)?;
        let bytes = self.storage.get(&key(&row, part)).await?;
        Ok((Shot::try_from(row)?, mime, bytes))
    }

    /// The file that answers for `part` of the shot, and its media type.
    fn served_part(row: &ShotRow, id: &ShotId, part: Part) -> Result<(Part, String), ShotError> {
        Ok(match part {
            Part::Full => (Part::Full, row.mime.clone()),
            Part::Poster if row.poster_bytes == 0 => {
                return Err(ShotError::NotFound(format!(
                    "{id} (a poster: it is no recording)"
                )));
            }
            Part::Preview if row.preview_bytes > 0 => (Part::Preview, "image/png".into()),
            // Small enough to be its own preview; a recording's is its poster.
            Part::Preview if row.poster_bytes > 0 => (Part::Poster, "image/png".into()),
            Part::Preview if row.mime == "image/png" => (Part::Full, row.mime.clone()),
            Part::Preview => {
                return Err(ShotError::NotFound(format!("{id} (a preview)")));
            }
            Part::Poster => (Part::Poster, "image/png".into()),
        })
    }

    /// A file of one of the account's shots to read in pieces, with its
    /// media type and length (what the routes serve).
    pub async fn open(
        &self,
        account: &AccountId,
        id: &ShotId,
        part: Part,
    ) -> Result<(Shot, String, u64, FileReader), ShotError> {
        let row = self.row(account, id).await?;
        let (part, mime) = Self::served_part(&row, id, part)?;
        let (len, reader) = self.storage.open(&key(&row, part)).await?;
        Ok((Shot::try_from(row)?, mime, len, reader))
    }

    /// Deletes one of the box's own shots.
    pub async fn delete(
        &self,
        account: &AccountId,
        id: &BoxId,
        shot: &ShotId,
    ) -> Result<(), ShotError> {
        let (store, account) = (self.store.clone(), account.clone());
        let (box_id, shot_id) = (id.clone(), shot.clone());
        let row = blocking(move || store.delete_shot(&account, &box_id, &shot_id))
            .await?
            .ok_or_else(|| ShotError::NotFound(shot.to_string()))?;
        self.delete_files(&row).await;
        Ok(())
    }

    /// Deletes all of the box's own shots, those a review keeps included; how many.
    pub async fn delete_all(&self, account: &AccountId, id: &BoxId) -> Result<usize, ShotError> {
        self.boxes.record(account, id).await?;
        let (store, account, box_id) = (self.store.clone(), account.clone(), id.clone());
        let rows = blocking(move || store.delete_box_shots(&account, &box_id)).await?;
        for row in &rows {
            self.delete_files(row).await;
        }
        Ok(rows.len())
    }

    /// Deletes the shots of boxes that stopped, but those a review keeps;
    /// and the files of reviews answered longer ago than the review
    /// retention (then those reviews too, once their box is over). How many
    /// shots it deleted.
    pub async fn sweep(&self) -> Result<usize, ShotError> {
        let mut deleted = 0;
        loop {
            let store = self.store.clone();
            let rows = blocking(move || store.take_shots_of_stopped_boxes(200)).await?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                self.delete_files(row).await;
            }
            deleted += rows.len();
        }
        let retention =
            chrono::Duration::from_std(self.review_retention).unwrap_or(chrono::Duration::MAX);
        let before = Utc::now()
            .checked_sub_signed(retention)
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        loop {
            let store = self.store.clone();
            let rows = blocking(move || store.take_shots_of_old_reviews(before, 200)).await?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                self.delete_files(row).await;
            }
            deleted += rows.len();
        }
        // What a server that stopped mid-shot left in the spool.
        let stale = self.storage.clean_spool(SPOOL_AGE).await?;
        if stale > 0 {
            tracing::info!(files = stale, "deleted old files from the shot spool");
        }
        let store = self.store.clone();
        let reviews = blocking(move || store.delete_old_reviews(before)).await?;
        if reviews > 0 {
            tracing::info!(
                reviews,
                "deleted reviews answered before the review retention, whose boxes are over"
            );
        }
        Ok(deleted)
    }
}
