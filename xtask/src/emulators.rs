//! The DynamoDB implementations we did not write, for the DynamoDB engine's conformance tests:
//! dynalite (npm) and moto's server (PyPI), installed into the git-ignored `.tools/` folder at
//! pinned versions and started on free loopback ports for the length of a test run.
//!
//! Everything fails loudly: a missing `node`, `npm` or `python3`, a failed install, or a server
//! that does not answer in time stops `cargo xtask test` with the tool's own output.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The dynalite release the suite's unsupported table was written against.
pub const DYNALITE_VERSION: &str = "4.0.0";
/// The moto release the suite's unsupported table was written against.
pub const MOTO_VERSION: &str = "5.2.5";
/// moto's server with every request applied under one lock. moto's own `moto_server` handles
/// requests on concurrent threads without isolating them: under load, two conditional writes of
/// one item both succeed and concurrent `ADD`s lose increments (CI, 2026-11-25). Tally's tests
/// that run several writers against moto — two `tally serve` processes flushing the same aggregate
/// items under a version condition — need the atomicity DynamoDB gives, so they get a moto that
/// applies one request at a time; connections are still accepted concurrently (HTTP/1.1
/// keep-alive), and a response is read whole inside the lock. The conformance cases about
/// concurrent writers stay listed as unsupported on moto (they would pass here only because of
/// the lock, which tests nothing of moto's).
const MOTO_SERIAL: &str = r#"
import os, sys, threading
os.environ.setdefault("MOTO_PORT", sys.argv[2])
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app

app = DomainDispatcherApplication(create_backend_app)
lock = threading.Lock()

def serial(environ, start_response):
    with lock:
        return [b"".join(app(environ, start_response))]

run_simple(sys.argv[1], int(sys.argv[2]), serial, threaded=True, request_handler=MotoRequestHandler)
"#;
/// How long a server may take to answer its first request.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one install may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// Running emulators; dropping this stops them (on success and on failure alike).
pub struct Emulators {
    servers: Vec<Server>,
}

struct Server {
    name: &'static str,
    port: u16,
    child: Child,
    log: PathBuf,
}

impl Emulators {
    /// The variables that tell the tests where the servers are, and that they must run.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![("TALLY_REQUIRE_EMULATORS".to_string(), "1".to_string())];
        for s in &self.servers {
            let var = format!("TALLY_{}_ENDPOINT", s.name.to_ascii_uppercase());
            env.push((var, format!("http://127.0.0.1:{}", s.port)));
        }
        env
    }
}

impl Drop for Emulators {
    fn drop(&mut self) {
        for s in &mut self.servers {
            // Only the processes this run started, by their own handle.
            let _ = s.child.kill();
            let _ = s.child.wait();
            // The log only matters when a server fails to start, and then it has been printed.
            let _ = fs::remove_file(&s.log);
            eprintln!("xtask: stopped {}", s.name);
        }
    }
}

/// Installs (when missing) and starts dynalite and moto on free loopback ports, and waits
/// until both answer.
pub fn start(root: &Path) -> Result<Emulators> {
    require_tool("node", &["--version"])?;
    require_tool("npm", &["--version"])?;
    require_tool("python3", &["--version"])?;
    let tools = root.join(".tools");
    let logs = tools.join("logs");
    fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;

    let dynalite_cli = install_dynalite(&tools)?;
    let moto_python = install_moto(&tools)?;

    let mut emulators = Emulators { servers: Vec::new() };
    let port = free_port()?;
    let mut node = Command::new("node");
    node.arg(&dynalite_cli).args(["--host", "127.0.0.1", "--port", &port.to_string()]);
    // Tables change state at once, so that each case's create and delete do not wait.
    node.args(["--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"]);
    emulators.servers.push(spawn("dynalite", node, &logs, port)?);
    let port = free_port()?;
    let mut moto = Command::new(&moto_python);
    moto.args(["-c", MOTO_SERIAL, "127.0.0.1", &port.to_string()]);
    emulators.servers.push(spawn("moto", moto, &logs, port)?);

    for s in &mut emulators.servers {
        wait_until_answering(s)?;
    }
    eprintln!("xtask: dynalite {DYNALITE_VERSION} and moto {MOTO_VERSION} are running: {:?}", emulators.env());
    Ok(emulators)
}

/// Runs `command` with the emulators up and their endpoints in its environment (for one
/// crate's tests, say: `cargo xtask emulators cargo test -p store-dynamodb`).
pub fn run_with(root: &Path, command: &[String]) -> Result<()> {
    let Some((program, args)) = command.split_first() else {
        bail!("usage: cargo xtask emulators <command> [args…]");
    };
    let emulators = start(root)?;
    let status = Command::new(program)
        .args(args)
        .current_dir(root)
        .envs(emulators.env())
        .status()
        .with_context(|| format!("running {program}"))?;
    drop(emulators);
    if !status.success() {
        bail!("{} failed with {status}", command.join(" "));
    }
    Ok(())
}

