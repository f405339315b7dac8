//! E-mail reports and traffic alerts: what they say, worked out from the Stats API's answers.
//!
//! A [`Report`] covers the last complete week (Monday to Sunday) or month of a site, in site
//! time: its top stats with the change from the period before, and its top pages and sources.
//! It renders as plain text and as HTML (every value escaped), and is sent by the binary, which
//! knows SMTP; this module knows neither SMTP nor HTTP.
//!
//! A [`TrafficCheck`] compares the visitors of the last hour with the hourly mean of the day
//! before it: a spike when the hour is above the mean by a site's threshold, a drop when below.

use jiff::ToSpan;

use crate::period::{Date, DateRange};
use crate::sites::Site;
use crate::stats::{Metric, Query, Stats, StatsError, Value};

/// A report's period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Every {
    /// Monday to Sunday.
    Week,
    /// A calendar month.
    Month,
}

impl Every {
    /// `week` or `month`.
    pub fn parse(name: &str) -> Option<Every> {
        match name {
            "week" | "weekly" => Some(Every::Week),
            "month" | "monthly" => Some(Every::Month),
            _ => None,
        }
    }

    /// `weekly` or `monthly`.
    pub fn adjective(self) -> &'static str {
        match self {
            Every::Week => "weekly",
            Every::Month => "monthly",
        }
    }

    /// The last complete period before `today`.
    pub fn last_complete(self, today: Date) -> Result<DateRange, StatsError> {
        let bad = |e: jiff::Error| StatsError::Invalid(e.to_string());
        let (first, last) = match self {
            Every::Week => {
                let monday = today.checked_sub((today.weekday().to_monday_zero_offset() as i64).days()).map_err(bad)?;
                let first = monday.checked_sub(7.days()).map_err(bad)?;
                (first, monday.yesterday().map_err(bad)?)
            }
            Every::Month => {
                let this = today.first_of_month();
                let last = this.yesterday().map_err(bad)?;
                (last.first_of_month(), last)
            }
        };
        DateRange::new(first, last).map_err(|e| StatsError::Invalid(e.to_string()))
    }
}

/// One top stat: this period's value, the period before's.
#[derive(Debug, Clone, PartialEq)]
pub struct Stat {
    /// What it is, for people.
    pub label: &'static str,
    /// This period.
    pub now: f64,
    /// The period before.
    pub before: f64,
    /// A unit after the number (`%`, `s`), if any.
    pub unit: &'static str,
}

impl Stat {
    /// The change in percent, if the period before had any.
    pub fn change_percent(&self) -> Option<f64> {
        (self.before != 0.0).then(|| (self.now - self.before) / self.before * 100.0)
    }

    fn value(&self) -> String {
        format!("{}{}", self.now.round() as i64, self.unit)
    }

    fn change(&self) -> String {
        match self.change_percent() {
            Some(c) => format!("{:+.0}%", c),
            None => "new".to_owned(),
        }
    }
}

/// A site's report for one period.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The site's domain.
    pub domain: String,
    /// Weekly or monthly.
    pub every: Every,
    /// The period.
    pub range: DateRange,
    /// Visitors, visits, page views, bounce rate, visit duration.
    pub stats: Vec<Stat>,
    /// The most viewed pages and their visitors.
    pub top_pages: Vec<(String, i64)>,
    /// The sources bringing most visitors.
    pub top_sources: Vec<(String, i64)>,
}

fn number(v: &Value) -> f64 {
    match v {
        Value::Int(i) => *i as f64,
        Value::Float(f) => *f,
    }
}

async fn totals(stats: &Stats, site: &Site, range: DateRange) -> Result<Vec<f64>, StatsError> {
    let metrics = vec![Metric::Visitors, Metric::Visits, Metric::Pageviews, Metric::BounceRate, Metric::VisitDuration];
    let q = Query::new(site.site_id.clone(), metrics, range, vec![], vec![], vec![], 1, 0)?;
    let rows = stats.query(&q).await?;
    Ok(rows.first().map(|r| r.metrics.iter().map(number).collect()).unwrap_or_else(|| vec![0.0; 5]))
}

