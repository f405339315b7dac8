//! The sites and settings API's bodies and answers ([`crate::admin`]), declared. Each answer is
//! built from the `analytics` value it shows, here and nowhere else, and is written in the order
//! of its fields; each body is read into `analytics` values by its own methods, which say what
//! is wrong in the order the fields are checked.

use analytics::accounts::{Member, Role, ShareInfo};
use analytics::goal::Goal;
use analytics::sites::{ApiKeyInfo, Scope, Site, SiteChanges, SiteFunnel, SiteGoal, SiteSegment};
use serde::{Deserialize, Serialize};

use crate::error::ServerError;
use crate::wire::sent::Sent;
use crate::wire::stats::{Filters, Steps, strings};

/// A site as the sites API shows it: its settings only to signed-in users.
#[derive(Debug, Serialize)]
pub struct SiteView<'a> {
    /// The site's id (a ULID), as every site route names it.
    pub site_id: &'a str,
    /// Its main domain.
    pub domain: &'a str,
    /// Its IANA time zone.
    pub timezone: &'a str,
    /// Its settings, when the caller is a signed-in user.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub settings: Option<SiteSettings<'a>>,
    /// The goals events are matched against, oldest first.
    pub goals: Vec<GoalView<'a>>,
    /// Its saved funnels.
    pub funnels: Vec<FunnelView<'a>>,
    /// Its saved segments.
    pub segments: Vec<SegmentView<'a>>,
}

/// A site's settings, shown to signed-in users.
#[derive(Debug, Serialize)]
pub struct SiteSettings<'a> {
    /// The website id Umami's tracker sends.
    pub umami_id: &'a str,
    /// Every domain of the site.
    pub domains: Vec<&'a str>,
    /// Days raw events are kept.
    pub retention_event_days: u32,
    /// Days hourly aggregates are kept.
    pub retention_hourly_days: u32,
    /// Days daily aggregates are kept.
    pub retention_daily_days: u32,
    /// Addresses whose events are dropped.
    pub excluded_ip_ranges: Vec<String>,
}

impl<'a> SiteView<'a> {
    /// `site` as shown, with its settings when `full`.
    pub fn new(site: &'a Site, full: bool) -> Self {
        SiteView {
            site_id: &site.site_id,
            domain: &site.domain,
            timezone: site.zone.name(),
            settings: full.then(|| SiteSettings {
                umami_id: &site.umami_id,
                domains: site.domains.iter().map(|d| d.as_str()).collect(),
                retention_event_days: site.retention_event_days,
                retention_hourly_days: site.retention_hourly_days,
                retention_daily_days: site.retention_daily_days,
                excluded_ip_ranges: site.excluded_ips.texts(),
            }),
            goals: site.goals.iter().map(GoalView::new).collect(),
            funnels: site.funnels.iter().map(FunnelView::new).collect(),
            segments: site.segments.iter().map(SegmentView::new).collect(),
        }
    }
}

/// A goal: `kind` is `page` or `event`, `target` the page pattern or event name.
#[derive(Debug, Serialize)]
pub struct GoalView<'a> {
    /// The id that removes the goal.
    pub goal_id: &'a str,
    /// `page` or `event`.
    pub kind: &'static str,
    /// The page pattern or the event name.
    pub target: &'a str,
    /// The name the Stats API answers with (`Visit /pricing`, `Signup`).
    pub display_name: String,
    /// The currency of a revenue goal.
    pub currency: Option<&'a str>,
}

impl<'a> GoalView<'a> {
    /// `g` as shown.
    pub fn new(g: &'a SiteGoal) -> Self {
        let (kind, target) = match &g.goal {
            Goal::Page(p) => ("page", p.as_str()),
            Goal::Event(name) => ("event", name.as_str()),
        };
        GoalView {
            goal_id: &g.goal_id,
            kind,
            target,
            display_name: g.goal.display_name(),
            currency: g.currency.as_deref(),
        }
    }
}

