//! Tally's table: every entity of the analytics store on one DynamoDB table, defined once.
//!
//! The design doc, the access-pattern matrix, CloudFormation and Terraform are generated
//! from [`tally_schema`] (`tally schema doc|matrix|cloudformation|terraform`), and every key
//! Tally writes is rendered from these templates by the model layer.
//!
//! Where the seeds were weak, and what this schema does instead:
//! - **Raw events are stored in event blocks**, many events of one site and UTC day (of the
//!   session's start) to an item, column by column and compressed (`EventBlock`, see
//!   [`crate::block`]): one write per block instead of one per event, a few dozen bytes an event,
//!   and a session, a day's sessions or a rebuild's input is one Query of one partition. A
//!   site's day is one partition; DynamoDB splits a hot partition by its sort keys (a run and a
//!   block number), and a block is one write whatever it holds.
//! - **There is no session item to rewrite per event in the common case.** Each event carries its
//!   session's visit attributes and the session's state just before it (see [`crate::stored`]).
//!   A visitor's latest event is kept in a small `VisitorSession` item, written per event only
//!   while several processes ingest (a conditional write serialises their sessions), otherwise
//!   only when a session leaves a process's memory ([`crate::lease`]).
//! - **Aggregates are keyed by (site, period, dimension) with the bucket and value in the sort
//!   key**, so a dashboard range for one dimension is one Query over O(buckets × values) items,
//!   whatever the traffic; each aggregate carries counters and a mergeable unique-visitor sketch.
//! - **Every short-lived item has a TTL**: event blocks (site retention, two years by
//!   default), visitors' latest events (two hours), hourly aggregates (90 days), daily and weekly aggregates (2 years), salts (72 hours),
//!   per-minute realtime aggregates (2 hours). Monthly aggregates are kept forever.
//! - API keys, login sessions and shared-link tokens are stored under the SHA-256 of the token,
//!   never the token itself; passwords as Argon2id hashes.

use std::time::Duration;

use model::schema::{AccessPattern, Attribute, Entity, Schema, SortShape};
use store::{BillingMode, KeySchema, Projection, ScalarType, TableDefinition};

/// Default table name.
pub const TABLE_NAME: &str = "tally";
/// Number of write shards per site and day for raw events and sessions.
pub const EVENT_SHARDS: u32 = 64;

/// Tally's table definition: `pk`/`sk`, two global indexes, TTL on `ttl`, on-demand billing.
pub fn tally_table(name: &str) -> TableDefinition {
    let mut table = TableDefinition::new(name, KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S))
        .gsi("gsi1", KeySchema::composite("gsi1pk", ScalarType::S, "gsi1sk", ScalarType::S), Projection::All)
        .ttl("ttl");
    table.billing = BillingMode::PayPerRequest;
    table.point_in_time_recovery = true;
    table
}

