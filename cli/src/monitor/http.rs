//! The monitor's HTTP endpoint: one thread, one `mio` event loop, no thread per connection.
//! It answers `GET /metrics` (the exposition) and `GET /healthz`, and refuses everything else
//! with a status: another method (405), another path (404), a malformed request (400), a
//! request head over [`MAX_REQUEST`] bytes (431). A connection gets [`CONN_DEADLINE`] to send
//! its request and take its answer (a slow client is closed, 408 if it can still hear it), at
//! most [`MAX_CONNS`] are open at once (more are closed on accept), and every answer closes
//! its connection.

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

/// Bytes of a request head (request line and headers) accepted.
pub const MAX_REQUEST: usize = 8 * 1024;
/// Time a connection has from accept to its answer's last byte.
pub const CONN_DEADLINE: Duration = Duration::from_secs(5);
/// Connections open at once.
pub const MAX_CONNS: usize = 64;

const LISTENER: Token = Token(usize::MAX);

struct Conn {
    stream: TcpStream,
    req: Vec<u8>,
    out: Vec<u8>,
    sent: usize,
    deadline: Instant,
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET /metrics`.
    Metrics,
    /// `GET /healthz`.
    Health,
}

/// The server: a listener and its open connections.
pub struct Server {
    poll: Poll,
    events: Events,
    listener: TcpListener,
    conns: Vec<Option<Conn>>,
}

/// An answer: status line, content type, body.
pub struct Answer {
    status: &'static str,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Answer {
    /// 200 with a body.
    pub fn ok(content_type: &'static str, body: Vec<u8>) -> Answer {
        Answer {
            status: "200 OK",
            content_type,
            body,
        }
    }

    fn error(status: &'static str, why: &str) -> Answer {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{why}\n").into_bytes(),
        }
    }

    fn bytes(&self, extra: &str) -> Vec<u8> {
        let mut v = format!(
            "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
            self.status,
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        v.extend_from_slice(&self.body);
        v
    }
}

/// Parses a complete request head: `Ok(route)` or the refusal to send.
fn route(head: &[u8]) -> Result<Route, (Answer, &'static str)> {
    let bad = || (Answer::error("400 Bad Request", "malformed request"), "");
    let text = std::str::from_utf8(head).map_err(|_| bad())?;
    let line = text.split("\r\n").next().ok_or_else(bad)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(bad());
    }
    if method != "GET" {
        return Err((
            Answer::error("405 Method Not Allowed", "only GET is served"),
            "Allow: GET\r\n",
        ));
    }
    match target.split('?').next().unwrap_or("") {
        "/metrics" => Ok(Route::Metrics),
        "/healthz" => Ok(Route::Health),
        _ => Err((
            Answer::error("404 Not Found", "served: /metrics, /healthz"),
            "",
        )),
    }
}

impl Server {
    /// Listens on `addr`.
    pub fn bind(addr: SocketAddr) -> std::io::Result<Server> {
        let poll = Poll::new()?;
        let mut listener = TcpListener::bind(addr)?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Server {
            poll,
            events: Events::with_capacity(128),
            listener,
            conns: (0..MAX_CONNS).map(|_| None).collect(),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `until` (or an error of the poll itself); `answer(route)` makes the body
    /// of a request routed to `/metrics` or `/healthz`.
    pub fn serve_until(
        &mut self,
        until: Instant,
        answer: &mut dyn FnMut(Route) -> Answer,
    ) -> std::io::Result<()> {
        loop {
            let now = Instant::now();
            if now >= until {
                return Ok(());
            }
            let next_deadline = self
                .conns
                .iter()
                .flatten()
                .map(|c| c.deadline)
                .min()
                .map_or(until, |d| d.min(until));
            let wait = next_deadline.saturating_duration_since(now);
            match self.poll.poll(&mut self.events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let ready: Vec<(Token, bool, bool)> = self
                .events
                .iter()
                .map(|e| (e.token(), e.is_readable(), e.is_writable()))
                .collect();
            for (t, r, w) in ready {
                if t == LISTENER {
                    self.accept();
                } else {
                    self.drive(t.0, r, w, answer);
                }
            }
            self.expire();
        }
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    let Some(i) = self.conns.iter().position(Option::is_none) else {
                        // Full: this one is closed at once (dropped).
                        continue;
                    };
                    if self
                        .poll
                        .registry()
                        .register(&mut stream, Token(i), Interest::READABLE)
                        .is_err()
                    {
                        continue;
                    }
                    self.conns[i] = Some(Conn {
                        stream,
                        req: Vec::new(),
                        out: Vec::new(),
                        sent: 0,
                        deadline: Instant::now() + CONN_DEADLINE,
                    });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // Out of descriptors and the like: try again at the next event.
                Err(_) => return,
            }
        }
    }

    fn close(&mut self, i: usize) {
        if let Some(mut c) = self.conns[i].take() {
            let _ = self.poll.registry().deregister(&mut c.stream);
        }
    }

    fn respond(&mut self, i: usize, a: Answer, extra: &str) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        c.out = a.bytes(extra);
        c.sent = 0;
        if self
            .poll
            .registry()
            .reregister(&mut c.stream, Token(i), Interest::WRITABLE)
            .is_err()
        {
            self.close(i);
            return;
        }
        self.write_some(i);
    }

    fn write_some(&mut self, i: usize) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        while c.sent < c.out.len() {
            match c.stream.write(&c.out[c.sent..]) {
                Ok(0) => break,
                Ok(n) => c.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let _ = c.stream.shutdown(std::net::Shutdown::Both);
        self.close(i);
    }

    fn drive(
        &mut self,
        i: usize,
        readable: bool,
        writable: bool,
        answer: &mut dyn FnMut(Route) -> Answer,
    ) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        if !c.out.is_empty() {
            if writable {
                self.write_some(i);
            }
            return;
        }
        if !readable {
            return;
        }
        let mut buf = [0u8; 2048];
        loop {
            match c.stream.read(&mut buf) {
                Ok(0) => {
                    // The client closed before a whole request.
                    self.close(i);
                    return;
                }
                Ok(n) => {
                    c.req.extend_from_slice(&buf[..n]);
                    if c.req.len() > MAX_REQUEST {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.close(i);
                    return;
                }
            }
        }
        let end = c.req.windows(4).position(|w| w == b"\r\n\r\n");
        match end {
            Some(e) if e + 4 <= MAX_REQUEST => {
                let head = c.req[..e].to_vec();
                match route(&head) {
                    Ok(r) => {
                        let a = answer(r);
                        self.respond(i, a, "");
                    }
                    Err((a, extra)) => self.respond(i, a, extra),
                }
            }
            _ if c.req.len() > MAX_REQUEST => self.respond(
                i,
                Answer::error(
                    "431 Request Header Fields Too Large",
                    "the request head is over 8 KiB",
                ),
                "",
            ),
            _ => {}
        }
    }

    /// Closes connections past their deadline (a 408 first when nothing was answered yet).
    fn expire(&mut self) {
        let now = Instant::now();
        for i in 0..self.conns.len() {
            let late = self.conns[i].as_ref().is_some_and(|c| c.deadline <= now);
            if !late {
                continue;
            }
            if let Some(c) = self.conns[i].as_mut() {
                if c.out.is_empty() {
                    let a = Answer::error("408 Request Timeout", "the request took too long");
                    let _ = c.stream.write(&a.bytes(""));
                }
            }
            self.close(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_of_the_two_paths_is_routed() {
        assert_eq!(route(b"GET /metrics HTTP/1.1").ok(), Some(Route::Metrics));
        assert_eq!(
            route(b"GET /metrics?x=1 HTTP/1.0\r\nHost: a").ok(),
            Some(Route::Metrics)
        );
        assert_eq!(route(b"GET /healthz HTTP/1.1").ok(), Some(Route::Health));
        let status = |h: &[u8]| route(h).err().map(|(a, _)| a.status);
        assert_eq!(
            status(b"POST /metrics HTTP/1.1"),
            Some("405 Method Not Allowed")
        );
        assert_eq!(
            status(b"HEAD /metrics HTTP/1.1"),
            Some("405 Method Not Allowed")
        );
        assert_eq!(status(b"GET /other HTTP/1.1"), Some("404 Not Found"));
        assert_eq!(status(b"GET /metrics"), Some("400 Bad Request"));
        assert_eq!(status(b"GET  /metrics HTTP/1.1"), Some("400 Bad Request"));
        assert_eq!(status(b"GET metrics HTTP/1.1"), Some("400 Bad Request"));
        assert_eq!(status(b"\xff\xfe HTTP/1.1"), Some("400 Bad Request"));
        assert_eq!(status(b"GET /metrics SPDY/3"), Some("400 Bad Request"));
    }
}
