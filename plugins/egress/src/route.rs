//! [`EgressRoute`]: a named upstream whose credentials stay on the host.
//! Inside the sandbox, `http://egress:<token>@127.0.0.1:PORT/<name>/rest`
//! (the proxy's own URL, then the route's name) reaches
//! `<upstream>/rest` with the headers the route adds; the sandbox never
//! holds them.

use hyper::header::{HeaderName, HeaderValue};

use crate::proxy_request::is_route_name;

/// Why a route cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("egress route: {0}")]
pub struct RouteError(pub String);

/// A named upstream and the headers the host adds to each request to it.
#[derive(Clone)]
pub struct EgressRoute {
    pub(crate) name: String,
    /// `scheme://authority` and the base path, without a trailing `/`.
    pub(crate) base: String,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
}

impl EgressRoute {
    /// A route `name` (letters, digits, `-`, `_`, `.`) to `upstream`
    /// (`https://api.github.com`, or with a base path:
    /// `https://example.org/api/v2`).
    pub fn new(name: &str, upstream: &str) -> Result<Self, RouteError> {
        if !is_route_name(name) {
            return Err(RouteError(format!(
                "`{name}` is not a route name (letters, digits, `-`, `_`, `.`)"
            )));
        }
        let uri: hyper::Uri = upstream
            .parse()
            .map_err(|e| RouteError(format!("`{upstream}` is not a URL: {e}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
            return Err(RouteError(format!(
                "`{upstream}` is not an http:// or https:// URL with a host"
            )));
        }
        if uri.query().is_some() || upstream.contains('@') {
            return Err(RouteError(format!(
                "`{upstream}`: a route's URL has no query and no credentials \
                 (add them as headers)"
            )));
        }
        Ok(EgressRoute {
            name: name.to_owned(),
            base: upstream.trim_end_matches('/').to_owned(),
            headers: Vec::new(),
        })
    }

    /// Adds `name: value` to every request (replacing the sandbox's own
    /// header of that name): `authorization: Bearer <token>`, say. The
    /// value is kept out of logs and `Debug`.
    pub fn header(mut self, name: &str, value: &str) -> Result<Self, RouteError> {
        let header = HeaderName::try_from(name)
            .map_err(|e| RouteError(format!("`{name}` is not a header name: {e}")))?;
        let mut value = HeaderValue::try_from(value)
            .map_err(|_| RouteError(format!("the value of `{name}` is not a header value")))?;
        value.set_sensitive(true);
        self.headers.push((header, value));
        Ok(self)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its upstream's URL.
    pub fn upstream(&self) -> &str {
        &self.base
    }
}

impl std::fmt::Debug for EgressRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<_> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("EgressRoute")
            .field("name", &self.name)
            .field("upstream", &self.base)
            .field("headers", &headers)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_checks_its_parts_and_keeps_its_secrets_out_of_debug() {
        let route = EgressRoute::new("github", "https://api.github.com/")
            .unwrap()
            .header("authorization", "Bearer s3cret")
            .unwrap();
        assert_eq!(route.upstream(), "https://api.github.com");
        let shown = format!("{route:?}");
        assert!(
            shown.contains("authorization") && !shown.contains("s3cret"),
            "{shown}"
        );
        for (name, url) in [
            ("", "https://a.example"),
            ("a/b", "https://a.example"),
            ("ok", "ftp://a.example"),
            ("ok", "/relative"),
            ("ok", "https://user:pw@a.example"),
            ("ok", "https://a.example/?key=1"),
        ] {
            assert!(EgressRoute::new(name, url).is_err(), "{name} {url}");
        }
        let ok = EgressRoute::new("ok", "http://a.example").unwrap();
        assert!(ok.clone().header("bad name", "v").is_err());
        assert!(ok.header("x-ok", "line\nbreak").is_err());
    }
}
