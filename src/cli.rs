//! The command line (SPEC §1): `hookwall serve -c FILE`, `hookwall check-config -c FILE`,
//! `hookwall verify`, `hookwall loadgen` (in [`crate::loadgen`]), `hookwall dlq …` (the
//! operator CLI, `dlq.rs`).
//! Exit codes: 0 ok, 2 bad usage or config, 1 runtime failure.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::Config;

/// hookwall: verify webhooks, admit each event exactly once into a durable ledger before
/// acknowledging, and forward it downstream.
#[derive(Debug, Parser)]
#[command(name = "hookwall", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the appliance: ingress, ledger, dispatcher and admin listener.
    Serve(ServeArgs),
    /// Validate a config file, print its sources and destinations, exit 0 (valid) or 2.
    CheckConfig(ConfigArg),
    /// Offline: is this captured delivery (body on stdin) authentic and fresh? Exit 0 yes,
    /// 1 no (the reason on stderr), 2 bad usage.
    Verify(VerifyArgs),
    /// Load generator: signed deliveries to any URL, open loop (`--rate`, coordinated-omission
    /// corrected) or closed loop (`--max`); HdrHistogram percentiles and answer counts.
    Loadgen(crate::loadgen::Args),
    /// Operator tooling over the admin API: list, inspect, replay and drop events (R20).
    Dlq(crate::dlq::DlqArgs),
    /// Apply the PostgreSQL ledger's schema migrations (`ledger.backend = "postgres"`): exit 0
    /// when the schema is at this binary's version, 1 when the database fails or is newer,
    /// 2 on a bad config.
    Migrate(ConfigArg),
}

/// `verify`'s arguments (SPEC §1).
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Provider, as in the config: one of this build's providers (`docs/providers.md`; an
    /// unknown name lists them).
    #[arg(long)]
    pub provider: String,
    /// The secret exactly as the provider's dashboard shows it. It is visible to other local
    /// users in the process list: use on a workstation, not a shared host.
    #[arg(long)]
    pub secret: String,
    /// A captured header, `'Name: value'`; repeat for each.
    #[arg(long = "header")]
    pub headers: Vec<String>,
    /// The URL the provider posted to, as it saw it (`https://host/path?query`): required by
    /// the URL-signing providers (twilio, square, hubspot, mandrill), ignored by the others.
    #[arg(long)]
    pub url: Option<String>,
    /// Judge freshness as of this time, Unix seconds (default: now).
    #[arg(long = "at")]
    pub at_unix_s: Option<i64>,
    /// A scheme option of the source, as its `[[source]]` TOML line: `'legacy_sha1 = true'`
    /// (GitHub), `'hmac = { header = "…", … }'` (required for `hmac`) or
    /// `'hmac_signature = "header"'` (Adyen); repeat for each.
    #[arg(long = "scheme")]
    pub scheme: Vec<String>,
}

/// `serve`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The config file.
    #[command(flatten)]
    pub config: ConfigArg,
    /// Log line format on stderr: `text` (human), `json` (one object per line) or `logfmt`
    /// (`key=value` pairs), the last two for log shippers. Level and filter come from `HOOKWALL_LOG` (tracing filter syntax).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured only on a terminal).
    Text,
    /// One JSON object per line.
    Json,
    /// One logfmt line per event: `ts=… level=info target=… code=reloaded …`.
    Logfmt,
}

/// `-c FILE`.
#[derive(Debug, clap::Args)]
pub struct ConfigArg {
    /// Config file (TOML, SPEC §2).
    #[arg(
        short = 'c',
        long = "config",
        env = CONFIG_ENV,
        default_value = "/etc/hookwall/hookwall.toml"
    )]
    pub config: PathBuf,
}

/// The environment variable that names the config file when `-c`/`--config` is not given.
pub const CONFIG_ENV: &str = "HOOKWALL_CONFIG";

/// Parses the command line; bad usage exits 2 with clap's message, except an empty
/// [`CONFIG_ENV`], which clap reports as a `--config` the user never typed given without a
/// value.
pub fn parse() -> Cli {
    Cli::try_parse().unwrap_or_else(|e| {
        let empty_env = std::env::var_os(CONFIG_ENV).is_some_and(|v| v.is_empty());
        let typed = std::env::args_os()
            .any(|a| a == "-c" || a == "--config" || a.to_string_lossy().starts_with("--config="));
        let about_config = e.kind() == clap::error::ErrorKind::InvalidValue
            && e.to_string().contains("'--config <CONFIG>'");
        if empty_env && about_config && !typed {
            eprintln!(
                "error: {CONFIG_ENV} is set but empty: set it to the config file's path, or \
                 unset it (then -c/--config names the file, else /etc/hookwall/hookwall.toml)"
            );
            std::process::exit(2);
        }
        e.exit()
    })
}