/// The answer to adding a goal.
#[derive(Debug, Serialize)]
pub struct GoalAdded<'a> {
    /// The new goal's id.
    pub goal_id: &'a str,
    /// The name the Stats API answers with.
    pub display_name: String,
    /// The currency of a revenue goal.
    pub currency: Option<&'a str>,
}

impl<'a> GoalAdded<'a> {
    /// The answer for `g`.
    pub fn new(g: &'a SiteGoal) -> Self {
        GoalAdded { goal_id: &g.goal_id, display_name: g.goal.display_name(), currency: g.currency.as_deref() }
    }
}

/// A saved funnel.
#[derive(Debug, Serialize)]
pub struct FunnelView<'a> {
    /// The id that removes the funnel.
    pub funnel_id: &'a str,
    /// What the owner called the funnel.
    pub name: &'a str,
    /// Its steps, in order.
    pub steps: Vec<StepView<'a>>,
}

/// A funnel step: `{"page": pattern}` or `{"event": name}`.
#[derive(Debug, Serialize)]
pub enum StepView<'a> {
    /// A page pattern.
    #[serde(rename = "page")]
    Page(&'a str),
    /// An event name.
    #[serde(rename = "event")]
    Event(&'a str),
}

impl<'a> FunnelView<'a> {
    /// `f` as shown.
    pub fn new(f: &'a SiteFunnel) -> Self {
        let steps = f
            .steps
            .iter()
            .map(|step| match step {
                Goal::Page(p) => StepView::Page(p.as_str()),
                Goal::Event(name) => StepView::Event(name),
            })
            .collect();
        FunnelView { funnel_id: &f.funnel_id, name: &f.name, steps }
    }
}

/// The answer to adding a funnel.
#[derive(Debug, Serialize)]
pub struct FunnelAdded<'a> {
    /// The new funnel's id.
    pub funnel_id: &'a str,
    /// What the owner called the funnel.
    pub name: &'a str,
}

/// A saved segment: its filters as the Stats API takes them, `[operator, dimension, [values]]`.
#[derive(Debug, Serialize)]
pub struct SegmentView<'a> {
    /// The id that removes the segment or names it in a query's filters.
    pub segment_id: &'a str,
    /// What the owner called the segment.
    pub name: &'a str,
    /// The filters the segment stands for, as a query sends them.
    pub filters: Vec<(&'static str, std::borrow::Cow<'static, str>, &'a [String])>,
}

impl<'a> SegmentView<'a> {
    /// `s` as shown.
    pub fn new(s: &'a SiteSegment) -> Self {
        let filters = s.filters.iter().map(|f| (f.op.name(), f.dimension.name(), f.values.as_slice())).collect();
        SegmentView { segment_id: &s.segment_id, name: &s.name, filters }
    }
}

/// An API key, without its secret.
#[derive(Debug, Serialize)]
pub struct KeyView<'a> {
    /// The id that revokes the key.
    pub key_id: &'a str,
    /// What the owner called the key.
    pub name: &'a str,
    /// Whether it was revoked.
    pub revoked: bool,
    /// What it may do.
    pub scopes: Vec<&'static str>,
    /// Whether it was stored before keys had scopes.
    pub legacy: bool,
}

impl<'a> KeyView<'a> {
    /// `k` as shown.
    pub fn new(k: &'a ApiKeyInfo) -> Self {
        KeyView {
            key_id: &k.key_id,
            name: &k.name,
            revoked: k.revoked,
            scopes: k.scopes.iter().map(|s| s.as_str()).collect(),
            legacy: k.legacy,
        }
    }
}

/// The answer to creating a key: the key itself, shown this once.
#[derive(Debug, Serialize)]
pub struct KeyCreated<'a> {
    /// The secret key.
    pub key: &'a str,
    /// Its id.
    pub key_id: &'a str,
    /// What the owner called the key.
    pub name: &'a str,
    /// What it may do.
    pub scopes: Vec<&'static str>,
}

