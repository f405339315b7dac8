//! Two-factor sign-in: time-based one-time codes (RFC 6238, as authenticator apps make them)
//! and single-use recovery codes, for dashboard accounts.
//!
//! An account turns it on in two steps: [`Accounts::totp_begin`] draws a 20-byte secret, kept
//! as pending on the `User` item and shown once (base32 and an `otpauth://` link for the app);
//! [`Accounts::totp_enable`] checks a code the app made from it, makes it the account's secret,
//! and returns ten recovery codes, kept only as SHA-256. From then on a sign-in needs the
//! password and a code ([`Accounts::login_with_code`]): a code is accepted once (the last
//! step used is stored, so a code seen by someone else cannot be replayed within its window),
//! a recovery code once ever. The secret itself must be kept to check codes; it lives in the
//! store, which is owner-only (SECURITY.md).
//!
//! Codes are computed by `totp-rs` (a maintained, pure-Rust RFC 6238 implementation on the
//! RustCrypto `hmac` and `sha1` crates, with no default features): SHA-1, six digits, 30-second
//! steps, one step of clock skew either way — what every authenticator app expects.

use model::expr::Update;
use sha2::{Digest, Sha256};
use store::item;
use totp_rs::{Builder, Secret};

use crate::accounts::{Accounts, AccountsError, User};

/// How many recovery codes an account gets.
pub const RECOVERY_CODES: usize = 10;

/// The outcome of a sign-in with a possible second factor.
#[derive(Debug)]
#[non_exhaustive]
pub enum Login {
    /// Signed in: the login token and the account.
    SignedIn(String, User),
    /// The password was right, but the account needs a code and none was given.
    CodeRequired,
    /// Wrong e-mail, password or code.
    Refused,
}

fn totp(secret: &[u8]) -> Result<totp_rs::Totp, AccountsError> {
    Builder::new()
        .with_secret(Secret::from(secret))
        .build()
        .map_err(|e| AccountsError::Corrupt { entity: "User", message: format!("two-factor secret: {e}") })
}

fn unix_now() -> u64 {
    jiff::Timestamp::now().as_second().max(0) as u64
}

