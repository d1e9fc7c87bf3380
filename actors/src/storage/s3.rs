//! Files in a bucket of S3-compatible object storage (`storage.s3`): the
//! storage of an installation with several nodes, where a file one node
//! stored is read through any other (issue 33, item 4).
//!
//! Each file is one object, `<prefix>/<key>`. A PUT is atomic in S3 (readers
//! see the old object or the new one, never half of one), so a put is whole
//! or nothing without a temporary name. A spooled file is uploaded streamed
//! from the disk, never read whole into memory: in one PUT up to
//! [`S3Storage::MULTIPART_ABOVE`], else as a multipart upload of
//! [`PART_BYTES`] parts (a recording is up to 200 MiB: a lost connection
//! costs one part, not the file), aborted when a part fails, so nothing
//! half-uploaded stays. Checksums are the SDK's defaults (CRC32 on each
//! part; the parts are completed by their ETags). A read streams the
//! object's body. The spool stays a directory on this machine.
//!
//! Credentials come from the AWS SDK's default chain only (environment,
//! profile, the instance's role), never from psbx's configuration, and are
//! never logged; an error says what S3 answered (its code and message).
//! `endpoint_url` sends every call to an S3-compatible server (MinIO, Ceph,
//! moto in tests) with path-style addressing. TLS is rustls with ring, the
//! workspace's provider (no aws-lc).

use super::{FileReader, Storage, StorageError, check_key, io};
use aws_config::{BehaviorVersion, Region};
use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::{ByteStream, Length};
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use std::path::{Path, PathBuf};

/// The size of each part of a multipart upload but the last (S3's least is
/// 5 MiB; 200 MiB is then 25 parts, of S3's 10,000).
const PART_BYTES: u64 = 8 << 20;

/// Where the objects are: what `storage.s3` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Settings {
    pub bucket: String,
    pub region: String,
    /// An S3-compatible server's URL (path-style addressing); `None` for AWS.
    pub endpoint_url: Option<String>,
    /// A folder of the bucket the objects go under (a storage key itself,
    /// such as `psbx/prod`); `None` for the bucket's root.
    pub prefix: Option<String>,
}

impl S3Settings {
    /// Where the settings point, for messages: `s3://bucket/prefix` in a
    /// region, at an endpoint when one is set.
    pub fn describe(&self) -> String {
        let prefix = self
            .prefix
            .as_deref()
            .map(|p| format!("/{p}"))
            .unwrap_or_default();
        let at = self
            .endpoint_url
            .as_deref()
            .map(|url| format!(" at {url}"))
            .unwrap_or_default();
        format!("s3://{}{prefix} (region {}{at})", self.bucket, self.region)
    }
}

/// Files as objects of one bucket.
pub struct S3Storage {
    client: aws_sdk_s3::Client,
    settings: S3Settings,
    spool: PathBuf,
}

/// What failed, S3's own words when it answered (code and message), and
/// the cause's chain when it could not be asked.
fn service<E: std::error::Error + 'static, R: std::fmt::Debug + 'static>(
    what: &'static str,
    key: &str,
) -> impl FnOnce(SdkError<E, R>) -> StorageError {
    move |e| StorageError::Service {
        what,
        key: key.to_owned(),
        reason: reason(&e),
    }
}

