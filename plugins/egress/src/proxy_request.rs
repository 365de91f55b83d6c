//! [`ProxyRequest`]: what a client asks of an HTTP proxy, read from the
//! head of its request with `httparse`: `CONNECT host:port` (a tunnel, for
//! HTTPS and anything else), or a plain-HTTP request with an absolute URI
//! (`GET http://host/path`), whose head is rewritten for the origin, or a
//! request to a named route (`GET /<name>/path`).

/// Most bytes a request head may take.
pub const MAX_HEAD: usize = 64 << 10;

/// A client's request to the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyRequest {
    /// `CONNECT host:port`: the proxy answers 200 and passes bytes through.
    Connect {
        /// The host, brackets off an IPv6 literal.
        host: String,
        /// The port.
        port: u16,
    },
    /// A plain-HTTP request: its head as the origin expects it (the path
    /// alone as its target, no `Proxy-*` headers, `Connection: close`).
    Forward {
        /// The host.
        host: String,
        /// The port (80 unless the URI says).
        port: u16,
        /// The rewritten head, its blank line included.
        head: Vec<u8>,
    },
    /// A request to one of the host's named routes, sent to the proxy as
    /// to a server (`GET /<name>/rest`): its head with the route's name
    /// cut from the path and the proxy's credential removed.
    Route {
        /// The route's name.
        name: String,
        /// The rewritten head (`GET /rest`), its blank line included.
        head: Vec<u8>,
    },
}

/// A request head, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyHead {
    /// What the client asks for.
    pub request: ProxyRequest,
    /// The proxy's credential as the client sent it: its
    /// `Proxy-Authorization` header, or for a route its `Authorization`
    /// (what a client sends for the user and password in
    /// `http://egress:<token>@127.0.0.1:PORT/<name>/`).
    pub authorization: Option<String>,
    /// How many bytes the head took.
    pub used: usize,
}