/// A shared link, without its token.
#[derive(Debug, Serialize)]
pub struct ShareView<'a> {
    /// The link's id.
    pub share_id: &'a str,
    /// What the owner called the link.
    pub name: &'a str,
    /// Whether it asks for a password.
    pub has_password: bool,
    /// Whether it was revoked.
    pub revoked: bool,
    /// Whether other sites may frame it.
    pub embed: bool,
}

impl<'a> ShareView<'a> {
    /// `s` as shown.
    pub fn new(s: &'a ShareInfo) -> Self {
        ShareView {
            share_id: &s.share_id,
            name: &s.name,
            has_password: s.has_password,
            revoked: s.revoked,
            embed: s.embed,
        }
    }
}

/// The answer to creating a shared link: its token and path, shown this once.
#[derive(Debug, Serialize)]
pub struct ShareCreated<'a> {
    /// The link's id.
    pub share_id: &'a str,
    /// What the owner called the link.
    pub name: &'a str,
    /// Whether it asks for a password.
    pub has_password: bool,
    /// Whether other sites may frame it.
    pub embed: bool,
    /// The link's token.
    pub token: &'a str,
    /// The link's path, `/share/TOKEN`.
    pub path: String,
}

/// The answer to changing whether a shared link may be framed.
#[derive(Debug, Serialize)]
pub struct ShareEmbed<'a> {
    /// The link's id.
    pub share_id: &'a str,
    /// Whether other sites may frame it now.
    pub embed: bool,
}

/// A person's role on a site.
#[derive(Debug, Serialize)]
pub struct MemberView<'a> {
    /// The person's e-mail address.
    pub email: &'a str,
    /// `owner`, `admin` or `viewer`.
    pub role: &'static str,
    /// Whether the person may read visitors' sessions.
    pub visitors: bool,
}

impl<'a> MemberView<'a> {
    /// `m` as shown.
    pub fn new(m: &'a Member) -> Self {
        MemberView { email: &m.email, role: m.role.as_str(), visitors: m.visitors }
    }
}

/// The answer to an invitation: its link, shown this once.
#[derive(Debug, Serialize)]
pub struct Invited<'a> {
    /// The invitation's path, `/invite/TOKEN`.
    pub link: String,
    /// The invitation's secret, shown once; the table keeps only its hash.
    pub token: &'a str,
    /// The role it grants.
    pub role: &'static str,
}

/// Who asked `GET /api/sites`: `{"kind": "user" | "key" | "share", …}`.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum PrincipalView<'a> {
    /// A signed-in user.
    User {
        /// The account's e-mail address.
        email: &'a str,
        /// Whether it administers every site.
        instance_admin: bool,
    },
    /// A site API key.
    Key,
    /// A shared link.
    Share {
        /// The link's name.
        name: &'a str,
    },
}

/// The answer of `GET /api/sites`.
#[derive(Debug, Serialize)]
pub struct SiteList<'a> {
    /// The sites the caller may see.
    pub sites: Vec<SiteView<'a>>,
    /// Who the caller is.
    pub principal: PrincipalView<'a>,
}

/// The answer of `GET /api/sites/{site}/segments`.
#[derive(Debug, Serialize)]
pub struct SegmentList<'a> {
    /// The site's saved segments.
    pub segments: Vec<SegmentView<'a>>,
}

/// The answer of `GET /api/sites/{site}/keys`.
#[derive(Debug, Serialize)]
pub struct KeyList<'a> {
    /// The site's API keys, without their secrets.
    pub keys: Vec<KeyView<'a>>,
}

/// The answer of `GET /api/sites/{site}/shares`.
#[derive(Debug, Serialize)]
pub struct ShareList<'a> {
    /// The site's shared links.
    pub shares: Vec<ShareView<'a>>,
}

/// The answer of `GET /api/sites/{site}/members`.
#[derive(Debug, Serialize)]
pub struct MemberList<'a> {
    /// The site's members.
    pub members: Vec<MemberView<'a>>,
}

