//! `cargo xtask docker`: builds the `Dockerfile`'s image with podman from the release binary the
//! host built (its `prebuilt` target: no second compile inside the image), then smoke-tests the
//! image: `tally site add` and `tally key create` in the image, `tally serve` in a container, the
//! image's own health check, one event posted to `/api/event`, and the Stats API reading it back.
//! It prints the image's size.
//!
//! Options: `--binary PATH` (default: `cargo build --release -p tally`, then
//! `target/release/tally`), `--base IMAGE` (the run stage's base image; default
//! `docker.io/library/debian:bookworm-slim` when it is there or can be pulled, otherwise an
//! equivalent minimal Debian 12 made here with `mmdebstrap` from Debian's packages and imported as
//! `localhost/tally-base:bookworm`), `--tag NAME` (default `localhost/tally:latest`).
//!
//! Containers run with runc and cgroupfs, host networking and limits a sandbox can grant
//! (`ulimits`): that works as root on an ordinary host and inside a sandbox whose cgroups are
//! in hybrid mode and whose limits cannot be raised (where crun, podman's default, cannot start a
//! container). podman, runc and mmdebstrap are installed with apt when missing.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::browser::apt_install;

const DEFAULT_BASE: &str = "docker.io/library/debian:bookworm-slim";
const LOCAL_BASE: &str = "localhost/tally-base:bookworm";
const SMOKE: &str = "tally-smoke";

/// Runs the task.
pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let option = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let tag = option("--tag").unwrap_or_else(|| "localhost/tally:latest".to_owned());
    if !has("podman") || !has("runc") {
        eprintln!("xtask: installing Debian's podman and runc");
        apt_install(&["podman", "runc"])?;
    }
    let binary = match option("--binary") {
        Some(path) => PathBuf::from(path),
        None => {
            crate::cargo(root, &["build", "--release", "--locked", "-p", "tally"])?;
            root.join("target/release/tally")
        }
    };
    let started = Instant::now();
    let base = match option("--base") {
        Some(base) => base,
        None => base_image(root)?,
    };
    // The build context: the Dockerfile and the binary, nothing else.
    let context = root.join("target/docker-context");
    let _ = fs::remove_dir_all(&context);
    fs::create_dir_all(&context).with_context(|| format!("creating {}", context.display()))?;
    fs::copy(&binary, context.join("tally")).with_context(|| format!("copying {}", binary.display()))?;
    if has("strip") {
        podman_like(Command::new("strip").arg(context.join("tally")), "strip")?;
    }
    fs::copy(root.join("Dockerfile"), context.join("Dockerfile")).context("copying the Dockerfile")?;
    let mut build = podman();
    // Docker's image format: the OCI format has no HEALTHCHECK, and podman drops it there.
    build.args(["build", "--format", "docker", "--runtime", "runc", "--network", "host", "--target", "prebuilt"]);
    build.args(ulimits());
    build.args(["--build-arg", &format!("BASE={base}"), "-t", &tag, "-f"]);
    build.arg(context.join("Dockerfile")).arg(&context);
    podman_like(&mut build, "podman build")?;
    let built = started.elapsed();
    let size = output(podman().args(["image", "inspect", "--format", "{{.Size}}", &tag]), "podman image inspect")?;
    let size: u64 = size.trim().parse().with_context(|| format!("the image size {size:?}"))?;
    smoke_test(&tag)?;
    println!("image: {tag} (base {base})");
    println!("image size: {size} bytes ({:.1} MB)", size as f64 / 1e6);
    println!("build: {:.1} s; build and smoke test: {:.1} s", built.as_secs_f64(), started.elapsed().as_secs_f64());
    Ok(())
}