async fn top(stats: &Stats, site: &Site, range: DateRange, dimension: &str) -> Result<Vec<(String, i64)>, StatsError> {
    let q = Query::new(
        site.site_id.clone(),
        vec![Metric::Visitors],
        range,
        vec![dimension.to_owned()],
        vec![],
        vec![("visitors".to_owned(), true)],
        5,
        0,
    )?;
    Ok(stats
        .query(&q)
        .await?
        .into_iter()
        .map(|r| (r.dimensions.into_iter().next().unwrap_or_default(), number(&r.metrics[0]) as i64))
        .collect())
}

impl Report {
    /// The report of `site` for the last complete period before `today` (site time).
    pub async fn build(stats: &Stats, site: &Site, every: Every, today: Date) -> Result<Report, StatsError> {
        let range = every.last_complete(today)?;
        let before = match every {
            Every::Week => range.previous_period().map_err(|e| StatsError::Invalid(e.to_string()))?,
            Every::Month => every.last_complete(range.first())?,
        };
        let (now, then) = (totals(stats, site, range).await?, totals(stats, site, before).await?);
        let labels =
            [("Visitors", ""), ("Visits", ""), ("Page views", ""), ("Bounce rate", "%"), ("Visit duration", "s")];
        let stats_list = labels
            .iter()
            .zip(now.iter().zip(&then))
            .map(|((label, unit), (n, b))| Stat { label, now: *n, before: *b, unit })
            .collect();
        Ok(Report {
            domain: site.domain.clone(),
            every,
            range,
            stats: stats_list,
            top_pages: top(stats, site, range, "event:page").await?,
            top_sources: top(stats, site, range, "visit:source").await?,
        })
    }

    /// The subject line.
    pub fn subject(&self) -> String {
        let visitors = self.stats.first().map(|s| s.now.round() as i64).unwrap_or(0);
        format!(
            "Tally {} report for {}: {} visitors, {} to {}",
            self.every.adjective(),
            self.domain,
            visitors,
            self.range.first(),
            self.range.last()
        )
    }

    /// The plain-text body.
    pub fn text(&self) -> String {
        let mut out = format!("{} — {} to {}\n\n", self.domain, self.range.first(), self.range.last());
        for s in &self.stats {
            out.push_str(&format!("{:<16}{:>10}  ({} on the period before)\n", s.label, s.value(), s.change()));
        }
        for (title, rows) in [("Top pages", &self.top_pages), ("Top sources", &self.top_sources)] {
            out.push_str(&format!("\n{title} (visitors)\n"));
            if rows.is_empty() {
                out.push_str("  none\n");
            }
            for (name, n) in rows {
                out.push_str(&format!("  {n:>8}  {name}\n"));
            }
        }
        out
    }

    /// The HTML body: a small table layout with inline styles, as mail clients need.
    pub fn html(&self) -> String {
        let mut out = format!(
            "<!doctype html><html><body style=\"font-family:system-ui,sans-serif;color:#222\">\
             <h2 style=\"margin:0\">{}</h2><p style=\"color:#666\">{} report, {} to {}</p>\
             <table cellpadding=\"6\" style=\"border-collapse:collapse\">",
            escape(&self.domain),
            self.every.adjective(),
            self.range.first(),
            self.range.last()
        );
        for s in &self.stats {
            out.push_str(&format!(
                "<tr><td>{}</td><td style=\"text-align:right;font-weight:bold\">{}</td><td style=\"color:#666\">{}</td></tr>",
                s.label,
                escape(&s.value()),
                escape(&s.change())
            ));
        }
        out.push_str("</table>");
        for (title, rows) in [("Top pages", &self.top_pages), ("Top sources", &self.top_sources)] {
            out.push_str(&format!("<h3>{title}</h3><table cellpadding=\"4\">"));
            for (name, n) in rows {
                out.push_str(&format!("<tr><td style=\"text-align:right\">{n}</td><td>{}</td></tr>", escape(name)));
            }
            out.push_str("</table>");
        }
        out.push_str("</body></html>");
        out
    }
}

/// Escapes text for HTML.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// What a traffic check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// Within the thresholds.
    Normal,
    /// Above the mean by more than the spike threshold.
    Spike,
    /// Below the mean by more than the drop threshold.
    Drop,
}