/// `hookwall migrate`: brings the PostgreSQL schema to this binary's version.
fn migrate(arg: &ConfigArg) -> ExitCode {
    let config = match Config::load(&arg.config) {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::from(2);
        }
    };
    let crate::config::LedgerBackend::Postgres(pg) = &config.ledger.backend else {
        println!("ledger.backend is rocksdb: its layout needs no migration");
        return ExitCode::SUCCESS;
    };
    let connector = match crate::ledger::postgres::Connector::new(&pg.url) {
        Ok(connector) => connector,
        Err(e) => {
            eprintln!("{}: ledger.url: {e}", config.path.display());
            return ExitCode::from(2);
        }
    };
    let result = connector
        .connect()
        .map_err(crate::ledger::postgres::schema::SchemaError::from)
        .and_then(|mut client| {
            crate::ledger::postgres::schema::migrate(&mut client, crate::clock::now_unix_ms())
        });
    match result {
        Ok((from, to)) if from == to => {
            println!("schema already at version {to}");
            ExitCode::SUCCESS
        }
        Ok((from, to)) => {
            println!("schema migrated from version {from} to {to}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}: ledger.url (server {}): {e}", config.path.display(), connector.server());
            ExitCode::from(1)
        }
    }
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    if !matches!(cli.command, Command::Serve(_)) {
        default_sigpipe();
    }
    match cli.command {
        Command::CheckConfig(arg) => match Config::load(&arg.config) {
            Ok(config) => {
                print!("{}", config.describe());
                for warning in &config.warnings {
                    eprintln!("warning: {}: {warning}", config.path.display());
                }
                println!("{}: ok", config.path.display());
                ExitCode::SUCCESS
            }
            Err(errors) => {
                eprintln!("{errors}");
                ExitCode::from(2)
            }
        },
        Command::Verify(args) => verify(args),
        Command::Loadgen(args) => crate::loadgen::main(&args),
        Command::Dlq(args) => crate::dlq::run(args),
        Command::Migrate(arg) => migrate(&arg),
        Command::Serve(ServeArgs { config: arg, log_format }) => {
            init_logging(log_format);
            abort_on_panic();
            let config = match Config::load(&arg.config) {
                Ok(config) => config,
                Err(errors) => {
                    eprintln!("{errors}");
                    return ExitCode::from(2);
                }
            };
            match crate::server::run(config) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(code = "serve_failed", "{e:#}");
                    if !tracing::enabled!(tracing::Level::ERROR) {
                        // `HOOKWALL_LOG` hides errors (say a mistyped level, read as a target
                        // name): the reason the process ends must still be seen.
                        eprintln!("hookwall serve: {e:#}");
                    }
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// `hookwall verify`: prints what was learned (exit 0) or why not (stderr, exit 1 or 2).
fn verify(args: VerifyArgs) -> ExitCode {
    let body = match crate::offline::read_body() {
        Ok(body) => body,
        Err(e) => {
            eprintln!("hookwall verify: reading the body from stdin: {e}");
            return ExitCode::from(2);
        }
    };
    let captured = crate::offline::Captured {
        provider: args.provider,
        secret: args.secret,
        headers: args.headers,
        url: args.url,
        at_unix_s: args.at_unix_s.unwrap_or_else(crate::clock::now_unix_s),
        scheme: args.scheme,
    };
    match crate::offline::judge(&captured, body) {
        crate::offline::Verdict::Authentic(lines) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        crate::offline::Verdict::Rejected(why) => {
            eprintln!("not authentic or not fresh: {why}");
            ExitCode::from(1)
        }
        crate::offline::Verdict::Usage(why) => {
            eprintln!("hookwall verify: {why}");
            ExitCode::from(2)
        }
    }
}

/// A panic anywhere is a broken invariant (STYLE "Errors"): log it and abort the whole
/// process, so systemd restarts it and recovery runs from the ledger, instead of limping on
/// with a dead shard writer or core. The one exception is a panic inside the NATS client
/// library ([`crate::dispatch::contain_nats_client_panic`]): caused by what a NATS server
/// sent, not by a broken invariant of ours, it unwinds the client's task and fails one attempt.
fn abort_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.location().is_some_and(|l| crate::dispatch::contain_nats_client_panic(l.file())) {
            tracing::error!(code = "nats_client_panicked", panic = %info, "The NATS client library panicked on what a NATS server sent; the attempt fails (retried unless it was the last) and the destination's client connects anew.");
            return;
        }
        tracing::error!(code = "panic", panic = %info, "broken invariant; aborting");
        default(info);
        std::process::abort();
    }));
}

/// Logs to stderr; level from `HOOKWALL_LOG` (tracing filter syntax), default `info`. A value
/// that is not a filter is reported on stderr and `info` used instead.
fn init_logging(format: LogFormat) {
    let filter = match std::env::var("HOOKWALL_LOG") {
        Ok(text) if !text.trim().is_empty() => tracing_subscriber::EnvFilter::try_new(&text)
            .unwrap_or_else(|e| {
                eprintln!(
                    "hookwall: HOOKWALL_LOG={text:?} is not a log filter ({e}); logging at info"
                );
                tracing_subscriber::EnvFilter::new("info")
            }),
        _ => tracing_subscriber::EnvFilter::new("info"),
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Logfmt => builder
            .event_format(tracing_logfmt::EventsFormatter::default())
            .fmt_fields(tracing_logfmt::FieldsFormatter::default())
            .try_init(),
        // Colour only on a terminal: journald and log files get plain text.
        LogFormat::Text => {
            builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init()
        }
    };
}

/// Restores the default SIGPIPE action for the one-shot commands, as command-line tools do:
/// `hookwall dlq list | head` then ends quietly when `head` closes the pipe instead of panicking
/// in `println!`. Sockets are unaffected (Rust writes to them with `MSG_NOSIGNAL`); `serve`
/// keeps SIGPIPE ignored.
fn default_sigpipe() {
    // SAFETY: setting a signal disposition to its default, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