fn hash(code: &str) -> String {
    Sha256::digest(normalise_recovery(code).as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Recovery codes are compared without dashes, spaces or case.
fn normalise_recovery(code: &str) -> String {
    code.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_lowercase()).collect()
}

fn recovery_code() -> String {
    let mut bytes = [0u8; 5];
    rand::fill(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}", &hex[..5], &hex[5..])
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    (0..text.len()).step_by(2).map(|i| text.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect()
}

impl Accounts {
    /// Starts turning two-factor sign-in on for `email`: a new secret, pending until
    /// [`Accounts::totp_enable`] confirms it. Returns its base32 form and an `otpauth://` link.
    pub async fn totp_begin(&self, email: &str) -> Result<(String, String), AccountsError> {
        let mut secret = [0u8; 20];
        rand::fill(&mut secret);
        let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        self.table().update("User", item! { "email" => email }, Update::new().set("totp_pending", hex)).await?;
        let base32 = Secret::from(&secret[..]).to_base32();
        let label: String = url::form_urlencoded::byte_serialize(format!("Tally:{email}").as_bytes()).collect();
        Ok((base32.clone(), format!("otpauth://totp/{label}?secret={base32}&issuer=Tally&digits=6&period=30")))
    }

    /// Confirms the pending secret with a `code` made from it: two-factor sign-in is on, and the
    /// ten recovery codes (shown once) are returned. A wrong code changes nothing.
    pub async fn totp_enable(&self, email: &str, code: &str) -> Result<Vec<String>, AccountsError> {
        let record = self.table().get("User", item! { "email" => email }).await?;
        let pending = record
            .as_ref()
            .and_then(|r| r.opt_string("totp_pending").ok().flatten())
            .and_then(decode_hex)
            .ok_or(AccountsError::NoPendingTwoFactor)?;
        let Some(step) = totp(&pending)?.check(code.trim(), unix_now()) else {
            return Err(AccountsError::WrongCode);
        };
        let codes: Vec<String> = (0..RECOVERY_CODES).map(|_| recovery_code()).collect();
        let hashes: std::collections::BTreeSet<String> = codes.iter().map(|c| hash(c)).collect();
        let hex: String = pending.iter().map(|b| format!("{b:02x}")).collect();
        self.table()
            .update(
                "User",
                item! { "email" => email },
                Update::new()
                    .set("totp_secret", hex)
                    .set("totp_last_step", step as i64)
                    .set("recovery_hashes", store::AttributeValue::Ss(hashes))
                    .remove("totp_pending"),
            )
            .await?;
        Ok(codes)
    }

    /// Turns two-factor sign-in off for `email` (the caller has checked its password).
    pub async fn totp_disable(&self, email: &str) -> Result<(), AccountsError> {
        self.table()
            .update(
                "User",
                item! { "email" => email },
                Update::new()
                    .remove("totp_secret")
                    .remove("totp_pending")
                    .remove("recovery_hashes")
                    .remove("totp_last_step"),
            )
            .await?;
        Ok(())
    }

    /// Whether `email` signs in with a second factor.
    pub async fn totp_enabled(&self, email: &str) -> Result<bool, AccountsError> {
        let record = self.table().get("User", item! { "email" => email }).await?;
        Ok(record.is_some_and(|r| r.opt_string("totp_secret").ok().flatten().is_some()))
    }

    /// Signs in with a password and, when the account has two-factor sign-in on, a `code`: one
    /// from the authenticator app (each accepted once) or a recovery code (each usable once).
    pub async fn login_with_code(
        &self,
        email: &str,
        password: &str,
        code: Option<&str>,
    ) -> Result<Login, AccountsError> {
        let normalised = crate::accounts::normalise_email(email).unwrap_or_default();
        if !self.password_matches(email, password).await? {
            return Ok(Login::Refused);
        }
        let Some(record) = self.table().get("User", item! { "email" => normalised.as_str() }).await? else {
            return Ok(Login::Refused);
        };
        if let Some(secret) = record.opt_string("totp_secret").ok().flatten().and_then(decode_hex) {
            let Some(code) = code.map(str::trim).filter(|c| !c.is_empty()) else { return Ok(Login::CodeRequired) };
            let last = record.opt_i64("totp_last_step").ok().flatten().unwrap_or(-1);
            let key = item! { "email" => normalised.as_str() };
            let accepted = match totp(&secret)?.check(code, unix_now()) {
                // A step at or before the last one used is a replay; the update is conditional on
                // the last step read, so two racing sign-ins cannot both use one code.
                Some(step) if step as i64 > last => {
                    let condition = model::expr::attr("totp_last_step")
                        .eq(last)
                        .or(model::expr::attr("totp_last_step").not_exists());
                    self.table()
                        .update_with(
                            "User",
                            key,
                            Update::new().set("totp_last_step", step as i64),
                            Some(&condition),
                            false,
                        )
                        .await
                        .map(|_| true)
                        .or_else(|e| if e.is_condition_failed() { Ok(false) } else { Err(e) })?
                }
                Some(_) => false,
                None => {
                    // A recovery code is used up by removing its hash, on condition it is there.
                    let h = hash(code);
                    let condition = model::expr::attr("recovery_hashes").contains(h.as_str());
                    let update = Update::new().delete("recovery_hashes", store::AttributeValue::Ss([h.clone()].into()));
                    self.table()
                        .update_with("User", key, update, Some(&condition), false)
                        .await
                        .map(|_| true)
                        .or_else(|e| if e.is_condition_failed() { Ok(false) } else { Err(e) })?
                }
            };
            if !accepted {
                return Ok(Login::Refused);
            }
        }
        match self.login(email, password).await? {
            Some((token, user)) => Ok(Login::SignedIn(token, user)),
            None => Ok(Login::Refused),
        }
    }
}
