//! `tally import --umami-postgres URL`: Umami's events read straight from its PostgreSQL
//! database, as rows of its `website_event` table joined with their `session` (browser, OS,
//! device, country, and the host name Umami 2 keeps there) and their `event_data` (a custom
//! event's properties). Each row goes through `history::UmamiRows`, exactly as a row of Umami's
//! CSV export does, so both give the same events and the same import ids (a row's `event_id`):
//! reading the database after importing its export, or twice, imports nothing twice.
//!
//! The columns read are those of Umami's published Prisma schema for PostgreSQL
//! (`db/postgresql/schema.prisma`); every value is cast to text in the query, so no column type
//! needs a Rust mapping. Newer releases that keep `hostname` on `website_event` are read too.
//!
//! The client is `tokio-postgres` (rust-postgres: maintained, pure Rust, on the tokio runtime the
//! binary already runs), without TLS: connect over a local socket, a loopback address or a
//! tunnel. Its cost, measured: about 38 s of one core for the 15 crates it adds to a clean debug
//! build (BENCHMARKS.md, "Build cost of `tokio-postgres`").

use std::collections::HashMap;

use analytics::sites::Site;
use anyhow::{Context, Result, anyhow, bail};
use futures::{StreamExt, TryStreamExt};

use crate::history::UmamiRows;

/// The columns of a row, in the order the query selects them.
const COLUMNS: [&str; 18] = [
    "event_id",
    "session_id",
    "created_at",
    "url_path",
    "url_query",
    "referrer_path",
    "referrer_query",
    "referrer_domain",
    "page_title",
    "event_type",
    "event_name",
    "hostname",
    "browser",
    "os",
    "device",
    "country",
    "website_id",
    "props",
];

/// Every event of one Umami website in `url`'s database, oldest first.
pub async fn read(url: &str, website: Option<&str>, site: &Site) -> Result<UmamiRows> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| anyhow!("cannot connect to Umami's database: {e}"))?;
    let connection = tokio::spawn(connection);
    let result = read_with(&client, website, site).await;
    drop(client);
    let _ = connection.await;
    result
}

async fn read_with(client: &tokio_postgres::Client, website: Option<&str>, site: &Site) -> Result<UmamiRows> {
    let website = match website {
        Some(w) => w.trim().to_ascii_lowercase(),
        None => pick_website(client, site).await?,
    };
    // Umami 2 keeps the host name on the session; later releases on the event as well.
    let event_hostname = client
        .query_opt(
            "SELECT 1 FROM information_schema.columns WHERE table_name = 'website_event' AND column_name = 'hostname'",
            &[],
        )
        .await
        .context("reading Umami's schema")?
        .is_some();
    let hostname = if event_hostname { "coalesce(e.hostname, s.hostname)" } else { "s.hostname" };
    let query = format!(
        "SELECT e.event_id::text, e.session_id::text,
                to_char(e.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),
                e.url_path, e.url_query, e.referrer_path, e.referrer_query, e.referrer_domain, e.page_title,
                e.event_type::text, e.event_name, {hostname}, s.browser, s.os, s.device, s.country,
                e.website_id::text,
                (SELECT json_object_agg(d.data_key, coalesce(d.string_value,
                        CASE WHEN d.number_value::text LIKE '%.%'
                             THEN rtrim(rtrim(d.number_value::text, '0'), '.') ELSE d.number_value::text END,
                        d.date_value::text))
                   FROM event_data d WHERE d.website_event_id = e.event_id)::text
           FROM website_event e LEFT JOIN session s ON s.session_id = e.session_id
          WHERE e.website_id::text = $1
          ORDER BY e.created_at, e.event_id"
    );
    let rows = client
        .query_raw(query.as_str(), [&website as &(dyn tokio_postgres::types::ToSql + Sync)])
        .await
        .map_err(|e| anyhow!("reading Umami's website_event rows: {e}"))?;
    let mut out = UmamiRows::new();
    let mut rows = std::pin::pin!(rows.map_err(|e| anyhow!("reading Umami's website_event rows: {e}")));
    let mut count = 0usize;
    while let Some(row) = rows.next().await {
        let row = row?;
        let values: HashMap<&str, String> = COLUMNS
            .iter()
            .enumerate()
            .map(|(i, name)| (*name, row.get::<_, Option<String>>(i).unwrap_or_default()))
            .collect();
        count += 1;
        // Row `count` is on line `count + 1`, as it would be below a CSV's header.
        out.push(count + 1, site, &|name: &str| values.get(name).cloned().unwrap_or_default());
        if count.is_multiple_of(100_000) {
            eprintln!("… {count} rows read from Umami's database");
        }
    }
    eprintln!("… Umami website {website}: {count} website_event rows");
    Ok(out)
}

/// The website to read when none is named: the only one, or the only one whose domain is the site's.
async fn pick_website(client: &tokio_postgres::Client, site: &Site) -> Result<String> {
    let websites: Vec<(String, String, String)> = client
        .query("SELECT website_id::text, name, coalesce(domain, '') FROM website WHERE deleted_at IS NULL", &[])
        .await
        .map_err(|e| anyhow!("reading Umami's websites: {e}"))?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let same_domain: Vec<_> = websites.iter().filter(|(_, _, d)| d.eq_ignore_ascii_case(&site.domain)).collect();
    match (websites.as_slice(), same_domain.as_slice()) {
        ([only], _) => Ok(only.0.clone()),
        (_, [one]) => Ok(one.0.clone()),
        ([], _) => bail!("Umami's database has no website"),
        (all, _) => bail!(
            "Umami's database has {} websites; name one with --umami-website: {}",
            all.len(),
            all.iter().map(|(id, name, domain)| format!("{id} ({name}, {domain})")).collect::<Vec<_>>().join("; ")
        ),
    }
}
