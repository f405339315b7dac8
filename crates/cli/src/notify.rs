//! E-mail reports and traffic alerts: their settings in `tally.toml`, sending over SMTP, the
//! JSON webhook, and the loop `tally serve` runs to send each one once.
//!
//! ```toml
//! [smtp]
//! host = "smtp.example.com"
//! port = 587                 # default: 587 with starttls, 465 with tls, 25 with none
//! security = "starttls"      # starttls, tls or none (none only for a relay on this machine)
//! username = "tally@example.com"
//! password = "…"
//! from = "Tally <tally@example.com>"
//!
//! [[reports]]
//! site = "example.com"
//! every = "week"             # or "month"
//! to = ["team@example.com"]
//!
//! [[alerts]]
//! site = "example.com"
//! spike_percent = 200        # the last hour above the day's hourly mean by this much
//! drop_percent = 80          # or below it by this much
//! min_visitors = 10          # no alarm for fewer visitors than this in the hour (or the mean)
//! to = ["oncall@example.com"]
//! webhook = "https://hooks.slack.com/services/…"   # JSON POST: {"text": …, "site", "kind", …}
//! ```
//!
//! Each report and alert is sent at most once: before sending, the loop creates a `Notice` item
//! keyed by site, kind and period (the week, month or hour) on condition that it does not exist,
//! so restarts and several `tally serve` processes on one table never send it twice. A send that
//! fails removes its notice again, so the next round retries.
//!
//! Mail goes out with `lettre` (the maintained Rust SMTP client), built with rustls on ring and
//! the system's roots (`rustls-native-certs`), which the DynamoDB client already brings: no
//! OpenSSL, no native-tls. The webhook is a small HTTP/1.1 POST over tokio, with TLS by
//! `tokio-rustls` for `https://` URLs.

use std::sync::Arc;
use std::time::Duration;

use analytics::report::{Every, Report, Traffic, TrafficCheck};
use analytics::sites::{Site, Sites};
use analytics::stats::Stats;
use anyhow::{Context, Result, anyhow, bail};
use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use model::Table;
use serde::Deserialize;
use serde_json::json;
use store::item;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The `[smtp]`, `[[reports]]` and `[[alerts]]` tables of `tally.toml`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The mail server.
    pub smtp: Option<Smtp>,
    /// Scheduled reports.
    #[serde(default)]
    pub reports: Vec<ReportSetting>,
    /// Traffic alerts.
    #[serde(default)]
    pub alerts: Vec<AlertSetting>,
    /// How often `tally serve` looks for reports and alerts to send, in seconds (default 300).
    pub check_every_secs: Option<u64>,
}

/// How to reach the mail server.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Smtp {
    /// Its host name.
    pub host: String,
    /// Its port (default by `security`).
    pub port: Option<u16>,
    /// `starttls` (default), `tls` or `none`.
    pub security: Option<String>,
    /// The account to sign in with, if any.
    pub username: Option<String>,
    /// The password of `username` on the SMTP server.
    pub password: Option<String>,
    /// The sender, `Name <address>` or an address.
    pub from: String,
}

/// A scheduled report.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportSetting {
    /// The site (domain or id).
    pub site: String,
    /// `week` or `month`.
    pub every: String,
    /// Who gets it.
    pub to: Vec<String>,
}

/// A traffic alert.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertSetting {
    /// The site (domain or id).
    pub site: String,
    /// A spike: the last hour's visitors above the day's hourly mean by this many percent.
    pub spike_percent: Option<f64>,
    /// A drop: below it by this many percent.
    pub drop_percent: Option<f64>,
    /// The fewest visitors (in the hour, or as the mean) worth an alert (default 10).
    pub min_visitors: Option<i64>,
    /// Who gets it by mail.
    #[serde(default)]
    pub to: Vec<String>,
    /// A URL that gets it as a JSON POST.
    pub webhook: Option<String>,
}