/// An error and its causes, outermost first, each said once.
fn reason(e: &(dyn std::error::Error + 'static)) -> String {
    let mut said: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(cause) = next {
        let text = cause.to_string();
        if !said.iter().any(|s| s.contains(&text)) {
            said.push(text);
        }
        next = cause.source();
    }
    said.join(": ")
}

/// Why a call of the start check failed, for its advice.
enum Trouble<'e> {
    /// S3 answered with this error code.
    Code(&'e str),
    /// The SDK's default chain found no credentials.
    NoCredentials,
    /// The endpoint did not answer (connection refused, timed out).
    Unreachable,
    Other,
}

impl<'e> Trouble<'e> {
    fn of<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug + 'static>(
        e: &'e SdkError<E, R>,
    ) -> Self {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = cause {
            if c.downcast_ref::<CredentialsError>().is_some() {
                return Self::NoCredentials;
            }
            cause = c.source();
        }
        match (e.code(), e) {
            (Some(code), _) => Self::Code(code),
            (None, SdkError::DispatchFailure(d)) if d.is_io() || d.is_timeout() => {
                Self::Unreachable
            }
            (None, SdkError::TimeoutError(_)) => Self::Unreachable,
            _ => Self::Other,
        }
    }

    /// What to do about it.
    fn advice(&self) -> &'static str {
        match self {
            Self::Code("NoSuchBucket") => {
                "create the bucket, or set storage.s3.bucket to one that exists (in \
                 storage.s3.region)"
            }
            Self::Code(
                "AccessDenied"
                | "InvalidAccessKeyId"
                | "SignatureDoesNotMatch"
                | "InvalidToken"
                | "ExpiredToken",
            ) => {
                "give the credentials the AWS SDK finds s3:PutObject, s3:GetObject and \
                 s3:DeleteObject on the bucket (and its prefix), or give psbx other ones"
            }
            Self::Code(
                "PermanentRedirect"
                | "AuthorizationHeaderMalformed"
                | "IllegalLocationConstraintException",
            ) => "set storage.s3.region to the bucket's region",
            Self::NoCredentials => {
                "give psbx credentials the AWS SDK finds: AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY in its environment, AWS_PROFILE with a profile in \
                 ~/.aws, or a role of the instance or task it runs on (never in psbx's \
                 configuration file)"
            }
            Self::Unreachable => {
                "check that storage.s3.endpoint_url (or AWS's S3 in storage.s3.region) is \
                 reachable from this machine"
            }
            Self::Code(_) | Self::Other => {
                "check storage.s3 (bucket, region, endpoint_url) and the credentials the AWS \
                 SDK finds (environment, profile, the instance's role)"
            }
        }
    }
}

impl S3Storage {
    /// A spooled file larger than this is uploaded in parts.
    pub const MULTIPART_ABOVE: u64 = 16 << 20;

    /// The bucket of `settings`, called with the credentials the SDK's
    /// default chain finds; files on their way in go to `spool` (a
    /// directory on this machine). Nothing is asked of S3 yet:
    /// [`S3Storage::check`] does.
    pub async fn connect(settings: S3Settings, spool: PathBuf) -> Result<Self, StorageError> {
        Self::build(settings, spool, None).await
    }

    /// [`S3Storage::connect`] with these credentials instead of the default
    /// chain's (tests and tools that hold a key of their own).
    pub async fn with_credentials(
        settings: S3Settings,
        spool: PathBuf,
        credentials: aws_credential_types::Credentials,
    ) -> Result<Self, StorageError> {
        Self::build(settings, spool, Some(credentials)).await
    }

    async fn build(
        settings: S3Settings,
        spool: PathBuf,
        credentials: Option<aws_credential_types::Credentials>,
    ) -> Result<Self, StorageError> {
        if let Some(prefix) = &settings.prefix {
            check_key(prefix)?;
        }
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .region(Region::new(settings.region.clone()));
        if let Some(credentials) = credentials {
            loader = loader.credentials_provider(credentials);
        }
        let sdk = loader.load().await;
        let mut config = aws_sdk_s3::config::Builder::from(&sdk);
        if let Some(url) = &settings.endpoint_url {
            config = config.endpoint_url(url).force_path_style(true);
        }
        Ok(Self {
            client: aws_sdk_s3::Client::from_conf(config.build()),
            spool,
            settings,
        })
    }

    /// The object name of `key` in the bucket.
    fn object(&self, key: &str) -> Result<String, StorageError> {
        Ok(self.under_prefix(check_key(key)?))
    }