/// `{"removed": id}`: what a `DELETE` removed.
#[derive(Debug, Serialize)]
pub struct Removed<'a> {
    /// The id (or e-mail address) removed.
    pub removed: &'a str,
}

/// `{"revoked": id}`: what a `DELETE` revoked.
#[derive(Debug, Serialize)]
pub struct Revoked<'a> {
    /// The id of the key or link that was revoked.
    pub revoked: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_written_in_the_order_of_their_fields() {
        let who = PrincipalView::User { email: "me@shop.test", instance_admin: true };
        let list = SiteList { sites: Vec::new(), principal: who };
        assert_eq!(
            serde_json::to_string(&list).unwrap(),
            r#"{"sites":[],"principal":{"kind":"user","email":"me@shop.test","instance_admin":true}}"#
        );
        assert_eq!(serde_json::to_string(&PrincipalView::Key).unwrap(), r#"{"kind":"key"}"#);
        let funnel = FunnelView {
            funnel_id: "f1",
            name: "Signup",
            steps: vec![StepView::Page("/pricing*"), StepView::Event("Signup")],
        };
        assert_eq!(
            serde_json::to_string(&funnel).unwrap(),
            r#"{"funnel_id":"f1","name":"Signup","steps":[{"page":"/pricing*"},{"event":"Signup"}]}"#
        );
        let values = vec!["/a".to_owned()];
        let segment = SegmentView { segment_id: "s1", name: "A", filters: vec![("is", "event:page".into(), &values)] };
        assert_eq!(
            serde_json::to_string(&segment).unwrap(),
            r#"{"segment_id":"s1","name":"A","filters":[["is","event:page",["/a"]]]}"#
        );
    }
}

/// `POST /api/sites {domain, timezone}`; `POST /api/sites/{site}/domains {domain}` sends the
/// domain alone.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NewSite {
    /// The site's (or the further) domain, required.
    pub domain: Sent<String>,
    /// Its IANA time zone; UTC when absent.
    pub timezone: Sent<String>,
}

/// `PATCH /api/sites/{site}`: the settings to change, each left as it is when absent.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SettingsChange {
    /// A new IANA time zone.
    pub timezone: Sent<String>,
    /// Days raw events are kept.
    pub retention_event_days: Sent<u32>,
    /// Days hourly aggregates are kept.
    pub retention_hourly_days: Sent<u32>,
    /// Days daily aggregates are kept.
    pub retention_daily_days: Sent<u32>,
    /// Addresses and ranges whose events are dropped, replacing the current list.
    pub excluded_ip_ranges: Sent<Vec<String>>,
}

impl SettingsChange {
    /// The changes to make, or the 400 naming the first field that is wrong.
    pub fn changes(&self) -> Result<SiteChanges, ServerError> {
        Ok(SiteChanges {
            timezone: self.timezone.optional("timezone")?.map(str::to_owned),
            retention_event_days: days(&self.retention_event_days, "retention_event_days")?,
            retention_hourly_days: days(&self.retention_hourly_days, "retention_hourly_days")?,
            retention_daily_days: days(&self.retention_daily_days, "retention_daily_days")?,
            excluded_ip_ranges: text_list(&self.excluded_ip_ranges, "excluded_ip_ranges")?,
        })
    }
}

/// An optional whole number of days.
fn days(sent: &Sent<u32>, name: &str) -> Result<Option<u32>, ServerError> {
    let wrong = |_: &_| ServerError::bad_request(format!("`{name}` must be a whole number of days"));
    sent.checked(wrong).map(Option::<&u32>::copied)
}

/// An optional list of strings.
fn text_list(sent: &Sent<Vec<String>>, name: &str) -> Result<Option<Vec<String>>, ServerError> {
    Ok(if sent.is_none() { None } else { Some(strings(sent, name)?) })
}