/// Tally's whole schema on a table named `name`.
pub fn tally_schema(name: &str) -> Schema {
    Schema::builder(tally_table(name))
        .description(
            "Tally's analytics store: sites, goals, API keys, salts, raw events with their sessions, \
             pre-computed aggregates (per minute, hour, day, ISO week and month) and ingestion runs on one table.",
        )
        .entity(
            Entity::new("Site")
                .description("A tracked site: its domain, time zone and retention.")
                .attribute(Attribute::string("site_id").ulid())
                .attribute(Attribute::string("domain").required().example("example.com"))
                .attribute(Attribute::string("timezone").default_value("UTC"))
                .attribute(Attribute::string("umami_id").example("9f1c2a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b"))
                .attribute(Attribute::number("retention_event_days").default_value(730))
                .attribute(Attribute::number("retention_hourly_days").default_value(90))
                .attribute(Attribute::number("retention_daily_days").default_value(730))
                .attribute(Attribute::number("weeks_from").example(0))
                .attribute(Attribute::string_set("excluded_ip_ranges"))
                .attribute(Attribute::string_set("extra_domains"))
                .attribute(Attribute::binary("import_salt"))
                .timestamps()
                .key("SITE#{site_id}", "SITE")
                .gsi("gsi1", "SITES", "SITE#{site_id}"),
        )
        .entity(
            Entity::new("SiteDomain")
                .description("Maps a domain, or `umami:{website id}`, to its site, for ingestion.")
                .attribute(Attribute::string("domain").required().example("example.com"))
                .attribute(Attribute::string("site_id").required())
                .key("DOMAIN#{domain}", "DOMAIN"),
        )
        .entity(
            Entity::new("Goal")
                .description("A goal: a pageview path pattern (with `*`) or a custom event name.")
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("goal_id").ulid())
                .attribute(Attribute::string("kind").required().example("event"))
                .attribute(Attribute::string("page_path"))
                .attribute(Attribute::string("event_name").example("Signup"))
                .attribute(Attribute::string("display_name"))
                .attribute(Attribute::string("currency").example("USD"))
                .timestamps()
                .key("SITE#{site_id}", "GOAL#{goal_id}"),
        )
        .entity(
            Entity::new("Funnel")
                .description(
                    "A saved funnel the dashboard shows: a name and 2 to 8 steps, each `{page: pattern}` or \
                     `{event: name}`.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("funnel_id").ulid())
                .attribute(Attribute::string("name").required().example("Signup"))
                .attribute(Attribute::list("steps").required())
                .timestamps()
                .key("SITE#{site_id}", "FUNNEL#{funnel_id}"),
        )
        .entity(
            Entity::new("Segment")
                .description(
                    "A saved segment: a name and the filters it stands for, each `{op, dimension, values}` as the \
                     Stats API takes them; a query names it with `[\"is\", \"segment\", [id]]`.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("segment_id").ulid())
                .attribute(Attribute::string("name").required().example("Visitors from Germany"))
                .attribute(Attribute::list("filters").required())
                .timestamps()
                .key("SITE#{site_id}", "SEGMENT#{segment_id}"),
        )
        .entity(
            Entity::new("ApiKey")
                .description("A site API key, stored as the SHA-256 of the key; the key itself is shown once.")
                .attribute(Attribute::string("key_hash").required().example("9f86d081884c7d65"))
                .attribute(Attribute::string("key_id").ulid())
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("name").example("CI import"))
                .attribute(Attribute::string_set("scopes"))
                .attribute(Attribute::number("revoked_at"))
                .timestamps()
                .key("KEY#{key_hash}", "KEY")
                .gsi("gsi1", "KEYS#{site_id}", "KEY#{key_id}"),
        )
        .entity(
            Entity::new("User")
                .description("A dashboard account: its e-mail, an Argon2id password hash (PHC string) and role.")
                .attribute(Attribute::string("email").required().example("admin@example.com"))
                .attribute(Attribute::string("user_id").ulid())
                .attribute(Attribute::string("password_hash").required().example("$argon2id$v=19$m=19456,t=2,p=1$…"))
                .attribute(Attribute::string("role").default_value("admin"))
                .attribute(Attribute::number("signout_generation").example(0))
                .attribute(Attribute::string("totp_secret"))
                .attribute(Attribute::string("totp_pending"))
                .attribute(Attribute::number("totp_last_step"))
                .attribute(Attribute::string_set("recovery_hashes"))
                .timestamps()
                .key("USER#{email}", "USER")
                .gsi("gsi1", "USERS", "USER#{email}"),
        )
        .entity(
            Entity::new("Grant")
                .description(
                    "A signed-in browser: a login session (`kind` user) or an unlocked password-protected shared \
                     link (`kind` share), stored as the SHA-256 of the cookie's token; expires by `ttl`.",
                )
                .attribute(Attribute::string("token_hash").required().example("9f86d081884c7d65"))
                .attribute(Attribute::string("kind").required().example("user"))
                .attribute(Attribute::string("subject").required().example("admin@example.com"))
                .attribute(Attribute::number("generation").example(0))
                .ttl_after("ttl", Duration::from_secs(30 * 86_400))
                .key("GRANT#{token_hash}", "GRANT"),
        )
        .entity(
            Entity::new("Setup")
                .description(
                    "The first-run setup, done: written in one transaction with the first account, on the \
                     condition that it is not there yet, so the setup link makes one account however many \
                     requests race.",
                )
                .attribute(Attribute::string("email").required().example("admin@example.com"))
                .timestamps()
                .key("SETUP", "SETUP"),
        )
        .entity(
            Entity::new("ShareLink")
                .description(
                    "A read-only shared link to one site's dashboard, stored as the SHA-256 of its token, with an \
                     optional Argon2id password hash; revocable.",
                )
                .attribute(Attribute::string("token_hash").required().example("9f86d081884c7d65"))
                .attribute(Attribute::string("share_id").ulid())
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("name").example("Public dashboard"))
                .attribute(Attribute::string("password_hash"))
                .attribute(Attribute::number("revoked_at"))
                .attribute(Attribute::bool("embed"))
                .timestamps()
                .key("SHARE#{token_hash}", "SHARE")
                .gsi("gsi1", "SHARES#{site_id}", "SHARE#{share_id}"),
        )
        .entity(
            Entity::new("Salt")
                .description("A daily visitor-id salt (16+ random bytes), shared by every node; kept 72 hours.")
                .attribute(Attribute::string("day").required().example("2026-11-22"))
                .attribute(Attribute::binary("salt").required())
                .ttl_after("ttl", Duration::from_secs(72 * 3600))
                .key("SALT", "DAY#{day}"),
        )
        .entity(
            Entity::new("Event")
                .description(
                    "A raw event as an earlier Tally stored it, one item per event on its visitor's shard \
                     partition: read only to convert it into event blocks (`event_store::ensure_blocks`), then \
                     deleted.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("day").required().example("2026-11-22"))
                .attribute(Attribute::number("shard").required().example(17))
                .attribute(Attribute::string("visitor_id").required().example("3f2a9c0d1e4b5a67"))
                .attribute(Attribute::string("session_id").ulid())
                .attribute(Attribute::number("seq").required().example(0))
                .attribute(Attribute::string("name").required().example("pageview"))
                .attribute(Attribute::number("ts").required().example(1_732_262_400_000i64))
                .attribute(Attribute::string("hostname").example("example.com"))
                .attribute(Attribute::string("path").example("/pricing"))
                .attribute(Attribute::map("props"))
                .attribute(Attribute::string("revenue").example("19.99"))
                .attribute(Attribute::string("currency").example("EUR"))
                .attribute(Attribute::bool("interactive"))
                .attribute(Attribute::list("goals"))
                .attribute(Attribute::number("start_ts").required().example(1_732_262_400_000i64))
                .attribute(Attribute::string("entry_page").example("/"))
                .attribute(Attribute::string("source").example("Google"))
                .attribute(Attribute::string("referrer").example("google.com/"))
                .attribute(Attribute::string("utm_source"))
                .attribute(Attribute::string("utm_medium"))
                .attribute(Attribute::string("utm_campaign"))
                .attribute(Attribute::string("utm_content"))
                .attribute(Attribute::string("utm_term"))
                .attribute(Attribute::string("country").example("DE"))
                .attribute(Attribute::string("device").example("Desktop"))
                .attribute(Attribute::string("browser").example("Firefox"))
                .attribute(Attribute::string("browser_version").example("132"))
                .attribute(Attribute::string("os").example("Linux"))
                .attribute(Attribute::string("os_version"))
                .attribute(Attribute::string("region").example("DE-BE"))
                .attribute(Attribute::string("city").example("Berlin"))
                .attribute(Attribute::string("screen").example("Laptop"))
                .attribute(Attribute::string("language").example("de-DE"))
                .attribute(Attribute::number("prev_events").default_value(0))
                .attribute(Attribute::number("prev_pageviews").default_value(0))
                .attribute(Attribute::number("prev_interactive").default_value(0))
                .attribute(Attribute::number("prev_last_ts").default_value(0))
                .attribute(Attribute::string("prev_exit_page"))
                .attribute(Attribute::string("run").required().example("01JDB3Y5C8M9V7T2X4K6P0QWER"))
                .attribute(Attribute::number("epoch").required().example(42))
                .ttl_after("ttl", Duration::from_secs(30 * 86_400))
                .key("EV#{site_id}#{day}#{shard:3}", "V#{visitor_id}#S#{session_id}#{seq:5}"),
        )
        .entity(
            Entity::new("EventBlock")
                .description(
                    "Raw events of one site whose sessions started on one UTC day, many to an item, column by \
                     column and compressed (`crate::block`): the unit of durability at ingestion, of scanning at \
                     query time and of erasure. Written once by one run (`run_id`, `block` numbered within the \
                     run), rewritten only to erase a visitor (under `version`); small blocks of flushed epochs \
                     are merged into one that `replaces` them, in one transaction.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("day").required().example("2026-11-22"))
                .attribute(Attribute::string("run_id").required().example("01JDB3Y5C8M9V7T2X4K6P0QWER"))
                .attribute(Attribute::number("block").required().example(17))
                .attribute(Attribute::number("events").required().example(812))
                .attribute(Attribute::number("first_ts").required().example(1_732_262_400_000i64))
                .attribute(Attribute::number("last_ts").required().example(1_732_262_460_000i64))
                .attribute(Attribute::number("max_epoch").required().example(42))
                .attribute(Attribute::binary("data").required())
                .attribute(Attribute::number("version").default_value(0))
                .attribute(Attribute::number_set("replaces"))
                .ttl_after("ttl", Duration::from_secs(731 * 86_400))
                .key("EB#{site_id}#{day}", "B#{run_id}#{block:10}"),
        )
        .entity(
            Entity::new("VisitorSession")
                .description(
                    "A visitor's latest event (a one-event block), so another process, or this one after \
                     dropping it from memory, continues the visit: written per event while several processes \
                     ingest (under `version`), otherwise only when a live session leaves memory. While a run \
                     holds the session (`holder`), its memory is the truth and the others hand it the events.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("visitor_id").required().example("3f2a9c0d1e4b5a67"))
                .attribute(Attribute::binary("last").required())
                .attribute(Attribute::number("version").default_value(0))
                .attribute(Attribute::string("holder").example("01JDQ4ZC6T8Y2V0M7RM3KX9W5N"))
                .ttl_after("ttl", Duration::from_secs(2 * 3600))
                .key("VS#{site_id}#{visitor_id}", "S"),
        )
        .entity(
            Entity::new("StoreFormat")
                .description(
                    "Which storage format the table is in: present once raw events are stored as event blocks \
                     (an earlier Tally's per-event items converted), so the conversion runs once.",
                )
                .attribute(Attribute::string("format").required().example("event-blocks"))
                .attribute(Attribute::number("version").example(1))
                .key("META", "FORMAT#{format}"),
        )
        .entity(
            Entity::new("IngestLease")
                .description(
                    "Which process ingests alone: its holder keeps sessions in memory only; any other ingesting \
                     process marks the lease `shared`, and then every process serialises sessions through \
                     `VisitorSession` items.",
                )
                .attribute(Attribute::string("holder").required().example("01JDB3Y5C8M9V7T2X4K6P0QWER"))
                .attribute(Attribute::string("host").example("tally-1"))
                .attribute(Attribute::number("pid").example(4242))
                .attribute(Attribute::number("expires_ms").required().example(1_732_262_400_000i64))
                .attribute(Attribute::bool("shared"))
                .attribute(Attribute::bool("shared_ack"))
                .key("LEASE", "INGEST"),
        )
        .entity(
            Entity::new("Aggregate")
                .description(
                    "Counters and a unique-visitor sketch for one (site, period, dimension, bucket, value); \
                     `flushes` holds the last flush epoch applied per run, so a flush is applied once. A \
                     counter of zero is left out and reads as zero.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("period").required().example("day"))
                .attribute(Attribute::string("dimension").required().example("event:page"))
                .attribute(Attribute::string("bucket").required().example("2026-11-22"))
                .attribute(Attribute::string("value").required().example("/pricing"))
                .attribute(Attribute::number("visits"))
                .attribute(Attribute::number("pageviews"))
                .attribute(Attribute::number("events"))
                .attribute(Attribute::number("bounces"))
                .attribute(Attribute::number("duration_ms"))
                .attribute(Attribute::number("visit_pageviews"))
                .attribute(Attribute::binary("visitors_sketch"))
                .attribute(Attribute::map("flushes"))
                .attribute(Attribute::number("version").default_value(0))
                .ttl("ttl")
                .key("AGG#{site_id}#{period}#{dimension}", "B#{bucket}#{value}"),
        )
        .entity(
            Entity::new("SessionLog")
                .description(
                    "The sessions with an event in one flush of one run, on one site and UTC day, each with its \
                     latest event time (36 bytes each): recent sessions read the newest of these, then each \
                     session, so listing costs what it lists, not the day's traffic.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("day").required().example("2026-11-22"))
                .attribute(Attribute::number("last_ts").required().example(1_732_262_400_000i64))
                .attribute(Attribute::string("run_id").required().example("01JDB3Y5C8M9V7T2X4K6P0QWER"))
                .attribute(Attribute::number("epoch").required().example(42))
                .attribute(Attribute::number("part").required().example(0))
                .attribute(Attribute::binary("sessions").required())
                .ttl_after("ttl", Duration::from_secs(31 * 86_400))
                .key("SLOG#{site_id}#{day}", "T#{last_ts:13}#{run_id}#{epoch}#{part}"),
        )
        .entity(
            Entity::new("Run")
                .description(
                    "One ingesting process's run: the (site, day) partitions it wrote events to and the last \
                     flush epoch it finished, so a crashed run's unflushed events can be found and counted once.",
                )
                .attribute(Attribute::string("run_id").ulid())
                .attribute(Attribute::string("host").example("tally-1"))
                .attribute(Attribute::number("pid").example(4242))
                .attribute(Attribute::number("heartbeat_ms").required().example(1_732_262_400_000i64))
                .attribute(Attribute::number("flushed_epoch").default_value(0))
                .attribute(Attribute::string_set("partitions"))
                .attribute(Attribute::string("state").default_value("live"))
                .attribute(Attribute::string("recovered_by"))
                .attribute(Attribute::string("address").example("http://10.0.0.5:8000"))
                .attribute(Attribute::string("token"))
                .attribute(Attribute::bool("released"))
                .ttl("ttl")
                .key("RUNS", "RUN#{run_id}"),
        )
        .entity(
            Entity::new("Membership")
                .description(
                    "An invited account's role on one site (owner, admin or viewer) and whether a viewer may read \
                     visitors' sessions; instance administrators need none.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("email").required().example("viewer@example.com"))
                .attribute(Attribute::string("role").required().example("viewer"))
                .attribute(Attribute::bool("visitors"))
                .key("SITE#{site_id}", "MEMBER#{email}")
                .gsi("gsi1", "MEMBERS#{email}", "SITE#{site_id}"),
        )
        .entity(
            Entity::new("Invitation")
                .description(
                    "An invitation link to a site with a role, stored as the SHA-256 of its token; used once, \
                     expires by `ttl` after seven days.",
                )
                .attribute(Attribute::string("token_hash").required().example("9f86d081884c7d65"))
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("email").required().example("viewer@example.com"))
                .attribute(Attribute::string("role").required().example("viewer"))
                .attribute(Attribute::bool("visitors"))
                .ttl_after("ttl", Duration::from_secs(7 * 86_400))
                .key("INVITE#{token_hash}", "INVITE"),
        )
        .entity(
            Entity::new("Notice")
                .description(
                    "A report or traffic alert sent (or being sent) for one site and period, created only if absent \
                     so that each is sent once whatever the number of processes.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("kind").required().example("report-weekly"))
                .attribute(Attribute::string("label").required().example("2026-11-16"))
                .timestamps()
                .ttl_after("ttl", Duration::from_secs(400 * 86_400))
                .key("SITE#{site_id}", "NOTICE#{kind}#{label}"),
        )
        .entity(
            Entity::new("ImportedDay")
                .description(
                    "History imported from another tool (Plausible's CSV export, or Google Analytics data in \
                     its shape): one day's counts for one dimension value, before the site's cut-over. Imported \
                     again, a row replaces itself.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("dimension").required().example("event:page"))
                .attribute(Attribute::string("date").required().example("2024-03-01"))
                .attribute(Attribute::string("value").required().example("/pricing"))
                .attribute(Attribute::string("source").example("plausible"))
                .attribute(Attribute::number("visitors").default_value(0))
                .attribute(Attribute::number("visits").default_value(0))
                .attribute(Attribute::number("pageviews").default_value(0))
                .attribute(Attribute::number("events").default_value(0))
                .attribute(Attribute::number("bounces").default_value(0))
                .attribute(Attribute::number("duration_ms").default_value(0))
                .attribute(Attribute::number("visit_pageviews").default_value(0))
                .key("IMP#{site_id}#{dimension}", "D#{date}#{value}"),
        )
        .entity(
            Entity::new("ImportSettings")
                .description(
                    "A site's cut-over between imported history and its own data: imported days before it, \
                     Tally's own from it on. Set by the first history import, then kept.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("cutover").required().example("2024-06-01"))
                .timestamps()
                .key("SITE#{site_id}", "IMPORTS"),
        )
        .entity(
            Entity::new("ImportFile")
                .description(
                    "An events file imported into a site, by the SHA-256 of its bytes: a rerun of the same file is \
                     recognised and changes nothing.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("file_hash").required().example("9f86d081884c7d65"))
                .attribute(Attribute::string("name").example("umami-export.csv"))
                .attribute(Attribute::string("state").required().example("done"))
                .attribute(Attribute::number("lines").default_value(0))
                .attribute(Attribute::number("imported").default_value(0))
                .timestamps()
                .key("SITE#{site_id}", "IMPORTFILE#{file_hash}"),
        )
        .entity(
            Entity::new("ImportLines")
                .description(
                    "The import ids of a chunk of imported lines (16 bytes each, concatenated): a line whose id is \
                     stored is not imported again, whatever file it comes in. `pending` while the chunk is being \
                     ingested by run `run_id`; a rerun after a crash finds which of its lines that run stored.",
                )
                .attribute(Attribute::string("site_id").required())
                .attribute(Attribute::string("chunk").required().example("01JDB3Y5C8M9V7T2X4K6P0QWER-000003"))
                .attribute(Attribute::string("state").required().example("done"))
                .attribute(Attribute::string("run_id").example("01JDB3Y5C8M9V7T2X4K6P0QWER"))
                .attribute(Attribute::number("first_ts").example(1_732_262_400_000i64))
                .attribute(Attribute::number("last_ts").example(1_732_262_460_000i64))
                .attribute(Attribute::binary("ids").required())
                .timestamps()
                .key("SITE#{site_id}", "IMPORTLINES#{chunk}"),
        )
        .access_pattern(AccessPattern::get("get_site", "A site's settings by id").entity("Site"))
        .access_pattern(
            AccessPattern::query("list_sites", "Every site, for the site picker").entity("Site").index("gsi1"),
        )
        .access_pattern(
            AccessPattern::get("site_by_domain", "Resolve an incoming event's domain to its site").entity("SiteDomain"),
        )
        .access_pattern(
            AccessPattern::query("site_with_goals", "A site, its goals, funnels and segments in one query")
                .entity("Site")
                .entity("Goal")
                .entity("Funnel")
                .entity("Segment"),
        )
        .access_pattern(AccessPattern::get("api_key_by_hash", "Authenticate a Bearer API key").entity("ApiKey"))
        .access_pattern(
            AccessPattern::query("keys_of_site", "A site's API keys, for the admin page")
                .entity("ApiKey")
                .index("gsi1")
                .sort(SortShape::BeginsWith),
        )
        .access_pattern(AccessPattern::get("user_by_email", "Sign a user in").entity("User"))
        .access_pattern(
            AccessPattern::get("setup_done", "The first-run setup, created once with the first account")
                .entity("Setup"),
        )
        .access_pattern(
            AccessPattern::query("list_users", "Every account (first-run check)").entity("User").index("gsi1"),
        )
        .access_pattern(AccessPattern::get("grant_by_hash", "The signed-in browser behind a cookie").entity("Grant"))
        .access_pattern(AccessPattern::get("share_by_hash", "Open a shared link").entity("ShareLink"))
        .access_pattern(
            AccessPattern::query("shares_of_site", "A site's shared links, for the settings page")
                .entity("ShareLink")
                .index("gsi1")
                .sort(SortShape::BeginsWith),
        )
        .access_pattern(
            AccessPattern::query("current_salts", "Today's and yesterday's salts, newest first")
                .entity("Salt")
                .sort(SortShape::GreaterOrEqual)
                .descending(),
        )
        .access_pattern(
            AccessPattern::query(
                "events_of_shard_day",
                "An earlier Tally's per-event items, read once to convert them",
            )
            .entity("Event"),
        )
        .access_pattern(
            AccessPattern::query("blocks_of_day", "Event blocks of one site and UTC day: queries, rebuilds, sessions")
                .entity("EventBlock"),
        )
        .access_pattern(
            AccessPattern::query("blocks_of_run", "A run's event blocks of one site and day: crash recovery")
                .entity("EventBlock")
                .sort(SortShape::BeginsWith),
        )
        .access_pattern(AccessPattern::get("visitor_session", "A visitor's latest event").entity("VisitorSession"))
        .access_pattern(AccessPattern::get("store_format", "Whether raw events are in blocks").entity("StoreFormat"))
        .access_pattern(AccessPattern::get("ingest_lease", "Whether one process ingests alone").entity("IngestLease"))
        .access_pattern(
            AccessPattern::query("aggregate_range", "A dimension's buckets over a date range (dashboards, Stats API)")
                .entity("Aggregate")
                .sort(SortShape::Between),
        )
        .access_pattern(
            AccessPattern::query("realtime_window", "The last 30 minutes of per-minute aggregates")
                .entity("Aggregate")
                .sort(SortShape::GreaterOrEqual),
        )
        .access_pattern(
            AccessPattern::query("recent_sessions", "The sessions active on a UTC day, latest first")
                .entity("SessionLog")
                .descending(),
        )
        .access_pattern(AccessPattern::query("runs", "Every ingesting run, to find crashed ones").entity("Run"))
        .access_pattern(
            AccessPattern::query("imported_range", "A dimension's imported days over a date range (merged answers)")
                .entity("ImportedDay")
                .sort(SortShape::Between),
        )
        .access_pattern(
            AccessPattern::get("import_cutover", "A site's cut-over date for imported history")
                .entity("ImportSettings"),
        )
        .access_pattern(
            AccessPattern::get("import_file", "Whether an events file was imported already").entity("ImportFile"),
        )
        .access_pattern(
            AccessPattern::query("import_lines", "Every line id imported into a site, before an import")
                .entity("ImportLines"),
        )
        .build()
        .unwrap_or_else(|e| panic!("Tally's schema is valid: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entity_renders_a_sample_item_with_its_keys() {
        let schema = tally_schema(TABLE_NAME);
        for entity in schema.entities() {
            let item = schema.sample_item(entity.name()).expect("sample item");
            assert!(item.contains_key("pk") && item.contains_key("sk"), "{}: {item:?}", entity.name());
        }
    }

    #[test]
    fn no_entity_writes_a_second_index() {
        let schema = tally_schema(TABLE_NAME);
        for entity in schema.entities() {
            let item = schema.sample_item(entity.name()).unwrap();
            assert!(!item.contains_key("gsi2pk"), "{}", entity.name());
        }
    }
}
