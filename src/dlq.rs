//! `hookwall dlq` (SPEC §1, R20): list, inspect, replay and drop events through the admin API
//! (`/admin/*`, SPEC §6) of a running hookwall.
//!
//! The admin URL and token file come from `--admin` / `--token-file`, else from the config file
//! (`server.admin_listen`, `admin.token_file`; only those two keys are read, so a config whose
//! secrets live in another environment still serves). Exit codes: 0 ok; 2 bad usage (clap, or
//! no admin URL / token); 1 runtime failure (admin unreachable, token refused, an action that
//! was not carried out). Bulk replay pages through the list (memory bounded by one page),
//! is throttled by `--rate`, and shows a progress bar on a terminal.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};

/// Longest time one admin request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Page size used when following list cursors (the admin API's largest).
const PAGE_MAX: usize = 1000;
/// Most items `dlq list` prints (`--limit`).
const LIST_LIMIT_MAX: usize = 100_000;
/// Highest `--rate` accepted, replays per second.
const RATE_MAX: u32 = 10_000;

/// `hookwall dlq …` arguments.
#[derive(Debug, Args)]
pub struct DlqArgs {
    /// Config file to read `server.admin_listen` and `admin.token_file` from.
    #[arg(
        short = 'c',
        long = "config",
        env = "HOOKWALL_CONFIG",
        default_value = "/etc/hookwall/hookwall.toml",
        global = true
    )]
    pub config: PathBuf,
    /// Admin API base URL, e.g. `http://127.0.0.1:9090` (default: from `server.admin_listen`).
    #[arg(long, global = true)]
    pub admin: Option<String>,
    /// File holding the admin bearer token (default: `admin.token_file` of the config).
    #[arg(long, global = true)]
    pub token_file: Option<PathBuf>,
    /// Print JSON for scripts instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: DlqCommand,
}

/// `dlq` subcommands.
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List events in one state (default `dead`), in ledger key order, page by page.
    List(ListArgs),
    /// Show one event: state, attempts, last error, payload while retained.
    Inspect {
        /// Idempotency key `tenant/source/event id`, unencoded.
        #[arg(value_parser = event_key)]
        key: String,
    },
    /// Re-queue events with attempts reset (from dead, dropped or failed).
    Replay(ReplayArgs),
    /// Settle events as dropped (from received, failed or dead).
    Drop {
        /// Idempotency keys, unencoded.
        #[arg(required = true, value_parser = event_key)]
        keys: Vec<String>,
        /// Why (kept in the audit log).
        #[arg(long, required = true, value_parser = non_empty)]
        reason: String,
    },
}

/// `dlq list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this source id.
    #[arg(long)]
    pub source: Option<String>,
    /// Which list.
    #[arg(long, value_enum, default_value_t = ListState::Dead)]
    pub state: ListState,
    /// Most events printed (1..=100000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub limit: u32,
}

/// `--state` of `dlq list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListState {
    /// Dead-lettered: attempts exhausted or a permanent answer.
    Dead,
    /// Conflicting copies (same key, other fingerprint).
    Quarantined,
    /// Waiting for a retry.
    Failed,
    /// Refused bodies (schema rejects), minimised.
    Rejected,
    /// Dropped by an operator.
    Dropped,
}

impl ListState {
    fn code(self) -> &'static str {
        match self {
            ListState::Dead => "dead",
            ListState::Quarantined => "quarantined",
            ListState::Failed => "failed",
            ListState::Rejected => "rejected",
            ListState::Dropped => "dropped",
        }
    }
}

/// `dlq replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Idempotency keys, unencoded.
    #[arg(required_unless_present = "all", conflicts_with = "all", value_parser = event_key)]
    pub keys: Vec<String>,
    /// Replay every dead event (of `--source`, when given).
    #[arg(long)]
    pub all: bool,
    /// With `--all`: only this source id.
    #[arg(long, requires = "all")]
    pub source: Option<String>,
    /// Why (kept in the audit log).
    #[arg(long, required = true, value_parser = non_empty)]
    pub reason: String,
    /// Most replays per second (1..=10000), so a bulk replay cannot flood the destination.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=i64::from(RATE_MAX)))]
    pub rate: u32,
}

/// An idempotency key as `dlq list` prints it: `tenant/source/event id`, none of the three
/// empty (the event id may itself hold `/`). Checked before any request, so a mistyped key is
/// bad usage (exit 2), not a network round trip.
fn event_key(text: &str) -> Result<String, String> {
    let mut parts = text.splitn(3, '/');
    let whole = (parts.next(), parts.next(), parts.next());
    match whole {
        (Some(t), Some(s), Some(id)) if !t.is_empty() && !s.is_empty() && !id.is_empty() => {
            Ok(text.to_owned())
        }
        _ => {
            Err("an idempotency key is tenant/source/event id, as `dlq list` prints it".to_owned())
        }
    }
}

