//! [`Resolve`]: how the host turns a name into addresses. The host
//! resolves, never the sandbox: [`SystemResolver`] asks this machine's
//! resolver; [`MappedResolver`] answers from a table only (tests, and
//! hosts that pin names), and nothing it does not list resolves.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;

use futures_util::future::BoxFuture;

use crate::host_name::HostName;
use crate::refusal::Refusal;

/// Resolves a name to the addresses the host may then check and dial.
pub trait Resolve: Send + Sync {
    /// The addresses of `name`.
    fn resolve<'a>(&'a self, name: &'a HostName) -> BoxFuture<'a, io::Result<Vec<IpAddr>>>;
}

/// This machine's resolver (`getaddrinfo`, on a blocking thread).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a HostName) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
            Ok(found.map(|addr| addr.ip()).collect())
        })
    }
}

/// Names mapped to addresses by a table; any other name does not resolve.
#[derive(Debug, Clone, Default)]
pub struct MappedResolver {
    table: HashMap<HostName, Vec<IpAddr>>,
}

impl MappedResolver {
    /// An empty table.
    pub fn new() -> Self {
        MappedResolver::default()
    }

    /// Resolves `name` to `addresses` (refused: `name` is not a host name).
    pub fn map(
        mut self,
        name: &str,
        addresses: impl IntoIterator<Item = IpAddr>,
    ) -> Result<Self, Refusal> {
        let name = HostName::parse(name)?;
        self.table.entry(name).or_default().extend(addresses);
        Ok(self)
    }
}

impl Resolve for MappedResolver {
    fn resolve<'a>(&'a self, name: &'a HostName) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        let found = self.table.get(name).cloned().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{name} is not in the table"),
            )
        });
        Box::pin(async move { found })
    }
}