impl Settings {
    /// Checks what can be checked before anything is sent: addresses, periods, thresholds, URLs.
    pub fn validate(&self) -> Result<()> {
        let needs_mail = self.reports.iter().any(|r| !r.to.is_empty()) || self.alerts.iter().any(|a| !a.to.is_empty());
        match &self.smtp {
            Some(s) => {
                s.from.parse::<Mailbox>().map_err(|e| anyhow!("smtp.from {:?}: {e}", s.from))?;
                if !matches!(s.security.as_deref(), None | Some("starttls" | "tls" | "none")) {
                    bail!("smtp.security must be starttls, tls or none");
                }
            }
            None if needs_mail => bail!("reports or alerts send mail, but there is no [smtp] table"),
            None => {}
        }
        for r in &self.reports {
            Every::parse(&r.every).ok_or_else(|| anyhow!("reports.every must be week or month, not {:?}", r.every))?;
            for to in &r.to {
                to.parse::<Mailbox>().map_err(|e| anyhow!("reports.to {to:?}: {e}"))?;
            }
        }
        for a in &self.alerts {
            if a.spike_percent.is_none() && a.drop_percent.is_none() {
                bail!("alerts for {} need spike_percent, drop_percent or both", a.site);
            }
            if a.spike_percent.is_some_and(|p| p <= 0.0) || a.drop_percent.is_some_and(|p| !(0.0..=100.0).contains(&p))
            {
                bail!("alerts for {}: spike_percent is over 0, drop_percent from 0 to 100", a.site);
            }
            for to in &a.to {
                to.parse::<Mailbox>().map_err(|e| anyhow!("alerts.to {to:?}: {e}"))?;
            }
            if let Some(url) = &a.webhook {
                let parsed = url::Url::parse(url).map_err(|e| anyhow!("alerts.webhook {url:?}: {e}"))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    bail!("alerts.webhook must be an http:// or https:// URL");
                }
            }
            if a.to.is_empty() && a.webhook.is_none() {
                bail!("alerts for {} go nowhere: give `to`, `webhook` or both", a.site);
            }
        }
        Ok(())
    }

    /// Whether there is anything to send.
    pub fn is_empty(&self) -> bool {
        self.reports.is_empty() && self.alerts.is_empty()
    }
}

/// Sends one e-mail with a plain-text and an HTML part.
pub async fn send_mail(smtp: &Smtp, to: &[String], subject: &str, text: String, html: String) -> Result<()> {
    let mut message = Message::builder().from(smtp.from.parse().context("smtp.from")?).subject(subject);
    for t in to {
        message = message.to(t.parse().with_context(|| format!("recipient {t:?}"))?);
    }
    let message = message.multipart(MultiPart::alternative_plain_html(text, html)).context("building the message")?;
    let security = smtp.security.as_deref().unwrap_or("starttls");
    let builder = match security {
        "tls" => AsyncSmtpTransport::<Tokio1Executor>::relay(&smtp.host)?.port(smtp.port.unwrap_or(465)),
        "none" => AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&smtp.host).port(smtp.port.unwrap_or(25)),
        _ => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&smtp.host)?.port(smtp.port.unwrap_or(587)),
    };
    let builder = match (&smtp.username, &smtp.password) {
        (Some(u), Some(p)) => builder.credentials(Credentials::new(u.clone(), p.clone())),
        _ => builder,
    };
    let transport = builder.timeout(Some(Duration::from_secs(30))).build();
    transport.send(message).await.with_context(|| format!("sending mail through {}", smtp.host))?;
    Ok(())
}

