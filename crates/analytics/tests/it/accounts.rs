//! Accounts, grants and shared links on the embedded engine, and the site settings the
//! dashboard's settings page changes.

use std::sync::Arc;

use analytics::accounts::{Accounts, AccountsError};
use analytics::goal::Goal;
use analytics::schema::tally_schema;
use analytics::sites::{SiteChanges, Sites, SitesError};
use model::Table;
use store::Store;
use store_embedded::EmbeddedStore;

async fn table() -> (tempfile::TempDir, Table) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let table = Table::new(store, tally_schema("tally"));
    table.create_table().await.unwrap();
    (dir, table)
}

/// Every item of the table, as text.
async fn everything(table: &Table) -> String {
    let records = table.scan().all().await.unwrap();
    format!("{records:?}")
}

#[tokio::test]
async fn users_sign_in_and_out_and_nothing_secret_is_stored_in_the_clear() {
    let (_dir, table) = table().await;
    let accounts = Accounts::new(table.clone());
    assert!(!accounts.has_users().await.unwrap());
    let user = accounts.add_user("Owner@Example.com", "correct horse").await.unwrap();
    assert_eq!(user.email, "owner@example.com");
    assert!(accounts.has_users().await.unwrap());
    assert!(matches!(accounts.add_user("owner@example.com", "another one").await, Err(AccountsError::EmailTaken(_))));
    assert!(matches!(accounts.add_user("x@example.com", "short").await, Err(AccountsError::InvalidPassword)));
    assert!(matches!(accounts.add_user("not-an-email", "long enough").await, Err(AccountsError::InvalidEmail(_))));

    assert!(accounts.login("owner@example.com", "wrong horse").await.unwrap().is_none());
    assert!(accounts.login("nobody@example.com", "correct horse").await.unwrap().is_none());
    let (token, signed_in) = accounts.login("OWNER@example.com", "correct horse").await.unwrap().unwrap();
    assert_eq!(signed_in, user);
    assert_eq!(accounts.session(&token).await.unwrap(), Some(user.clone()));
    assert_eq!(accounts.session("f".repeat(64).as_str()).await.unwrap(), None);
    assert_eq!(accounts.session("junk").await.unwrap(), None);

    let (share, _) = accounts.create_share("SITE", "board", Some("open sesame")).await.unwrap();
    let stored = everything(&table).await;
    for secret in ["correct horse", token.as_str(), share.as_str(), "open sesame"] {
        assert!(!stored.contains(secret), "{secret:?} is stored in the clear");
    }
    assert!(stored.contains("$argon2id$"), "passwords are Argon2id hashes");

    accounts.set_password("owner@example.com", "new horse battery").await.unwrap();
    assert!(accounts.login("owner@example.com", "correct horse").await.unwrap().is_none());
    assert!(accounts.login("owner@example.com", "new horse battery").await.unwrap().is_some());
    accounts.logout(&token).await.unwrap();
    assert_eq!(accounts.session(&token).await.unwrap(), None, "signed out");
    // A login of a removed account stops working.
    let (again, _) = accounts.login("owner@example.com", "new horse battery").await.unwrap().unwrap();
    assert!(accounts.remove_user("owner@example.com").await.unwrap());
    assert_eq!(Accounts::new(table).session(&again).await.unwrap(), None);
}

#[tokio::test]
async fn shared_links_open_one_site_until_revoked_and_a_password_needs_an_unlock() {
    let (_dir, table) = table().await;
    let accounts = Accounts::new(table.clone());
    let (open, info) = accounts.create_share("SITE_A", "public", None).await.unwrap();
    let (locked, locked_info) = accounts.create_share("SITE_A", "team", Some("open sesame")).await.unwrap();
    assert_eq!(accounts.share(&open).await.unwrap(), Some(info.clone()));
    assert!(accounts.share(&locked).await.unwrap().unwrap().has_password);
    assert_eq!(accounts.unlock_share(&locked, "wrong").await.unwrap(), None);
    assert_eq!(accounts.unlock_share(&open, "anything").await.unwrap(), None, "an open link has nothing to unlock");
    let grant = accounts.unlock_share(&locked, "open sesame").await.unwrap().unwrap();
    assert!(accounts.share_unlocked(&grant, &locked_info.share_id).await.unwrap());
    assert!(!accounts.share_unlocked(&grant, &info.share_id).await.unwrap(), "a grant is for one link");
    assert_eq!(accounts.shares("SITE_A").await.unwrap().len(), 2);
    assert!(accounts.shares("SITE_B").await.unwrap().is_empty());

    accounts.revoke_share("SITE_A", &info.share_id).await.unwrap();
    assert_eq!(Accounts::new(table.clone()).share(&open).await.unwrap(), None, "revoked");
    assert!(matches!(accounts.revoke_share("SITE_B", &locked_info.share_id).await, Err(AccountsError::NoSuchShare(_))));
}