/// `POST /api/sites/{site}/goals {event_name | page_path, currency?}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NewGoal {
    /// The custom event the goal counts.
    pub event_name: Sent<String>,
    /// Or the page pattern it counts.
    pub page_path: Sent<String>,
    /// The currency of a revenue goal.
    pub currency: Sent<String>,
}

impl NewGoal {
    /// The goal and its currency, or the 400 saying what is wrong.
    pub fn goal(&self) -> Result<(Goal, Option<&str>), ServerError> {
        let goal = match (self.event_name.optional("event_name")?, self.page_path.optional("page_path")?) {
            (Some(name), None) => Goal::event(name),
            (None, Some(path)) => Goal::page(path),
            _ => return Err(ServerError::bad_request("give exactly one of `event_name` and `page_path`")),
        };
        let goal = goal.map_err(|e| ServerError::bad_request(e.to_string()))?;
        Ok((goal, self.currency.optional("currency")?))
    }
}

/// `POST /api/sites/{site}/funnels {name, steps}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NewFunnel {
    /// The funnel's name, required.
    pub name: Sent<String>,
    /// Its steps, as the funnel route takes them.
    pub steps: Steps,
}

/// `POST /api/sites/{site}/segments {name, filters}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NewSegment {
    /// The segment's name, required.
    pub name: Sent<String>,
    /// Its filters, as the Stats API takes them.
    pub filters: Filters,
}

/// `POST /api/sites/{site}/keys {name, scopes}` and `POST /api/sites/{site}/shares {name,
/// password, embed}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NewCredential {
    /// The key's or link's name; a default when absent.
    pub name: Sent<String>,
    /// A key's scopes (`stats` when absent).
    pub scopes: Sent<Vec<String>>,
    /// A link's password, when it has one.
    pub password: Sent<String>,
    /// Whether other sites may frame a link.
    pub embed: Sent<bool>,
}

impl NewCredential {
    /// The name, `default` when absent: at most 200 bytes.
    pub fn name<'a>(&'a self, default: &'static str) -> Result<&'a str, ServerError> {
        let name = self.name.optional("name")?.unwrap_or(default);
        if name.len() > 200 {
            return Err(ServerError::bad_request("`name` is longer than 200 bytes"));
        }
        Ok(name)
    }

    /// A key's scopes.
    pub fn scopes(&self) -> Result<Vec<Scope>, ServerError> {
        let mut scopes = Vec::new();
        for name in text_list(&self.scopes, "scopes")?.unwrap_or_default() {
            let scope = Scope::parse(&name).ok_or_else(|| {
                ServerError::bad_request(format!(
                    "unknown scope {name:?}: the scopes are stats, visitors, import and admin"
                ))
            })?;
            scopes.push(scope);
        }
        Ok(scopes)
    }

    /// A link's `embed`.
    pub fn embed(&self) -> Result<Option<bool>, ServerError> {
        self.embed.flag(EMBED_FLAG)
    }
}

/// `PATCH /api/sites/{site}/shares/{share} {embed}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct EmbedChange {
    /// Whether other sites may frame the link, required.
    pub embed: Sent<bool>,
}

/// What a wrong `embed` is told.
pub(crate) const EMBED_FLAG: &str = "`embed` must be true or false";

/// `POST /api/sites/{site}/invitations {email, role, visitors}` and
/// `PUT /api/sites/{site}/members/{email} {role, visitors}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct MemberRole {
    /// Whom to invite (invitations only).
    pub email: Sent<String>,
    /// The role, required.
    pub role: Sent<String>,
    /// Whether the person may see the visitor log.
    pub visitors: Sent<bool>,
}

impl MemberRole {
    /// The role and whether it sees visitors.
    pub fn role(&self) -> Result<(Role, bool), ServerError> {
        let role = Role::parse(self.role.required("role")?).map_err(|e| ServerError::bad_request(e.to_string()))?;
        let visitors = self.visitors.flag("`visitors` must be true or false")?.unwrap_or(false);
        Ok((role, visitors))
    }
}