/// POSTs `body` as JSON to `url` (HTTP/1.1; TLS for `https://`), expecting a 2xx answer.
pub async fn post_webhook(url: &str, body: &serde_json::Value) -> Result<()> {
    let url = url::Url::parse(url)?;
    let host = url.host_str().ok_or_else(|| anyhow!("the webhook URL has no host"))?.to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let payload = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nUser-Agent: Tally\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    let tcp = tokio::time::timeout(Duration::from_secs(10), tokio::net::TcpStream::connect((host.as_str(), port)))
        .await
        .context("connecting to the webhook timed out")??;
    let mut answer = Vec::new();
    let exchange = async {
        if url.scheme() == "https" {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            let config =
                rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                    .with_safe_default_protocol_versions()?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
            let name = rustls::pki_types::ServerName::try_from(host.clone())?;
            let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await?;
            tls.write_all(request.as_bytes()).await?;
            tls.take(64 * 1024).read_to_end(&mut answer).await?;
        } else {
            let mut tcp = tcp;
            tcp.write_all(request.as_bytes()).await?;
            tcp.take(64 * 1024).read_to_end(&mut answer).await?;
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(20), exchange).await.context("the webhook timed out")??;
    let status = String::from_utf8_lossy(&answer).split_whitespace().nth(1).unwrap_or("").to_owned();
    if !status.starts_with('2') {
        bail!("the webhook answered {status:?}");
    }
    Ok(())
}

/// Sends `report` to `to`.
pub async fn send_report(smtp: &Smtp, to: &[String], report: &Report) -> Result<()> {
    send_mail(smtp, to, &report.subject(), report.text(), report.html()).await
}

/// Claims the notice `kind`/`label` of `site`: true when this process is the first to.
async fn claim(table: &Table, site: &Site, kind: &str, label: &str) -> Result<bool> {
    let created =
        table.create("Notice", item! { "site_id" => site.site_id.as_str(), "kind" => kind, "label" => label }).await;
    match created {
        Ok(_) => Ok(true),
        Err(e) if e.is_condition_failed() || e.is_already_exists() => Ok(false),
        Err(e) => Err(e.into()),
    }
}

async fn release(table: &Table, site: &Site, kind: &str, label: &str) {
    let _ =
        table.delete("Notice", item! { "site_id" => site.site_id.as_str(), "kind" => kind, "label" => label }).await;
}

/// One round: every report whose last complete period was not reported yet, and every alert
/// whose site's traffic is out of bounds this hour and was not alerted yet. Returns what was sent.
pub async fn round(
    settings: &Settings,
    table: &Table,
    sites: &Sites,
    stats: &Stats,
    now_ms: i64,
) -> Result<Vec<String>> {
    let mut sent = Vec::new();
    for r in &settings.reports {
        let Some(site) = sites.resolve(&r.site).await? else {
            tracing::warn!(site = %r.site, "a report names no site");
            continue;
        };
        let every = Every::parse(&r.every).ok_or_else(|| anyhow!("reports.every {:?}", r.every))?;
        let today = site.zone.date_of(now_ms)?;
        let range = every.last_complete(today)?;
        let (kind, label) = (format!("report-{}", every.adjective()), range.first().to_string());
        let Some(smtp) = &settings.smtp else { continue };
        if !claim(table, &site, &kind, &label).await? {
            continue;
        }
        let report = Report::build(stats, &site, every, today).await?;
        match send_report(smtp, &r.to, &report).await {
            Ok(()) => {
                tracing::info!(site = %site.domain, kind, period = label, "report sent");
                sent.push(format!("{kind} {} {label}", site.domain));
            }
            Err(e) => {
                tracing::warn!(site = %site.domain, error = format!("{e:#}"), "report not sent; retrying next round");
                release(table, &site, &kind, &label).await;
            }
        }
    }
    for a in &settings.alerts {
        let Some(site) = sites.resolve(&a.site).await? else {
            tracing::warn!(site = %a.site, "an alert names no site");
            continue;
        };
        let check = TrafficCheck::read(stats, &site, now_ms).await?;
        let verdict = check.judge(
            a.spike_percent.unwrap_or(f64::INFINITY),
            a.drop_percent.unwrap_or(0.0),
            a.min_visitors.unwrap_or(10),
        );
        let kind = match verdict {
            Traffic::Normal => continue,
            Traffic::Spike if a.spike_percent.is_some() => "spike",
            Traffic::Drop if a.drop_percent.is_some() => "drop",
            _ => continue,
        };
        let hour = site.zone.bucket(analytics::period::Unit::Hour, now_ms)?.label();
        if !claim(table, &site, &format!("alert-{kind}"), &hour).await? {
            continue;
        }
        let text = format!(
            "Traffic {kind} on {}: {} visitors in the last hour, against {:.1} an hour over the day before.",
            site.domain, check.last_hour, check.hourly_mean
        );
        let mut result = Ok(());
        if !a.to.is_empty()
            && let Some(smtp) = &settings.smtp
        {
            let html = format!("<p>{}</p>", analytics::report::escape(&text));
            result =
                send_mail(smtp, &a.to, &format!("Tally: traffic {kind} on {}", site.domain), text.clone(), html).await;
        }
        if result.is_ok()
            && let Some(url) = &a.webhook
        {
            let body = json!({
                "text": text, "site": site.domain, "kind": kind, "hour": hour,
                "last_hour_visitors": check.last_hour, "hourly_mean_visitors": check.hourly_mean,
            });
            result = post_webhook(url, &body).await;
        }
        match result {
            Ok(()) => {
                tracing::info!(site = %site.domain, kind, "traffic alert sent");
                sent.push(format!("alert-{kind} {}", site.domain));
            }
            Err(e) => {
                tracing::warn!(site = %site.domain, error = format!("{e:#}"), "alert not sent; retrying next round");
                release(table, &site, &format!("alert-{kind}"), &hour).await;
            }
        }
    }
    Ok(sent)
}

/// The loop `tally serve` runs: a round now, then every `check_every_secs`.
pub fn spawn(settings: Settings, table: Table, sites: Arc<Sites>, stats: Arc<Stats>) -> tokio::task::JoinHandle<()> {
    let every = Duration::from_secs(settings.check_every_secs.unwrap_or(300).max(1));
    tokio::spawn(async move {
        loop {
            if let Err(e) = round(&settings, &table, &sites, &stats, jiff::Timestamp::now().as_millisecond()).await {
                tracing::warn!(error = format!("{e:#}"), "reports and alerts round failed");
            }
            tokio::time::sleep(every).await;
        }
    })
}
