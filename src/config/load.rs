//! Loading and validating the configuration file (SPEC §2, STYLE "Configuration").
//!
//! The file is parsed into `Raw*` structs (serde; unknown keys are collected as errors through
//! `serde_ignored` rather than stopping the parse at the first one; every key optional so
//! that a missing key is one more collected error rather than a parse failure), then checked as
//! a whole: every problem is collected, each naming its file and field, before anything starts.
//! Fields are named `server.read_timeout`, `source[stripe-billing].secrets[k13].env`, and
//! `source[#2].id` (1-based position in the file) where the id itself is missing or bad.
//!
//! Relative paths (`ledger.path`, `admin.token_file`, secret `file`s) are relative to the
//! current directory of the process, not to the config file.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use serde::Deserialize;

use super::types::{
    AdminConfig, AdminToken, Config, DestinationConfig, IoMode, LedgerBackend, LedgerConfig,
    NatsTarget, PostgresConfig, Secret, ServerConfig, SigningKey, SourceConfig, TlsConfig,
};
use crate::limits;
use crate::provider::{self, Provider};

/// Reads at most `max` bytes of the regular file `path` (symlinks followed).
///
/// The file is opened non-blocking and checked to be a regular file before any read, so a
/// FIFO, a device or a directory named by mistake is an error instead of a hang (a FIFO blocks
/// `open` until a writer comes) or an endless read (`/dev/zero`).
///
/// # Errors
/// The IO error; `InvalidInput` "not a regular file"; `InvalidData` when the file is longer
/// than `max` bytes.
pub fn read_bounded(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    if !file.metadata()?.is_file() {
        let why = "not a regular file (a FIFO, device or directory?)";
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, why));
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        let why = format!("longer than {max} bytes");
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
    }
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_text(path: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_bounded(path, max)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Longest source, destination, tenant or secret id, in bytes (SPEC §2).
const ID_BYTES_MAX: usize = 64;
const MIB: i64 = 1024 * 1024;
const BODY_BYTES: RangeInclusive<i64> = 1..=64 * MIB;
const HEADER_BYTES: RangeInclusive<i64> = 1024..=MIB;
const ATTEMPTS: RangeInclusive<i64> = 1..=100;
const CONCURRENCY: RangeInclusive<i64> = 1..=4096;
/// `destination.pipeline`: requests in flight per connection (HTTP/1.1 pipelining).
const PIPELINE: RangeInclusive<i64> = 1..=64;
/// `server.connections_max` and `server.connections_per_ip_max` (0 = default / off).
const CONNECTIONS: RangeInclusive<i64> = 0..=1_000_000;
const BREAKER_FAILURES: RangeInclusive<i64> = 0..=1_000_000;

/// One problem found in the configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file at fault (as given to [`Config::load`]).
    pub file: PathBuf,
    /// The field at fault, e.g. `source[stripe-billing].secrets[k13].env`; for a value of the
    /// wrong type, its key path and position (`source[#1].secrets (line 6, column 19)`); for an
    /// unknown key, its path (`source[#2].colour`); for a TOML syntax error, `line L, column
    /// C`; empty when the file itself is at fault.
    pub field: String,
    /// What is wrong, as a sentence fragment; never contains a secret.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(f, "{}: {}: {}", self.file.display(), self.field, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in one configuration file, in the order found (file order, section by
/// section). Displays as one `{file}: {field}: {message}` line per problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, error) in self.0.iter().enumerate() {
            if n > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

#[derive(Debug, Default, Deserialize)]
struct RawConfig {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    ledger: RawLedger,
    #[serde(default)]
    admin: RawAdmin,
    #[serde(default)]
    source: Vec<RawSource>,
    #[serde(default)]
    destination: Vec<RawDestination>,
}

#[derive(Debug, Default, Deserialize)]
struct RawServer {
    listen: Option<String>,
    admin_listen: Option<String>,
    cores: Option<i64>,
    io: Option<String>,
    body_bytes_max: Option<i64>,
    header_bytes_max: Option<i64>,
    read_timeout: Option<String>,
    trusted_proxies: Option<Vec<String>>,
    connections_max: Option<i64>,
    connections_per_ip_max: Option<i64>,
    tls: Option<RawTls>,
}

#[derive(Debug, Deserialize)]
struct RawTls {
    cert: Option<String>,
    key: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawLedger {
    path: Option<String>,
    sync: Option<bool>,
    shards: Option<i64>,
    dedupe_retention: Option<String>,
    payload_retention: Option<String>,
    backend: Option<String>,
    url: Option<String>,
    pool_size: Option<i64>,
    lease: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawAdmin {
    token_file: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawSource {
    id: Option<String>,
    tenant: Option<String>,
    provider: Option<String>,
    tolerance: Option<String>,
    future_skew: Option<String>,
    event_types: Option<Vec<String>>,
    secrets: Option<Vec<RawSecret>>,
    destination: Option<String>,
    ack_deadline: Option<String>,
    ordering_key: Option<String>,
    public_url: Option<String>,
    legacy_sha1: Option<bool>,
    hmac: Option<provider::hmac::RawScheme>,
    hmac_signature: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawSecret {
    id: Option<String>,
    value: Option<String>,
    env: Option<String>,
    file: Option<String>,
    not_before: Option<toml::Value>,
    not_after: Option<toml::Value>,
}

#[derive(Debug, Deserialize)]
struct RawDestination {
    id: Option<String>,
    url: Option<String>,
    timeout: Option<String>,
    attempts_max: Option<i64>,
    backoff_min: Option<String>,
    backoff_max: Option<String>,
    concurrency_max: Option<i64>,
    pipeline: Option<i64>,
    signing_secret: Option<RawSecretRef>,
    paused: Option<bool>,
    breaker_failures_max: Option<i64>,
    kind: Option<String>,
    subject: Option<String>,
    stream: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawSecretRef {
    value: Option<String>,
    env: Option<String>,
    file: Option<String>,
}

impl Config {
    /// Reads and validates the TOML file at `path`, resolving `env` secrets from the process
    /// environment and `file` secrets from disk (SPEC §2).
    ///
    /// # Errors
    /// Every problem found, each naming the file and field; an unreadable file is one error.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = read_text(path, limits::CONFIG_FILE_BYTES_MAX).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                file: path.to_path_buf(),
                field: String::new(),
                message: format!("cannot read the configuration file: {e}"),
            }])
        })?;
        Config::from_toml_str(&text, path, &|name: &str| std::env::var(name).ok())
    }

    /// Validates configuration `text`; `path` only names the file in messages, `env` looks up
    /// environment variables (`None` = unset). Secret `file`s are read from disk.
    ///
    /// # Errors
    /// Every problem found (see [`Config::load`]).
    pub fn from_toml_str(
        text: &str,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigErrors> {
        Config::from_toml_str_at(text, path, env, wall_clock_unix_s())
    }

    /// [`Config::from_toml_str`] with the current time given (Unix seconds), used only to warn
    /// about sources whose every secret is already retired; deterministic for tests.
    ///
    /// # Errors
    /// Every problem found (see [`Config::load`]).
    pub fn from_toml_str_at(
        text: &str,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
        now_unix_s: i64,
    ) -> Result<Config, ConfigErrors> {
        let syntax = |e: toml::de::Error| {
            let mut message = e.message().trim_end().to_owned();
            if message == "duplicate key" {
                // The span is the key (a name, never a value): say which.
                if let Some(key) = e.span().and_then(|span| text.get(span)) {
                    message = format!("duplicate key `{}`", key.trim());
                }
            }
            ConfigErrors(vec![ConfigError {
                file: path.to_path_buf(),
                field: toml_position(text, e.span()),
                message,
            }])
        };
        let mut unknown = Vec::new();
        let deserializer = toml::de::Deserializer::parse(text).map_err(syntax)?;
        let mut note_unknown = |key: serde_ignored::Path<'_>| unknown.push(key_name(&key));
        let ignoring = serde_ignored::Deserializer::new(deserializer, &mut note_unknown);
        let raw: RawConfig = serde_path_to_error::deserialize(ignoring).map_err(|e| {
            let field = path_name(e.path());
            let position = toml_position(text, e.inner().span());
            let message = without_values(e.inner().message().trim_end());
            let field = if field.is_empty() { position } else { format!("{field} ({position})") };
            ConfigErrors(vec![ConfigError { file: path.to_path_buf(), field, message }])
        })?;
        let mut check =
            Check { file: path, env, now_unix_s, errors: Vec::new(), warnings: Vec::new() };
        for field in unknown {
            check.errors.push(ConfigError {
                file: path.to_path_buf(),
                field,
                message: "unknown key".to_owned(),
            });
        }
        let config = check.config(raw);
        if check.errors.is_empty() {
            Ok(Config { warnings: check.warnings, ..config })
        } else {
            Err(ConfigErrors(check.errors))
        }
    }

    /// Plain-text tables of the sources and destinations, for `hookwall check-config` (SPEC
    /// §1). Shows secret ids, never secret values. Warnings are not included.
    pub fn describe(&self) -> String {
        let sources: Vec<Vec<String>> = self.sources.iter().map(|s| self.source_row(s)).collect();
        let destinations: Vec<Vec<String>> =
            self.destinations.iter().map(destination_row).collect();
        let mut out = format!("sources ({}):\n", sources.len());
        out += &table(
            &[
                "id",
                "tenant",
                "provider",
                "tolerance",
                "future_skew",
                "secrets",
                "destination",
                "ack_deadline",
            ],
            &sources,
        );
        out += &format!("\ndestinations ({}):\n", destinations.len());
        out += &table(
            &["id", "url", "timeout", "attempts_max", "backoff", "concurrency_max", "pipeline"],
            &destinations,
        );
        out
    }

    fn source_row(&self, source: &SourceConfig) -> Vec<String> {
        let secrets: Vec<&str> = source.secrets.iter().map(|s| s.id.as_str()).collect();
        let destination = self.destinations.get(source.destination).map_or("?", |d| &d.id);
        vec![
            source.id.clone(),
            source.tenant.clone(),
            source.provider.name().to_owned(),
            window(source, source.tolerance),
            window(source, source.future_skew),
            secrets.join(","),
            destination.to_owned(),
            human(source.ack_deadline),
        ]
    }
}

/// A source's `tolerance` or `future_skew` for the table: `-` where its provider signs no
/// timestamp (nothing is checked against it).
fn window(source: &SourceConfig, d: Duration) -> String {
    if source.provider != Provider::Hmac && !source.provider.signs_timestamp() {
        "-".to_owned()
    } else {
        human(d)
    }
}

fn destination_row(destination: &DestinationConfig) -> Vec<String> {
    vec![
        destination.id.clone(),
        shown_url(&destination.url),
        human(destination.timeout),
        destination.attempts_max.to_string(),
        format!("{}..{}", human(destination.backoff_min), human(destination.backoff_max)),
        destination.concurrency_max.to_string(),
        destination.pipeline.to_string(),
    ]
}

/// A destination URL as `check-config` prints it: a query (`?token=…`, some downstreams
/// authenticate so) written `?…`, and a password (refused by the checks; kept out here too)
/// written `***`, as either may be a credential (R28). Unparseable text is not shown.
fn shown_url(text: &str) -> String {
    let Ok(mut url) = reqwest::Url::parse(text) else { return "(not a URL)".to_owned() };
    if url.password().is_some() {
        // Err: a URL that cannot have a password (none of the schemes allowed here).
        let _ = url.set_password(Some("***"));
    }
    let query = url.query().is_some();
    url.set_query(None);
    let mut shown = url.to_string();
    if query {
        shown.push_str("?…");
    }
    shown
}

/// A duration as people write it (`7days`, `1h 30m`), for messages and tables.
pub(super) fn human(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

/// Left-aligned columns separated by two spaces, one line per row.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = table_line(header.iter().copied(), &widths);
    for row in rows {
        out += &table_line(row.iter().map(String::as_str), &widths);
    }
    out
}

fn table_line<'a>(cells: impl Iterator<Item = &'a str>, widths: &[usize]) -> String {
    let mut line = String::new();
    for (cell, width) in cells.zip(widths) {
        line += &format!("{cell:<width$}  ");
    }
    line.truncate(line.trim_end().len());
    line + "\n"
}

/// `line L, column C` (1-based) of a TOML error's span, or `toml` when it has none.
fn toml_position(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let Some(span) = span else { return "toml".to_owned() };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {column}")
}

/// An environment variable's name as error messages show it: as written when it looks like
/// one by convention (`STRIPE_WEBHOOK_SECRET`: upper case, digits, `_`), else not at all — a
/// secret pasted into `env` by mistake (`env = "whsec_…"`) must not be printed (R28).
fn shown_env_name(name: &str) -> String {
    let conventional = name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if conventional {
        name.to_owned()
    } else {
        "(name not shown: not an upper-case variable name, and possibly a secret pasted in)"
            .to_owned()
    }
}

/// A file path as error messages show it: as written when absolute or explicitly relative
/// (`/run/credentials/…`, `./tls/key.pem`), else not at all — a secret or a PEM pasted into a
/// path key by mistake must not be printed (R28).
fn shown_path(path: &str) -> String {
    let pathlike = ["/", "./", "../"].iter().any(|p| path.starts_with(p))
        && path.len() <= 4096
        && !path.chars().any(char::is_control);
    if pathlike {
        path.to_owned()
    } else {
        "the file (path not shown: not absolute or ./-relative, and possibly a secret pasted in)"
            .to_owned()
    }
}

/// Admin tokens shorter than this many bytes are warned about (still accepted).
const ADMIN_TOKEN_BYTES_LOW: usize = 16;

/// The config-file name of the key a type error is at, as [`key_name`] names unknown keys:
/// `source[#2].secrets[#1]`; empty at the top level.
fn path_name(path: &serde_path_to_error::Path) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            serde_path_to_error::Segment::Seq { index } => {
                out.push_str(&format!("[#{}]", index + 1));
            }
            serde_path_to_error::Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            serde_path_to_error::Segment::Enum { .. } | serde_path_to_error::Segment::Unknown => {}
        }
    }
    out
}