fn require_tool(tool: &str, args: &[&str]) -> Result<()> {
    match Command::new(tool).args(args).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => bail!("`{tool} {}` failed:\n{}", args.join(" "), output_text(&out)),
        Err(e) => bail!(
            "`{tool}` is needed to run the DynamoDB engine's tests against dynalite and moto, but it cannot be run: {e}"
        ),
    }
}

/// `npm install` of the pinned dynalite into `.tools/dynalite`, unless that version is there.
fn install_dynalite(tools: &Path) -> Result<PathBuf> {
    let prefix = tools.join("dynalite");
    let package = prefix.join("node_modules/dynalite");
    let installed = fs::read_to_string(package.join("package.json"))
        .is_ok_and(|text| text.contains(&format!("\"version\": \"{DYNALITE_VERSION}\"")));
    if !installed {
        eprintln!("xtask: installing dynalite {DYNALITE_VERSION} into {}", prefix.display());
        let mut npm = Command::new("npm");
        npm.arg("install").arg("--prefix").arg(&prefix).arg(format!("dynalite@{DYNALITE_VERSION}"));
        npm.args(["--no-audit", "--no-fund", "--loglevel=error"]);
        run_quietly(npm, "npm install dynalite")?;
    }
    let cli = package.join("cli.js");
    if !cli.is_file() {
        bail!("dynalite was installed but {} is missing", cli.display());
    }
    Ok(cli)
}

/// A venv at `.tools/venv` with the pinned `moto[server]`, unless a stamp says it is there;
/// returns the venv's Python, which runs [`MOTO_SERIAL`].
fn install_moto(tools: &Path) -> Result<PathBuf> {
    let venv = tools.join("venv");
    let bin = venv.join("bin");
    let stamp = venv.join(format!(".tally-moto-{MOTO_VERSION}"));
    let server = bin.join("moto_server");
    let python = bin.join("python");
    if stamp.is_file() && server.is_file() {
        return Ok(python);
    }
    if !bin.join("python").exists() {
        eprintln!("xtask: creating a Python venv in {}", venv.display());
        let mut python = Command::new("python3");
        python.args(["-m", "venv"]).arg(&venv);
        run_quietly(python, "python3 -m venv")?;
    }
    eprintln!("xtask: installing moto[server] {MOTO_VERSION} into {}", venv.display());
    let mut pip = Command::new(bin.join("pip"));
    pip.args(["install", "--quiet", "--disable-pip-version-check", &format!("moto[server]=={MOTO_VERSION}")]);
    run_quietly(pip, "pip install moto[server]")?;
    if !server.is_file() {
        bail!("moto was installed but {} is missing", server.display());
    }
    fs::write(&stamp, MOTO_VERSION).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(python)
}

/// Runs an install command with its output captured; prints the output only if it fails.
pub(crate) fn run_quietly(mut command: Command, what: &str) -> Result<()> {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().with_context(|| format!("starting {what}"))?;
    let started = Instant::now();
    // Poll so that a hung install is stopped instead of hanging the test run.
    loop {
        if child.try_wait().with_context(|| format!("waiting for {what}"))?.is_some() {
            break;
        }
        if started.elapsed() > INSTALL_TIMEOUT {
            let _ = child.kill();
            let out = child.wait_with_output().with_context(|| format!("collecting {what}'s output"))?;
            bail!("{what} did not finish within {INSTALL_TIMEOUT:?}:\n{}", output_text(&out));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = child.wait_with_output().with_context(|| format!("collecting {what}'s output"))?;
    if !out.status.success() {
        bail!("{what} failed with {}:\n{}", out.status, output_text(&out));
    }
    Ok(())
}

fn output_text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A loopback port that was free a moment ago (the OS picks it).
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free loopback port")?;
    Ok(listener.local_addr().context("reading the free port")?.port())
}

/// Starts a server with its output going to `<logs>/<name>-<port>.log`.
fn spawn(name: &'static str, mut command: Command, logs: &Path, port: u16) -> Result<Server> {
    let log = logs.join(format!("{name}-{port}.log"));
    let file = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let err = file.try_clone().context("sharing the log file")?;
    command.stdin(Stdio::null()).stdout(file).stderr(err);
    let child = command.spawn().with_context(|| format!("starting {name}"))?;
    Ok(Server { name, port, child, log })
}

/// Waits until the server answers an HTTP request, or fails with its output.
fn wait_until_answering(s: &mut Server) -> Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, s.port));
    let started = Instant::now();
    loop {
        if let Some(status) = s.child.try_wait().context("checking on a server")? {
            bail!("{} exited with {status} before answering:\n{}", s.name, log_text(&s.log));
        }
        if answers(addr) {
            return Ok(());
        }
        if started.elapsed() > START_TIMEOUT {
            bail!("{} did not answer on {addr} within {START_TIMEOUT:?}:\n{}", s.name, log_text(&s.log));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether an HTTP server at `addr` answers a request (any answer will do).
fn answers(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let request = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut first = [0u8; 12];
    matches!(stream.read(&mut first), Ok(n) if n >= 5 && first.starts_with(b"HTTP/"))
}

fn log_text(log: &Path) -> String {
    fs::read_to_string(log).unwrap_or_else(|e| format!("(could not read {}: {e})", log.display()))
}
