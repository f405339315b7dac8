//! `tally`: Tally's command line.
//!
//! Commands are thin: they read the configuration, open the store and call the library crates.
//! Every command takes `--config` and the settings flags (`--store`, `--table`, …); see
//! [`config`] for the file, the `TALLY_*` variables and their precedence.

mod allocator;
mod app;
mod backup;
mod bench;
mod capacity;
mod config;
mod demo;
mod export;
mod history;
#[allow(dead_code)]
mod http;
mod import_events;
mod import_lines;
mod logging;
mod notify;
mod serve;
mod store;
mod umami_pg;
mod users;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{Config, Layer};

/// mimalloc rather than the system allocator. A dashboard decodes thousands of small items, each
/// a map of short strings, and sums their sketches; under glibc's malloc a third of that CPU was
/// the allocator itself (`_int_malloc`, `malloc_consolidate` and `free` in a profile of
/// `tally bench`). mimalloc is Microsoft's maintained allocator, built from its C sources by the
/// `mimalloc` crate with no system dependency; BENCHMARKS.md has the before and after. Blocks
/// whose alignment mimalloc gives anyway are asked for plainly ([`allocator`]).
#[global_allocator]
static ALLOCATOR: allocator::Allocator = allocator::Allocator;

/// Turns transparent huge pages off for this process. Where the kernel backs every anonymous
/// mapping with 2 MiB pages (`/sys/kernel/mm/transparent_hugepage/enabled` = `always`, as on
/// many distributions), mimalloc's arenas are faulted in 2 MiB at a time and the resident set
/// of `tally serve` grows by tens of megabytes that hold nothing (BENCHMARKS.md, "Server
/// memory"). The flag is the kernel's own per-process switch (`prctl(PR_SET_THP_DISABLE)`,
/// through `rustix`'s safe wrapper); failing to set it costs only memory, so it is ignored.
fn small_pages() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

/// How long mimalloc keeps freed memory before giving it back to the kernel, in milliseconds,
/// unless `MIMALLOC_PURGE_DELAY` says otherwise.
const PURGE_DELAY_MS: std::ffi::c_long = 100;

/// Shortens mimalloc's purge delay (a second in the mimalloc v3 the `mimalloc` crate builds) to
/// [`PURGE_DELAY_MS`]. Under sustained ingestion the delayed purges let short-lived buffers
/// (request bodies, block encodings, batches of items) stay resident; purging sooner costs
/// CPU wherever memory is freed and taken again within the delay: each purged page is given
/// back (`madvise`) and faulted in, zeroed, at its next use. At 10 ms that was about a sixth of
/// ingestion's CPU (`tally bench`: 75 against 61 µs per event, a third more system time), for
/// 1–4 MB less resident memory under 64 connections (BENCHMARKS.md, "twenty-third session";
/// the "third session" has the first measurements). An operator's `MIMALLOC_PURGE_DELAY` is
/// left as it is.
#[allow(unsafe_code)]
fn prompt_purge() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // `mi_option_purge_delay` is the sixteenth option (index 15) of `mi_option_t` in the
    // mimalloc v2 and v3 headers the `mimalloc` crate builds; the `mimalloc` crate does not name it.
    const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
    unsafe extern "C" {
        fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    }
    // SAFETY: mimalloc's option setter takes any option index and value at any time.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
}

