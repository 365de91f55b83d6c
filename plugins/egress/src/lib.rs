//! Egress under the host's control: which names, ports and addresses a
//! sandbox may reach, decided on the host.
//!
//! The host resolves names itself and connects to exactly the address it
//! checked, so a sandbox needs no DNS of its own and a name that resolves
//! to the host's loopback, a private network or a cloud's metadata address
//! cannot be used to reach them.
//!
//! ```
//! use agentix_egress::{Destination, EgressPolicy};
//!
//! let policy = EgressPolicy::new()
//!     .allow("packages.example.org")
//!     .allow("*.example-cdn.net")
//!     .allow("api.example.com:8443")
//!     .deny("private.example-cdn.net");
//! let allowed = |host: &str, port| policy.check_destination(&Destination::parse(host)?, port);
//! assert!(allowed("Packages.Example.org.", 443).is_ok());
//! assert!(allowed("eu.example-cdn.net", 80).is_ok());
//! assert!(allowed("example-cdn.net", 443).is_err(), "`*.a` is not `a`");
//! assert!(allowed("private.example-cdn.net", 443).is_err(), "denied");
//! assert!(allowed("api.example.com", 443).is_err(), "only its own port");
//! assert!(allowed("93.184.216.34", 443).is_err(), "an address literal needs allowing");
//! # Ok::<(), agentix_egress::Refusal>(())
//! ```
//!
//! On the host, an [`EgressGateway`] holds the policy and is each
//! sandbox's host half of `/egress`; in the sandbox, an HTTP proxy on
//! 127.0.0.1 makes every connection a tunnel through the host
//! (`CONNECT host:port`, or plain HTTP with an absolute URI). A sandbox
//! created from [`EgressGateway::prepare`]'s config starts it in every
//! worker and finds its URL in `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY`,
//! so curl, pip, git and HTTP libraries use it unchanged
//! ([`serve_proxy`] starts it on demand instead). The host never sees
//! what TLS carries.
//!
//! ```no_run
//! # use agentix::prelude::*;
//! # use agentix_egress::{EgressGateway, EgressPolicy, EgressRoute};
//! # async fn host(provider: &LocalProvider, config: SandboxConfig, token: &str) -> Result<(), Box<dyn std::error::Error>> {
//! let github = EgressRoute::new("github", "https://api.github.com")?
//!     .header("authorization", &format!("Bearer {token}"))?;
//! let gateway = EgressGateway::new(EgressPolicy::new().allow("pypi.org").allow("*.pythonhosted.org"))
//!     .route(github)
//!     .audit_log("egress.jsonl")?;
//! let sandbox = provider.create(gateway.prepare(config)).await?;
//! gateway.attach(&sandbox)?;
//! // In the sandbox: `pip download requests` works, `curl https://example.com` gets a 403,
//! // and `curl $HTTP_PROXY/github/user` reaches GitHub with the host's token.
//! # Ok(()) }
//! ```
//!
//! A named [route](EgressRoute) carries requests to an API whose token
//! stays on the host: `$HTTP_PROXY/<name>/path` inside the sandbox reaches
//! `<upstream>/path` with the headers the host adds. Every connection is
//! an `egress` span on the sandbox's trace hub and, with
//! [`EgressGateway::audit_log`], a JSON line ([`EgressRecord`]).
//!
//! Layout: [`host_name`] normalises a name (lowercase, IDNA, one trailing
//! dot off) and parses a destination; [`host_pattern`] is one allow or deny
//! rule; [`address_class`] names the addresses refused after resolution
//! unless allowed; [`policy`] decides, and a [`refusal`] says why not;
//! [`resolver`] resolves names, or maps them for tests. [`protocol`] is
//! the namespace's protocol, [`window`] one direction's flow control,
//! [`proxy_request`] reads a client's request; [`sandbox_proxy`] and
//! [`host_gateway`] are the two halves; [`route`] and [`route_server`]
//! the named routes; [`connection_watch`], [`egress_record`] and
//! [`audit_log`] what the host keeps of each connection.

pub mod address_class;
pub mod audit_log;
pub mod connection_watch;
pub mod egress_record;
pub mod host_gateway;
pub mod host_name;
pub mod host_pattern;
pub mod policy;
pub mod protocol;
pub mod proxy_request;
pub mod refusal;
pub mod resolver;
pub mod route;
pub mod route_server;
pub mod sandbox_proxy;
pub mod window;

agentix::plugin_crate!();

pub use address_class::AddressClass;
pub use audit_log::AuditLog;
pub use egress_record::EgressRecord;
pub use host_gateway::EgressGateway;
pub use host_name::{Destination, HostName};
pub use host_pattern::HostPattern;
pub use policy::EgressPolicy;
pub use protocol::{Egress, TunnelTo};
pub use refusal::Refusal;
pub use resolver::{MappedResolver, Resolve, SystemResolver};
pub use route::{EgressRoute, RouteError};
pub use sandbox_proxy::{serve_proxy, EgressError, NO_PROXY, PROXY_PORT_VAR, PROXY_VARS};