/// The last hour's visitors against the hourly mean of the 24 hours before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrafficCheck {
    /// Visitors in the last hour.
    pub last_hour: i64,
    /// Mean visitors per hour over the day before.
    pub hourly_mean: f64,
}

impl TrafficCheck {
    /// Reads the check for `site` at `now_ms` from the realtime per-minute page views and the
    /// hourly series.
    pub async fn read(stats: &Stats, site: &Site, now_ms: i64) -> Result<TrafficCheck, StatsError> {
        let today = site.zone.date_of(now_ms).map_err(|e| StatsError::Invalid(e.to_string()))?;
        let yesterday = today.yesterday().map_err(|e| StatsError::Invalid(e.to_string()))?;
        let range = DateRange::new(yesterday, today).map_err(|e| StatsError::Invalid(e.to_string()))?;
        let q = Query::new(
            site.site_id.clone(),
            vec![Metric::Visitors],
            range,
            vec!["time:hour".into()],
            vec![],
            vec![],
            100,
            0,
        )?;
        let rows = stats.query(&q).await?;
        // Hours as labels `YYYY-MM-DD HH:00:00` in site time; the current (partial) hour and the 24 before it.
        let hour_of = |ms: i64| -> Option<String> {
            let b = site.zone.bucket(crate::period::Unit::Hour, ms).ok()?;
            Some(format!("{} {}:00:00", b.first_date(), b.label().get(11..13)?))
        };
        let current = hour_of(now_ms).unwrap_or_default();
        let earlier: Vec<String> = (1..=24).filter_map(|h| hour_of(now_ms - h * 3_600_000)).collect();
        let value =
            |label: &str| rows.iter().find(|r| r.dimensions[0] == label).map(|r| number(&r.metrics[0])).unwrap_or(0.0);
        let last_hour = value(&current) as i64;
        let hourly_mean = earlier.iter().map(|l| value(l)).sum::<f64>() / 24.0;
        Ok(TrafficCheck { last_hour, hourly_mean })
    }

    /// Judges the check: a spike over `spike_percent` above the mean (and at least
    /// `min_visitors` in the hour), a drop over `drop_percent` below it (when the mean is at
    /// least `min_visitors`, so a quiet site does not alarm at every empty hour).
    pub fn judge(&self, spike_percent: f64, drop_percent: f64, min_visitors: i64) -> Traffic {
        let now = self.last_hour as f64;
        if self.last_hour >= min_visitors && now > self.hourly_mean * (1.0 + spike_percent / 100.0) {
            Traffic::Spike
        } else if self.hourly_mean >= min_visitors as f64 && now < self.hourly_mean * (1.0 - drop_percent / 100.0) {
            Traffic::Drop
        } else {
            Traffic::Normal
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(s: &str) -> Date {
        crate::period::parse_date(s).unwrap()
    }

    #[test]
    fn the_last_complete_week_and_month() {
        let w = Every::Week.last_complete(date("2026-11-26")).unwrap();
        assert_eq!((w.first(), w.last()), (date("2026-11-16"), date("2026-11-22")));
        let w = Every::Week.last_complete(date("2026-11-23")).unwrap();
        assert_eq!((w.first(), w.last()), (date("2026-11-16"), date("2026-11-22")), "a Monday reports the week before");
        let m = Every::Month.last_complete(date("2026-03-01")).unwrap();
        assert_eq!((m.first(), m.last()), (date("2026-02-01"), date("2026-02-28")));
    }

    #[test]
    fn spikes_and_drops_need_their_thresholds_and_enough_visitors() {
        let check = |last_hour, hourly_mean| TrafficCheck { last_hour, hourly_mean };
        assert_eq!(check(30, 10.0).judge(100.0, 50.0, 5), Traffic::Spike);
        assert_eq!(check(19, 10.0).judge(100.0, 50.0, 5), Traffic::Normal);
        assert_eq!(check(3, 0.0).judge(100.0, 50.0, 5), Traffic::Normal, "too few to call a spike");
        assert_eq!(check(2, 10.0).judge(100.0, 50.0, 5), Traffic::Drop);
        assert_eq!(check(0, 2.0).judge(100.0, 50.0, 5), Traffic::Normal, "too quiet to call a drop");
    }
}
