//! Configuration as a user gives it: a TOML file, `TALLY_*` variables and flags, flags winning.

use std::process::Command;

fn config_output(dir: &std::path::Path, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tally"));
    command.current_dir(dir).args(args).arg("config");
    for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("TALLY_")) {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.output().expect("run tally")
}

fn effective(dir: &std::path::Path, env: &[(&str, &str)], args: &[&str]) -> String {
    let output = config_output(dir, env, args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("utf-8")
}

#[test]
fn flags_beat_environment_beats_the_default_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tally.toml"),
        "listen = \"127.0.0.1:7001\"\nlog_level = \"debug\"\ntable = \"file-table\"\nflush_interval = \"4s\"\n",
    )
    .unwrap();
    let text = effective(
        dir.path(),
        &[("TALLY_LISTEN", "127.0.0.1:7002"), ("TALLY_TABLE", "env-table")],
        &["--listen", "127.0.0.1:7003"],
    );
    assert!(text.contains("listen = \"127.0.0.1:7003\""), "{text}");
    assert!(text.contains("table = \"env-table\""), "{text}");
    assert!(text.contains("log_level = \"debug\""), "{text}");
    assert!(text.contains("flush_interval = \"4000ms\""), "{text}");

    // Without a file, the defaults show.
    let empty = tempfile::tempdir().unwrap();
    let text = effective(empty.path(), &[], &[]);
    assert!(text.contains("listen = \"127.0.0.1:8000\""), "{text}");
    assert!(text.contains("store = \"./tally-data\""), "{text}");
}

#[test]
fn an_explicit_config_file_wins_over_the_default_one_and_must_exist() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tally.toml"), "table = \"default-file\"\n").unwrap();
    std::fs::write(dir.path().join("other.toml"), "table = \"other-file\"\n").unwrap();
    let text = effective(dir.path(), &[], &["--config", "other.toml"]);
    assert!(text.contains("table = \"other-file\""), "{text}");
    let text = effective(dir.path(), &[("TALLY_CONFIG", "other.toml")], &[]);
    assert!(text.contains("table = \"other-file\""), "{text}");

    let output = config_output(dir.path(), &[], &["--config", "missing.toml"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("missing.toml"), "{stderr}");
}

/// `tally health`, the container health check: 0 when the server answers `/health` with 200,
/// an error when nothing answers.
#[test]
fn health_checks_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let server = crate::support::Server::start(&store);
    let addr = server.addr.to_string();
    let ok = crate::support::tally(&store, &["health", "--addr", &addr]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("healthy"));
    server.stop();
    let down = crate::support::tally(&store, &["health", "--addr", &addr]);
    assert!(!down.status.success());
    assert!(String::from_utf8_lossy(&down.stderr).contains("unhealthy"));
}