#[tokio::test]
async fn site_settings_change_and_a_new_site_is_found_at_once() {
    let (_dir, table) = table().await;
    let sites = Sites::new(table);
    // A lookup that found nothing is cached; adding the site must not leave it unknown.
    assert!(sites.by_domain("fresh.example").await.unwrap().is_none());
    let site = sites.add("fresh.example", "UTC").await.unwrap();
    assert_eq!(sites.by_domain("fresh.example").await.unwrap().map(|s| s.site_id), Some(site.site_id.clone()));
    assert!(sites.by_umami_id(&site.umami_id).await.unwrap().is_some());

    let changes =
        SiteChanges { timezone: Some("Asia/Tokyo".into()), retention_event_days: Some(60), ..SiteChanges::default() };
    let changed = sites.update(&site.site_id, &changes).await.unwrap();
    assert_eq!(
        (changed.zone.name(), changed.retention_event_days, changed.retention_daily_days),
        ("Asia/Tokyo", 60, 730)
    );
    let bad_zone = SiteChanges { timezone: Some("Nowhere/Land".into()), ..SiteChanges::default() };
    assert!(matches!(sites.update(&site.site_id, &bad_zone).await, Err(SitesError::InvalidTimezone(_))));
    let bad_days = SiteChanges { retention_hourly_days: Some(0), ..SiteChanges::default() };
    assert!(matches!(sites.update(&site.site_id, &bad_days).await, Err(SitesError::InvalidRetention { .. })));
    assert_eq!(
        sites.get(&site.site_id).await.unwrap().unwrap().zone.name(),
        "Asia/Tokyo",
        "a refused change changes nothing"
    );

    let more = sites.add_domain(&site.site_id, "fresh-shop.example").await.unwrap();
    let names: Vec<&str> = more.domains.iter().map(|d| d.as_str()).collect();
    assert_eq!(names, ["fresh.example", "fresh-shop.example"]);
    assert_eq!(sites.by_domain("fresh-shop.example").await.unwrap().map(|s| s.site_id), Some(site.site_id.clone()));
    let other = sites.add("other.example", "UTC").await.unwrap();
    assert!(matches!(sites.add_domain(&other.site_id, "fresh-shop.example").await, Err(SitesError::DomainTaken(_))));
    assert!(matches!(sites.remove_domain(&site.site_id, "fresh.example").await, Err(SitesError::InvalidDomain(_))));
    let fewer = sites.remove_domain(&site.site_id, "fresh-shop.example").await.unwrap();
    assert_eq!(fewer.domains.len(), 1);
    assert!(sites.by_domain("fresh-shop.example").await.unwrap().is_none());
    assert!(sites.add_domain(&other.site_id, "fresh-shop.example").await.is_ok(), "a freed domain can be taken");

    let goal = sites.add_goal(&site.site_id, Goal::event("Signup").unwrap()).await.unwrap();
    assert_eq!(sites.get(&site.site_id).await.unwrap().unwrap().goals.len(), 1);
    assert!(sites.remove_goal(&site.site_id, &goal.goal_id).await.unwrap());
    assert!(!sites.remove_goal(&site.site_id, &goal.goal_id).await.unwrap());
    assert!(sites.get(&site.site_id).await.unwrap().unwrap().goals.is_empty());
}

/// A saved segment this Tally cannot read (a hand edit, or a later version's dimension) is left
/// out when its site loads; the site and its other segments load as before.
#[tokio::test]
async fn an_unreadable_segment_is_left_out_not_the_site() {
    use analytics::stats::{Filter, FilterOp};
    let (_dir, table) = table().await;
    let sites = Sites::new(table.clone());
    let site = sites.add("segments.example", "UTC").await.unwrap();
    let filter = |dimension: &str| Filter::new(FilterOp::Is, dimension, vec!["DE".into()]).unwrap();
    let kept = sites.add_segment(&site.site_id, "Germany", vec![filter("visit:country")]).await.unwrap();
    let broken = sites.add_segment(&site.site_id, "Broken", vec![filter("visit:source")]).await.unwrap();
    let mut unreadable = store::Item::new();
    unreadable.insert("op".into(), store::AttributeValue::S("is".into()));
    unreadable.insert("dimension".into(), store::AttributeValue::S("visit:not_a_dimension".into()));
    unreadable.insert("values".into(), store::AttributeValue::L(vec![store::AttributeValue::S("x".into())]));
    table
        .update(
            "Segment",
            store::item! { "site_id" => site.site_id.as_str(), "segment_id" => broken.segment_id.as_str() },
            model::expr::Update::new()
                .set("filters", store::AttributeValue::L(vec![store::AttributeValue::M(unreadable)])),
        )
        .await
        .unwrap();
    let loaded = Sites::new(table).get(&site.site_id).await.unwrap().expect("the site still loads");
    let names: Vec<&str> = loaded.segments.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["Germany"], "only the unreadable segment is left out");
    assert_eq!(loaded.segments[0].segment_id, kept.segment_id);
}
