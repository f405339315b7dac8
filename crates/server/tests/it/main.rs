//! The server over real HTTP: the router is spawned on 127.0.0.1, port 0, with a recording
//! [`Ingest`], and a plain hyper client sends what the official trackers send.

mod fuzz_seeds;
mod ingestion;
mod props;
mod tracker;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use analytics::enrich::DropReason;
use analytics::event::{Event, Limits, RawEvent};
use analytics::pipeline::{IngestResult, PipelineError, SiteSelector};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use server::{AppState, Ingest};

/// Records every event, and answers as a pipeline would: the name `Bot` is dropped, the domain
/// `unknown.example` (or the nil website id) is no site, and anything else is validated; once
/// `failing` is set, everything fails as it would with a broken store.
#[derive(Default)]
pub(crate) struct Recorder {
    events: Mutex<Vec<(RawEvent, SiteSelector)>>,
    pub(crate) failing: std::sync::atomic::AtomicBool,
}

pub(crate) const UNKNOWN_WEBSITE: &str = "00000000-0000-0000-0000-000000000000";

#[async_trait::async_trait]
impl Ingest for Recorder {
    async fn ingest(&self, event: RawEvent, site: SiteSelector) -> IngestResult {
        self.events.lock().unwrap().push((event.clone(), site.clone()));
        if event.name == "Bot" {
            return IngestResult::Dropped(DropReason::Bot);
        }
        if self.failing.load(std::sync::atomic::Ordering::Relaxed) {
            return IngestResult::Failed(PipelineError::Contended(8));
        }
        if event.domain == "unknown.example" || site == SiteSelector::UmamiWebsite(UNKNOWN_WEBSITE.into()) {
            return IngestResult::UnknownSite;
        }
        match Event::parse(event, &Limits::default()) {
            Ok(_) => IngestResult::Accepted,
            Err(e) => IngestResult::Invalid(e),
        }
    }
}

impl Recorder {
    /// Every event so far, emptying the record.
    pub(crate) fn take(&self) -> Vec<(RawEvent, SiteSelector)> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

/// A running server and a client for it.
pub(crate) struct TestApp {
    pub(crate) addr: SocketAddr,
    pub(crate) recorder: Arc<Recorder>,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// A response, read whole.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl TestApp {
    pub(crate) async fn spawn() -> TestApp {
        TestApp::spawn_with(|state| state).await
    }

    /// Like [`TestApp::spawn`], with the state changed by `f` first.
    pub(crate) async fn spawn_with(f: impl FnOnce(AppState) -> AppState) -> TestApp {
        let recorder = Arc::new(Recorder::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = server::router(f(AppState::new(recorder.clone())));
        tokio::spawn(server::serve(listener, app));
        TestApp { addr, recorder, client: Client::builder(TokioExecutor::new()).build_http() }
    }

    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Answer {
        let mut request = Request::builder().method(method).uri(format!("http://{}{path}", self.addr));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self.client.request(request.body(Full::new(body.into())).unwrap()).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Answer { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
    }

    pub(crate) async fn post(&self, path: &str, content_type: &str, body: impl Into<Bytes>) -> Answer {
        self.send(Method::POST, path, &[("content-type", content_type), ("user-agent", BROWSER)], body).await
    }
}

pub(crate) const BROWSER: &str =
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";