    /// `name` under the prefix.
    fn under_prefix(&self, name: &str) -> String {
        match &self.settings.prefix {
            Some(prefix) => format!("{prefix}/{name}"),
            None => name.to_owned(),
        }
    }

    /// Writes, reads back and deletes a small object (`.psbx-check-<random>`
    /// under the prefix): proof that the bucket exists and the credentials
    /// may do what psbx does with it (s3:PutObject, s3:GetObject,
    /// s3:DeleteObject), before a server takes requests. The error names the
    /// step and what S3 answered, and says what to do.
    pub async fn check(&self) -> Result<(), String> {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| format!("no random name: {e}"))?;
        let object = self.under_prefix(&format!(".psbx-check-{}", hex::encode(random)));
        let bucket = &self.settings.bucket;
        self.client
            .put_object()
            .bucket(bucket)
            .key(&object)
            .body(ByteStream::from_static(b"psbx"))
            .send()
            .await
            .map_err(|e| self.check_failed("writing", &reason(&e), Trouble::of(&e)))?;
        let read = self
            .client
            .get_object()
            .bucket(bucket)
            .key(&object)
            .send()
            .await
            .map_err(|e| self.check_failed("reading", &reason(&e), Trouble::of(&e)))?;
        let body = read
            .body
            .collect()
            .await
            .map_err(|e| self.check_failed("reading", &reason(&e), Trouble::Other))?
            .into_bytes();
        if body.as_ref() != b"psbx" {
            return Err(self.check_failed(
                "reading",
                "it read back as other bytes",
                Trouble::Other,
            ));
        }
        self.client
            .delete_object()
            .bucket(bucket)
            .key(&object)
            .send()
            .await
            .map_err(|e| self.check_failed("deleting", &reason(&e), Trouble::of(&e)))?;
        Ok(())
    }

    /// The start check's message: the step, why, and what to do.
    fn check_failed(&self, step: &str, reason: &str, trouble: Trouble<'_>) -> String {
        format!(
            "{step} a test object in {} failed: {reason}; {}",
            self.settings.describe(),
            trouble.advice()
        )
    }

    /// Uploads `path` (`len` bytes) as `object` in parts; aborts the upload
    /// when a part fails, so no part stays stored.
    async fn put_parts(
        &self,
        key: &str,
        object: &str,
        path: &Path,
        len: u64,
    ) -> Result<(), StorageError> {
        let bucket = &self.settings.bucket;
        let created = self
            .client
            .create_multipart_upload()
            .bucket(bucket)
            .key(object)
            .send()
            .await
            .map_err(service("starting the upload of", key))?;
        let Some(upload) = created.upload_id() else {
            return Err(StorageError::Service {
                what: "starting the upload of",
                key: key.to_owned(),
                reason: "the answer named no upload".to_owned(),
            });
        };
        let uploaded = self.upload_parts(key, object, upload, path, len).await;
        let completed = match uploaded {
            Ok(parts) => self
                .client
                .complete_multipart_upload()
                .bucket(bucket)
                .key(object)
                .upload_id(upload)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map(drop)
                .map_err(service("completing the upload of", key)),
            Err(e) => Err(e),
        };
        if completed.is_err() {
            let aborted = self
                .client
                .abort_multipart_upload()
                .bucket(bucket)
                .key(object)
                .upload_id(upload)
                .send()
                .await;
            if let Err(e) = aborted {
                tracing::warn!(
                    key,
                    error = %reason(&e),
                    "could not abort a failed upload: its parts stay in the bucket until a \
                     lifecycle rule removes incomplete multipart uploads"
                );
            }
        }
        completed
    }

    /// Uploads the parts of `path`, each read from the disk as it is sent.
    async fn upload_parts(
        &self,
        key: &str,
        object: &str,
        upload: &str,
        path: &Path,
        len: u64,
    ) -> Result<Vec<CompletedPart>, StorageError> {
        let mut parts = Vec::new();
        let mut offset = 0;
        let mut number = 1;
        while offset < len {
            let size = PART_BYTES.min(len - offset);
            let body = spooled(key, path, offset, size).await?;
            let part = self
                .client
                .upload_part()
                .bucket(&self.settings.bucket)
                .key(object)
                .upload_id(upload)
                .part_number(number)
                .content_length(i64::try_from(size).unwrap_or(i64::MAX))
                .body(body)
                .send()
                .await
                .map_err(service("uploading a part of", key))?;
            parts.push(
                CompletedPart::builder()
                    .part_number(number)
                    .set_e_tag(part.e_tag().map(str::to_owned))
                    .build(),
            );
            offset += size;
            number += 1;
        }
        Ok(parts)
    }
}