/// The run stage's base: Debian's image when podman has it or can pull it, else a minimal
/// Debian 12 made with mmdebstrap (once; it is kept as `localhost/tally-base:bookworm`).
fn base_image(root: &Path) -> Result<String> {
    for image in [DEFAULT_BASE, LOCAL_BASE] {
        if podman().args(["image", "exists", image]).status().is_ok_and(|s| s.success()) {
            return Ok(image.to_owned());
        }
    }
    let pull = podman().args(["pull", "-q", DEFAULT_BASE]).stdout(Stdio::null()).stderr(Stdio::piped()).output();
    match pull {
        Ok(out) if out.status.success() => return Ok(DEFAULT_BASE.to_owned()),
        Ok(out) => eprintln!(
            "xtask: cannot pull {DEFAULT_BASE} ({}); making a minimal Debian 12 base with mmdebstrap",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => eprintln!("xtask: cannot run podman pull ({e}); making a minimal Debian 12 base with mmdebstrap"),
    }
    if !has("mmdebstrap") {
        apt_install(&["mmdebstrap"])?;
    }
    let tar = root.join("target/tally-base-bookworm.tar");
    let mut debootstrap = Command::new("mmdebstrap");
    debootstrap.args(["--variant=minbase", "--include=ca-certificates"]);
    for excluded in ["/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*"] {
        debootstrap.arg(format!("--dpkgopt=path-exclude={excluded}"));
    }
    debootstrap.args(["bookworm"]).arg(&tar).arg("http://deb.debian.org/debian");
    podman_like(&mut debootstrap, "mmdebstrap")?;
    podman_like(
        podman().args(["import", "--change", "CMD [\"/bin/bash\"]"]).arg(&tar).arg(LOCAL_BASE),
        "podman import",
    )?;
    let _ = fs::remove_file(&tar);
    Ok(LOCAL_BASE.to_owned())
}

/// Serve, ingest one event, read it back; the container, its volume and nothing else removed after.
fn smoke_test(tag: &str) -> Result<()> {
    cleanup();
    let result = smoke_test_inner(tag);
    if result.is_err() {
        let logs = podman().args(["logs", SMOKE]).output();
        if let Ok(out) = logs {
            eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        }
    }
    cleanup();
    result
}

fn smoke_test_inner(tag: &str) -> Result<()> {
    let volume = format!("{SMOKE}:/data");
    let in_image = |args: &[&str], what: &str| {
        let mut c = podman();
        c.args(["run", "--rm", "--runtime", "runc", "--network", "host", "-v", &volume]).args(ulimits());
        c.arg(tag).args(args);
        output(&mut c, what)
    };
    in_image(&["site", "add", "smoke.test"], "tally site add in the image")?;
    let key = in_image(&["key", "create", "smoke.test", "--scope", "stats"], "tally key create in the image")?;
    let key = key
        .lines()
        .find_map(|l| l.strip_prefix("key:"))
        .map(|k| k.trim().to_owned())
        .context("tally key create printed no key")?;
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port();
    let listen = format!("TALLY_LISTEN=127.0.0.1:{port}");
    let mut serve = podman();
    serve.args(["run", "-d", "--name", SMOKE, "--runtime", "runc", "--network", "host", "-v", &volume]);
    serve.args(ulimits()).args(["-e", &listen, "-e", "TALLY_FLUSH_INTERVAL=200ms", tag]);
    output(&mut serve, "podman run tally serve")?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let started = Instant::now();
    while !http(addr, "GET", "/health", &[], "").is_ok_and(|(s, _)| s == 200) {
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the container did not answer /health on {addr} within 60 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // The image's HEALTHCHECK (`tally health`), run once by podman.
    podman_like(podman().args(["healthcheck", "run", SMOKE]), "podman healthcheck run")?;
    let ua = (
        "user-agent",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    );
    let event = r#"{"n":"pageview","u":"https://smoke.test/hello","d":"smoke.test","r":null}"#;
    let (status, body) = http(addr, "POST", "/api/event", &[ua, ("content-type", "text/plain")], event)?;
    if status != 202 {
        bail!("POST /api/event answered {status}: {body}");
    }
    let auth = format!("Bearer {key}");
    let query = r#"{"site_id":"smoke.test","metrics":["pageviews"],"date_range":"day"}"#;
    let started = Instant::now();
    loop {
        let (status, body) = http(addr, "POST", "/api/v2/query", &[("authorization", &auth)], query)?;
        let compact: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        if status == 200 && compact.contains(r#""metrics":[1]"#) {
            eprintln!("xtask: the image served, took one event and read it back: {compact}");
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("the Stats API never showed the event: {status} {body}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn cleanup() {
    let _ = podman().args(["rm", "-f", "-t", "2", SMOKE]).stdout(Stdio::null()).stderr(Stdio::null()).status();
    let _ = podman().args(["volume", "rm", "-f", SMOKE]).stdout(Stdio::null()).stderr(Stdio::null()).status();
}

/// podman with the cgroup manager that works without systemd.
fn podman() -> Command {
    let mut c = Command::new("podman");
    c.arg("--cgroup-manager=cgroupfs");
    c
}

/// `--ulimit` options a container can be given where limits cannot be raised: open files at the
/// host's own hard limit, and 4,096 processes (threads) for the container's user, plenty for one
/// server. podman's defaults ask for more, which a sandbox without CAP_SYS_RESOURCE refuses
/// ("setrlimit `RLIMIT_NOFILE`: Operation not permitted"); the host's own process limit is
/// refused too ("error setting rlimit type 6"), as it counts every process of the user.
fn ulimits() -> Vec<String> {
    let limits = fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let hard = |name: &str| -> Option<u64> {
        limits
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l[name.len()..].split_whitespace().nth(1)?.parse().ok())
    };
    let files = hard("Max open files").unwrap_or(1024);
    let processes = hard("Max processes").unwrap_or(4096).min(4096);
    vec![
        "--ulimit".to_owned(),
        format!("nofile={files}:{files}"),
        "--ulimit".to_owned(),
        format!("nproc={processes}:{processes}"),
    ]
}

fn has(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `command`, failing with its output when it fails.
fn podman_like(command: &mut Command, what: &str) -> Result<()> {
    output(command, what).map(|_| ())
}

/// Runs `command` and returns its standard output, failing with its output when it fails.
fn output(command: &mut Command, what: &str) -> Result<String> {
    eprintln!("xtask: {what}");
    let out = command.stdin(Stdio::null()).output().with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed with {}:\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One HTTP/1.1 request with `Connection: close`: the status and the body.
fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).context("no HTTP status")?;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}