/// A deserializer's message without the value it quotes, and with the configuration's own
/// type names put plainly: `invalid type: string "whsec_…", expected struct RawSecret` becomes
/// `invalid type: a string, expected a table`. A value in the wrong place may well be a secret
/// (`secrets = "whsec_…"` instead of a table), and no error ever prints one (SPEC §2, R28).
fn without_values(message: &str) -> String {
    let Some((prefix, rest)) = ["invalid type: ", "invalid value: ", "invalid length "]
        .iter()
        .find_map(|p| message.strip_prefix(p).map(|rest| (*p, rest)))
    else {
        return message.to_owned();
    };
    // serde's `Unexpected` reads `string "…"`, `integer `1``, `boolean `true``, `sequence`…
    // The expected part never holds `, expected `; a quoted value may, so split at the last.
    let (unexpected, expected) = rest.rsplit_once(", expected ").unwrap_or((rest, ""));
    let kind = unexpected.split([' ', '`', '"']).next().unwrap_or("");
    let kind = match kind {
        "string" => "a string",
        "integer" => "an integer",
        "floating" => "a number",
        "boolean" => "a boolean",
        "character" => "a character",
        "sequence" => "an array",
        "map" => "a table",
        _ if prefix == "invalid length " => "a length",
        _ => "a value",
    };
    let expected = expected.trim();
    let expected = if expected.starts_with("struct Raw") || expected == "a map" {
        "a table"
    } else {
        match expected {
            "a sequence" => "an array",
            "i64" | "u64" | "u32" | "u16" | "u8" | "usize" | "i32" => "an integer",
            "f64" | "f32" => "a number",
            "bool" => "a boolean",
            other => other,
        }
    };
    let what = prefix.trim_end_matches([' ', ':']);
    if prefix == "invalid length " {
        // An array given where a table (or a shorter array) belongs.
        return format!("invalid type: an array, expected {expected}");
    }
    if kind == expected {
        // `integer `99999999999999999999` as i128, expected i64`: the type is right.
        return format!("{what}: {kind} out of range");
    }
    if expected.is_empty() {
        format!("{what}: {kind}")
    } else {
        format!("{what}: {kind}, expected {expected}")
    }
}

/// The config-file name of an unknown key: `source[#2].colour` for `source.1.colour`.
fn key_name(path: &serde_ignored::Path<'_>) -> String {
    let mut out = String::new();
    // `?` marks an `Option` layer in serde_ignored's path; it is not a key.
    for part in path.to_string().split('.').filter(|p| *p != "?") {
        match part.parse::<usize>() {
            Ok(index) => out.push_str(&format!("[#{}]", index + 1)),
            Err(_) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(part);
            }
        }
    }
    out
}

/// Wall-clock Unix seconds, from the one reader of time.
fn wall_clock_unix_s() -> i64 {
    crate::clock::now_unix_s()
}

/// The validation pass: collects every error and warning while building the typed config.
struct Check<'a> {
    file: &'a Path,
    env: &'a dyn Fn(&str) -> Option<String>,
    now_unix_s: i64,
    errors: Vec<ConfigError>,
    warnings: Vec<String>,
}

/// An entry's label in field names: `source[id]` when its id is valid, else `source[#n]`
/// (1-based position); `kind` is `source`, `destination` or `source[x].secrets`.
fn label(kind: &str, n: usize, id: Option<&str>) -> String {
    match id {
        Some(id) if id_problem(id).is_none() => format!("{kind}[{id}]"),
        _ => format!("{kind}[#{}]", n + 1),
    }
}

/// What is wrong with an id (`[a-z0-9][a-z0-9_-]*`, at most [`ID_BYTES_MAX`] bytes), if anything.
fn id_problem(id: &str) -> Option<String> {
    let mut bytes = id.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok =
        bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if id.is_empty() {
        Some("is empty".to_owned())
    } else if id.len() > ID_BYTES_MAX {
        Some(format!("is {} bytes long; at most {ID_BYTES_MAX} are allowed", id.len()))
    } else if !(first_ok && rest_ok) {
        Some(format!("{id:?} must match [a-z0-9][a-z0-9_-]*"))
    } else {
        None
    }
}

/// What is wrong with a NATS server URL (`nats://host:port` or `tls://host:port`), if anything.
fn nats_url_problem(url: &str) -> Option<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Some(format!("{url:?} is not a nats:// URL"));
    };
    if scheme != "nats" && scheme != "tls" {
        return Some(format!("scheme {scheme:?} is not nats or tls"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("contains whitespace".to_owned());
    }
    let authority = rest.trim_end_matches('/');
    if authority.contains('@') {
        return Some("must not carry credentials (user:password@)".to_owned());
    }
    authority_problem(authority)
}

/// What is wrong with an `http(s)://host[:port]/…` URL, if anything. Userinfo is refused: the
/// URL is printed by `check-config` and logged, so it must not carry credentials.
fn url_problem(url: &str) -> Option<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Some(format!("{url:?} is not an absolute http:// or https:// URL"));
    };
    if scheme != "http" && scheme != "https" {
        return Some(format!("scheme {scheme:?} is not http or https"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("contains whitespace".to_owned());
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Some("must not carry credentials (user:password@)".to_owned());
    }
    authority_problem(authority)
}

/// What is wrong with a URL's `host[:port]`, if anything. Port 0 is refused: nothing can be
/// reached on it (connecting to it fails with `ECONNREFUSED` on Linux), so every attempt
/// would fail and each event would end in the dead-letter queue.
fn authority_problem(authority: &str) -> Option<String> {
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, Some(port)),
        _ => (authority, None),
    };
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        }
    };
    if !host_ok {
        return Some(format!("host {host:?} is not a valid host name or address"));
    }
    match port {
        Some(port) => match port.parse::<u16>() {
            Ok(0) => Some(
                "port 0 cannot be connected to; give the port the server listens on".to_owned(),
            ),
            Ok(_) => None,
            Err(_) => Some(format!("port {port:?} is not 1..=65535")),
        },
        None => None,
    }
}

/// What is wrong with a CIDR (`10.0.0.0/8`, `fd00::/8`, or a bare address), if anything.
fn cidr_problem(text: &str) -> Option<String> {
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let Ok(ip) = addr.parse::<IpAddr>() else {
        return Some(format!("{text:?} is not an IPv4 or IPv6 address or CIDR"));
    };
    let bits: u8 = if ip.is_ipv4() { 32 } else { 128 };
    match prefix.map(str::parse::<u8>) {
        Some(Ok(n)) if n > bits => Some(format!("prefix /{n} is longer than {bits} bits")),
        Some(Err(_)) => Some(format!("{text:?} has a prefix that is not a number")),
        _ => None,
    }
}

/// What is surely unintended in a valid `trusted_proxies` entry: a `/0` (every client's
/// `X-Forwarded-Proto`/`-Host` trusted, so any sender picks the URL a signed-URL provider's
/// signature is checked against), or host bits set (`10.0.0.1/8` trusts all of `10.0.0.0/8`,
/// not the one address it names).
fn cidr_warning(text: &str) -> Option<String> {
    let (addr, prefix) = text.split_once('/')?;
    let (ip, n) = (addr.parse::<IpAddr>().ok()?, prefix.parse::<u32>().ok()?);
    if n == 0 {
        return Some(format!(
            "{text} trusts X-Forwarded-Proto/Host from every client: any sender chooses the URL \
             a signed-URL provider's signature is checked against"
        ));
    }
    let network = match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - n).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - n).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    };
    (network != ip)
        .then(|| format!("{text} has host bits set: it trusts all of {network}/{n}, not only {ip}"))
}

/// Unix seconds of an RFC 3339 UTC timestamp given as a TOML string or TOML datetime.
fn timestamp_unix_s(value: &toml::Value) -> Result<i64, String> {
    let text = match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Datetime(d) => d.to_string(),
        other => {
            return Err(format!("expected an RFC 3339 timestamp, found a {}", other.type_str()))
        }
    };
    // The text is not repeated: a value in the wrong key may be a secret.
    let expect = || "is not an RFC 3339 UTC timestamp like 2026-12-31T00:00:00Z".to_owned();
    let time = humantime::parse_rfc3339(&text).map_err(|_| expect())?;
    let seconds = time.duration_since(UNIX_EPOCH).map_err(|_| expect())?.as_secs();
    i64::try_from(seconds).map_err(|_| expect())
}

/// A serving certificate that expires within this is warned about (`check-config`, start,
/// reload): two weeks to renew it.
const CERT_EXPIRY_WARNING: Duration = Duration::from_secs(14 * 86_400);

