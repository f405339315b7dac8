//! Dashboard accounts, signed-in browsers and read-only shared links, on Tally's table.
//!
//! - **Users** sign in with an e-mail and a password. Passwords are kept as Argon2id hashes (PHC
//!   strings) from the `argon2` crate — RustCrypto's maintained, pure-Rust implementation of the
//!   algorithm OWASP recommends first — with its default parameters (19 MiB, two passes), and
//!   hashed on a blocking thread so a sign-in never stalls ingestion. At most
//!   [`max_concurrent_hashes`] hashes run at once in a process (each holds 19 MiB); a caller
//!   waits up to [`HASH_QUEUE_WAIT`] for a turn, then gets [`AccountsError::Busy`]. Every user
//!   is an admin of every site: Tally is self-hosted, and the people who can sign in run it.
//! - **Signing out everywhere** ([`Accounts::sign_out_everywhere`], and every password change)
//!   raises the account's sign-out generation; a login grant carries the generation it was made
//!   in and is refused once the account's has moved on.
//! - **The first account** made by the setup link ([`Accounts::add_first_user`]) is written in
//!   one transaction with a `Setup` item created on the condition that none exists, so racing
//!   setup requests make exactly one account.
//! - **Grants** are what a browser's cookie stands for: a login session, or a password-protected
//!   shared link that was unlocked. The cookie holds a random 32-byte token; the table holds only
//!   its SHA-256, so a copy of the table signs nobody in. Grants expire (30 days for a login,
//!   7 for a shared link), checked on every read, not left to the table's lazy TTL deletion.
//! - **Shared links** open one site's dashboard read-only, optionally behind a password, until
//!   revoked. The link carries a random token, stored hashed like the others.
//!
//! Lookups behind a cookie or link are cached for [`CACHE_TTL`], so a dashboard's burst of
//! queries costs one read; signing out or revoking is seen everywhere within that time.
//!
//! ```no_run
//! # async fn run(table: model::Table) -> Result<(), analytics::accounts::AccountsError> {
//! use analytics::accounts::Accounts;
//!
//! let accounts = Accounts::new(table);
//! accounts.add_user("admin@example.com", "correct horse battery").await?;
//! let (cookie, user) = accounts.login("admin@example.com", "correct horse battery").await?.unwrap();
//! assert_eq!(accounts.session(&cookie).await?.unwrap().email, user.email);
//! # Ok(()) }
//! ```

use std::sync::OnceLock;
use std::time::Duration;

use argon2::password_hash::SaltString;
use argon2::{Argon2, PasswordHash, PasswordHasher, PasswordVerifier};
use model::{Record, Table};
use sha2::{Digest, Sha256};
use store::item;

use crate::ttl_cache::{Cached, forget};

