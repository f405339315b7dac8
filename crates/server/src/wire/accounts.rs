//! The account routes' bodies and answers ([`crate::account`]), declared. The answers: sign-in
//! state (and the second factor a sign-in still needs), two-factor set-up, and the site a shared
//! link shows; the bodies: credentials and a password change, whose fields each route checks in
//! its own order.

use analytics::accounts::ShareInfo;
use analytics::sites::Site;
use serde::{Deserialize, Serialize};

use crate::wire::sent::Sent;

/// Whether the browser is signed in: what `GET /api/auth` answers (with `setup_required`), and
/// what signing in (with `email` and `csrf`) and out (`signed_in` alone) answer.
#[derive(Debug, Serialize)]
pub struct AuthView<'a> {
    /// Whether the browser is signed in.
    pub signed_in: bool,
    /// The signed-in account.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<&'a str>,
    /// The token every cookie-signed-in request sends in `X-Tally-CSRF`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub csrf: Option<String>,
    /// Whether no account exists yet, so the page offers the first-run setup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup_required: Option<bool>,
}

/// The 401 of a sign-in whose password was right but needs a second factor: the page asks for
/// the code.
#[derive(Debug, Serialize)]
pub struct CodeRequired {
    /// What the page shows.
    pub error: &'static str,
    /// Always `true`: the sign-in needs the code.
    pub two_factor: bool,
}

impl CodeRequired {
    /// The one answer.
    pub const ANSWER: CodeRequired =
        CodeRequired { error: "enter the code from your authenticator app, or a recovery code", two_factor: true };
}

/// A new authenticator secret, pending until confirmed.
#[derive(Debug, Serialize)]
pub struct TwoFactorSetup<'a> {
    /// The secret, for typing in.
    pub secret: &'a str,
    /// The `otpauth://` URL, for a QR code.
    pub otpauth_url: &'a str,
}

/// Whether two-factor sign-in is on; the recovery codes once, when it is turned on.
#[derive(Debug, Serialize)]
pub struct TwoFactorState<'a> {
    /// Whether it is on.
    pub enabled: bool,
    /// The recovery codes, shown this once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery_codes: Option<&'a [String]>,
}

/// The site a shared link shows, and whether it still needs its password.
#[derive(Debug, Serialize)]
pub struct SharedSite<'a> {
    /// The shared site's id, for the Stats API calls the page makes.
    pub site_id: &'a str,
    /// Its main domain.
    pub domain: &'a str,
    /// Its IANA time zone.
    pub timezone: &'a str,
    /// The link's name.
    pub name: &'a str,
    /// Whether the link has a password.
    pub password_required: bool,
    /// Whether this browser unlocked it.
    pub unlocked: bool,
}

impl<'a> SharedSite<'a> {
    /// What `share` shows of `site`.
    pub fn new(site: &'a Site, share: &'a ShareInfo, unlocked: bool) -> Self {
        SharedSite {
            site_id: &site.site_id,
            domain: &site.domain,
            timezone: site.zone.name(),
            name: &share.name,
            password_required: share.has_password,
            unlocked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_in_states_leave_out_what_they_do_not_have() {
        let out = AuthView { signed_in: false, email: None, csrf: None, setup_required: None };
        assert_eq!(serde_json::to_string(&out).unwrap(), r#"{"signed_in":false}"#);
        let state = AuthView { signed_in: false, email: None, csrf: None, setup_required: Some(true) };
        assert_eq!(serde_json::to_string(&state).unwrap(), r#"{"signed_in":false,"setup_required":true}"#);
        let signed =
            AuthView { signed_in: true, email: Some("a@b.test"), csrf: Some("c".into()), setup_required: None };
        assert_eq!(serde_json::to_string(&signed).unwrap(), r#"{"signed_in":true,"email":"a@b.test","csrf":"c"}"#);
        let off = TwoFactorState { enabled: false, recovery_codes: None };
        assert_eq!(serde_json::to_string(&off).unwrap(), r#"{"enabled":false}"#);
    }
}

/// The bodies that prove who is asking: `POST /api/login {email, password, code}`,
/// `POST /api/setup {token, email, password}`, `POST /api/share/{token}/unlock {password}`,
/// `POST /api/2fa/enable {code}` and `POST /api/2fa/disable {password}`. Each route requires the
/// fields it names.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Credentials {
    /// The account's e-mail address.
    pub email: Sent<String>,
    /// The account's (or the shared link's) password.
    pub password: Sent<String>,
    /// A code from an authenticator app, or a recovery code.
    pub code: Sent<String>,
    /// The setup token `tally serve` printed.
    pub token: Sent<String>,
}

/// `POST /api/password {current_password, new_password}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PasswordChange {
    /// The password the account has, required.
    pub current_password: Sent<String>,
    /// The password it is to have, required.
    pub new_password: Sent<String>,
}