impl Check<'_> {
    fn error(&mut self, field: &str, message: impl Into<String>) {
        let file = self.file.to_path_buf();
        self.errors.push(ConfigError { file, field: field.to_owned(), message: message.into() });
    }

    fn warn(&mut self, field: &str, message: &str) {
        self.warnings.push(format!("{field}: {message}"));
    }

    /// A humantime duration, `default` when absent or bad (bad is an error). At most
    /// [`crate::limits::CONFIG_DURATION_MAX`] (100 years); longer is an error.
    fn duration(&mut self, field: &str, raw: Option<&str>, default: Duration) -> Duration {
        let Some(text) = raw else { return default };
        match humantime::parse_duration(text) {
            Ok(d) if d <= crate::limits::CONFIG_DURATION_MAX => d,
            Ok(_) | Err(humantime::DurationError::NumberOverflow) => {
                self.error(field, format!("{text:?} is longer than durations may be (100 years)"));
                default
            }
            Err(e) => {
                let problem = format!("{text:?} is not a duration like \"10s\" or \"7d\" ({e})");
                self.error(field, problem);
                default
            }
        }
    }

    /// A duration that must be greater than zero.
    fn duration_positive(&mut self, field: &str, raw: Option<&str>, default: Duration) -> Duration {
        let duration = self.duration(field, raw, default);
        if duration.is_zero() {
            self.error(field, "must be greater than zero");
        }
        duration
    }

    /// An integer in `range`, `default` when absent; out of range is an error.
    fn int(
        &mut self,
        field: &str,
        raw: Option<i64>,
        default: i64,
        range: RangeInclusive<i64>,
    ) -> i64 {
        let value = raw.unwrap_or(default);
        if range.contains(&value) {
            value
        } else {
            self.error(field, format!("{value} is not in {}..={}", range.start(), range.end()));
            default
        }
    }

    /// A required id: missing or malformed is an error and gives `None`.
    fn id(&mut self, field: &str, raw: Option<&str>) -> Option<String> {
        let Some(id) = raw else {
            self.error(field, "is missing");
            return None;
        };
        match id_problem(id) {
            Some(problem) => {
                self.error(field, problem);
                None
            }
            None => Some(id.to_owned()),
        }
    }

    fn socket_addr(&mut self, field: &str, raw: Option<&str>, default: &str) -> SocketAddr {
        let text = raw.unwrap_or(default);
        text.parse().unwrap_or_else(|_| {
            self.error(
                field,
                format!("{text:?} is not an IP:port address like \"127.0.0.1:8080\""),
            );
            SocketAddr::from(([127, 0, 0, 1], 0))
        })
    }

    fn config(&mut self, raw: RawConfig) -> Config {
        let server = self.server(&raw.server);
        let mut ledger = self.ledger(&raw.ledger, server.cores);
        let admin = self.admin(&raw.admin);
        let destinations = self.destinations(&raw.destination);
        let sources = self.sources(&raw.source, &destinations);
        if raw.ledger.dedupe_retention.is_none() {
            ledger.dedupe_retention = default_dedupe_retention(&sources);
        }
        self.retention_warnings(&ledger, &sources);
        self.lease_warnings(&ledger, &destinations);
        self.unused_destination_warnings(&sources, &destinations);
        self.loop_warnings(&server, &destinations);
        let path = self.file.to_path_buf();
        Config { path, server, ledger, admin, sources, destinations, warnings: Vec::new() }
    }

    fn server(&mut self, raw: &RawServer) -> ServerConfig {
        let listen = self.socket_addr("server.listen", raw.listen.as_deref(), "127.0.0.1:8080");
        let admin_listen =
            self.socket_addr("server.admin_listen", raw.admin_listen.as_deref(), "127.0.0.1:9090");
        // Same port on the same or an overlapping address (0.0.0.0 covers every address) would
        // fail at bind; port 0 picks a free port for each, so it never clashes. An IPv4-mapped
        // IPv6 address (`[::ffff:127.0.0.1]`) binds the IPv4 address it maps.
        let (a, b) = (listen.ip().to_canonical(), admin_listen.ip().to_canonical());
        let overlapping = a == b || a.is_unspecified() || b.is_unspecified();
        if listen.port() != 0 && listen.port() == admin_listen.port() && overlapping {
            self.error(
                "server.admin_listen",
                format!("{admin_listen} clashes with server.listen ({listen}): same port on an overlapping address"),
            );
        }
        let body = self.int("server.body_bytes_max", raw.body_bytes_max, 1_048_576, BODY_BYTES);
        let header =
            self.int("server.header_bytes_max", raw.header_bytes_max, 16_384, HEADER_BYTES);
        let read_timeout = raw.read_timeout.as_deref();
        let read_timeout = self.duration_positive("server.read_timeout", read_timeout, secs(10));
        // A request's head and body must each arrive within it (SPEC §2). Allowed either way,
        // but under a second real senders over the internet get 408 for ordinary latency (a
        // unit typo, "10ms" for "10s"?), and over an hour a slow client holds its connection
        // and buffer that long (slowloris protection, receiver checklist).
        if read_timeout < READ_TIMEOUT_SANE.start {
            self.warn(
                "server.read_timeout",
                "is under 1s: senders across the internet will get 408 for ordinary latency \
                 (a unit typo?)",
            );
        } else if read_timeout > READ_TIMEOUT_SANE.end {
            self.warn(
                "server.read_timeout",
                "is over 1h: a slow or stalled client keeps its connection and buffer that long",
            );
        }
        let trusted_proxies = raw.trusted_proxies.clone().unwrap_or_default();
        for (n, cidr) in trusted_proxies.iter().enumerate() {
            let field = format!("server.trusted_proxies[#{}]", n + 1);
            if let Some(problem) = cidr_problem(cidr) {
                self.error(&field, problem);
            } else if let Some(warning) = cidr_warning(cidr) {
                self.warn(&field, &warning);
            }
        }
        let tls = raw.tls.as_ref().and_then(|tls| self.tls(tls));
        let connections_max =
            self.int("server.connections_max", raw.connections_max, 0, CONNECTIONS);
        let per_ip =
            self.int("server.connections_per_ip_max", raw.connections_per_ip_max, 0, CONNECTIONS);
        ServerConfig {
            listen,
            admin_listen,
            cores: self.cores(raw.cores),
            io: self.io(raw.io.as_deref()),
            body_bytes_max: usize::try_from(body).unwrap_or(1_048_576),
            header_bytes_max: usize::try_from(header).unwrap_or(16_384),
            read_timeout,
            trusted_proxies,
            connections_max: usize::try_from(connections_max).unwrap_or(0),
            connections_per_ip_max: usize::try_from(per_ip).unwrap_or(0),
            tls,
        }
    }

    /// `[server.tls]`: both paths required; the pair is loaded now so that `check-config`
    /// reports an unreadable file, a missing key or a key that does not match the certificate.
    fn tls(&mut self, raw: &RawTls) -> Option<TlsConfig> {
        let cert = raw.cert.as_deref().filter(|p| !p.is_empty());
        let key = raw.key.as_deref().filter(|p| !p.is_empty());
        if cert.is_none() {
            self.error("server.tls.cert", "is missing (a PEM certificate chain, leaf first)");
        }
        if key.is_none() {
            self.error("server.tls.key", "is missing (the PEM private key of the certificate)");
        }
        let (cert, key) = (PathBuf::from(cert?), PathBuf::from(key?));
        let mut readable = true;
        for (field, path) in [("server.tls.cert", &cert), ("server.tls.key", &key)] {
            if let Err(e) = read_bounded(path, limits::CONFIG_FILE_BYTES_MAX) {
                let shown = shown_path(&path.to_string_lossy());
                self.error(field, format!("cannot read {shown}: {e}"));
                readable = false;
            }
        }
        if !readable {
            return None;
        }
        match crate::tls::load_certified_key(&cert, &key) {
            Ok(certified) => {
                if let Some(leaf) = certified.cert.first() {
                    self.certificate_validity_warnings(leaf);
                }
                Some(TlsConfig { cert, key, certified })
            }
            Err(problem) => {
                self.error("server.tls", problem);
                None
            }
        }
    }

    /// Warns when the serving certificate is expired, not yet valid, or expires within
    /// [`CERT_EXPIRY_WARNING`]: TLS clients refuse such a certificate (RFC 5280 §6.1.3 (a)(2)), so
    /// every provider's delivery would fail its handshake while hookwall looks healthy.
    fn certificate_validity_warnings(&mut self, leaf: &rustls::pki_types::CertificateDer<'_>) {
        let Some((not_before, not_after)) = crate::tls::validity(leaf) else { return };
        let now = u64::try_from(self.now_unix_s).unwrap_or(0);
        let at = |s: u64| crate::clock::rfc3339_ms(s.saturating_mul(1000));
        let field = "server.tls.cert";
        if now > not_after {
            let message = format!(
                "the certificate expired at {}; TLS clients (the providers) refuse it: renew it and reload",
                at(not_after)
            );
            self.warn(field, &message);
        } else if now < not_before {
            let message = format!(
                "the certificate is not valid before {}; TLS clients refuse it until then (or this machine's clock is wrong)",
                at(not_before)
            );
            self.warn(field, &message);
        } else if not_after - now < CERT_EXPIRY_WARNING.as_secs() {
            let days = (not_after - now) / 86_400;
            let message = format!(
                "the certificate expires at {} (in {days} days); renew it and reload before then",
                at(not_after)
            );
            self.warn(field, &message);
        }
    }

    /// `server.cores`: 0 = all online CPUs (capped at `CORES_MAX`).
    fn cores(&mut self, raw: Option<i64>) -> usize {
        let cores_max = i64::try_from(limits::CORES_MAX).unwrap_or(i64::MAX);
        let cores = self.int("server.cores", raw, 0, 0..=cores_max);
        match usize::try_from(cores) {
            Ok(0) | Err(_) => std::thread::available_parallelism()
                .map_or(1, std::num::NonZeroUsize::get)
                .min(limits::CORES_MAX),
            Ok(n) => n,
        }
    }

    fn io(&mut self, raw: Option<&str>) -> IoMode {
        match raw.unwrap_or("auto") {
            "auto" => IoMode::Auto,
            "io_uring" => IoMode::IoUring,
            "epoll" => IoMode::Epoll,
            other => {
                self.error("server.io", format!("{other:?} is not one of auto, io_uring, epoll"));
                IoMode::Auto
            }
        }
    }

    fn ledger(&mut self, raw: &RawLedger, cores: usize) -> LedgerConfig {
        let path = raw.path.as_deref().unwrap_or("./data");
        if path.is_empty() {
            self.error("ledger.path", "is empty");
        }
        let sync = raw.sync.unwrap_or(true);
        if !sync {
            self.warn("ledger.sync", "false: acks before fsync; for benchmarks only");
        }
        let dedupe = raw.dedupe_retention.as_deref();
        let dedupe_retention = self.duration_positive("ledger.dedupe_retention", dedupe, days(7));
        let payload = raw.payload_retention.as_deref();
        let payload_retention = self.duration("ledger.payload_retention", payload, days(3));
        if payload_retention > dedupe_retention {
            // Named as the user's or as the default, which a short dedupe_retention alone
            // passes (the message once blamed a payload_retention the file did not set).
            let (payload_text, dedupe_text) = (human(payload_retention), human(dedupe_retention));
            let which = if payload.is_some() { "" } else { "(unset: the default) " };
            self.warn(
                "ledger.payload_retention",
                &format!(
                    "{payload_text} {which}is longer than ledger.dedupe_retention \
                     ({dedupe_text}): a cleanly delivered event's body outlives its identity; \
                     set payload_retention to at most dedupe_retention"
                ),
            );
        }
        if payload.is_some() && payload_retention.is_zero() {
            // Allowed (a site that must not keep bodies), but it silently takes away the
            // operator's replay of delivered events: said once, at check-config and start.
            self.warn(
                "ledger.payload_retention",
                "0s: a delivered or dropped event's body and attempt history are removed as \
                 soon as it settles, so it cannot be replayed (POST /admin/events/{key}/replay \
                 answers 410); dead-lettered events keep theirs until an operator acts",
            );
        }
        let shards_max = i64::try_from(limits::SHARDS_MAX).unwrap_or(i64::MAX);
        let shards = self.int("ledger.shards", raw.shards, 0, 0..=shards_max);
        let shards = match usize::try_from(shards) {
            Ok(0) | Err(_) => cores.min(limits::SHARDS_MAX),
            Ok(n) => n,
        };
        let path = PathBuf::from(path);
        let backend = self.ledger_backend(raw);
        if backend == LedgerBackend::RocksDb && !path.as_os_str().is_empty() {
            if let Some(problem) = crate::ledger::path_problem(&path) {
                let shown = shown_path(&path.to_string_lossy());
                self.error("ledger.path", format!("{shown}: {problem}"));
            }
        }
        LedgerConfig { path, sync, shards, dedupe_retention, payload_retention, backend }
    }

    /// `ledger.backend` and the fields only the PostgreSQL backend reads (set with the
    /// RocksDB backend, they are errors: a forgotten `backend` line must not silently give a
    /// single-node ledger to a cluster).
    fn ledger_backend(&mut self, raw: &RawLedger) -> LedgerBackend {
        let postgres = match raw.backend.as_deref().unwrap_or("rocksdb") {
            "rocksdb" => false,
            "postgres" => true,
            other => {
                self.error("ledger.backend", format!("{other:?} is not one of rocksdb, postgres"));
                false
            }
        };
        if !postgres {
            for (field, set) in [
                ("ledger.url", raw.url.is_some()),
                ("ledger.pool_size", raw.pool_size.is_some()),
                ("ledger.lease", raw.lease.is_some()),
            ] {
                if set {
                    self.error(field, "is only read with ledger.backend = \"postgres\"");
                }
            }
            return LedgerBackend::RocksDb;
        }
        let url = match raw.url.as_deref() {
            None | Some("") => {
                self.error("ledger.url", "is required with ledger.backend = \"postgres\"");
                String::new()
            }
            Some(url) => {
                // The messages name the bad part, never the URL (it may hold a password).
                match crate::ledger::postgres::tls::Target::parse(url) {
                    Err(e) => self.error("ledger.url", e),
                    Ok(target) => {
                        if let Some(Err(e)) = target
                            .root_cert
                            .as_deref()
                            .map(crate::ledger::postgres::tls::load_roots)
                        {
                            self.error("ledger.url", e);
                        }
                    }
                }
                url.to_owned()
            }
        };
        let max = i64::try_from(limits::POSTGRES_POOL_MAX).unwrap_or(i64::MAX);
        let pool_size = self.int("ledger.pool_size", raw.pool_size, 4, 2..=max);
        let pool_size = usize::try_from(pool_size).unwrap_or(4);
        let lease = self.duration_positive("ledger.lease", raw.lease.as_deref(), secs(60));
        LedgerBackend::Postgres(PostgresConfig { url, pool_size, lease })
    }

    fn admin(&mut self, raw: &RawAdmin) -> AdminConfig {
        if raw.token_file.as_deref() == Some("") {
            self.error("admin.token_file", "is empty; omit it to disable /admin/*");
        }
        let token_file = raw.token_file.as_deref().filter(|p| !p.is_empty()).map(PathBuf::from);
        let token = token_file.as_ref().and_then(|path| self.admin_token(path));
        AdminConfig { token_file, token }
    }

    /// Reads the admin bearer token: a missing, unreadable or empty file is an error (an
    /// admin API configured without a usable token would lock every operator out).
    fn admin_token(&mut self, path: &Path) -> Option<AdminToken> {
        match read_text(path, limits::SECRET_FILE_BYTES_MAX) {
            Ok(text) if text.trim().is_empty() => {
                let message =
                    format!("{} is empty; write the bearer token into it", path.display());
                self.error("admin.token_file", message);
                None
            }
            Ok(text) if !crate::admin::auth::is_token_text(text.trim()) => {
                let message = format!(
                    "{}: the token must be one line of visible ASCII (RFC 6750 bearer token \
                     characters); no client could send it",
                    path.display()
                );
                self.error("admin.token_file", message);
                None
            }
            Ok(text) => {
                let token = text.trim();
                if token.len() < ADMIN_TOKEN_BYTES_LOW {
                    let message = format!(
                        "the token is {} characters; a bearer token guessable in few tries \
                         guards replay and drop: use at least {ADMIN_TOKEN_BYTES_LOW} random \
                         characters (e.g. `openssl rand -hex 32`)",
                        token.len()
                    );
                    self.warn("admin.token_file", &message);
                }
                Some(AdminToken(token.to_owned()))
            }
            Err(e) => {
                let shown = shown_path(&path.to_string_lossy());
                self.error("admin.token_file", format!("cannot read {shown}: {e}"));
                None
            }
        }
    }

    fn destinations(&mut self, raw: &[RawDestination]) -> Vec<DestinationConfig> {
        let mut seen = HashSet::new();
        let mut destinations = Vec::with_capacity(raw.len());
        for (n, raw) in raw.iter().enumerate() {
            let label = label("destination", n, raw.id.as_deref());
            let id = self.id(&format!("{label}.id"), raw.id.as_deref()).unwrap_or_default();
            if !id.is_empty() && !seen.insert(id.clone()) {
                let field = format!("destination[#{}].id", n + 1);
                self.error(&field, format!("duplicate destination id {id:?}"));
            }
            destinations.push(self.destination(&label, id, raw));
        }
        destinations
    }

    fn destination(&mut self, label: &str, id: String, raw: &RawDestination) -> DestinationConfig {
        let url = raw.url.clone().unwrap_or_default();
        let nats = self.destination_kind(label, raw);
        match &raw.url {
            None => self.error(&format!("{label}.url"), "is missing"),
            Some(url) => {
                let problem = if nats.is_some() { nats_url_problem(url) } else { url_problem(url) };
                if let Some(problem) = problem {
                    self.error(&format!("{label}.url"), problem);
                }
            }
        }
        let field = |name: &str| format!("{label}.{name}");
        let timeout = self.duration_positive(&field("timeout"), raw.timeout.as_deref(), secs(10));
        let attempts = self.int(&field("attempts_max"), raw.attempts_max, 5, ATTEMPTS);
        let errors_before = self.errors.len();
        let backoff_min =
            self.duration_positive(&field("backoff_min"), raw.backoff_min.as_deref(), secs(1));
        let backoff_max =
            self.duration(&field("backoff_max"), raw.backoff_max.as_deref(), secs(3600));
        // Compared only when both were taken as written (a refused one stands at its default).
        if self.errors.len() == errors_before && backoff_min > backoff_max {
            self.error(&field("backoff_min"), "is greater than backoff_max");
        }
        let concurrency = self.int(&field("concurrency_max"), raw.concurrency_max, 64, CONCURRENCY);
        let pipeline = self.int(&field("pipeline"), raw.pipeline, 1, PIPELINE);
        if pipeline > 1 && (nats.is_some() || url.starts_with("https://")) {
            // https:// goes through reqwest, which does not pipeline: refuse rather than ignore.
            self.error(&field("pipeline"), "applies to plain http:// destinations only");
        }
        let breaker = self.int(
            &field("breaker_failures_max"),
            raw.breaker_failures_max,
            10,
            BREAKER_FAILURES,
        );
        let signing_key = raw.signing_secret.as_ref().and_then(|secret| {
            let label = field("signing_secret");
            let text = self.secret_ref_text(&label, secret)?;
            match provider::standard::whsec_key(&text, "Standard Webhooks") {
                Ok(key) => Some(SigningKey(key)),
                Err(why) => {
                    self.error(&label, format!("{why} (expected whsec_ followed by base64)"));
                    None
                }
            }
        });
        DestinationConfig {
            id,
            url,
            timeout,
            attempts_max: u32::try_from(attempts).unwrap_or(5),
            backoff_min,
            backoff_max,
            concurrency_max: usize::try_from(concurrency).unwrap_or(64),
            pipeline: usize::try_from(pipeline).unwrap_or(1),
            paused: raw.paused.unwrap_or(false),
            breaker_failures_max: u32::try_from(breaker).unwrap_or(10),
            signing_key,
            nats,
        }
    }

    /// `kind` (`"http"`, the default, or `"nats"`) and the NATS-only keys `subject` and
    /// `stream`: required with `nats`, errors with `http`.
    fn destination_kind(&mut self, label: &str, raw: &RawDestination) -> Option<NatsTarget> {
        let field = |name: &str| format!("{label}.{name}");
        let nats = match raw.kind.as_deref().unwrap_or("http") {
            "http" => false,
            "nats" => true,
            other => {
                self.error(&field("kind"), format!("{other:?} is not one of http, nats"));
                false
            }
        };
        if !nats {
            for (name, set) in
                [("subject", raw.subject.is_some()), ("stream", raw.stream.is_some())]
            {
                if set {
                    self.error(&field(name), "is only read with kind = \"nats\"");
                }
            }
            return None;
        }
        if raw.signing_secret.is_some() {
            self.error(
                &field("signing_secret"),
                "signs HTTP forwards; a nats destination has none",
            );
        }
        let subject = raw.subject.clone().unwrap_or_default();
        // NATS subjects: dot-separated tokens, no whitespace; a publish subject has no wildcard.
        if subject.is_empty() {
            self.error(&field("subject"), "is required with kind = \"nats\"");
        } else if subject.split('.').any(|t| t.is_empty() || t == "*" || t == ">")
            || subject.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            self.error(
                &field("subject"),
                format!("{subject:?} is not a NATS publish subject (dot-separated tokens, no wildcards or spaces)"),
            );
        }
        let stream = raw.stream.clone().unwrap_or_default();
        // JetStream stream names: no whitespace, `.`, `*`, `>`, path separators.
        if stream.is_empty() {
            self.error(&field("stream"), "is required with kind = \"nats\"");
        } else if stream
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || ".*>/\\".contains(c))
        {
            self.error(&field("stream"), format!("{stream:?} is not a JetStream stream name (no spaces, '.', '*', '>', '/', '\\')"));
        }
        Some(NatsTarget { subject, stream })
    }

    /// `signing_secret = { value | env | file }`: the secret's text, read like a source secret
    /// (an inline value is warned about; an unset variable or unreadable file is an error).
    fn secret_ref_text(&mut self, label: &str, raw: &RawSecretRef) -> Option<String> {
        let as_secret = RawSecret {
            id: None,
            value: raw.value.clone(),
            env: raw.env.clone(),
            file: raw.file.clone(),
            not_before: None,
            not_after: None,
        };
        self.secret_text(label, &as_secret)
    }

    fn sources(
        &mut self,
        raw: &[RawSource],
        destinations: &[DestinationConfig],
    ) -> Vec<SourceConfig> {
        if raw.is_empty() {
            self.error("source", "no [[source]] is configured; at least one is needed");
        }
        let mut seen = HashSet::new();
        let mut sources = Vec::with_capacity(raw.len());
        for (n, raw) in raw.iter().enumerate() {
            let label = label("source", n, raw.id.as_deref());
            let id = self.id(&format!("{label}.id"), raw.id.as_deref());
            if let Some(id) = &id {
                if !seen.insert(id.clone()) {
                    let field = format!("source[#{}].id", n + 1);
                    self.error(&field, format!("duplicate source id {id:?}"));
                }
            }
            let source = self.source(&label, raw, destinations);
            if let (Some(id), Some(source)) = (id, source) {
                sources.push(SourceConfig { id, ..source });
            }
        }
        sources
    }

    /// One source, with an empty id (filled in by the caller); `None` when a part that has no
    /// usable fallback (tenant, provider, destination) is bad — the error is already recorded.
    fn source(
        &mut self,
        label: &str,
        raw: &RawSource,
        destinations: &[DestinationConfig],
    ) -> Option<SourceConfig> {
        let field = |name: &str| format!("{label}.{name}");
        let tenant = self.id(&field("tenant"), raw.tenant.as_deref());
        let provider = self.provider(&field("provider"), raw.provider.as_deref());
        let default_tolerance = provider.map_or(secs(300), Provider::default_tolerance);
        let tolerance = self.duration_positive(
            &field("tolerance"),
            raw.tolerance.as_deref(),
            default_tolerance,
        );
        // A provider that signs no timestamp has no replay window (R7): its window settings
        // are warned about once, below, as ignored, not also as too long.
        let no_window = provider.is_some_and(|p| p != Provider::Hmac && !p.signs_timestamp());
        if tolerance > days(1) && !no_window {
            let message = format!(
                "tolerance {} is longer than a day: a captured delivery replayed that long after \
                 it was signed is still accepted (providers' own windows are minutes)",
                human(tolerance)
            );
            self.warn(&field("tolerance"), &message);
        }
        let future_skew =
            self.duration(&field("future_skew"), raw.future_skew.as_deref(), secs(60));
        if future_skew > FUTURE_SKEW_SANE_MAX && !no_window {
            let message = format!(
                "future_skew {} is longer than an hour: a delivery signed that far ahead of this \
                 clock is accepted (clocks agree within seconds; R6)",
                human(future_skew)
            );
            self.warn(&field("future_skew"), &message);
        }
        if let Some(p) = provider.filter(|&p| p != Provider::Hmac && !p.signs_timestamp()) {
            // Nothing to be fresh against (R7): a set window only suggests replay protection
            // the source does not have; a replayed delivery is a duplicate by its event id.
            for (name, set) in [("tolerance", &raw.tolerance), ("future_skew", &raw.future_skew)] {
                if set.is_some() {
                    let message = format!(
                        "{} signs no timestamp, so there is no replay window to set; ignored \
                         (a replayed delivery is answered duplicate by its event id, R12)",
                        p.name()
                    );
                    self.warn(&field(name), &message);
                }
            }
        }
        let event_types = self.event_types(&field("event_types"), raw.event_types.as_ref());
        let scheme = self.scheme_options(label, provider, raw);
        let secrets = self.secrets(label, provider, &scheme, raw.secrets.as_deref());
        let destination = self.destination_ref(&field("destination"), raw, destinations);
        let default_ack = provider.map_or(secs(10), Provider::ack_deadline);
        let ack_deadline = self.duration_positive(
            &field("ack_deadline"),
            raw.ack_deadline.as_deref(),
            default_ack,
        );
        if ack_deadline < ACK_DEADLINE_SANE_MIN {
            // Admission sheds a delivery whose estimated commit wait passes half the deadline
            // (issue 6): under ~100 ms that is a group commit or two, so most deliveries
            // would be answered 503 on an idle server. Allowed (tests force shedding so), but
            // most likely a unit typo ("10ms" for "10s").
            self.warn(
                &field("ack_deadline"),
                "is under 100ms; providers allow seconds, and most deliveries will be shed \
                 with 503 overloaded (a unit typo?)",
            );
        }
        let ordering_key = raw.ordering_key.as_deref().and_then(|pointer| {
            crate::ordering::OrderingKey::parse(pointer)
                .map_err(|problem| self.error(&field("ordering_key"), problem))
                .ok()
        });
        let public_url = self.public_url(label, provider, raw.public_url.as_deref());
        Some(SourceConfig {
            id: String::new(),
            tenant: tenant?,
            provider: provider?,
            tolerance,
            future_skew,
            event_types,
            secrets,
            destination: destination?,
            ack_deadline,
            ordering_key,
            public_url,
            scheme,
        })
    }

    /// `public_url`: the endpoint URL as configured at the provider, without a query (the
    /// request's query is appended, [`crate::signed_url`]). Used by URL-signing providers;
    /// warned about (and ignored) for the others.
    fn public_url(
        &mut self,
        label: &str,
        provider: Option<Provider>,
        raw: Option<&str>,
    ) -> Option<String> {
        let url = raw?;
        let field = format!("{label}.public_url");
        if let Some(problem) = url_problem(url) {
            self.error(&field, problem);
            return None;
        }
        if url.contains(['?', '#']) {
            self.error(&field, format!("{url:?} has a query or fragment; write it without"));
            return None;
        }
        if provider.is_some_and(|p| !p.signs_url()) {
            self.warn(&field, "this provider does not sign the URL; ignored");
        }
        Some(url.to_owned())
    }

    /// `legacy_sha1` (github only), the `hmac` table (hmac only, required there) and
    /// `hmac_signature` (adyen only).
    fn scheme_options(
        &mut self,
        label: &str,
        provider: Option<Provider>,
        raw: &RawSource,
    ) -> provider::options::SchemeOptions {
        let mut options = provider::options::SchemeOptions::default();
        if let Some(legacy) = raw.legacy_sha1 {
            if provider.is_some_and(|p| p != Provider::Github) {
                self.error(&format!("{label}.legacy_sha1"), "is only for provider \"github\"");
            }
            options.legacy_sha1 = legacy;
        }
        if let Some(place) = raw.hmac_signature.as_deref() {
            let field = format!("{label}.hmac_signature");
            if provider.is_some_and(|p| p != Provider::Adyen) {
                self.error(&field, "is only for provider \"adyen\"");
            }
            match place {
                provider::adyen::IN_ADDITIONAL_DATA => options.adyen_hmac_header = false,
                provider::adyen::IN_HEADER => options.adyen_hmac_header = true,
                other => self.error(
                    &field,
                    format!(
                        "is {other:?}; expected \"additional_data\" (each notification item's \
                         additionalData.hmacSignature: standard webhooks, the default) or \
                         \"header\" (the HmacSignature header over the body: Balance Platform \
                         and Management API webhooks)"
                    ),
                ),
            }
        }
        match (&raw.hmac, provider) {
            (Some(_), Some(p)) if p != Provider::Hmac => {
                self.error(&format!("{label}.hmac"), "is only for provider \"hmac\"");
            }
            (None, Some(Provider::Hmac)) => {
                let message = "is missing (provider \"hmac\" needs its header, algorithm, \
                               encoding, content and id source)";
                self.error(&format!("{label}.hmac"), message);
            }
            (Some(raw), _) => match provider::hmac::Scheme::parse(raw) {
                Ok(scheme) => options.hmac = Some(Box::new(scheme)),
                Err(problems) => {
                    for (key, message) in problems {
                        self.error(&format!("{label}.hmac.{key}"), message);
                    }
                }
            },
            (None, _) => {}
        }
        options
    }

    fn provider(&mut self, field: &str, raw: Option<&str>) -> Option<Provider> {
        let Some(name) = raw else {
            self.error(field, "is missing");
            return None;
        };
        let parsed = Provider::parse(name);
        if parsed.is_none() {
            let supported: Vec<&str> = Provider::ALL.iter().map(|p| p.name()).collect();
            let supported = supported.join(", ");
            if Provider::PLANNED.contains(&name) {
                let message = format!(
                    "provider {name:?} is not supported by this build yet (supported: {supported})"
                );
                self.error(field, message);
            } else {
                self.error(field, format!("unknown provider {name:?} (supported: {supported})"));
            }
        }
        parsed
    }

    fn event_types(&mut self, field: &str, raw: Option<&Vec<String>>) -> Option<Vec<String>> {
        let types = raw?;
        if types.is_empty() {
            self.error(field, "is empty; omit it to allow every event type");
        }
        for (n, event_type) in types.iter().enumerate() {
            let entry = format!("{field}[#{}]", n + 1);
            if event_type.is_empty() {
                self.error(&entry, "is empty");
            } else if event_type.len() > limits::EVENT_TYPE_BYTES_MAX {
                let max = limits::EVENT_TYPE_BYTES_MAX;
                self.error(&entry, format!("is longer than {max} bytes"));
            }
        }
        Some(types.clone())
    }

    fn destination_ref(
        &mut self,
        field: &str,
        raw: &RawSource,
        destinations: &[DestinationConfig],
    ) -> Option<usize> {
        let Some(name) = raw.destination.as_deref() else {
            self.error(field, "is missing");
            return None;
        };
        let index = destinations.iter().position(|d| !d.id.is_empty() && d.id == name);
        if index.is_none() {
            let known: Vec<&str> =
                destinations.iter().map(|d| d.id.as_str()).filter(|id| !id.is_empty()).collect();
            let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
            self.error(field, format!("no destination {name:?} is configured (known: {known})"));
        }
        index
    }

    fn secrets(
        &mut self,
        label: &str,
        provider: Option<Provider>,
        scheme: &provider::options::SchemeOptions,
        raw: Option<&[RawSecret]>,
    ) -> Vec<Secret> {
        let field = format!("{label}.secrets");
        let raw = raw.unwrap_or_default();
        let max = limits::SECRETS_PER_SOURCE_MAX;
        if raw.is_empty() || raw.len() > max {
            self.error(&field, format!("has {} entries; 1..={max} are allowed", raw.len()));
        }
        let mut seen = HashSet::new();
        let mut secrets = Vec::with_capacity(raw.len());
        for (n, raw) in raw.iter().enumerate() {
            let secret_label = self::label(&field, n, raw.id.as_deref());
            let id = self.id(&format!("{secret_label}.id"), raw.id.as_deref());
            if let Some(id) = &id {
                if !seen.insert(id.clone()) {
                    let message = format!("duplicate secret id {id:?}");
                    self.error(&format!("{field}[#{}].id", n + 1), message);
                }
            }
            let secret = self.secret(&secret_label, provider, scheme, raw);
            if let (Some(id), Some(secret)) = (id, secret) {
                secrets.push(Secret { id, ..secret });
            }
        }
        self.retired_warning(label, &secrets);
        secrets
    }

    /// One secret with an empty id (filled in by the caller); `None` when it cannot be used.
    fn secret(
        &mut self,
        label: &str,
        provider: Option<Provider>,
        scheme: &provider::options::SchemeOptions,
        raw: &RawSecret,
    ) -> Option<Secret> {
        let not_before = self.timestamp(&format!("{label}.not_before"), raw.not_before.as_ref());
        let not_after = self.timestamp(&format!("{label}.not_after"), raw.not_after.as_ref());
        if let (Some(before), Some(after)) = (not_before, not_after) {
            if after <= before {
                self.error(&format!("{label}.not_after"), "must be later than not_before");
            }
        }
        let text = self.secret_text(label, raw)?;
        if text.starts_with(char::is_whitespace) || text.ends_with(char::is_whitespace) {
            // Kept as written (a file loses only its trailing line break), since some secret
            // could really have them, but a copy-paste that took a space along is the usual
            // cause, and then no delivery verifies. The secret itself is never shown.
            self.warn(
                label,
                "begins or ends with whitespace, which is part of the secret; deliveries will \
                 not verify unless the provider's secret has it too",
            );
        }
        if provider == Some(Provider::Stripe) && !text.starts_with("whsec_") {
            // Stripe's endpoint signing secrets all start with `whsec_` (its webhook docs); any
            // other string still makes a key, but most likely an API key was pasted instead,
            // and no delivery will verify.
            self.warn(
                label,
                "does not start with whsec_, as Stripe's endpoint signing secrets do; \
                 deliveries will not verify if this is an API key (sk_/rk_/pk_)",
            );
        }
        let key = match provider::key_with(provider?, scheme, &text) {
            Ok(key) => key,
            Err(message) => {
                self.error(label, message);
                return None;
            }
        };
        Some(Secret { id: String::new(), key, not_before, not_after })
    }

    fn timestamp(&mut self, field: &str, raw: Option<&toml::Value>) -> Option<i64> {
        match timestamp_unix_s(raw?) {
            Ok(seconds) => Some(seconds),
            Err(message) => {
                self.error(field, message);
                None
            }
        }
    }

    /// The secret as written, from exactly one of `value`, `env` or `file` (an inline value is
    /// warned about). Errors name the variable or path when it looks like one
    /// ([`shown_env_name`], [`shown_path`]), never the secret.
    fn secret_text(&mut self, label: &str, raw: &RawSecret) -> Option<String> {
        match (&raw.value, &raw.env, &raw.file) {
            (Some(value), None, None) => {
                self.warn(label, "inline secret value; prefer env or file");
                Some(value.clone())
            }
            (None, Some(name), None) => {
                let value = (self.env)(name).filter(|v| !v.is_empty());
                if value.is_none() {
                    let message =
                        format!("environment variable {} is unset or empty", shown_env_name(name));
                    self.error(&format!("{label}.env"), message);
                }
                value
            }
            (None, None, Some(path)) => {
                match read_text(Path::new(path), limits::SECRET_FILE_BYTES_MAX) {
                    Ok(text) => Some(text.trim_end().to_owned()),
                    Err(e) => {
                        let message = format!("cannot read {}: {e}", shown_path(path));
                        self.error(&format!("{label}.file"), message);
                        None
                    }
                }
            }
            _ => {
                self.error(label, "needs exactly one of value, env or file");
                None
            }
        }
    }

    fn retired_warning(&mut self, label: &str, secrets: &[Secret]) {
        let now = self.now_unix_s;
        let all_retired = secrets.iter().all(|s| s.not_after.is_some_and(|t| t <= now));
        if !secrets.is_empty() && all_retired {
            self.warn(label, "every secret is past its not_after; no delivery can verify");
        }
    }

    /// A PostgreSQL lease no longer than an attempt can expire mid-attempt: another node (or
    /// this one) starts the event again, and the first result is not recorded, so the
    /// downstream may get it twice (same `Idempotency-Key`; at-least-once, R21).
    fn lease_warnings(&mut self, ledger: &LedgerConfig, destinations: &[DestinationConfig]) {
        let LedgerBackend::Postgres(pg) = &ledger.backend else { return };
        for d in destinations.iter().filter(|d| d.timeout >= pg.lease) {
            let message = format!(
                "is {} but destination {} may take {} per attempt; an attempt outliving its \
                 lease is started again (delivered twice)",
                human(pg.lease),
                d.id,
                human(d.timeout),
            );
            self.warn("ledger.lease", &message);
        }
    }

    /// R25 / checklist item 9: an identity must outlive the provider's retries and twice the
    /// tolerance, or a late retry is admitted twice. (Only an explicit `dedupe_retention` can
    /// be short: the default is [`default_dedupe_retention`].)
    fn retention_warnings(&mut self, ledger: &LedgerConfig, sources: &[SourceConfig]) {
        let retention = ledger.dedupe_retention;
        for source in sources {
            let horizon = source.provider.retry_horizon();
            let window = twice_the_replay_window(source);
            let floor = horizon.max(window.unwrap_or(Duration::ZERO));
            if retention < floor {
                let why = match window {
                    Some(w) => format!(
                        "provider retry horizon {}, 2 × tolerance {}",
                        human(horizon),
                        human(w)
                    ),
                    None => {
                        format!("provider retry horizon {}; no signed timestamp", human(horizon))
                    }
                };
                let message = format!(
                    "is {} but source {} ({}) needs at least {} ({why}); late retries would be \
                     admitted twice (R25)",
                    human(retention),
                    source.id,
                    source.provider.name(),
                    human(floor),
                );
                self.warn("ledger.dedupe_retention", &message);
            }
        }
    }

    fn unused_destination_warnings(
        &mut self,
        sources: &[SourceConfig],
        destinations: &[DestinationConfig],
    ) {
        for (n, destination) in destinations.iter().enumerate() {
            if !destination.id.is_empty() && !sources.iter().any(|s| s.destination == n) {
                let field = format!("destination[{}]", destination.id);
                self.warn(&field, "no source uses this destination");
            }
        }
    }
}