fn non_empty(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(text.to_owned())
    }
}

/// Why a `dlq` command failed, and its exit code.
#[derive(Debug)]
enum Failure {
    /// Bad usage or config: exit 2.
    Usage(String),
    /// Runtime failure: exit 1.
    Runtime(String),
}

/// Runs `hookwall dlq …` and returns the exit code.
pub fn run(args: DlqArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hookwall dlq: cannot start a runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run_async(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("hookwall dlq: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(message)) => {
            eprintln!("hookwall dlq: {message}");
            ExitCode::from(1)
        }
    }
}

async fn run_async(args: DlqArgs) -> Result<(), Failure> {
    let api = Api::new(&args)?;
    match args.command {
        DlqCommand::List(list) => list_events(&api, &list, args.json).await,
        DlqCommand::Inspect { key } => inspect(&api, &key, args.json).await,
        DlqCommand::Replay(replay) if replay.all => replay_all(&api, &replay, args.json).await,
        // clap's `requires` counts the `--all` flag as present even when false.
        DlqCommand::Replay(ReplayArgs { source: Some(_), .. }) => {
            Err(Failure::Usage("--source applies to --all only, not to keys".to_owned()))
        }
        DlqCommand::Replay(replay) => {
            act_on_keys(&api, "replay", &replay.keys, &replay.reason, args.json).await
        }
        DlqCommand::Drop { keys, reason } => {
            act_on_keys(&api, "drop", &keys, &reason, args.json).await
        }
    }
}

/// The admin API client: base URL and bearer token.
struct Api {
    base: String,
    token: String,
    token_file: PathBuf,
    client: reqwest::Client,
}

/// The two keys of the config file `dlq` needs.
fn config_defaults(path: &std::path::Path) -> Result<(Option<String>, Option<String>), Failure> {
    let text =
        crate::config::read_text(path, crate::limits::CONFIG_FILE_BYTES_MAX).map_err(|e| {
            Failure::Usage(format!(
                "cannot read the config {} ({e}); give --admin and --token-file, or -c FILE",
                path.display()
            ))
        })?;
    // The position and the parser's message only: its full display quotes the offending line,
    // which may hold an inline secret (R28).
    let value: toml::Value = toml::from_str(&text).map_err(|e| {
        let line = e.span().map_or(0, |s| text[..s.start.min(text.len())].lines().count().max(1));
        Failure::Usage(format!(
            "{}: not valid TOML at line {line}: {}",
            path.display(),
            e.message().trim_end()
        ))
    })?;
    let get = |table: &str, key: &str| -> Result<Option<String>, Failure> {
        match value.get(table).and_then(|t| t.get(key)) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => {
                Err(Failure::Usage(format!("{}: {table}.{key}: is not a string", path.display())))
            }
        }
    };
    let admin = get("server", "admin_listen")?.or_else(|| Some("127.0.0.1:9090".to_owned()));
    Ok((admin.map(|a| format!("http://{a}")), get("admin", "token_file")?))
}

impl Api {
    fn new(args: &DlqArgs) -> Result<Api, Failure> {
        let (from_config_url, from_config_token) =
            if args.admin.is_some() && args.token_file.is_some() {
                (None, None)
            } else {
                config_defaults(&args.config)?
            };
        let base = args.admin.clone().or(from_config_url).expect("config_defaults gives a URL");
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Failure::Usage(format!(
                "--admin {base:?}: must start with http:// or https://"
            )));
        }
        let token_file = match (&args.token_file, from_config_token) {
            (Some(f), _) => f.clone(),
            (None, Some(f)) => PathBuf::from(f),
            (None, None) => {
                return Err(Failure::Usage(format!(
                    "no admin token: give --token-file, or set admin.token_file in {}",
                    args.config.display()
                )))
            }
        };
        let token = crate::config::read_text(&token_file, crate::limits::SECRET_FILE_BYTES_MAX)
            .map_err(|e| {
                Failure::Usage(format!("token file {}: cannot read: {e}", token_file.display()))
            })?
            .trim()
            .to_owned();
        if token.is_empty() {
            return Err(Failure::Usage(format!("token file {}: is empty", token_file.display())));
        }
        if !crate::admin::auth::is_token_text(&token) {
            return Err(Failure::Usage(format!(
                "token file {}: the token must be one line of visible ASCII (RFC 6750 bearer \
                 token characters)",
                token_file.display()
            )));
        }
        // Err: a provider is already installed for this process; that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .tls_backend_rustls()
            // The admin API never redirects: a redirect means another server at --admin, and
            // following it would send a replay's reason there (the token is never forwarded
            // across hosts by reqwest, but the request would be).
            .redirect(reqwest::redirect::Policy::none())
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("hookwall-dlq/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Failure::Runtime(format!("cannot build an HTTP client: {e}")))?;
        Ok(Api { base, token, token_file, client })
    }

    /// Sends one request; returns the status and the JSON body. Unreachable, 401 and 403 are
    /// failures here; other statuses are the caller's to judge.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), Failure> {
        let url = format!("{}{path}", self.base);
        let mut request = self.client.request(method, &url).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_string());
        }
        let response = request.send().await.map_err(|e| {
            Failure::Runtime(format!(
                "cannot reach the admin API at {}: {}",
                self.base,
                root_cause(&e)
            ))
        })?;
        let status = response.status().as_u16();
        if !response.headers().contains_key(crate::admin::api::ADMIN_API_HEADER) {
            return Err(Failure::Runtime(format!(
                "{} is not hookwall's admin API (HTTP {status} without a {} header): check \
                 --admin or server.admin_listen",
                self.base,
                crate::admin::api::ADMIN_API_HEADER
            )));
        }
        let bytes = response.bytes().await.map_err(|e| {
            Failure::Runtime(format!(
                "reading the admin API's answer from {}: {}",
                self.base,
                root_cause(&e)
            ))
        })?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        match status {
            401 => Err(Failure::Runtime(format!(
                "the admin API at {} refused the token from {} (401): {}",
                self.base,
                self.token_file.display(),
                message(&value)
            ))),
            403 => Err(Failure::Runtime(format!(
                "the admin API at {} is disabled (403): {}",
                self.base,
                message(&value)
            ))),
            _ => Ok((status, value)),
        }
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