/// How long a cached session or shared link is trusted.
pub const CACHE_TTL: Duration = Duration::from_secs(5);
/// How long a login lasts.
pub const LOGIN_LIFETIME: Duration = Duration::from_secs(30 * 86_400);
/// How long an unlocked shared link stays unlocked.
pub const SHARE_UNLOCK_LIFETIME: Duration = Duration::from_secs(7 * 86_400);
/// Shortest password accepted.
pub const MIN_PASSWORD_CHARS: usize = 8;
/// Longest password accepted (hashing cost grows with it).
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// What can go wrong with accounts and links.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AccountsError {
    /// The table could not be read or written.
    #[error(transparent)]
    Model(#[from] model::Error),
    /// Not an e-mail address.
    #[error("{0:?} is not an e-mail address")]
    InvalidEmail(String),
    /// The password is too short or too long.
    #[error("a password must have at least {MIN_PASSWORD_CHARS} characters and at most {MAX_PASSWORD_BYTES} bytes")]
    InvalidPassword,
    /// An account with this e-mail exists.
    #[error("an account for {0} already exists")]
    EmailTaken(String),
    /// No account has this e-mail.
    #[error("no account for {0}")]
    NoSuchUser(String),
    /// The site has no shared link with this id.
    #[error("the site has no shared link {0:?}")]
    NoSuchShare(String),
    /// A stored item does not read back.
    #[error("a stored {entity} is malformed: {message}")]
    Corrupt {
        /// The name of the schema entity whose item is malformed (`User`, `ShareLink`, …).
        entity: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Hashing failed (it does not, for valid parameters), or its thread panicked.
    #[error("password hashing failed: {0}")]
    Hashing(String),
    /// Every password-hashing slot stayed taken for [`HASH_QUEUE_WAIT`]: try again shortly.
    #[error("too many sign-ins at once; try again in a moment")]
    Busy,
    /// The first-run setup was done already (or an account exists).
    #[error("the first account exists already; sign in instead")]
    SetupDone,
    /// Not one of the site roles.
    #[error("{0:?} is not a role: owner, admin or viewer")]
    InvalidRole(String),
    /// The invitation does not exist, was used, or expired.
    #[error("this invitation is not valid (used, expired or revoked)")]
    NoSuchInvitation,
    /// No two-factor setup was started (or it was finished already).
    #[error("start setting up two-factor sign-in first")]
    NoPendingTwoFactor,
    /// The one-time code is wrong, expired or used.
    #[error("the code is wrong or expired")]
    WrongCode,
    /// An invitation for an existing account was accepted with the wrong password.
    #[error("an account for {0} exists: accept the invitation with its password")]
    WrongPassword(String),
}

/// How long a password check waits for a hashing slot before it gives up with
/// [`AccountsError::Busy`].
pub const HASH_QUEUE_WAIT: Duration = Duration::from_secs(2);

/// Most Argon2 hashes computed at once in this process: one per core, at least two. More would
/// only queue on the cores and hold 19 MiB each meanwhile.
pub fn max_concurrent_hashes() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).max(2)
}

/// Runs `work` (a password hash or check) on a blocking thread once a hashing slot is free.
async fn hashing<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, AccountsError> {
    static SLOTS: OnceLock<tokio::sync::Semaphore> = OnceLock::new();
    let slots = SLOTS.get_or_init(|| tokio::sync::Semaphore::new(max_concurrent_hashes()));
    let permit = match tokio::time::timeout(HASH_QUEUE_WAIT, slots.acquire()).await {
        Ok(Ok(permit)) => permit,
        Ok(Err(_closed)) => return Err(AccountsError::Hashing("the hashing slots are closed".into())),
        Err(_elapsed) => return Err(AccountsError::Busy),
    };
    let out = tokio::task::spawn_blocking(work).await.map_err(|e| AccountsError::Hashing(e.to_string()));
    drop(permit);
    out
}

/// A dashboard account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Its e-mail, lower-cased.
    pub email: String,
    /// Its id (a ULID).
    pub user_id: String,
    /// Its role (`admin`).
    pub role: String,
}

/// A shared link, without its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareInfo {
    /// Its id (a ULID), for revoking.
    pub share_id: String,
    /// The site it shows.
    pub site_id: String,
    /// What its owner called it.
    pub name: String,
    /// Whether opening it asks for a password.
    pub has_password: bool,
    /// Whether it was revoked.
    pub revoked: bool,
    /// Whether other sites may show it in a frame (off unless its owner turns it on).
    pub embed: bool,
}

/// Accounts, grants and shared links. Share it behind an `Arc`.
#[derive(Debug)]
pub struct Accounts {
    table: Table,
    sessions: Cached<User>,
    shares: Cached<ShareInfo>,
}

/// Most answers each of the logins and shared-links caches keeps.
const CACHE_CAP: usize = 10_000;

fn corrupt(entity: &'static str) -> impl Fn(model::Error) -> AccountsError {
    move |e| AccountsError::Corrupt { entity, message: e.to_string() }
}

