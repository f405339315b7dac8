//! `tally user add|list|remove|password|sign-out` and `tally share create|list|revoke`: accounts and
//! shared links from the command line, for the first account without the setup link and for
//! scripts. Passwords are read from standard input (one line), never from the command line, where
//! other users of the machine could see them.

use std::io::BufRead;

use analytics::accounts::Accounts;
use analytics::sites::Sites;
use anyhow::{Context, Result, bail};

use crate::config::Config;

/// Reads one line from standard input as a password, prompting on standard error.
fn read_password(prompt: &str) -> Result<String> {
    eprint!("{prompt}: ");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).context("reading the password from standard input")?;
    let password = line.trim_end_matches(['\r', '\n']).to_owned();
    if password.is_empty() {
        bail!("no password given on standard input");
    }
    Ok(password)
}

/// `tally user add EMAIL`.
pub async fn add(config: &Config, email: &str) -> Result<()> {
    let accounts = Accounts::new(crate::store::open(config).await?);
    let password = read_password("password")?;
    let user = accounts.add_user(email, &password).await?;
    println!("added {} ({})", user.email, user.role);
    Ok(())
}

/// `tally user list`.
pub async fn list(config: &Config) -> Result<()> {
    let accounts = Accounts::new(crate::store::open(config).await?);
    for user in accounts.users().await? {
        println!("{}\t{}", user.email, user.role);
    }
    Ok(())
}

/// `tally user remove EMAIL`.
pub async fn remove(config: &Config, email: &str) -> Result<()> {
    let accounts = Accounts::new(crate::store::open(config).await?);
    if !accounts.remove_user(email).await? {
        bail!("no account for {email}");
    }
    println!("removed {email}");
    Ok(())
}

/// `tally user password EMAIL`.
pub async fn password(config: &Config, email: &str) -> Result<()> {
    let accounts = Accounts::new(crate::store::open(config).await?);
    let password = read_password("new password")?;
    accounts.set_password(email, &password).await?;
    println!("password changed for {email}; its sign-ins are ended everywhere");
    Ok(())
}

/// `tally user sign-out EMAIL`.
pub async fn sign_out(config: &Config, email: &str) -> Result<()> {
    let accounts = Accounts::new(crate::store::open(config).await?);
    accounts.sign_out_everywhere(email).await?;
    println!("signed {email} out everywhere");
    Ok(())
}

/// `tally share create SITE [--name N] [--password]`: prints the link's path, once.
pub async fn share_create(config: &Config, site: &str, name: &str, with_password: bool) -> Result<()> {
    let table = crate::store::open(config).await?;
    let sites = Sites::new(table.clone());
    let site = sites.resolve(site).await?.with_context(|| format!("no site {site:?}"))?;
    let password = if with_password { Some(read_password("link password")?) } else { None };
    let (token, info) = Accounts::new(table).create_share(&site.site_id, name, password.as_deref()).await?;
    println!("share id: {}", info.share_id);
    println!("link: /share/{token}");
    eprintln!("the link is shown once; Tally keeps only its SHA-256");
    Ok(())
}

/// `tally share list SITE`.
pub async fn share_list(config: &Config, site: &str) -> Result<()> {
    let table = crate::store::open(config).await?;
    let site = Sites::new(table.clone()).resolve(site).await?.with_context(|| format!("no site {site:?}"))?;
    for s in Accounts::new(table).shares(&site.site_id).await? {
        let state = if s.revoked {
            "revoked"
        } else if s.has_password {
            "password"
        } else {
            "open"
        };
        println!("{}\t{}\t{}", s.share_id, state, s.name);
    }
    Ok(())
}

/// `tally share revoke SITE SHARE_ID`.
pub async fn share_revoke(config: &Config, site: &str, share_id: &str) -> Result<()> {
    let table = crate::store::open(config).await?;
    let site = Sites::new(table.clone()).resolve(site).await?.with_context(|| format!("no site {site:?}"))?;
    Accounts::new(table).revoke_share(&site.site_id, share_id).await?;
    println!("revoked shared link {share_id}");
    Ok(())
}