impl Check<'_> {
    /// Warns about a destination whose URL is hookwall's own `server.listen`: every forward
    /// would arrive as a new, unsigned delivery, be refused 401, and the event go dead after
    /// its attempts — a loop that looks healthy. (Warned, not refused: a proxy in between
    /// could make it deliberate.) The URL is not shown (it may carry a credential).
    fn loop_warnings(&mut self, server: &ServerConfig, destinations: &[DestinationConfig]) {
        let listen = server.listen;
        if listen.port() == 0 {
            return;
        }
        for destination in destinations {
            let Ok(url) = reqwest::Url::parse(&destination.url) else { continue };
            if url.scheme() != "http" && url.scheme() != "https" {
                continue;
            }
            let port = url.port_or_known_default();
            let host = url.host_str().unwrap_or("");
            let ip = if host.eq_ignore_ascii_case("localhost") {
                Some(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
            } else {
                host.trim_start_matches('[').trim_end_matches(']').parse().ok()
            };
            let Some(ip) = ip.map(|ip| ip.to_canonical()) else { continue };
            let (at, on) = (listen.ip().to_canonical(), port == Some(listen.port()));
            let reaches = at == ip || (at.is_unspecified() && ip.is_loopback());
            if on && reaches {
                self.warn(
                    &format!("destination[{}].url", destination.id),
                    "points at hookwall's own server.listen: each forward would come back as a \
                     new unsigned delivery, be refused 401, and the event end in the \
                     dead-letter queue; point it at the application",
                );
            }
        }
    }
}

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