/// How often a long-running process has mimalloc purge what is waiting to be purged, whatever
/// its schedule says.
const PURGE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Starts a thread that has mimalloc purge every [`PURGE_EVERY`] (`mi_collect(true)`: a forced
/// purge of every arena, and the collection of this thread's own, empty, heap).
///
/// mimalloc v3 purges freed memory on a schedule: each arena keeps an expiry, and the process
/// one that says when any arena is next due. A pass that finds nothing due clears the process's
/// expiry; when another thread schedules a purge on an arena between that pass's look at the
/// arena and its clearing, the arena keeps an expiry the process no longer has, and, since a
/// purge is only scheduled process-wide when the arena had none, no purge is due again: from then
/// on nothing freed is given back, and the resident set climbs to every later peak and stays
/// there. Under `tally serve`'s sustained ingestion (purges every 10 ms, as [`prompt_purge`] then set) that
/// happened in about one 90 s run in ten, and in five of six with purges every millisecond,
/// taking the server from 135–140 to 162–182 MB (BENCHMARKS.md, "fifteenth session"). A forced
/// pass ignores the expiries and resets the arena's, so the schedule works again; in between it
/// only purges sooner what was due within [`PURGE_DELAY_MS`] anyway.
#[allow(unsafe_code)]
fn keep_purging() {
    unsafe extern "C" {
        fn mi_collect(force: bool);
    }
    let started = std::thread::Builder::new().name("tally-purge".into()).spawn(|| {
        // mimalloc collects nothing for a thread that never allocated: give this one its heap.
        drop(std::hint::black_box(vec![0u8; 64]));
        loop {
            std::thread::sleep(PURGE_EVERY);
            // SAFETY: mimalloc's collection may be called from any thread at any time.
            unsafe { mi_collect(true) }
        }
    });
    // Without the thread the server runs as before, its memory less well kept.
    if let Err(e) = started {
        eprintln!("warning: no thread to purge freed memory: {e}");
    }
}

/// Privacy-first web analytics on a DynamoDB single-table design.
#[derive(Parser)]
#[command(name = "tally", version, about)]
struct Cli {
    /// A TOML configuration file [default: ./tally.toml when it exists].
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: Layer,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs Tally: ingestion, the dashboard, the Stats API and /metrics, until SIGTERM or Ctrl-C.
    Serve {
        /// Fills a demo site with months of synthetic traffic first (once), keeps live visits
        /// coming, and prints a read-only link to its dashboard.
        #[arg(long)]
        demo: bool,
    },
    /// Creates a demo site with months of realistic synthetic traffic (once).
    Demo {
        /// Days of history, ending now.
        #[arg(long, default_value_t = 180)]
        days: u32,
        /// Average events per day.
        #[arg(long, default_value_t = 1000.0)]
        events_per_day: f64,
    },
    /// Sites.
    Site {
        #[command(subcommand)]
        what: SiteCommand,
    },
    /// Goals of a site.
    Goal {
        #[command(subcommand)]
        what: GoalCommand,
    },
    /// Site API keys (for the Stats API and imports).
    Key {
        #[command(subcommand)]
        what: KeyCommand,
    },
    /// Dashboard accounts (every account is an admin). Passwords are read from standard input.
    User {
        #[command(subcommand)]
        what: UserCommand,
    },
    /// Read-only shared links to a site's dashboard.
    Share {
        #[command(subcommand)]
        what: ShareCommand,
    },
    /// Imports a file, its format found from its contents: events with their own timestamps
    /// (Tally's NDJSON, or CSV with `timestamp`, `url`, `name`, `referrer`, props, `visitor` or
    /// `ip` and `user_agent`, `country`, `interactive`, `browser`, `os`, `device`; Umami's CSV of
    /// `website_event` rows), ingested in time order; or history (Plausible's CSV export — its zip, a directory of its `imported_*`
    /// CSVs, or one of them — or Google Analytics data in that shape), stored as imported daily
    /// aggregates before the site's cut-over; or Umami's events read from its PostgreSQL database
    /// (`--umami-postgres`). Every line has an import id: the same file again, a part of it, or
    /// a rerun after a crash imports no line twice.
    Import {
        /// The file (or the directory of a Plausible export); none with `--umami-postgres`.
        file: Option<PathBuf>,
        /// The site (domain or id).
        #[arg(long)]
        site: String,
        /// `ndjson`, `csv`, `umami` or `plausible` [default: found from the file].
        #[arg(long)]
        format: Option<String>,
        /// Where imported history came from, as labelled in the store: `plausible` or `ga`.
        #[arg(long, default_value = "plausible")]
        source: String,
        /// The first day of the site's own data, for its first history import [default: the
        /// first day Tally counted, or today]; imported days before it, Tally's own from it on.
        #[arg(long, value_name = "YYYY-MM-DD")]
        cutover: Option<String>,
        /// Read an events file again although it was imported whole (its lines imported before
        /// are skipped all the same).
        #[arg(long)]
        force: bool,
        /// Read Umami's events from its PostgreSQL database at this URL
        /// (`postgres://user:password@host:5432/umami`; no TLS: a local or tunnelled connection).
        #[arg(long, value_name = "URL", env = "TALLY_UMAMI_POSTGRES")]
        umami_postgres: Option<String>,
        /// The Umami website to read [default: the only one, or the one whose domain is the site's].
        #[arg(long, value_name = "UUID")]
        umami_website: Option<String>,
    },
    /// Exports a site's events (in the shape `import` reads) or its daily aggregates, as NDJSON
    /// or CSV.
    Export {
        #[command(flatten)]
        range: SiteRange,
        /// The daily aggregate items (every dimension but props) instead of the events.
        #[arg(long)]
        aggregates: bool,
        /// `ndjson` or `csv`.
        #[arg(long, default_value = "ndjson")]
        format: String,
        /// The file to write [default: standard output].
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Aggregates: `--rebuild` recomputes a site's aggregates from its raw events.
    Aggregate {
        /// Recompute (required; the only operation).
        #[arg(long, required = true)]
        rebuild: bool,
        #[command(flatten)]
        range: SiteRange,
        /// Only compare and report differences (exit 1 when any); do not write.
        #[arg(long)]
        verify: bool,
    },
    /// Measures ingestion (in process and over HTTP), write units per event, and dashboard
    /// read units and latency, on synthetic traffic in a temporary embedded store.
    Bench {
        /// Events to ingest.
        #[arg(long, default_value_t = 100_000)]
        events: u64,
        /// Also measure ingestion over HTTP with keep-alive.
        #[arg(long)]
        http: bool,
        /// Concurrent ingestions (tasks in process, connections over HTTP).
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// Dashboards to time for the latency percentiles.
        #[arg(long, default_value_t = 100)]
        dashboards: usize,
        /// Also times each of the dashboard's queries alone (mean of 20 runs).
        #[arg(long)]
        per_query: bool,
        /// Writes the measured costs as JSON, for `tally capacity --from-bench`.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Days the synthetic traffic spans, ending yesterday (at 365 or more, the questions
        /// read from event blocks are also timed over 12 months).
        #[arg(long, default_value_t = 30)]
        days: u32,
        /// Ingesting processes on the one table: 2 runs a second pipeline and aggregator that
        /// shares it, as two `tally serve` processes on one DynamoDB table do.
        #[arg(long, default_value_t = 1)]
        ingesters: usize,
        /// Keeps the bench's store in DIR instead of a temporary directory. When DIR holds a
        /// store an earlier `--keep-store DIR` run filled, nothing is ingested and only the queries
        /// are timed against it (its traffic ends the day it was generated).
        #[arg(long, value_name = "DIR")]
        keep_store: Option<PathBuf>,
        /// Posts load to a `tally serve` already running at ADDR for `--seconds`, instead of
        /// measuring a store of its own: Plausible page views from a new visitor each (a random
        /// address in `x-forwarded-for`, so the server must trust loopback as a proxy) over
        /// `--concurrency` keep-alive connections, with the requests per second every 10 s.
        #[arg(long, value_name = "ADDR", conflicts_with_all = ["http", "output", "keep_store", "ingesters", "events"])]
        against: Option<std::net::SocketAddr>,
        /// How long `--against` posts, in seconds.
        #[arg(long, default_value_t = 60, requires = "against")]
        seconds: u64,
        /// A file of User-Agents, one a line, that `--against` picks from at random (default:
        /// three browsers').
        #[arg(long, value_name = "FILE", requires = "against")]
        user_agents: Option<PathBuf>,
        /// The site's domain `--against` posts to.
        #[arg(long, default_value = "example.com", requires = "against")]
        domain: String,
    },
    /// Writes a consistent copy of the embedded store into DIR (new or empty), while `tally
    /// serve` keeps running (it takes the copy, asked over `tally.sock` in the store's directory)
    /// or with no server. Every event acknowledged before the backup began is in it.
    Backup {
        /// The directory to write the backup into.
        dir: PathBuf,
    },
    /// Brings a backup back as the configured embedded store, which must not exist yet (move
    /// the old one aside first; a restore never overwrites a store).
    Restore {
        /// The directory `tally backup` wrote.
        backup: PathBuf,
    },
    /// Sends a site's e-mail report for its last complete week or month now, over the `[smtp]`
    /// of the configuration file (`tally serve` sends the `[[reports]]` it lists by itself).
    Report {
        /// The site (domain or id).
        #[arg(long)]
        site: String,
        /// `week` or `month`.
        #[arg(long, default_value = "week")]
        every: String,
        /// Recipients [default: those of the site's `[[reports]]` entry].
        #[arg(long)]
        to: Vec<String>,
    },
    /// Asks a running `tally serve` whether it is healthy (`GET /health`): exit status 0 when it
    /// answers 200 within 5 s, 1 otherwise. For container health checks, which have no curl.
    Health {
        /// The server's address [default: the `listen` setting].
        #[arg(long, value_name = "HOST:PORT")]
        addr: Option<std::net::SocketAddr>,
    },
    /// Prints the effective configuration (file, environment and flags applied) as TOML.
    Config,
    /// Tally's table design, generated from its one schema definition.
    Schema {
        #[command(subcommand)]
        what: SchemaCommand,
    },
    /// Prices a traffic level on DynamoDB on-demand from measured per-event costs.
    Capacity {
        /// Events ingested per day, over all sites.
        #[arg(long)]
        events_per_day: f64,
        /// Dashboards opened per day.
        #[arg(long, default_value_t = 200.0)]
        dashboards_per_day: f64,
        /// Sites.
        #[arg(long, default_value_t = 1.0)]
        sites: f64,
        /// Days raw events are kept.
        #[arg(long, default_value_t = 30.0)]
        raw_retention_days: f64,
        /// A JSON file written by `tally bench --output FILE` [default: the figures in BENCHMARKS.md].
        #[arg(long, value_name = "FILE")]
        from_bench: Option<PathBuf>,
    },
}

/// A site and a range of its days, for `export` and `aggregate`.
#[derive(clap::Args)]
struct SiteRange {
    /// The site (domain or id).
    #[arg(long)]
    site: String,
    /// First date, site time [default: the raw-event retention ago].
    #[arg(long)]
    from: Option<String>,
    /// Last date, site time [default: today].
    #[arg(long)]
    to: Option<String>,
}

#[derive(Subcommand)]
enum SiteCommand {
    /// Adds a site.
    Add {
        /// Its domain, such as example.com.
        domain: String,
        /// Its IANA time zone.
        #[arg(long, default_value = "UTC")]
        timezone: String,
    },
    /// Lists sites: id, domain, time zone, Umami website id, excluded address ranges.
    List,
    /// Changes a site's settings; what is not given stays as it is.
    Update {
        /// The site (domain or id).
        site: String,
        /// A new IANA time zone (for events from now on).
        #[arg(long)]
        timezone: Option<String>,
        /// Days raw events are kept.
        #[arg(long)]
        retention_event_days: Option<u32>,
        /// Days hourly aggregates are kept.
        #[arg(long)]
        retention_hourly_days: Option<u32>,
        /// Days daily aggregates are kept.
        #[arg(long)]
        retention_daily_days: Option<u32>,
        /// An address or CIDR range whose events are dropped (repeatable; replaces the list).
        #[arg(long = "exclude-ip", value_name = "RANGE")]
        exclude_ip: Vec<String>,
        /// Drops every excluded address range.
        #[arg(long, conflicts_with = "exclude_ip")]
        no_excluded_ips: bool,
    },
    /// Removes a site (domain or id).
    Remove {
        /// The site.
        site: String,
    },
}

#[derive(Subcommand)]
enum GoalCommand {
    /// Adds a page goal (`--page /signup/*`) or a custom event goal (`--event Signup`).
    Add {
        /// The site (domain or id).
        site: String,
        /// A page path pattern.
        #[arg(long)]
        page: Option<String>,
        /// A custom event name.
        #[arg(long)]
        event: Option<String>,
        /// Makes it a revenue goal counting revenue in this currency (`USD`, `EUR`…).
        #[arg(long)]
        currency: Option<String>,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Creates a key; it is printed once.
    Create {
        /// The site (domain or id).
        site: String,
        /// What the key is for.
        #[arg(long, default_value = "default")]
        name: String,
        /// What the key may do: stats (read statistics, the default), visitors (read, export
        /// and erase visitors), import, admin (everything on its site). Repeatable or
        /// comma-separated.
        #[arg(long = "scope", value_delimiter = ',')]
        scopes: Vec<String>,
    },
    /// Lists a site's keys: id, scopes, state and name.
    List {
        /// The site (domain or id).
        site: String,
    },
    /// Revokes a key by its id.
    Revoke {
        /// The site (domain or id).
        site: String,
        /// The key id printed by `key create`.
        key_id: String,
    },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Creates an account; the password is read from standard input.
    Add {
        /// Its e-mail.
        email: String,
    },
    /// Lists the accounts.
    List,
    /// Removes an account.
    Remove {
        /// Its e-mail.
        email: String,
    },
    /// Sets an account's password, read from standard input; ends its sign-ins everywhere.
    Password {
        /// Its e-mail.
        email: String,
    },
    /// Ends every sign-in of an account, on every browser.
    SignOut {
        /// Its e-mail.
        email: String,
    },
}

#[derive(Subcommand)]
enum ShareCommand {
    /// Creates a shared link; its path is printed once.
    Create {
        /// The site (domain or id).
        site: String,
        /// What the link is for.
        #[arg(long, default_value = "shared link")]
        name: String,
        /// Protects the link with a password, read from standard input.
        #[arg(long)]
        password: bool,
    },
    /// Lists a site's shared links.
    List {
        /// The site (domain or id).
        site: String,
    },
    /// Revokes a shared link by its id.
    Revoke {
        /// The site (domain or id).
        site: String,
        /// The share id printed by `share create`.
        share_id: String,
    },
}

#[derive(Subcommand)]
enum SchemaCommand {
    /// The markdown design document: table, indexes, entities, sample items, access patterns.
    Doc,
    /// The access-pattern matrix alone.
    Matrix,
    /// A CloudFormation template for the table.
    Cloudformation {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Yaml)]
        format: Format,
    },
    /// A Terraform `aws_dynamodb_table` resource.
    Terraform,
    /// Creates the table in the configured store if it does not exist.
    CreateTable,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Yaml,
}

fn main() -> std::process::ExitCode {
    small_pages();
    prompt_purge();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            // One line, causes included, as a person reads it.
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs one command: loads the configuration, then hands the command to the function or module
/// that carries it out. A failed `aggregate --verify` exits with failure.
fn run(cli: Cli) -> Result<std::process::ExitCode> {
    let config = Config::load(cli.config.as_deref(), cli.settings, |name| std::env::var(name).ok())?;
    match cli.command {
        Command::Serve { demo } => {
            logging::init(&config)?;
            keep_purging();
            let demo = demo.then(demo::DemoOptions::default);
            runtime()?.block_on(serve::serve(&config, demo))?;
        }
        Command::Demo { days, events_per_day } => {
            if days == 0 || days > 3650 || !(1.0..=1e7).contains(&events_per_day) {
                anyhow::bail!("--days must be 1 to 3650 and --events-per-day 1 to 10,000,000");
            }
            runtime()?.block_on(serve::demo(&config, demo::DemoOptions { days, events_per_day }))?;
        }
        Command::Site { what } => runtime()?.block_on(site(&config, what))?,
        Command::Goal { what: GoalCommand::Add { site, page, event, currency } } => {
            runtime()?.block_on(serve::goal_add(
                &config,
                &site,
                page.as_deref(),
                event.as_deref(),
                currency.as_deref(),
            ))?;
        }
        Command::Key { what } => runtime()?.block_on(key(&config, what))?,
        Command::User { what } => runtime()?.block_on(user(&config, what))?,
        Command::Share { what } => runtime()?.block_on(share(&config, what))?,
        Command::Export { range, aggregates, format, output } => {
            let options = export::ExportOptions {
                site: &range.site,
                from: range.from.as_deref(),
                to: range.to.as_deref(),
                aggregates,
                format: &format,
                output: output.as_deref(),
            };
            runtime()?.block_on(export::export(&config, &options))?;
        }
        Command::Import { file, site, format, source, cutover, force, umami_postgres, umami_website } => {
            if !matches!(source.as_str(), "plausible" | "ga") {
                anyhow::bail!("--source must be plausible or ga, not {source:?}");
            }
            let options = serve::ImportOptions { format, source, cutover, force, umami_postgres, umami_website };
            runtime()?.block_on(serve::import(&config, file.as_deref(), &site, &options))?
        }
        Command::Aggregate { rebuild: _, range, verify } => {
            let (site, from, to) = (&range.site, range.from.as_deref(), range.to.as_deref());
            let clean = runtime()?.block_on(serve::rebuild(&config, site, from, to, verify))?;
            if !clean {
                return Ok(std::process::ExitCode::FAILURE);
            }
        }
        Command::Bench { against: Some(addr), concurrency, seconds, user_agents, domain, .. } => {
            let traffic = match user_agents {
                Some(path) => {
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
                    bench::load::Traffic::with_user_agents(&domain, &text)?
                }
                None => bench::load::Traffic::three_browsers(&domain),
            };
            runtime()?.block_on(bench::against(addr, traffic, concurrency, std::time::Duration::from_secs(seconds)))?;
        }
        Command::Bench {
            events,
            http,
            concurrency,
            dashboards,
            per_query,
            output,
            days,
            ingesters,
            keep_store,
            ..
        } => {
            let options = bench::BenchOptions {
                events,
                http,
                concurrency,
                dashboards,
                per_query,
                output,
                flush_interval: config.flush_interval,
                compact_event_blocks: config.compact_event_blocks,
                days,
                ingesters,
                store: keep_store,
            };
            runtime()?.block_on(bench::run(&options))?;
        }
        Command::Backup { dir } => runtime()?.block_on(backup::backup(&config, &dir))?,
        Command::Restore { backup } => backup::restore(&config, &backup)?,
        Command::Report { site, every, to } => runtime()?.block_on(serve::report(&config, &site, &every, &to))?,
        Command::Health { addr } => health(addr.unwrap_or(config.listen))?,
        Command::Config => print!("{}", config.to_toml()),
        Command::Schema { what } => schema(what, &config)?,
        Command::Capacity { events_per_day, dashboards_per_day, sites, raw_retention_days, from_bench } => {
            let traffic = capacity::Traffic {
                events_per_day,
                dashboards_per_day,
                sites,
                raw_retention_days,
                aggregate_days: 365.0,
            };
            capacity_report(from_bench, &traffic)?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `tally site …`.
async fn site(config: &Config, what: SiteCommand) -> Result<()> {
    match what {
        SiteCommand::Add { domain, timezone } => serve::site_add(config, &domain, &timezone).await,
        SiteCommand::List => serve::site_list(config).await,
        SiteCommand::Update {
            site,
            timezone,
            retention_event_days,
            retention_hourly_days,
            retention_daily_days,
            exclude_ip,
            no_excluded_ips,
        } => {
            let changes = analytics::sites::SiteChanges {
                timezone,
                retention_event_days,
                retention_hourly_days,
                retention_daily_days,
                excluded_ip_ranges: (no_excluded_ips || !exclude_ip.is_empty()).then_some(exclude_ip),
            };
            serve::site_update(config, &site, &changes).await
        }
        SiteCommand::Remove { site } => serve::site_remove(config, &site).await,
    }
}

/// `tally key …`.
async fn key(config: &Config, what: KeyCommand) -> Result<()> {
    match what {
        KeyCommand::Create { site, name, scopes } => serve::key_create(config, &site, &name, &scopes).await,
        KeyCommand::List { site } => serve::key_list(config, &site).await,
        KeyCommand::Revoke { site, key_id } => serve::key_revoke(config, &site, &key_id).await,
    }
}

/// `tally user …`.
async fn user(config: &Config, what: UserCommand) -> Result<()> {
    match what {
        UserCommand::Add { email } => users::add(config, &email).await,
        UserCommand::List => users::list(config).await,
        UserCommand::Remove { email } => users::remove(config, &email).await,
        UserCommand::Password { email } => users::password(config, &email).await,
        UserCommand::SignOut { email } => users::sign_out(config, &email).await,
    }
}

/// `tally share …`.
async fn share(config: &Config, what: ShareCommand) -> Result<()> {
    match what {
        ShareCommand::Create { site, name, password } => users::share_create(config, &site, &name, password).await,
        ShareCommand::List { site } => users::share_list(config, &site).await,
        ShareCommand::Revoke { site, share_id } => users::share_revoke(config, &site, &share_id).await,
    }
}

/// `tally health`: asks the server at `addr` for `/health`, waiting at most 5 s, and fails
/// unless it answers 200.
fn health(addr: std::net::SocketAddr) -> Result<()> {
    let asked = runtime()?.block_on(async {
        let ask = async {
            let mut c = http::Connection::connect(addr).await?;
            c.request("GET", "/health", &[], b"").await
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), ask).await
    });
    match asked {
        Ok(Ok(r)) if r.status == 200 => println!("healthy: {addr}"),
        Ok(Ok(r)) => anyhow::bail!("unhealthy: {addr} answered {}", r.status),
        Ok(Err(e)) => anyhow::bail!("unhealthy: {e:#}"),
        Err(_) => anyhow::bail!("unhealthy: {addr} did not answer within 5 s"),
    }
    Ok(())
}

/// `tally capacity`: prints what `traffic` costs, at the costs measured by a `tally bench
/// --output` file (`from_bench`) or the built-in ones.
fn capacity_report(from_bench: Option<PathBuf>, traffic: &capacity::Traffic) -> Result<()> {
    let costs = match from_bench {
        Some(path) => capacity::Costs::from_file(&path)?,
        None => capacity::Costs::built_in(),
    };
    print!("{}", capacity::report(&costs, traffic));
    Ok(())
}

/// A multi-threaded runtime for one command.
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")
}

fn schema(what: SchemaCommand, config: &Config) -> Result<()> {
    let schema = analytics::schema::tally_schema(&config.table);
    let text = match what {
        SchemaCommand::Doc => model::generate::design_doc(&schema),
        SchemaCommand::Matrix => model::generate::access_matrix(&schema),
        SchemaCommand::Cloudformation { format: Format::Json } => model::generate::cloudformation_json(&schema),
        SchemaCommand::Cloudformation { format: Format::Yaml } => model::generate::cloudformation_yaml(&schema),
        SchemaCommand::Terraform => model::generate::terraform(&schema),
        SchemaCommand::CreateTable => {
            logging::init(config)?;
            return runtime()?.block_on(async {
                let (_, created) = store::open_reporting(config).await?;
                if created {
                    println!("created table {} in {}", config.table, config.store);
                } else {
                    println!("table {} already exists in {}", config.table, config.store);
                }
                Ok(())
            });
        }
    };
    print!("{text}");
    Ok(())
}