/// A fresh random token: 32 bytes as 64 lower-case hex digits.
fn new_token() -> String {
    let mut secret = [0u8; 32];
    rand::fill(&mut secret);
    secret.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the table keeps of a token.
fn hash_token(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `token` looks like one [`new_token`] makes, so junk costs no read.
fn plausible_token(token: &str) -> bool {
    token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit())
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// `email` lower-cased, if it is an address: one `@`, something on both sides, a dot in the
/// domain, no spaces or control characters, at most 254 bytes.
pub fn normalise_email(email: &str) -> Result<String, AccountsError> {
    let e = email.trim().to_lowercase();
    let ok = e.len() <= 254
        && !e.chars().any(|c| c.is_whitespace() || c.is_control())
        && matches!(e.split_once('@'), Some((local, domain))
            if !local.is_empty() && domain.contains('.') && !domain.contains('@')
               && !domain.starts_with('.') && !domain.ends_with('.'));
    if ok { Ok(e) } else { Err(AccountsError::InvalidEmail(email.to_owned())) }
}

fn check_password(password: &str) -> Result<(), AccountsError> {
    if password.chars().count() < MIN_PASSWORD_CHARS || password.len() > MAX_PASSWORD_BYTES {
        return Err(AccountsError::InvalidPassword);
    }
    Ok(())
}

/// Hashes `password` with Argon2id and a random salt, on a blocking thread.
async fn hash_password(password: &str) -> Result<String, AccountsError> {
    let password = password.to_owned();
    hashing(move || {
        let mut salt = [0u8; 16];
        rand::fill(&mut salt);
        let salt = SaltString::encode_b64(&salt).map_err(|e| AccountsError::Hashing(e.to_string()))?;
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| AccountsError::Hashing(e.to_string()))
    })
    .await?
}

/// Whether `password` matches the PHC string `hash`, on a blocking thread. A `None` hash (no
/// such account) is checked against a dummy, so the answer takes as long either way.
async fn verify_password(password: &str, hash: Option<String>) -> Result<bool, AccountsError> {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let known = hash.is_some();
    let hash = match hash {
        Some(h) => h,
        None => match DUMMY.get() {
            Some(d) => d.clone(),
            None => {
                let d = hash_password("tally-dummy-password").await?;
                DUMMY.get_or_init(|| d).clone()
            }
        },
    };
    let password = password.to_owned();
    let matched = hashing(move || {
        PasswordHash::new(&hash)
            .is_ok_and(|parsed| Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok())
    })
    .await?;
    Ok(known && matched)
}

fn user_of(r: &Record) -> Result<User, AccountsError> {
    Ok(User {
        email: r.string("email").map_err(corrupt("User"))?.to_owned(),
        user_id: r.string("user_id").map_err(corrupt("User"))?.to_owned(),
        role: r.opt_string("role").ok().flatten().unwrap_or("admin").to_owned(),
    })
}

/// An account's sign-out generation (0 until it first signs out everywhere).
fn generation_of(user: &Record) -> i64 {
    user.opt_i64("signout_generation").ok().flatten().unwrap_or(0)
}

fn share_of(r: &Record) -> Result<ShareInfo, AccountsError> {
    Ok(ShareInfo {
        share_id: r.string("share_id").map_err(corrupt("ShareLink"))?.to_owned(),
        site_id: r.string("site_id").map_err(corrupt("ShareLink"))?.to_owned(),
        name: r.opt_string("name").ok().flatten().unwrap_or_default().to_owned(),
        has_password: r.opt_string("password_hash").ok().flatten().is_some_and(|h| !h.is_empty()),
        revoked: r.opt_i64("revoked_at").ok().flatten().is_some(),
        embed: matches!(r.get("embed"), Some(store::AttributeValue::Bool(true))),
    })
}

impl Accounts {
    /// Accounts on `table`.
    pub fn new(table: Table) -> Self {
        Accounts { table, sessions: Cached::new(CACHE_TTL, CACHE_CAP), shares: Cached::new(CACHE_TTL, CACHE_CAP) }
    }

    /// Every account, by e-mail.
    pub async fn users(&self) -> Result<Vec<User>, AccountsError> {
        let records = self.table.query("User").index("gsi1").key(item! {}).all().await?;
        records.iter().map(user_of).collect()
    }

    /// Whether any account exists (the first-run check).
    pub async fn has_users(&self) -> Result<bool, AccountsError> {
        Ok(!self.table.query("User").index("gsi1").key(item! {}).limit(1).all().await?.is_empty())
    }

    /// Creates an account. Refuses an e-mail that has one.
    pub async fn add_user(&self, email: &str, password: &str) -> Result<User, AccountsError> {
        let email = normalise_email(email)?;
        check_password(password)?;
        let hash = hash_password(password).await?;
        let user_id = ulid::Ulid::new().to_string();
        let created = self
            .table
            .create(
                "User",
                item! {
                    "email" => email.as_str(),
                    "user_id" => user_id.as_str(),
                    "password_hash" => hash.as_str(),
                    "role" => "admin",
                },
            )
            .await;
        match created {
            Ok(_) => Ok(User { email, user_id, role: "admin".to_owned() }),
            Err(e) if e.is_condition_failed() || e.is_already_exists() => Err(AccountsError::EmailTaken(email)),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates the first account, the one the setup link makes: written in one transaction
    /// with the `Setup` item, created only if it is not there, so of any number of racing calls
    /// one succeeds and the others get [`AccountsError::SetupDone`].
    pub async fn add_first_user(&self, email: &str, password: &str) -> Result<User, AccountsError> {
        let email = normalise_email(email)?;
        check_password(password)?;
        if self.table.get("Setup", item! {}).await?.is_some() || self.has_users().await? {
            return Err(AccountsError::SetupDone);
        }
        let hash = hash_password(password).await?;
        let user_id = ulid::Ulid::new().to_string();
        let writes = vec![
            model::TxWrite::create("Setup", item! { "email" => email.as_str() }),
            model::TxWrite::create(
                "User",
                item! {
                    "email" => email.as_str(),
                    "user_id" => user_id.as_str(),
                    "password_hash" => hash.as_str(),
                    "role" => "admin",
                },
            ),
        ];
        match self.table.transact_write(writes).await {
            Ok(_) => Ok(User { email, user_id, role: "admin".to_owned() }),
            Err(e) if e.is_condition_failed() || e.is_already_exists() || e.is_transaction_canceled() => {
                Err(AccountsError::SetupDone)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Sets an account's password and ends its existing logins (see
    /// [`Accounts::sign_out_everywhere`]).
    pub async fn set_password(&self, email: &str, password: &str) -> Result<(), AccountsError> {
        let email = normalise_email(email)?;
        check_password(password)?;
        if self.table.get("User", item! { "email" => email.as_str() }).await?.is_none() {
            return Err(AccountsError::NoSuchUser(email));
        }
        let hash = hash_password(password).await?;
        self.table
            .update(
                "User",
                item! { "email" => email.as_str() },
                model::expr::Update::new().set("password_hash", hash).add("signout_generation", 1),
            )
            .await?;
        forget(&self.sessions);
        Ok(())
    }

    /// Ends every login of an account, on every process (within [`CACHE_TTL`] on the others):
    /// its sign-out generation moves on, and grants made in an earlier one are refused.
    pub async fn sign_out_everywhere(&self, email: &str) -> Result<(), AccountsError> {
        let email = normalise_email(email)?;
        let updated = self
            .table
            .update(
                "User",
                item! { "email" => email.as_str() },
                model::expr::Update::new().add("signout_generation", 1),
            )
            .await;
        match updated {
            Ok(_) => {}
            Err(e) if e.is_not_found() || e.is_condition_failed() => return Err(AccountsError::NoSuchUser(email)),
            Err(e) => return Err(e.into()),
        }
        forget(&self.sessions);
        Ok(())
    }

    /// Removes an account; its logins stop working within [`CACHE_TTL`].
    pub async fn remove_user(&self, email: &str) -> Result<bool, AccountsError> {
        let email = normalise_email(email)?;
        let existed = self.table.get("User", item! { "email" => email.as_str() }).await?.is_some();
        self.table.delete("User", item! { "email" => email.as_str() }).await?;
        forget(&self.sessions);
        Ok(existed)
    }

    /// Signs in: a new login token (for the cookie) and the account, or `None` when the e-mail or
    /// password is wrong (which one is not said).
    pub async fn login(&self, email: &str, password: &str) -> Result<Option<(String, User)>, AccountsError> {
        let record = match normalise_email(email) {
            Ok(e) if password.len() <= MAX_PASSWORD_BYTES => {
                self.table.get("User", item! { "email" => e.as_str() }).await?
            }
            _ => None,
        };
        let hash = record.as_ref().and_then(|r| r.opt_string("password_hash").ok().flatten().map(str::to_owned));
        if !verify_password(password, hash).await? {
            return Ok(None);
        }
        let Some(record) = record else { return Ok(None) };
        let user = user_of(&record)?;
        let token = self.grant("user", &user.email, LOGIN_LIFETIME, generation_of(&record)).await?;
        Ok(Some((token, user)))
    }

    async fn grant(
        &self,
        kind: &str,
        subject: &str,
        lifetime: Duration,
        generation: i64,
    ) -> Result<String, AccountsError> {
        let token = new_token();
        let expires = (now_ms() / 1000) + lifetime.as_secs() as i64;
        self.table
            .put(
                "Grant",
                item! {
                    "token_hash" => hash_token(&token).as_str(),
                    "kind" => kind,
                    "subject" => subject,
                    "ttl" => expires,
                    "generation" => generation,
                },
            )
            .await?;
        Ok(token)
    }

    /// The live grant behind `token`: its kind, subject and generation.
    async fn grant_of(&self, token: &str) -> Result<Option<(String, String, i64)>, AccountsError> {
        if !plausible_token(token) {
            return Ok(None);
        }
        let Some(r) = self.table.get("Grant", item! { "token_hash" => hash_token(token).as_str() }).await? else {
            return Ok(None);
        };
        let expires = r.opt_i64("ttl").ok().flatten().unwrap_or(0);
        if expires * 1000 <= now_ms() {
            return Ok(None);
        }
        let kind = r.string("kind").map_err(corrupt("Grant"))?.to_owned();
        let subject = r.string("subject").map_err(corrupt("Grant"))?.to_owned();
        // Grants made before generations existed are of generation 0, as are their accounts.
        let generation = r.opt_i64("generation").ok().flatten().unwrap_or(0);
        Ok(Some((kind, subject, generation)))
    }

    /// The account signed in with login token `token`, if the login is live and the account exists.
    pub async fn session(&self, token: &str) -> Result<Option<User>, AccountsError> {
        // A cookie no login could have made is neither read nor cached.
        if !plausible_token(token) {
            return Ok(None);
        }
        let key = hash_token(token);
        self.sessions
            .get_or_load(&key, || async {
                Ok(match self.grant_of(token).await? {
                    Some((kind, email, generation)) if kind == "user" => {
                        match self.table.get("User", item! { "email" => email.as_str() }).await? {
                            // Signed out everywhere (or the password changed) since this login.
                            Some(r) if generation_of(&r) != generation => None,
                            Some(r) => Some(user_of(&r)?),
                            None => None,
                        }
                    }
                    _ => None,
                })
            })
            .await
    }

    /// Ends the login (or unlock) behind `token`.
    pub async fn logout(&self, token: &str) -> Result<(), AccountsError> {
        if plausible_token(token) {
            self.table.delete("Grant", item! { "token_hash" => hash_token(token).as_str() }).await?;
        }
        forget(&self.sessions);
        Ok(())
    }

    /// Creates a shared link to `site_id`: its token (shown once, part of the link) and info.
    pub async fn create_share(
        &self,
        site_id: &str,
        name: &str,
        password: Option<&str>,
    ) -> Result<(String, ShareInfo), AccountsError> {
        let password = password.filter(|p| !p.is_empty());
        if let Some(p) = password {
            check_password(p)?;
        }
        let token = new_token();
        let share_id = ulid::Ulid::new().to_string();
        let mut fields = item! {
            "token_hash" => hash_token(&token).as_str(),
            "share_id" => share_id.as_str(),
            "site_id" => site_id,
            "name" => name,
        };
        if let Some(p) = password {
            fields.insert("password_hash".to_owned(), hash_password(p).await?.into());
        }
        self.table.create("ShareLink", fields).await?;
        let info = ShareInfo {
            share_id,
            site_id: site_id.to_owned(),
            name: name.to_owned(),
            has_password: password.is_some(),
            revoked: false,
            embed: false,
        };
        Ok((token, info))
    }

    /// A site's shared links, revoked ones included.
    pub async fn shares(&self, site_id: &str) -> Result<Vec<ShareInfo>, AccountsError> {
        let records = self.table.query("ShareLink").index("gsi1").key(item! { "site_id" => site_id }).all().await?;
        records.iter().map(share_of).collect()
    }

    /// Revokes a shared link; it stops opening within [`CACHE_TTL`] everywhere.
    pub async fn revoke_share(&self, site_id: &str, share_id: &str) -> Result<(), AccountsError> {
        self.update_share(site_id, share_id, model::expr::Update::new().set("revoked_at", now_ms())).await
    }

    /// Lets other sites show a shared link in a frame, or stops them; it takes effect within
    /// [`CACHE_TTL`] everywhere.
    pub async fn set_share_embed(&self, site_id: &str, share_id: &str, embed: bool) -> Result<(), AccountsError> {
        let update = model::expr::Update::new().set("embed", store::AttributeValue::Bool(embed));
        self.update_share(site_id, share_id, update).await
    }

    /// Applies `update` to the site's shared link `share_id` (found by its id, stored by its
    /// token's hash) and drops the cached links.
    async fn update_share(
        &self,
        site_id: &str,
        share_id: &str,
        update: model::expr::Update,
    ) -> Result<(), AccountsError> {
        let records = self
            .table
            .query("ShareLink")
            .index("gsi1")
            .key(item! { "site_id" => site_id, "share_id" => share_id })
            .all()
            .await?;
        let hash = records
            .first()
            .and_then(|r| r.string("token_hash").ok())
            .ok_or_else(|| AccountsError::NoSuchShare(share_id.to_owned()))?
            .to_owned();
        self.table.update("ShareLink", item! { "token_hash" => hash.as_str() }, update).await?;
        forget(&self.shares);
        Ok(())
    }

    /// The live shared link with token `token`.
    pub async fn share(&self, token: &str) -> Result<Option<ShareInfo>, AccountsError> {
        if !plausible_token(token) {
            return Ok(None);
        }
        let key = hash_token(token);
        self.shares
            .get_or_load(&key, || async {
                match self.table.get("ShareLink", item! { "token_hash" => key.as_str() }).await? {
                    Some(r) => Ok(Some(share_of(&r)?).filter(|s| !s.revoked)),
                    None => Ok(None),
                }
            })
            .await
    }

    /// Unlocks a password-protected shared link: a grant token for the cookie, or `None` when the
    /// link or password is wrong.
    pub async fn unlock_share(&self, token: &str, password: &str) -> Result<Option<String>, AccountsError> {
        let Some(info) = self.share(token).await? else { return Ok(None) };
        let record = self.table.get("ShareLink", item! { "token_hash" => hash_token(token).as_str() }).await?;
        let hash = record.and_then(|r| r.opt_string("password_hash").ok().flatten().map(str::to_owned));
        if hash.is_none() || password.len() > MAX_PASSWORD_BYTES || !verify_password(password, hash).await? {
            return Ok(None);
        }
        Ok(Some(self.grant("share", &info.share_id, SHARE_UNLOCK_LIFETIME, 0).await?))
    }

    /// Whether `grant` is a live unlock of shared link `share_id`.
    pub async fn share_unlocked(&self, grant: &str, share_id: &str) -> Result<bool, AccountsError> {
        Ok(matches!(self.grant_of(grant).await?, Some((kind, subject, _)) if kind == "share" && subject == share_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_checked_and_lower_cased() {
        assert_eq!(normalise_email(" Admin@Example.COM ").unwrap(), "admin@example.com");
        for bad in ["", "admin", "@example.com", "admin@", "admin@example", "a b@example.com", "a@b@c.com", "a@.com"] {
            assert!(normalise_email(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tokens_are_random_hex_and_stored_hashed() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert!(plausible_token(&a));
        assert!(!plausible_token("x"));
        assert_ne!(hash_token(&a), a);
        assert_eq!(hash_token(&a), hash_token(&a));
    }

    #[tokio::test]
    async fn a_password_verifies_against_its_hash_only() {
        let hash = hash_password("correct horse").await.unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", Some(hash.clone())).await.unwrap());
        assert!(!verify_password("wrong horse", Some(hash)).await.unwrap());
        assert!(!verify_password("correct horse", None).await.unwrap());
        assert!(!verify_password("x", Some("not a phc string".into())).await.unwrap());
    }
}

/// A user's role on one site. An account whose own role is `admin` (every account made with
/// `tally user add` or the setup link) is an instance administrator: the owner of every site.
/// Invited accounts (role `member`) see only the sites they hold a role on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads the site's statistics (and its visitors' sessions when granted).
    Viewer,
    /// Also imports and changes the site's settings, goals, keys and shared links.
    Admin,
    /// Also manages the site's people and may delete it.
    Owner,
}

impl Role {
    /// `owner`, `admin` or `viewer`.
    pub fn parse(name: &str) -> Result<Role, AccountsError> {
        match name {
            "owner" => Ok(Role::Owner),
            "admin" => Ok(Role::Admin),
            "viewer" => Ok(Role::Viewer),
            other => Err(AccountsError::InvalidRole(other.chars().take(40).collect())),
        }
    }

    /// The role's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::Viewer => "viewer",
        }
    }
}

/// One person's place on a site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The account's e-mail.
    pub email: String,
    /// What the account may do on the site.
    pub role: Role,
    /// Whether a viewer may read visitors' sessions (owners and admins always may).
    pub visitors: bool,
}

/// How long an invitation link stays valid.
pub const INVITATION_LIFETIME: Duration = Duration::from_secs(7 * 86_400);

impl User {
    /// Whether this account administers the whole instance (every site, adding sites).
    pub fn is_instance_admin(&self) -> bool {
        self.role == "admin"
    }
}

impl Accounts {
    /// The table, for the other account modules (two-factor sign-in).
    pub(crate) fn table(&self) -> &Table {
        &self.table
    }

    /// Whether `password` is `email`'s (the same work either way, so timing tells nothing).
    pub async fn password_matches(&self, email: &str, password: &str) -> Result<bool, AccountsError> {
        let record = match normalise_email(email) {
            Ok(e) if password.len() <= MAX_PASSWORD_BYTES => {
                self.table.get("User", item! { "email" => e.as_str() }).await?
            }
            _ => None,
        };
        let hash = record.as_ref().and_then(|r| r.opt_string("password_hash").ok().flatten().map(str::to_owned));
        Ok(verify_password(password, hash).await? && record.is_some())
    }

    /// `email`'s place on `site_id`, if any (instance administrators hold none: they own every site).
    pub async fn membership(&self, site_id: &str, email: &str) -> Result<Option<Member>, AccountsError> {
        let Some(r) = self.table.get("Membership", item! { "site_id" => site_id, "email" => email }).await? else {
            return Ok(None);
        };
        member_of(&r).map(Some)
    }

    /// The people of `site_id`, by e-mail.
    pub async fn members(&self, site_id: &str) -> Result<Vec<Member>, AccountsError> {
        let records = self.table.query("Membership").key(item! { "site_id" => site_id }).all().await?;
        records.iter().map(member_of).collect()
    }

    /// The sites `email` holds a role on.
    pub async fn sites_of(&self, email: &str) -> Result<Vec<String>, AccountsError> {
        let records = self.table.query("Membership").index("gsi1").key(item! { "email" => email }).all().await?;
        records.iter().map(|r| Ok(r.string("site_id").map_err(corrupt("Membership"))?.to_owned())).collect()
    }

    /// Gives `email` (an existing account) `role` on `site_id`, replacing any role it had.
    pub async fn set_member(
        &self,
        site_id: &str,
        email: &str,
        role: Role,
        visitors: bool,
    ) -> Result<(), AccountsError> {
        let email = normalise_email(email)?;
        if self.table.get("User", item! { "email" => email.as_str() }).await?.is_none() {
            return Err(AccountsError::NoSuchUser(email));
        }
        self.table
            .put(
                "Membership",
                item! { "site_id" => site_id, "email" => email.as_str(), "role" => role.as_str(), "visitors" => visitors },
            )
            .await?;
        Ok(())
    }

    /// Takes `email`'s role on `site_id` away; whether it had one.
    pub async fn remove_member(&self, site_id: &str, email: &str) -> Result<bool, AccountsError> {
        Ok(self.table.delete("Membership", item! { "site_id" => site_id, "email" => email }).await?.is_some())
    }

    /// An invitation to `site_id` for `email` with `role`: the token of its link, shown once
    /// (kept as its SHA-256), valid for [`INVITATION_LIFETIME`] and once.
    pub async fn invite(
        &self,
        site_id: &str,
        email: &str,
        role: Role,
        visitors: bool,
    ) -> Result<String, AccountsError> {
        let email = normalise_email(email)?;
        let token = new_token();
        let expires = now_ms() / 1000 + INVITATION_LIFETIME.as_secs() as i64;
        self.table
            .put(
                "Invitation",
                item! {
                    "token_hash" => hash_token(&token).as_str(),
                    "site_id" => site_id,
                    "email" => email.as_str(),
                    "role" => role.as_str(),
                    "visitors" => visitors,
                    "ttl" => expires,
                },
            )
            .await?;
        Ok(token)
    }

    /// The live invitation behind `token`: (site, e-mail), for the page that accepts it.
    pub async fn invitation(&self, token: &str) -> Result<Option<(String, String)>, AccountsError> {
        Ok(self.live_invitation(token).await?.map(|r| (r.0, r.1.email)))
    }

    async fn live_invitation(&self, token: &str) -> Result<Option<(String, Member)>, AccountsError> {
        if !plausible_token(token) {
            return Ok(None);
        }
        let Some(r) = self.table.get("Invitation", item! { "token_hash" => hash_token(token).as_str() }).await? else {
            return Ok(None);
        };
        if r.opt_i64("ttl").ok().flatten().unwrap_or(0) * 1000 <= now_ms() {
            return Ok(None);
        }
        let site = r.string("site_id").map_err(corrupt("Invitation"))?.to_owned();
        Ok(Some((site, member_of(&r)?)))
    }

    /// Accepts the invitation behind `token`: makes the account with `password` when none
    /// exists for the invited e-mail (checking the password of the one that does), gives it its
    /// role, and uses the invitation up. Returns the account and the site.
    pub async fn accept_invitation(&self, token: &str, password: &str) -> Result<(User, String), AccountsError> {
        let Some((site_id, member)) = self.live_invitation(token).await? else {
            return Err(AccountsError::NoSuchInvitation);
        };
        let user = match self.table.get("User", item! { "email" => member.email.as_str() }).await? {
            Some(record) => {
                let hash = record.opt_string("password_hash").ok().flatten().map(str::to_owned);
                if !verify_password(password, hash).await? {
                    return Err(AccountsError::WrongPassword(member.email));
                }
                user_of(&record)?
            }
            None => self.add_user_with_role(&member.email, password, "member").await?,
        };
        // Used once: the delete must find it, so two racing acceptances give one role.
        let deleted = self.table.delete("Invitation", item! { "token_hash" => hash_token(token).as_str() }).await?;
        if deleted.is_none() {
            return Err(AccountsError::NoSuchInvitation);
        }
        if !user.is_instance_admin() {
            self.set_member(&site_id, &user.email, member.role, member.visitors).await?;
        }
        Ok((user, site_id))
    }

    async fn add_user_with_role(&self, email: &str, password: &str, role: &str) -> Result<User, AccountsError> {
        let email = normalise_email(email)?;
        check_password(password)?;
        let hash = hash_password(password).await?;
        let user_id = ulid::Ulid::new().to_string();
        let created = self
            .table
            .create(
                "User",
                item! {
                    "email" => email.as_str(),
                    "user_id" => user_id.as_str(),
                    "password_hash" => hash.as_str(),
                    "role" => role,
                },
            )
            .await;
        match created {
            Ok(_) => Ok(User { email, user_id, role: role.to_owned() }),
            Err(e) if e.is_condition_failed() || e.is_already_exists() => Err(AccountsError::EmailTaken(email)),
            Err(e) => Err(e.into()),
        }
    }
}

fn member_of(r: &model::Record) -> Result<Member, AccountsError> {
    let email = r.string("email").map_err(corrupt("Membership"))?.to_owned();
    let role = Role::parse(r.string("role").map_err(corrupt("Membership"))?)?;
    let visitors = r.opt_bool("visitors").ok().flatten().unwrap_or(false);
    Ok(Member { email, role, visitors })
}