/// `server.read_timeout` taken without a warning: 1 s to 1 h.
const READ_TIMEOUT_SANE: std::ops::Range<Duration> =
    Duration::from_secs(1)..Duration::from_secs(3600);

/// Longest `future_skew` taken without a warning: 1 h.
const FUTURE_SKEW_SANE_MAX: Duration = Duration::from_secs(3600);

/// Shortest `ack_deadline` taken without a warning: 100 ms.
const ACK_DEADLINE_SANE_MIN: Duration = Duration::from_millis(100);

fn days(days: u64) -> Duration {
    Duration::from_secs(days * 86_400)
}

/// `ledger.dedupe_retention` when the file sets none (R25): 7 days, or longer when a
/// configured source needs it — its provider's retry horizon plus a day of margin (Stripe
/// retries for 3 days → 4 days), and never under twice its tolerance.
pub fn default_dedupe_retention(sources: &[SourceConfig]) -> Duration {
    sources
        .iter()
        .map(|s| {
            let window = twice_the_replay_window(s).unwrap_or(Duration::ZERO);
            (s.provider.retry_horizon() + days(1)).max(window)
        })
        .fold(days(7), Duration::max)
}

/// Twice a source's replay window (`2 × tolerance`, R25), or `None` when its provider signs no
/// timestamp (GitHub and the others of [`Provider::signs_timestamp`]): such a source has no
/// replay window (R7), its `tolerance` is ignored (and warned about), so it neither lengthens
/// `dedupe_retention` nor is cited in its warning. `hmac` counts as windowed (a source may
/// configure a signed timestamp).
fn twice_the_replay_window(source: &SourceConfig) -> Option<Duration> {
    let windowed = source.provider == Provider::Hmac || source.provider.signs_timestamp();
    windowed.then(|| source.tolerance.saturating_mul(2))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// 2026-01-01T00:00:00Z: a fixed "now" so the retired-secret warning is deterministic.
    const NOW: i64 = 1_767_225_600;

    const MINIMAL: &str = r#"
        [[source]]
        id = "s"
        tenant = "t"
        provider = "github"
        secrets = [{ id = "k", env = "GH_SECRET" }]
        destination = "d"

        [[destination]]
        id = "d"
        url = "http://127.0.0.1:3000/hooks"
    "#;

    fn env(name: &str) -> Option<String> {
        match name {
            "GH_SECRET" => Some("It's a Secret to Everybody".to_owned()),
            "STANDARD_SECRET" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    /// What a case must produce: `Ok` with exactly these warnings, or exactly these errors.
    /// Each expected string must occur in the corresponding `field: message` line.
    enum Expect<'a> {
        Ok(&'a [&'a str]),
        Errors(&'a [&'a str]),
    }

    fn check(text: &str, expect: Expect<'_>) -> Option<Config> {
        let result = Config::from_toml_str_at(text, Path::new("test.toml"), &env, NOW);
        let (config, lines, want) = match (result, expect) {
            (Ok(config), Expect::Ok(want)) => {
                let lines = config.warnings.clone();
                (Some(config), lines, want)
            }
            (Err(errors), Expect::Errors(want)) => {
                let lines = errors.0.iter().map(|e| format!("{}: {}", e.field, e.message));
                (None, lines.collect(), want)
            }
            (Ok(config), Expect::Errors(_)) => panic!("expected errors, got {config:?}"),
            (Err(errors), Expect::Ok(_)) => panic!("expected success, got:\n{errors}"),
        };
        assert_eq!(lines.len(), want.len(), "got:\n{}", lines.join("\n"));
        for (line, want) in lines.iter().zip(want) {
            assert!(line.contains(want), "{line:?} does not contain {want:?}");
        }
        config
    }

    /// A value of the wrong type is named by its key path and never echoed: it may be a secret
    /// written where a table belongs (`secrets = "whsec_…"`). Before, the message quoted it
    /// (`invalid type: string "whsec_…", expected struct RawSecret`) on `check-config` and in
    /// a refused reload's log line, and named no field (found by an audit of the CLI).
    #[test]
    fn a_value_of_the_wrong_type_is_named_by_its_key_and_never_echoed() {
        let secret = "whsec_TOPSECRET_0123456789";
        let cases: [(String, &str); 10] = [
            (
                MINIMAL.replace(r#"[{ id = "k", env = "GH_SECRET" }]"#, &format!("\"{secret}\"")),
                "source[#1].secrets (line 6, column 19): invalid type: a string, expected an array",
            ),
            (
                MINIMAL.replace(r#"[{ id = "k", env = "GH_SECRET" }]"#, &format!("[\"{secret}\"]")),
                "source[#1].secrets[#1] (line 6, column 20): invalid type: a string, expected a table",
            ),
            (
                MINIMAL.replace(r#"env = "GH_SECRET""#, "value = 12345678901234"),
                "source[#1].secrets[#1].value (line 6, column 40): invalid type: an integer, expected a string",
            ),
            (
                minimal_with("[server]\ncores = \"two\"", ""),
                "server.cores (line 2, column 9): invalid type: a string, expected an integer",
            ),
            (
                minimal_with("[server]\ncores = 99999999999999999999", ""),
                "server.cores (line 2, column 9): ",
            ),
            (
                MINIMAL.replace(r#"[{ id = "k", env = "GH_SECRET" }]"#, &format!("[[\"k\", \"{secret}\"]]")),
                "source[#1].secrets[#1] (line 6, column 20): invalid type: an array, expected a table",
            ),
            (
                MINIMAL.replace(r#"env = "GH_SECRET""#, &format!("env = \"{secret}\"")),
                "source[s].secrets[k].env: environment variable (name not shown",
            ),
            (
                MINIMAL.replace(r#"env = "GH_SECRET""#, &format!("file = \"{secret}\"")),
                "source[s].secrets[k].file: cannot read the file (path not shown",
            ),
            (
                MINIMAL.replace(r#"env = "GH_SECRET""#, &format!("env = \"GH_SECRET\", not_before = \"{secret}\"")),
                "source[s].secrets[k].not_before: is not an RFC 3339 UTC timestamp",
            ),
            (
                MINIMAL.replace("tenant = \"t\"", "tenant = \"t\"\n        tenant = \"u\""),
                "line 5, column 9: duplicate key `tenant`",
            ),
        ];
        for (text, want) in cases {
            let errors = Config::from_toml_str_at(&text, Path::new("test.toml"), &env, NOW)
                .expect_err("refused");
            let shown = errors.to_string();
            assert!(shown.contains(want), "{shown:?} should contain {want:?}");
            assert!(!shown.contains("TOPSECRET") && !shown.contains("12345678901234"), "{shown}");
        }
    }

    /// `MINIMAL` with `extra` appended to the source table and `top` put before it.
    fn minimal_with(top: &str, source_extra: &str) -> String {
        let source = MINIMAL
            .replace("destination = \"d\"\n", &format!("destination = \"d\"\n{source_extra}\n"));
        format!("{top}\n{source}")
    }

    /// `public_url` (issue 3): kept for URL-signing providers; a query or fragment, or a
    /// non-URL, is an error; on a provider that signs no URL it is warned about and ignored.
    #[test]
    fn public_url_is_checked_and_kept() {
        let twilio = MINIMAL.replace("provider = \"github\"", "provider = \"twilio\"");
        let with = |text: &str, line: &str| {
            text.replace("destination = \"d\"\n", &format!("destination = \"d\"\n{line}\n"))
        };
        let url = "public_url = \"https://hooks.example.com/twilio\"";
        let config = check(&with(&twilio, url), Expect::Ok(&[])).unwrap();
        let kept = config.sources[0].public_url.as_deref();
        assert_eq!(kept, Some("https://hooks.example.com/twilio"));
        let query = "public_url = \"https://hooks.example.com/twilio?a=1\"";
        check(
            &with(&twilio, query),
            Expect::Errors(&[
                "source[s].public_url: \"https://hooks.example.com/twilio?a=1\" has a query",
            ]),
        );
        check(
            &with(&twilio, "public_url = \"hooks.example.com\""),
            Expect::Errors(&["source[s].public_url"]),
        );
        let config = check(
            &with(MINIMAL, url),
            Expect::Ok(&["source[s].public_url: this provider does not sign the URL"]),
        )
        .unwrap();
        assert_eq!(
            config.sources[0].public_url.as_deref(),
            Some("https://hooks.example.com/twilio")
        );
    }

    /// `kind = "nats"` destinations: a nats:// URL, a publish subject and a stream name are
    /// required; the NATS keys are errors on an HTTP destination.
    #[test]
    fn nats_destination() {
        let nats = |lines: &str| MINIMAL.replace("url = \"http://127.0.0.1:3000/hooks\"", lines);
        let ok = nats("kind = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nsubject = \"hooks.billing\"\nstream = \"HOOKS\"");
        let config = check(&ok, Expect::Ok(&[])).unwrap();
        let target = config.destinations[0].nats.clone().unwrap();
        assert_eq!((target.subject.as_str(), target.stream.as_str()), ("hooks.billing", "HOOKS"));
        assert!(check(MINIMAL, Expect::Ok(&[])).unwrap().destinations[0].nats.is_none());
        let cases: &[(&str, &[&str])] = &[
            (
                "kind = \"kafka\"\nurl = \"http://h/\"",
                &["destination[d].kind: \"kafka\" is not one of http, nats"],
            ),
            (
                "kind = \"nats\"\nurl = \"http://h:4222\"\nsubject = \"a\"\nstream = \"S\"",
                &["url: scheme \"http\" is not nats or tls"],
            ),
            (
                "kind = \"nats\"\nurl = \"nats://h:4222\"",
                &["subject: is required", "stream: is required"],
            ),
            (
                "kind = \"nats\"\nurl = \"nats://h:4222\"\nsubject = \"hooks.>\"\nstream = \"a.b\"",
                &[
                    "subject: \"hooks.>\" is not a NATS publish subject",
                    "stream: \"a.b\" is not a JetStream stream name",
                ],
            ),
            (
                "url = \"http://h/\"\nsubject = \"a\"",
                &["subject: is only read with kind = \"nats\""],
            ),
        ];
        for (lines, errors) in cases {
            check(&nats(lines), Expect::Errors(errors));
        }
    }

    /// `ledger.backend`: rocksdb by default; postgres needs a parseable `url` and takes
    /// `pool_size` (2..=POSTGRES_POOL_MAX, default 4) and `lease` (default 60s); the
    /// postgres-only keys are errors with rocksdb (a forgotten `backend` line is not silently
    /// a single-node ledger).
    #[test]
    fn ledger_backend() {
        let config = check(&minimal_with("", ""), Expect::Ok(&[])).unwrap();
        assert_eq!(config.ledger.backend, LedgerBackend::RocksDb);
        let pg = "[ledger]\nbackend = \"postgres\"\nurl = \"postgres://hw@db.internal/hookwall\"";
        let config = check(&minimal_with(pg, ""), Expect::Ok(&[])).unwrap();
        let LedgerBackend::Postgres(p) = config.ledger.backend else { panic!("not postgres") };
        assert_eq!(
            (p.url.as_str(), p.pool_size, p.lease),
            ("postgres://hw@db.internal/hookwall", 4, secs(60))
        );
        let secret = "[ledger]\nbackend = \"postgres\"\nurl = \"postgres://hw:pw-9f2@db/hookwall\"";
        let config = check(&minimal_with(secret, ""), Expect::Ok(&[])).unwrap();
        assert!(!format!("{config:?}").contains("pw-9f2"), "Debug hides the database password");
        let tuned = format!("{pg}\npool_size = 8\nlease = \"5s\"");
        let warning = "ledger.lease: is 5s but destination d may take 10s per attempt";
        let config = check(&minimal_with(&tuned, ""), Expect::Ok(&[warning])).unwrap();
        let LedgerBackend::Postgres(p) = config.ledger.backend else { panic!("not postgres") };
        assert_eq!((p.pool_size, p.lease), (8, secs(5)));
        let cases: &[(&str, &[&str])] = &[
            (
                "[ledger]\nbackend = \"mysql\"",
                &["ledger.backend: \"mysql\" is not one of rocksdb, postgres"],
            ),
            ("[ledger]\nbackend = \"postgres\"", &["ledger.url: is required"]),
            (
                "[ledger]\nbackend = \"postgres\"\nurl = \"postgres://h/db?connect_timeout=x\"",
                &["ledger.url: is not a PostgreSQL connection string"],
            ),
            (
                "[ledger]\nbackend = \"postgres\"\nurl = \"postgres://u:pw@h/db?sslmode=bogus\"",
                &["ledger.url: sslmode is not one of disable, prefer, require, verify-ca, verify-full"],
            ),
            (
                "[ledger]\nbackend = \"postgres\"\nurl = \"postgres://h/db?sslmode=verify-full\"",
                &["ledger.url: sslmode=verify-full needs sslrootcert=PATH"],
            ),
            (
                "[ledger]\nbackend = \"postgres\"\nurl = \"host=h sslmode=verify-ca sslrootcert=/nonexistent/ca.pem\"",
                &["ledger.url: sslrootcert /nonexistent/ca.pem: cannot read it"],
            ),
            (
                "[ledger]\nbackend = \"postgres\"\nurl = \"postgres://h/db\"\npool_size = 1",
                &["ledger.pool_size"],
            ),
            (
                "[ledger]\nbackend = \"postgres\"\nurl = \"postgres://h/db\"\npool_size = 65",
                &["ledger.pool_size"],
            ),
            (
                "[ledger]\nbackend = \"postgres\"\nurl = \"postgres://h/db\"\nlease = \"0s\"",
                &["ledger.lease"],
            ),
            (
                "[ledger]\nurl = \"postgres://h/db\"\npool_size = 3",
                &["ledger.url: is only read with", "ledger.pool_size: is only read with"],
            ),
        ];
        for (top, errors) in cases {
            check(&minimal_with(top, ""), Expect::Errors(errors));
        }
    }

    /// `admin.token_file` is read at load: a readable file gives the trimmed token, a missing
    /// or empty one is an error naming the field. The destination keys of the operator
    /// tooling (`paused`, `breaker_failures_max`, `signing_secret`) parse and are checked.
    #[test]
    fn admin_token_and_operator_destination_keys() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "  s3cret-token-0123456789\n").unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let admin = |path: &Path| format!("[admin]\ntoken_file = {:?}", path.display().to_string());
        let config = check(&minimal_with(&admin(&token), ""), Expect::Ok(&[])).unwrap();
        let kept = config.admin.token.as_ref().map(|t| t.0.as_str());
        assert_eq!(kept, Some("s3cret-token-0123456789"));
        // A short token still works, with a warning (a CLI audit's 5-character one was silent).
        let short = dir.path().join("short");
        std::fs::write(&short, "12345\n").unwrap();
        let warned = "admin.token_file: the token is 5 characters";
        check(&minimal_with(&admin(&short), ""), Expect::Ok(&[warned])).unwrap();
        assert!(!format!("{config:?}").contains("s3cret"), "Debug hides the token");
        check(&minimal_with(&admin(&empty), ""), Expect::Errors(&["admin.token_file: "]));
        let missing = dir.path().join("missing");
        check(
            &minimal_with(&admin(&missing), ""),
            Expect::Errors(&["admin.token_file: cannot read"]),
        );

        let text = format!(
            "{MINIMAL}paused = true\nbreaker_failures_max = 0\n\
             signing_secret = {{ env = \"STANDARD_SECRET\" }}\n"
        );
        let config = check(&text, Expect::Ok(&[])).unwrap();
        let d = &config.destinations[0];
        assert!(d.paused && d.breaker_failures_max == 0 && d.signing_key.is_some());
        let bad = format!(
            "{MINIMAL}breaker_failures_max = -1\nsigning_secret = {{ env = \"GH_SECRET\" }}\n"
        );
        check(
            &bad,
            Expect::Errors(&[
                "destination[d].breaker_failures_max",
                "destination[d].signing_secret: Standard Webhooks secret is not base64",
            ]),
        );
    }

    /// `pipeline`: default 1, 1..=64, and refused where it cannot apply (https:// goes
    /// through a client that does not pipeline; NATS publishes).
    #[test]
    fn destination_pipeline_is_bounded_and_http_only() {
        let config = check(MINIMAL, Expect::Ok(&[])).unwrap();
        assert_eq!(config.destinations[0].pipeline, 1);
        let config = check(&format!("{MINIMAL}pipeline = 8\n"), Expect::Ok(&[])).unwrap();
        assert_eq!(config.destinations[0].pipeline, 8);
        for bad in ["0", "65", "-1"] {
            let text = format!("{MINIMAL}pipeline = {bad}\n");
            check(&text, Expect::Errors(&["destination[d].pipeline"]));
        }
        let https = MINIMAL.replace("http://127.0.0.1:3000", "https://127.0.0.1:3000");
        check(
            &format!("{https}pipeline = 2\n"),
            Expect::Errors(&[
                "destination[d].pipeline: applies to plain http:// destinations only",
            ]),
        );
        check(&format!("{https}pipeline = 1\n"), Expect::Ok(&[]));
    }

    #[test]
    fn every_file_in_config_dir_loads() {
        // The checkout under test (cargo sets this at run time), not the one compiled in.
        let root = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
        let dir = root.join("config");
        let mut loaded = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            // The production example names files under /etc and /run; the integration test
            // `production_example_config_passes_check_config` loads it with those provided.
            let example = path.file_name().is_some_and(|n| n == "hookwall.example.toml");
            if path.extension().is_some_and(|e| e == "toml") && !example {
                Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
                loaded += 1;
            }
        }
        assert!(loaded >= 1, "no config file found in {}", dir.display());
    }

    /// Files named by the config are read bounded and only when regular: `/dev/zero`, a FIFO
    /// (whose `open` would block until a writer comes) and an oversized file are errors naming
    /// the field — for secrets, the admin token and the TLS pair — not a hang or an OOM.
    #[test]
    fn endless_blocking_and_oversized_files_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("no NUL");
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 2 * 1024 * 1024]).expect("big file");
        let cases = [
            ("/dev/zero".to_owned(), "not a regular file"),
            (fifo.display().to_string(), "not a regular file"),
            (dir.path().display().to_string(), "not a regular file"),
            (big.display().to_string(), "longer than"),
        ];
        for (path, want) in &cases {
            let secret = MINIMAL.replace(r#"env = "GH_SECRET""#, &format!("file = {path:?}"));
            let errors = Config::from_toml_str(&secret, Path::new("z.toml"), &env)
                .expect_err("refused")
                .to_string();
            assert!(
                errors.contains("secrets[k].file") && errors.contains(want),
                "{path}: {errors}"
            );
            let token = format!("[admin]\ntoken_file = {path:?}\n{MINIMAL}");
            let errors = Config::from_toml_str(&token, Path::new("z.toml"), &env)
                .expect_err("refused")
                .to_string();
            assert!(
                errors.contains("admin.token_file") && errors.contains(want),
                "{path}: {errors}"
            );
            let tls = format!("[server.tls]\ncert = {path:?}\nkey = {path:?}\n{MINIMAL}");
            let errors = Config::from_toml_str(&tls, Path::new("z.toml"), &env)
                .expect_err("refused")
                .to_string();
            assert!(errors.contains("server.tls") && errors.contains(want), "{path}: {errors}");
        }
    }

    /// `0.0.0.0:P` and `127.0.0.1:P` clash (the second bind would fail); port 0 never does.
    #[test]
    fn admin_listen_clashes_only_on_overlapping_addresses() {
        let with = |listen: &str, admin: &str| {
            let text =
                format!("[server]\nlisten = {listen:?}\nadmin_listen = {admin:?}\n{MINIMAL}");
            Config::from_toml_str(&text, Path::new("l.toml"), &env)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert!(with("0.0.0.0:18081", "127.0.0.1:18081").is_err_and(|e| e.contains("clashes")));
        assert!(with("127.0.0.1:18081", "[::]:18081").is_err_and(|e| e.contains("clashes")));
        assert!(with("127.0.0.1:0", "127.0.0.1:0").is_ok(), "port 0 picks two free ports");
        assert!(with("127.0.0.1:18081", "127.0.0.2:18081").is_ok(), "different addresses");
        assert!(with("0.0.0.0:18081", "127.0.0.1:18082").is_ok(), "different ports");
        for (listen, admin) in [
            ("[::ffff:127.0.0.1]:18081", "127.0.0.1:18081"),
            ("127.0.0.1:18081", "[::ffff:127.0.0.1]:18081"),
            ("[::ffff:0.0.0.0]:18081", "127.0.0.2:18081"),
        ] {
            let clash = with(listen, admin);
            assert!(clash.is_err_and(|e| e.contains("clashes")), "{listen} and {admin}");
        }
        assert!(with("[::ffff:127.0.0.1]:18081", "127.0.0.2:18081").is_ok(), "mapped, other");
        // The refused pairs do clash at bind.
        let first = std::net::TcpListener::bind("[::ffff:127.0.0.1]:0").expect("a mapped bind");
        let port = first.local_addr().expect("its address").port();
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_err(), "same socket");
    }

    #[test]
    fn dev_toml() {
        let text = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/config/dev.toml"));
        let inline = "inline secret value";
        let config = check(text, Expect::Ok(&[inline, inline, inline])).unwrap();
        let ids: Vec<&str> = config.sources.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["stripe-dev", "github-dev", "standard-dev"]);
        assert_eq!(config.destinations[0].backoff_max, secs(300));
        assert_eq!(config.sources[2].ack_deadline, secs(15));
        let table = config.describe();
        assert!(table.contains("standard-dev  dev     standard"), "{table}");
        assert!(table.contains("http://127.0.0.1:3000/hooks"), "{table}");
        assert!(!table.contains("whsec_"), "secret printed:\n{table}");
    }

    /// A replay window longer than a day is accepted with a warning (a CLI audit's
    /// `tolerance = "100y"` passed silently, switching replay protection off in effect); a
    /// day is not warned about. Likewise a `future_skew` over an hour.
    #[test]
    fn a_tolerance_over_a_day_is_warned_about() {
        let skew = |t: &str| {
            minimal_with("", &format!("future_skew = \"{t}\""))
                .replace("provider = \"github\"", "provider = \"standard\"")
                .replace("GH_SECRET", "STANDARD_SECRET")
        };
        check(&skew("1h"), Expect::Ok(&[]));
        let warned = "source[s].future_skew: future_skew 10years is longer than an hour";
        check(&skew("10y"), Expect::Ok(&[warned]));
        // Standard Webhooks signs a timestamp (GitHub, MINIMAL's provider, does not).
        let with = |t: &str| {
            minimal_with("", &format!("tolerance = \"{t}\""))
                .replace("provider = \"github\"", "provider = \"standard\"")
                .replace("GH_SECRET", "STANDARD_SECRET")
        };
        check(&with("1d"), Expect::Ok(&[]));
        check(
            &with("100y"),
            Expect::Ok(&["source[s].tolerance: tolerance 100years is longer than a day"]),
        );
    }

    /// `check-config`'s table shows a destination URL without its password or query, which may
    /// carry a credential (found by a newcomer's review: `?k=whsec_…` was printed in full).
    #[test]
    fn destination_urls_are_shown_without_credentials() {
        let text = MINIMAL.replace(
            "http://127.0.0.1:3000/hooks",
            "http://127.0.0.1:3000/hooks?token=whsec_SECRET",
        );
        let table = check(&text, Expect::Ok(&[])).unwrap().describe();
        assert!(table.contains("http://127.0.0.1:3000/hooks?…"), "{table}");
        assert!(!table.contains("SECRET"), "{table}");
        assert_eq!(shown_url("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(shown_url("nats://u:hunter2@127.0.0.1:4222"), "nats://u:***@127.0.0.1:4222");
    }

    #[test]
    fn minimal_gets_defaults() {
        let config = check(MINIMAL, Expect::Ok(&[])).unwrap();
        let server = &config.server;
        assert_eq!(server.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(server.admin_listen, "127.0.0.1:9090".parse().unwrap());
        assert!((1..=limits::CORES_MAX).contains(&server.cores));
        assert_eq!(server.io, IoMode::Auto);
        assert_eq!((server.body_bytes_max, server.header_bytes_max), (1_048_576, 16_384));
        assert_eq!(server.read_timeout, secs(10));
        assert!(server.trusted_proxies.is_empty());
        let ledger = &config.ledger;
        assert_eq!(ledger.path, PathBuf::from("./data"));
        assert!(ledger.sync);
        assert_eq!((ledger.dedupe_retention, ledger.payload_retention), (days(7), days(3)));
        assert_eq!(config.admin.token_file, None);
        let source = &config.sources[0];
        assert_eq!((source.tolerance, source.future_skew), (secs(300), secs(60)));
        assert_eq!((source.ack_deadline, source.destination), (secs(10), 0));
        assert_eq!(source.event_types, None);
        assert_eq!(source.secrets[0].id, "k");
        assert!(source.secrets[0].active_at(NOW));
        let destination = &config.destinations[0];
        assert_eq!((destination.timeout, destination.attempts_max), (secs(10), 5));
        assert_eq!((destination.backoff_min, destination.backoff_max), (secs(1), secs(3600)));
        assert_eq!(destination.concurrency_max, 64);
    }

    #[test]
    fn ledger_shards_default_to_cores_and_are_bounded() {
        let config = check(&minimal_with("[server]\ncores = 3", ""), Expect::Ok(&[])).unwrap();
        assert_eq!(config.ledger.shards, 3, "0 (the default) = one per core");
        let one = minimal_with("[server]\ncores = 3\n[ledger]\nshards = 1", "");
        assert_eq!(check(&one, Expect::Ok(&[])).unwrap().ledger.shards, 1);
        check(&minimal_with("[ledger]\nshards = 65", ""), Expect::Errors(&["ledger.shards"]));
        check(&minimal_with("[ledger]\nshards = -1", ""), Expect::Errors(&["ledger.shards"]));
    }

    #[test]
    fn syntax_and_unknown_keys() {
        let unknown = minimal_with("[server]\nlisten = \"127.0.0.1:1\"\nlisen = \"x\"", "");
        check(&unknown, Expect::Errors(&["server.lisen: unknown key"]));
        let in_source = minimal_with("", "colour = \"red\"");
        check(&in_source, Expect::Errors(&["source[#1].colour: unknown key"]));
        // Unknown keys are collected with every other problem, not the first and only error.
        let both = minimal_with("[server]\nlisen = \"x\"\nread_timeout = \"soon\"", "");
        check(&both, Expect::Errors(&["server.lisen: unknown key", "server.read_timeout"]));
        check("[server\n", Expect::Errors(&["line 1, column"]));
        check("", Expect::Errors(&["source: no [[source]] is configured"]));
    }

    /// Every duration field is capped at 100 years (`CONFIG_DURATION_MAX`): a longer one is
    /// an error naming the field, not a value that overflows a deadline later (a helper's
    /// audit found `timeout = "300000000000y"` accepted, then `serve` aborted at the first
    /// attempt, and `backoff_min` of ~8 000 years panicked the admin API's timestamps).
    #[test]
    fn durations_longer_than_100_years_are_refused() {
        let long = "\"101y\"";
        let config = minimal_with(
            &format!("[server]\nread_timeout = {long}\n[ledger]\npayload_retention = {long}\n"),
            &format!("tolerance = {long}\nack_deadline = \"300000000000y\""),
        )
        .replace(
            "url = \"http://127.0.0.1:3000/hooks\"",
            &format!("url = \"http://127.0.0.1:3000/hooks\"\ntimeout = {long}\nbackoff_min = {long}\nbackoff_max = {long}"),
        );
        check(
            &config,
            Expect::Errors(&[
                "server.read_timeout: \"101y\" is longer than durations may be (100 years)",
                "ledger.payload_retention: \"101y\" is longer",
                "destination[d].timeout: \"101y\" is longer",
                "destination[d].backoff_min: \"101y\" is longer",
                "destination[d].backoff_max: \"101y\" is longer",
                "source[s].tolerance: \"101y\" is longer",
                "source[s].ack_deadline: \"300000000000y\" is longer",
            ]),
        );
        // Past what humantime counts, the same message; a refused backoff_max is not also
        // compared with backoff_min.
        let config = MINIMAL.replace(
            "url = \"http://127.0.0.1:3000/hooks\"",
            "url = \"http://127.0.0.1:3000/hooks\"\nbackoff_min = \"100y\"\nbackoff_max = \"99999999999999999999ns\"",
        );
        check(
            &config,
            Expect::Errors(&[
                "destination[d].backoff_max: \"99999999999999999999ns\" is longer than durations may be",
            ]),
        );
        let hundred = "\"100y\"";
        let config = minimal_with(&format!("[ledger]\ndedupe_retention = {hundred}\n"), "");
        let config = check(&config, Expect::Ok(&[])).unwrap();
        assert_eq!(config.ledger.dedupe_retention, crate::limits::CONFIG_DURATION_MAX);
    }

    #[test]
    fn every_mistake_reported_at_once() {
        let text = r#"
            [server]
            listen = "127.0.0.1:8080"
            admin_listen = "127.0.0.1:8080"
            io = "kqueue"
            body_bytes_max = 0
            read_timeout = "soon"
            trusted_proxies = ["10.0.0.0/8", "10.0.0.0/33", "nope"]

            [[source]]
            id = "Bad Id"
            tenant = "t"
            provider = "quickbooks"
            secrets = [{ id = "k", env = "MISSING" }]
            destination = "nowhere"

            [[source]]
            id = "ok"
            tenant = "t"
            provider = "zapier"
            tolerance = "0s"
            event_types = []
            secrets = []
            destination = "d"

            [[destination]]
            id = "d"
            url = "ftp://example.com/"
            attempts_max = 0
            backoff_min = "2h"
        "#;
        check(
            text,
            Expect::Errors(&[
                "server.admin_listen: 127.0.0.1:8080 clashes with server.listen",
                "server.body_bytes_max: 0 is not in 1..=67108864",
                "server.read_timeout: \"soon\" is not a duration",
                "server.trusted_proxies[#2]: prefix /33 is longer than 32 bits",
                "server.trusted_proxies[#3]: \"nope\" is not an IPv4 or IPv6 address",
                "server.io: \"kqueue\" is not one of auto, io_uring, epoll",
                "destination[d].url: scheme \"ftp\" is not http or https",
                "destination[d].attempts_max: 0 is not in 1..=100",
                "destination[d].backoff_min: is greater than backoff_max",
                "source[#1].id: \"Bad Id\" must match [a-z0-9][a-z0-9_-]*",
                "source[#1].provider: unknown provider \"quickbooks\" (supported: stripe, \
                 github, slack, shopify, standard, svix, paddle, pagerduty, twitch, typeform, \
                 gitlab, segment, woocommerce, bitbucket",
                "source[#1].secrets[k].env: environment variable MISSING is unset or empty",
                "source[#1].destination: no destination \"nowhere\" is configured (known: d)",
                "source[ok].provider: unknown provider \"zapier\" (supported: stripe, github, \
                 slack, shopify, standard, svix, paddle, pagerduty, twitch, typeform, gitlab, \
                 segment, woocommerce, bitbucket",
                "source[ok].tolerance: must be greater than zero",
                "source[ok].event_types: is empty",
                "source[ok].secrets: has 0 entries; 1..=16 are allowed",
            ]),
        );
    }

    #[test]
    fn secrets_from_env_file_and_value() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
        let secrets = format!(
            r#"secrets = [
                {{ id = "a", env = "STANDARD_SECRET", not_before = "2025-01-01T00:00:00Z" }},
                {{ id = "b", file = "{}", not_after = 2027-01-01T00:00:00Z }},
                {{ id = "c", value = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" }},
            ]"#,
            file.path().display()
        );
        let text = MINIMAL
            .replace("provider = \"github\"", "provider = \"standard\"")
            .replace("secrets = [{ id = \"k\", env = \"GH_SECRET\" }]", &secrets);
        let config =
            check(&text, Expect::Ok(&["source[s].secrets[c]: inline secret value"])).unwrap();
        let secrets = &config.sources[0].secrets;
        assert_eq!(secrets.len(), 3);
        assert_eq!(secrets[0].not_before, Some(1_735_689_600));
        assert_eq!(secrets[1].not_after, Some(1_798_761_600));
        assert!(!format!("{config:?}").contains("MfKQ9r8"), "secret in Debug output");
    }

    /// A secret with leading or trailing whitespace (after a file's trailing line break) is
    /// kept as written but warned about, never shown (a review found a file's leading spaces
    /// taken silently, and no delivery verified).
    #[test]
    fn a_secret_with_surrounding_whitespace_is_warned_about() {
        let dir = tempfile::tempdir().unwrap();
        let padded = dir.path().join("padded");
        std::fs::write(&padded, "  It's a Secret to Everybody\n").unwrap();
        let clean = dir.path().join("clean");
        std::fs::write(&clean, "It's a Secret to Everybody\n").unwrap();
        let with = |path: &Path| {
            let file = format!("file = {:?}", path.display().to_string());
            MINIMAL.replace("env = \"GH_SECRET\"", &file)
        };
        let config = check(&with(&padded), Expect::Ok(&["source[s].secrets[k]: begins or ends"]));
        let warnings = config.unwrap().warnings.join("\n");
        assert!(!warnings.contains("Secret to Everybody"), "the secret is shown: {warnings}");
        check(&with(&clean), Expect::Ok(&[]));
        let inline = MINIMAL.replace("env = \"GH_SECRET\"", "value = \"trailing \"");
        check(
            &inline,
            Expect::Ok(&["inline secret value", "source[s].secrets[k]: begins or ends"]),
        );
    }

    /// An `ack_deadline` under 100 ms sheds nearly every delivery: warned about (a bad-input
    /// review found "1ns" taken silently, black-holing the source with 503s).
    #[test]
    fn a_tiny_ack_deadline_is_warned_about() {
        let tiny = minimal_with("", "ack_deadline = \"10ms\"");
        check(&tiny, Expect::Ok(&["source[s].ack_deadline: is under 100ms"]));
        check(&minimal_with("", "ack_deadline = \"100ms\""), Expect::Ok(&[]));
    }

    /// `tolerance` / `future_skew` on a provider that signs no timestamp (GitHub) is warned
    /// about as ignored (a review found it taken silently, suggesting a replay window); on one
    /// that does (Standard Webhooks), it is not.
    #[test]
    fn a_window_for_a_provider_without_timestamps_is_warned_about() {
        let github = minimal_with("", "tolerance = \"1m\"\nfuture_skew = \"10s\"");
        check(
            &github,
            Expect::Ok(&[
                "source[s].tolerance: github signs no timestamp",
                "source[s].future_skew: github signs no timestamp",
            ]),
        );
        let standard = minimal_with("", "tolerance = \"1m\"")
            .replace("provider = \"github\"", "provider = \"standard\"")
            .replace("GH_SECRET", "STANDARD_SECRET");
        check(&standard, Expect::Ok(&[]));
    }

    /// A `trusted_proxies` entry of `/0`, or with host bits set, is warned about (a review
    /// found both taken silently); a plain address or a network address is not.
    #[test]
    fn trusted_proxies_that_trust_too_much_are_warned_about() {
        let with = |cidr: &str| {
            MINIMAL.replace(
                "[[source]]",
                &format!("[server]\ntrusted_proxies = [{cidr:?}]\n\n[[source]]"),
            )
        };
        let field = "server.trusted_proxies[#1]: ";
        check(&with("0.0.0.0/0"), Expect::Ok(&[&format!("{field}0.0.0.0/0 trusts")]));
        check(&with("::/0"), Expect::Ok(&[&format!("{field}::/0 trusts")]));
        let v4 = format!("{field}10.0.0.1/8 has host bits set: it trusts all of 10.0.0.0/8");
        check(&with("10.0.0.1/8"), Expect::Ok(&[&v4]));
        let v6 = format!("{field}fd00::1/64 has host bits set: it trusts all of fd00::/64");
        check(&with("fd00::1/64"), Expect::Ok(&[&v6]));
        for fine in ["10.0.0.0/8", "10.0.0.1", "10.0.0.1/32", "fd00::/64", "::1"] {
            check(&with(fine), Expect::Ok(&[]));
        }
    }

    /// A destination at hookwall's own `server.listen` is a forwarding loop: warned about (a
    /// review found it accepted silently); another port, or another address, is not.
    #[test]
    fn a_destination_at_our_own_listen_is_warned_about() {
        let with = |listen: &str, url: &str| {
            MINIMAL
                .replace("http://127.0.0.1:3000/hooks", url)
                .replace("[[source]]", &format!("[server]\nlisten = {listen:?}\n\n[[source]]"))
        };
        let warned = ["destination[d].url: points at hookwall's own server.listen"];
        check(&with("127.0.0.1:8080", "http://127.0.0.1:8080/webhooks/s"), Expect::Ok(&warned));
        check(&with("0.0.0.0:8080", "http://localhost:8080/x"), Expect::Ok(&warned));
        check(&with("[::]:80", "http://[::1]/x"), Expect::Ok(&warned));
        check(&with("127.0.0.1:8080", "http://127.0.0.1:8081/x"), Expect::Ok(&[]));
        check(&with("127.0.0.1:8080", "http://127.0.0.2:8080/x"), Expect::Ok(&[]));
        check(&with("127.0.0.1:8080", "http://app.internal:8080/x"), Expect::Ok(&[]));
    }

    /// A `read_timeout` under 1 s answers ordinary internet latency with 408, over 1 h lets a
    /// stalled client hold its connection: both warned about (a review found "1ns" and "100y"
    /// taken silently); 1 s and 1 h are not.
    #[test]
    fn a_read_timeout_out_of_range_is_warned_about() {
        let with = |t: &str| minimal_with(&format!("[server]\nread_timeout = \"{t}\""), "");
        check(&with("1ns"), Expect::Ok(&["server.read_timeout: is under 1s"]));
        check(&with("100y"), Expect::Ok(&["server.read_timeout: is over 1h"]));
        check(&with("1s"), Expect::Ok(&[]));
        check(&with("1h"), Expect::Ok(&[]));
    }

    /// A Stripe secret without `whsec_` is most likely an API key pasted by mistake: warned
    /// about (never printed), and a `whsec_` secret is not.
    #[test]
    fn a_stripe_secret_without_whsec_is_warned_about() {
        let stripe = |value: &str| {
            MINIMAL.replace("provider = \"github\"", "provider = \"stripe\"").replace(
                "secrets = [{ id = \"k\", env = \"GH_SECRET\" }]",
                &format!("secrets = [{{ id = \"k\", value = \"{value}\" }}]"),
            )
        };
        let inline = "source[s].secrets[k]: inline secret value";
        let config = check(
            &stripe("sk_live_TOPSECRET"),
            Expect::Ok(&[inline, "source[s].secrets[k]: does not start with whsec_"]),
        );
        let warnings = config.map(|c| c.warnings.join("\n")).unwrap_or_default();
        assert!(!warnings.contains("TOPSECRET"), "secret printed: {warnings}");
        check(&stripe("whsec_0123456789"), Expect::Ok(&[inline]));
    }

    #[test]
    fn secret_mistakes() {
        let case = |provider: &str, secrets: &str, expect: &[&str]| {
            let text = MINIMAL
                .replace("provider = \"github\"", &format!("provider = \"{provider}\""))
                .replace("secrets = [{ id = \"k\", env = \"GH_SECRET\" }]", secrets);
            check(&text, Expect::Errors(expect));
        };
        case(
            "github",
            r#"secrets = [{ id = "k", env = "EMPTY" }]"#,
            &["source[s].secrets[k].env: environment variable EMPTY is unset or empty"],
        );
        case(
            "standard",
            r#"secrets = [{ id = "k", value = "whsec_not*base64" }]"#,
            &["source[s].secrets[k]: Standard Webhooks secret is not base64"],
        );
        case(
            "standard",
            r#"secrets = [{ id = "k", value = "whsk_AAAA" }]"#,
            &["source[s].secrets[k]: a whsk_ signing key was given; configure its public key"],
        );
        case(
            "standard",
            r#"secrets = [{ id = "k", value = "whpk_AAAA" }]"#,
            &["source[s].secrets[k]: Standard Webhooks public key is 3 bytes; Ed25519 keys are 32"],
        );
        case(
            "svix",
            r#"secrets = [{ id = "k", value = "whpk_AAAA" }]"#,
            &["source[s].secrets[k]: Svix signs with HMAC only"],
        );
        case(
            "github",
            r#"secrets = [{ id = "k", value = "x", env = "GH_SECRET" }]"#,
            &["source[s].secrets[k]: needs exactly one of value, env or file"],
        );
        case(
            "github",
            r#"secrets = [{ id = "k", file = "/nonexistent/k" }]"#,
            &["source[s].secrets[k].file: cannot read /nonexistent/k"],
        );
        let rotation = r#"secrets = [
            { id = "k", env = "GH_SECRET", not_before = "2026-02-01T00:00:00Z",
              not_after = "2026-01-01T00:00:00Z" },
            { id = "k", env = "GH_SECRET", not_after = "tomorrow" },
        ]"#;
        case(
            "github",
            rotation,
            &[
                "source[s].secrets[k].not_after: must be later than not_before",
                "source[s].secrets[#2].id: duplicate secret id \"k\"",
                "source[s].secrets[k].not_after: is not an RFC 3339 UTC timestamp",
            ],
        );
    }

    #[test]
    fn duplicate_ids_and_references() {
        let text = format!(
            "{MINIMAL}\n{}\n{}",
            MINIMAL.replace("[[destination]]\n        id = \"d\"", "[[destination]]\nid = \"e\""),
            "[[destination]]\nid = \"d\"\nurl = \"https://[::1]:8443/x\"",
        );
        check(
            &text,
            Expect::Errors(&[
                "destination[#3].id: duplicate destination id \"d\"",
                "source[#2].id: duplicate source id \"s\"",
            ]),
        );
    }

    /// R22: `ordering_key` is an RFC 6901 JSON pointer; anything else is a precise error.
    #[test]
    fn ordering_key_must_be_a_json_pointer() {
        for (pointer, want) in [
            ("data/id", "source[s].ordering_key: \"data/id\" is not a JSON pointer"),
            ("", "source[s].ordering_key: \"\" is not a JSON pointer"),
            ("/a~2", "source[s].ordering_key: \"/a~2\": `~` must be followed by 0 or 1"),
        ] {
            let text = minimal_with("", &format!("ordering_key = {pointer:?}"));
            check(&text, Expect::Errors(&[want]));
        }
        let text = minimal_with("", "ordering_key = \"/data/object/id\"");
        check(&text, Expect::Ok(&[]));
        let pg = "[ledger]\nbackend = \"postgres\"\nurl = \"postgres://h/db\"";
        let text = minimal_with(pg, "ordering_key = \"/data/object/id\"");
        check(&text, Expect::Ok(&[]));
    }

    /// R25: without `dedupe_retention`, identities are kept 7 days, or longer when a source's
    /// retry horizon (+ 1 day) or twice its tolerance needs it.
    #[test]
    fn dedupe_retention_defaults_from_the_sources() {
        let config =
            Config::from_toml_str_at(&minimal_with("", ""), Path::new("x.toml"), &env, NOW)
                .unwrap();
        assert_eq!(config.ledger.dedupe_retention, days(7));
        let standard = |text: String| {
            text.replace("provider = \"github\"", "provider = \"standard\"")
                .replace("GH_SECRET", "STANDARD_SECRET")
        };
        let long = standard(minimal_with("", "tolerance = \"5d\""));
        let config = Config::from_toml_str_at(&long, Path::new("x.toml"), &env, NOW).unwrap();
        assert_eq!(config.ledger.dedupe_retention, days(10), "2 × a 5-day tolerance");
        let set =
            standard(minimal_with("[ledger]\ndedupe_retention = \"8d\"", "tolerance = \"5d\""));
        let config = Config::from_toml_str_at(&set, Path::new("x.toml"), &env, NOW).unwrap();
        assert_eq!(config.ledger.dedupe_retention, days(8), "an explicit value stands (warned)");
        // GitHub signs no timestamp: its (ignored) tolerance lengthens nothing.
        let github = minimal_with("", "tolerance = \"5d\"");
        let config = Config::from_toml_str_at(&github, Path::new("x.toml"), &env, NOW).unwrap();
        assert_eq!(config.ledger.dedupe_retention, days(7), "github: no replay window");
    }

    /// The short-`dedupe_retention` warning cites `2 × tolerance` only for a source that has a
    /// replay window: on GitHub (no signed timestamp, its tolerance ignored) it once cited the
    /// ignored value and asked for 10 days where 3 suffice (review).
    #[test]
    fn the_retention_warning_cites_no_tolerance_a_provider_does_not_sign() {
        let four_days = "[ledger]\ndedupe_retention = \"4d\"";
        let github = minimal_with(four_days, "tolerance = \"5d\"");
        check(&github, Expect::Ok(&["source[s].tolerance: github signs no timestamp"]));
        let two_days = minimal_with("[ledger]\ndedupe_retention = \"2d\"", "");
        check(
            &two_days,
            Expect::Ok(&[
                "ledger.payload_retention: 3days (unset: the default) is longer than",
                "ledger.dedupe_retention: is 2days but source s (github) needs at least 3days \
                 (provider retry horizon 3days; no signed timestamp)",
            ]),
        );
        let standard = minimal_with(four_days, "tolerance = \"5d\"")
            .replace("provider = \"github\"", "provider = \"standard\"")
            .replace("GH_SECRET", "STANDARD_SECRET");
        check(
            &standard,
            Expect::Ok(&[
                "source[s].tolerance: tolerance 5days is longer than a day",
                "ledger.dedupe_retention: is 4days but source s (standard) needs at least \
                 10days (provider retry horizon 1day 3h 36m, 2 × tolerance 10days)",
            ]),
        );
    }

    /// A short `dedupe_retention` alone is warned about as against the default
    /// `payload_retention`, said to be the default (the warning once read as if the file had
    /// set it: review).
    #[test]
    fn a_default_payload_retention_is_named_as_the_default() {
        let text = minimal_with("[ledger]\ndedupe_retention = \"1h\"", "");
        let config = Config::from_toml_str_at(&text, Path::new("x.toml"), &env, NOW).unwrap();
        let said = "ledger.payload_retention: 3days (unset: the default) is longer than \
                    ledger.dedupe_retention (1h):";
        assert!(config.warnings.iter().any(|w| w.contains(said)), "{:#?}", config.warnings);
    }

    /// `payload_retention = "0s"` is accepted but warned about: it makes delivered events
    /// impossible to replay, which an operator finds out only at the replay otherwise (R25).
    #[test]
    fn a_zero_payload_retention_is_warned_about() {
        let text = minimal_with("[ledger]\npayload_retention = \"0s\"", "");
        let config = Config::from_toml_str_at(&text, Path::new("x.toml"), &env, NOW).unwrap();
        assert!(config.ledger.payload_retention.is_zero());
        let said = "ledger.payload_retention: 0s: a delivered or dropped event's body";
        assert!(config.warnings.iter().any(|w| w.contains(said)), "{:#?}", config.warnings);
        let text = minimal_with("[ledger]\npayload_retention = \"1s\"", "");
        let config = Config::from_toml_str_at(&text, Path::new("x.toml"), &env, NOW).unwrap();
        let payload_warnings = config.warnings.iter().filter(|w| w.contains("payload_retention"));
        assert_eq!(payload_warnings.count(), 0, "{:#?}", config.warnings);
    }

    #[test]
    fn warnings() {
        let top = "[ledger]\nsync = false\ndedupe_retention = \"1d\"\npayload_retention = \"2d\"";
        let extra = "ordering_key = \"/data/id\"\n[[destination]]\nid = \"unused\"\n\
                     url = \"http://localhost:1/\"\n\
                     signing_secret = { value = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\" }";
        let retired =
            r#"secrets = [{ id = "k", env = "GH_SECRET", not_after = "2025-01-01T00:00:00Z" }]"#;
        let text = minimal_with(top, extra)
            .replace("secrets = [{ id = \"k\", env = \"GH_SECRET\" }]", retired);
        check(
            &text,
            Expect::Ok(&[
                "ledger.sync: false: acks before fsync; for benchmarks only",
                "ledger.payload_retention: 2days is longer than ledger.dedupe_retention (1day)",
                "destination[unused].signing_secret: inline secret value; prefer env or file",
                "source[s]: every secret is past its not_after",
                "ledger.dedupe_retention: is 1day but source s (github) needs at least 3days",
                "destination[unused]: no source uses this destination",
            ]),
        );
    }

    #[test]
    fn errors_display_one_line_each() {
        let errors = Config::from_toml_str_at("", Path::new("x.toml"), &env, NOW).unwrap_err();
        assert_eq!(
            errors.to_string(),
            "x.toml: source: no [[source]] is configured; at least one is needed"
        );
        let missing = Config::load(Path::new("/nonexistent/hookwall.toml")).unwrap_err();
        assert!(missing.to_string().starts_with("/nonexistent/hookwall.toml: cannot read"));
    }

    #[test]
    fn url_and_cidr_forms() {
        for good in
            ["http://a", "https://h.example:443/p?q#f", "http://[::1]:80/", "http://10.0.0.1"]
        {
            assert_eq!(url_problem(good), None, "{good}");
        }
        for bad in [
            "127.0.0.1:80",
            "http://",
            "http://u:p@h/",
            "http://h:99999/",
            "http://h:0/",
            "http://h:/",
            "http://h x/",
            "http://::1/",
        ] {
            assert!(url_problem(bad).is_some(), "{bad}");
        }
        assert_eq!(nats_url_problem("nats://h:4222"), None);
        for bad in ["nats://h:0", "tls://h:0/", "nats://h:65536"] {
            assert!(nats_url_problem(bad).is_some(), "{bad}");
        }
        for good in ["10.0.0.0/8", "192.168.1.1", "fd00::/8", "::1/128", "0.0.0.0/0"] {
            assert_eq!(cidr_problem(good), None, "{good}");
        }
        for bad in ["10.0.0.0/33", "fd00::/129", "10.0.0/8", "10.0.0.0/x", ""] {
            assert!(cidr_problem(bad).is_some(), "{bad}");
        }
    }
}
