//! A small HTTP/1.1 client over one keep-alive connection, for `tally bench --http`: a tracker
//! posts one event per request, so requests are sent one after another on each connection and
//! many connections run at once.
//!
//! It reads exactly what Tally's server writes (a status line, headers, a `content-length` body);
//! it is not a general client.

use std::net::SocketAddr;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One keep-alive connection.
pub struct Connection {
    stream: BufReader<TcpStream>,
    host: String,
}

/// A response: the status and the body.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body's bytes, whole (the client reads until the connection's end or the length).
    pub body: Vec<u8>,
}

impl Connection {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> Result<Connection> {
        let stream = TcpStream::connect(addr).await.with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(Connection { stream: BufReader::new(stream), host: addr.to_string() })
    }

    /// Sends a request and reads its response; `headers` are extra `(name, value)` pairs.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-length: {}\r\n", self.host, body.len());
        for (name, value) in headers {
            head.push_str(name);
            head.push_str(": ");
            head.push_str(value);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        self.stream.get_mut().write_all(&request).await.context("sending a request")?;
        self.read_response().await
    }

    async fn read_response(&mut self) -> Result<Response> {
        let mut line = String::new();
        if self.stream.read_line(&mut line).await.context("reading a response")? == 0 {
            bail!("the server closed the connection");
        }
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .with_context(|| format!("not an HTTP status line: {line:?}"))?;
        let mut length = 0usize;
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                bail!("the server closed the connection in the headers");
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().context("a content-length that is not a number")?;
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await.context("reading a response body")?;
        Ok(Response { status, body })
    }
}