/// `size` bytes of the spooled file at `path` from `offset`, read from the
/// disk as they are sent.
async fn spooled(
    key: &str,
    path: &Path,
    offset: u64,
    size: u64,
) -> Result<ByteStream, StorageError> {
    ByteStream::read_from()
        .path(path)
        .offset(offset)
        .length(Length::Exact(size))
        .build()
        .await
        .map_err(|e| StorageError::Io {
            what: "reading the spooled",
            key: key.to_owned(),
            source: std::io::Error::other(e),
        })
}

#[async_trait::async_trait]
impl Storage for S3Storage {
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StorageError> {
        let object = self.object(key)?;
        self.client
            .put_object()
            .bucket(&self.settings.bucket)
            .key(object)
            .body(ByteStream::from(bytes))
            .send()
            .await
            .map_err(service("storing", key))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
        let (_, mut reader) = self.open(key).await?;
        let mut bytes = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut reader, &mut bytes)
            .await
            .map_err(io("reading", key))?;
        Ok(bytes)
    }

    async fn open(&self, key: &str) -> Result<(u64, FileReader), StorageError> {
        let object = self.object(key)?;
        let answer = self
            .client
            .get_object()
            .bucket(&self.settings.bucket)
            .key(object)
            .send()
            .await;
        let found = match answer {
            Ok(found) => found,
            Err(e) if e.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
                return Err(StorageError::NotFound(key.to_owned()));
            }
            Err(e) => return Err(service("reading", key)(e)),
        };
        let len = found
            .content_length()
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| StorageError::Service {
                what: "reading",
                key: key.to_owned(),
                reason: "the answer had no length".to_owned(),
            })?;
        Ok((len, Box::new(Box::pin(found.body.into_async_read()))))
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        let object = self.object(key)?;
        let answer = self
            .client
            .delete_object()
            .bucket(&self.settings.bucket)
            .key(object)
            .send()
            .await;
        match answer {
            Ok(_) => Ok(()),
            // S3 answers 204 for a missing key; some compatible servers 404.
            Err(e) if e.code() == Some("NoSuchKey") => Ok(()),
            Err(e) => Err(service("deleting", key)(e)),
        }
    }

    fn spool_dir(&self) -> &Path {
        &self.spool
    }

    async fn put_file(&self, key: &str, path: &Path) -> Result<(), StorageError> {
        let object = self.object(key)?;
        let len = tokio::fs::metadata(path)
            .await
            .map_err(io("opening the spooled", key))?
            .len();
        if len > Self::MULTIPART_ABOVE {
            self.put_parts(key, &object, path, len).await?;
        } else {
            let body = spooled(key, path, 0, len).await?;
            self.client
                .put_object()
                .bucket(&self.settings.bucket)
                .key(object)
                .content_length(i64::try_from(len).unwrap_or(i64::MAX))
                .body(body)
                .send()
                .await
                .map_err(service("storing", key))?;
        }
        // Stored: the spooled copy goes (else the spool's cleaning takes it).
        if let Err(e) = tokio::fs::remove_file(path).await
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(key, error = %e, "could not remove a stored file from the spool");
        }
        Ok(())
    }
}