/// Reads a request head from the start of `buf`: `None` while it is
/// incomplete.
pub fn parse(buf: &[u8]) -> Result<Option<ProxyHead>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let used = match request.parse(buf) {
        Ok(httparse::Status::Complete(used)) => used,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Ok(None),
        Ok(httparse::Status::Partial) => return Err("the request head is too large".into()),
        Err(e) => return Err(format!("not an HTTP request: {e}")),
    };
    let method = request.method.unwrap_or_default();
    let target = request.path.unwrap_or_default();
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    let proxy_authorization = header("proxy-authorization");
    let head = |request, authorization| ProxyHead {
        request,
        authorization,
        used,
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = authority(target, None)?;
        return Ok(Some(head(
            ProxyRequest::Connect { host, port },
            proxy_authorization,
        )));
    }
    if let Some(path) = target.strip_prefix('/') {
        let split = path.find(['/', '?']).unwrap_or(path.len());
        let name = &path[..split];
        if !is_route_name(name) {
            return Err(format!("`/{name}` does not name a route"));
        }
        let rest = match &path[split..] {
            "" => "/".to_owned(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_owned(),
        };
        let authorization = header("authorization").or(proxy_authorization);
        return Ok(Some(head(
            ProxyRequest::Route {
                name: name.to_owned(),
                head: rewrite(method, &rest, request.headers, true),
            },
            authorization,
        )));
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return Err(format!(
            "`{target}` is not an absolute http:// URI (use CONNECT for https)"
        ));
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (host, port) = authority(&rest[..split], Some(80))?;
    let path = match &rest[split..] {
        "" => "/".to_owned(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_owned(),
    };
    Ok(Some(head(
        ProxyRequest::Forward {
            host,
            port,
            head: rewrite(method, &path, request.headers, false),
        },
        proxy_authorization,
    )))
}

/// Whether `name` can name a route: letters, digits, `-`, `_` and `.`.
pub fn is_route_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A head for the origin: `method path`, the client's headers less the
/// proxy's own (`Proxy-*`, and for a route the `Authorization` that
/// carried the proxy's credential) and the connection's, then
/// `Connection: close` (one request per tunnel).
fn rewrite(method: &str, path: &str, headers: &[httparse::Header<'_>], route: bool) -> Vec<u8> {
    let mut rewritten = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    for header in headers {
        let name = header.name.to_ascii_lowercase();
        let dropped = name.starts_with("proxy-")
            || name == "connection"
            || name == "keep-alive"
            || (route && name == "authorization");
        if dropped {
            continue;
        }
        rewritten.extend_from_slice(header.name.as_bytes());
        rewritten.extend_from_slice(b": ");
        rewritten.extend_from_slice(header.value);
        rewritten.extend_from_slice(b"\r\n");
    }
    rewritten.extend_from_slice(b"Connection: close\r\n\r\n");
    rewritten
}

/// `host:port` (or `[v6]:port`), the port `default` when absent.
fn authority(text: &str, default: Option<u16>) -> Result<(String, u16), String> {
    if text.contains('@') {
        return Err(format!(
            "`{text}`: credentials in the URI are not passed on"
        ));
    }
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("`{text}`: not a port"))?;
            (host, port)
        }
        _ => (text, default.ok_or_else(|| format!("`{text}`: no port"))?),
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(format!("`{text}`: no host"));
    }
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_request_names_its_tunnel() {
        let head = b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\
                     Proxy-Authorization: Basic ZTp0\r\n\r\nextra";
        let ProxyHead {
            request,
            authorization,
            used,
        } = parse(head).unwrap().unwrap();
        assert_eq!(authorization.as_deref(), Some("Basic ZTp0"));
        assert_eq!(
            request,
            ProxyRequest::Connect {
                host: "example.org".into(),
                port: 443
            }
        );
        assert_eq!(&head[used..], b"extra");
        let v6 = parse(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(v6.authorization, None);
        assert_eq!(
            v6.request,
            ProxyRequest::Connect {
                host: "::1".into(),
                port: 8443
            }
        );
    }

    #[test]
    fn a_plain_request_is_rewritten_for_its_origin() {
        let head = b"GET http://example.org/a/b?c=1 HTTP/1.1\r\nHost: example.org\r\n\
                     Proxy-Connection: keep-alive\r\nProxy-Authorization: x\r\nAccept: */*\r\n\r\n";
        let parsed = parse(head).unwrap().unwrap();
        assert_eq!(parsed.used, head.len());
        assert_eq!(parsed.authorization.as_deref(), Some("x"));
        let ProxyRequest::Forward { host, port, head } = parsed.request else {
            panic!("not forwarded")
        };
        assert_eq!((host.as_str(), port), ("example.org", 80));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /a/b?c=1 HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let query_only = parse(b"GET http://h:8080?q HTTP/1.1\r\n\r\n")
            .unwrap()
            .unwrap();
        let ProxyRequest::Forward { port, head, .. } = query_only.request else {
            panic!("not forwarded")
        };
        assert_eq!(port, 8080);
        assert!(head.starts_with(b"GET /?q HTTP/1.1\r\n"));
    }

    #[test]
    fn a_request_to_a_route_loses_its_name_and_the_proxys_credential() {
        let head = b"POST /github/repos/a/b?x=1 HTTP/1.1\r\nHost: 127.0.0.1:3128\r\n\
                     Authorization: Basic ZTp0\r\nContent-Length: 2\r\n\r\n{}";
        let parsed = parse(head).unwrap().unwrap();
        assert_eq!(parsed.authorization.as_deref(), Some("Basic ZTp0"));
        assert_eq!(&head[parsed.used..], b"{}");
        let ProxyRequest::Route { name, head } = parsed.request else {
            panic!("not a route")
        };
        assert_eq!(name, "github");
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "POST /repos/a/b?x=1 HTTP/1.1\r\nHost: 127.0.0.1:3128\r\nContent-Length: 2\r\n\
             Connection: close\r\n\r\n"
        );
        let bare = parse(b"GET /api HTTP/1.1\r\nProxy-Authorization: p\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(bare.authorization.as_deref(), Some("p"));
        assert!(
            matches!(bare.request, ProxyRequest::Route { head, .. } if head.starts_with(b"GET / HTTP/1.1\r\n"))
        );
    }

    #[test]
    fn a_partial_head_waits_and_bad_ones_are_refused() {
        assert_eq!(
            parse(b"CONNECT example.org:443 HTTP/1.1\r\nHo").unwrap(),
            None
        );
        for bad in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"GET /no%20route/ HTTP/1.1\r\n\r\n",
            b"GET https://example.org/ HTTP/1.1\r\n\r\n",
            b"CONNECT example.org HTTP/1.1\r\n\r\n",
            b"CONNECT example.org:0 HTTP/1.1\r\n\r\n",
            b"GET http://user:pw@example.org/ HTTP/1.1\r\n\r\n",
            b"\x16\x03\x01 not http\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let huge = [b'a'; MAX_HEAD + 1];
        assert!(parse(&huge).is_err());
    }
}