fn message(value: &Value) -> String {
    value
        .get("message")
        .or_else(|| value.get("status"))
        .and_then(Value::as_str)
        .unwrap_or("no explanation in the answer")
        .to_owned()
}

/// The key as one path segment (`/` → `%2F`).
fn encode_key(key: &str) -> String {
    percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// `?name=value&…` with form encoding.
fn query(pairs: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        q.append_pair(k, v);
    }
    q.finish()
}

/// One list page.
async fn page(
    api: &Api,
    state: &str,
    source: Option<&str>,
    limit: usize,
    cursor: Option<&str>,
) -> Result<(Vec<Value>, Option<String>), Failure> {
    let limit = limit.to_string();
    let mut pairs = vec![("state", state), ("limit", limit.as_str())];
    if let Some(s) = source {
        pairs.push(("source", s));
    }
    if let Some(c) = cursor {
        pairs.push(("cursor", c));
    }
    let path = format!("/admin/events?{}", query(&pairs));
    let (status, value) = api.call(reqwest::Method::GET, &path, None).await?;
    if status == 400 {
        // The list's arguments come from the command line (`--source`): bad usage, exit 2.
        return Err(Failure::Usage(format!("listing events: {status}: {}", message(&value))));
    }
    if status != 200 {
        return Err(Failure::Runtime(format!("listing events: {status}: {}", message(&value))));
    }
    let items = value.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
    let next = value.get("next_cursor").and_then(Value::as_str).map(str::to_owned);
    Ok((items, next))
}

async fn list_events(api: &Api, args: &ListArgs, json_out: bool) -> Result<(), Failure> {
    let want = (args.limit as usize).min(LIST_LIMIT_MAX);
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let asked = (want - items.len()).min(PAGE_MAX);
        let (got, next) =
            page(api, args.state.code(), args.source.as_deref(), asked, cursor.as_deref()).await?;
        items.extend(got);
        cursor = next;
        if items.len() >= want || cursor.is_none() {
            break;
        }
    }
    items.truncate(want);
    if json_out {
        println!("{}", json!({ "items": items, "next_cursor": cursor }));
        return Ok(());
    }
    let rows: Vec<[String; 6]> = items.iter().map(row).collect();
    print_table(&["KEY", "SOURCE", "STATE", "ATTEMPTS", "RECEIVED", "REASON / LAST ERROR"], &rows);
    let more = if cursor.is_some() { " (more: raise --limit)" } else { "" };
    println!("{} {} event(s){more}", items.len(), args.state.code());
    Ok(())
}

fn text(v: &Value, field: &str) -> String {
    match v.get(field) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "-".to_owned(),
    }
}

fn row(v: &Value) -> [String; 6] {
    let key = match v.get("key") {
        Some(Value::String(k)) => k.clone(),
        _ => format!("(event id {})", text(v, "event_id")),
    };
    let why = if v.get("reason").is_some() { text(v, "reason") } else { text(v, "last_error") };
    [key, text(v, "source"), text(v, "state"), text(v, "attempts"), text(v, "received_at"), why]
}

fn print_table(head: &[&str; 6], rows: &[[String; 6]]) {
    let mut widths = head.map(str::len);
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(*head);
    for r in rows {
        line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]].map(String::as_str));
    }
}

async fn inspect(api: &Api, key: &str, json_out: bool) -> Result<(), Failure> {
    let path = format!("/admin/events/{}", encode_key(key));
    let (status, value) = api.call(reqwest::Method::GET, &path, None).await?;
    match status {
        200 => {}
        404 => return Err(Failure::Runtime(format!("no event with key {key:?}"))),
        _ => {
            return Err(Failure::Runtime(format!(
                "inspecting {key:?}: {status}: {}",
                message(&value)
            )))
        }
    }
    if json_out {
        println!("{value}");
        return Ok(());
    }
    for field in [
        "key",
        "source",
        "state",
        "attempts",
        "last_error",
        "secret_id",
        "event_type",
        "content_type",
        "fingerprint",
        "received_at",
        "delivered_at",
        "next_attempt_at",
    ] {
        println!("{field:<16} {}", text(&value, field));
    }
    let history = value.get("attempt_history").and_then(Value::as_array);
    println!("attempt history");
    for a in history.into_iter().flatten() {
        let (n, at, outcome) = (text(a, "attempt"), text(a, "at"), text(a, "outcome"));
        println!("  #{n:<3} {at}  {outcome:<9} {}", text(a, "error"));
    }
    match (
        value.get("payload").and_then(Value::as_str),
        value.get("payload_base64").and_then(Value::as_str),
    ) {
        (Some(p), _) => println!("payload\n{p}"),
        (None, Some(b)) => println!("payload (base64)\n{b}"),
        (None, None) => println!("payload          (no longer retained)"),
    }
    Ok(())
}

/// POSTs `action` (`replay`/`drop`) for one key; `Ok(Err(text))` is a refusal to report.
async fn act(
    api: &Api,
    action: &str,
    key: &str,
    reason: &str,
) -> Result<Result<Value, String>, Failure> {
    let path = format!("/admin/events/{}/{action}", encode_key(key));
    let (status, value) =
        api.call(reqwest::Method::POST, &path, Some(json!({ "reason": reason }))).await?;
    if status == 200 {
        Ok(Ok(value))
    } else {
        Ok(Err(format!("{status} {}", message(&value))))
    }
}

async fn act_on_keys(
    api: &Api,
    action: &str,
    keys: &[String],
    reason: &str,
    json_out: bool,
) -> Result<(), Failure> {
    let mut failed = 0usize;
    let mut results = Vec::new();
    for key in keys {
        match act(api, action, key, reason).await? {
            Ok(v) => {
                if !json_out {
                    println!("{}: {key} (was {})", text(&v, "status"), text(&v, "state_before"));
                }
                results.push(v);
            }
            Err(why) => {
                failed += 1;
                if !json_out {
                    eprintln!("hookwall dlq: {action} {key}: {why}");
                }
                results.push(json!({ "status": "failed", "key": key, "message": why }));
            }
        }
    }
    if json_out {
        println!("{}", json!({ "results": results }));
    }
    if failed > 0 {
        return Err(Failure::Runtime(format!("{failed} of {} {action}(s) failed", keys.len())));
    }
    Ok(())
}

/// `replay --all`: pages through the dead events (one page in memory at a time) and replays
/// each, at most `--rate` per second.
async fn replay_all(api: &Api, args: &ReplayArgs, json_out: bool) -> Result<(), Failure> {
    let bar = indicatif::ProgressBar::new_spinner();
    if json_out {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} replayed {pos} dead event(s) [{elapsed}, {per_sec}] {msg}",
        )
        .expect("static template"),
    );
    let mut tick = tokio::time::interval(Duration::from_secs(1) / args.rate);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut replayed, mut failed) = (0u64, 0u64);
    let mut cursor: Option<String> = None;
    loop {
        let (items, next) =
            page(api, "dead", args.source.as_deref(), PAGE_MAX, cursor.as_deref()).await?;
        for item in items {
            let Some(key) = item.get("key").and_then(Value::as_str) else { continue };
            tick.tick().await;
            match act(api, "replay", key, &args.reason).await? {
                Ok(_) => {
                    replayed += 1;
                    bar.inc(1);
                }
                Err(why) => {
                    failed += 1;
                    bar.println(format!("replay {key}: {why}"));
                }
            }
        }
        cursor = next;
        if cursor.is_none() {
            break;
        }
    }
    bar.finish_and_clear();
    if json_out {
        println!("{}", json!({ "replayed": replayed, "failed": failed }));
    } else {
        println!("replayed {replayed} dead event(s); {failed} failed");
    }
    if failed > 0 {
        return Err(Failure::Runtime(format!("{failed} replay(s) failed")));
    }
    Ok(())
}
