//! Providers by name: [`provider`]`("docker")` or `("local")` gives a
//! `dyn Provider` configured from the environment, so a harness picks its
//! provider at run time (the seed's `agentix.provider` entry points).
//!
//! A provider crate registers itself with `agentix::register_provider!`;
//! its registration is linked in with the crate (name it in
//! `agentix::link_plugins!`). Two registrations of one name are an error
//! naming both.

use crate::provider::Provider;
use crate::provider_error::ProviderError;

/// One provider, registered under a name.
pub struct ProviderFactory {
    /// The name `provider()` takes.
    pub name: &'static str,
    /// The module that registered it, for errors.
    pub registered_by: &'static str,
    /// Makes the provider, configured from environment variables.
    pub make: fn() -> Result<Box<dyn Provider>, ProviderError>,
}

inventory::collect!(ProviderFactory);

/// The provider registered as `name`, made from the environment.
pub fn provider(name: &str) -> Result<Box<dyn Provider>, ProviderError> {
    let all: Vec<&ProviderFactory> = inventory::iter::<ProviderFactory>.into_iter().collect();
    (find(name, &all)?.make)()
}

/// The names every linked provider registered, sorted.
pub fn provider_names() -> Vec<&'static str> {
    let mut names: Vec<_> = inventory::iter::<ProviderFactory>
        .into_iter()
        .map(|f| f.name)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

fn find<'a>(name: &str, all: &[&'a ProviderFactory]) -> Result<&'a ProviderFactory, ProviderError> {
    let mut matching = all.iter().filter(|f| f.name == name);
    let Some(first) = matching.next() else {
        let mut known: Vec<&str> = all.iter().map(|f| f.name).collect();
        known.sort_unstable();
        return Err(ProviderError::UnknownProvider {
            name: name.to_owned(),
            known: known.join(", "),
        });
    };
    if let Some(second) = matching.next() {
        return Err(ProviderError::DuplicateProvider {
            name: name.to_owned(),
            first: first.registered_by,
            second: second.registered_by,
        });
    }
    Ok(first)
}

fn local() -> Result<Box<dyn Provider>, ProviderError> {
    Ok(Box::new(match std::env::var_os("AGENTIX_LOCAL_BASE_DIR") {
        Some(dir) => crate::LocalProvider::with_base_dir(dir),
        None => crate::LocalProvider::new(),
    }))
}

inventory::submit! {
    ProviderFactory { name: crate::local::PROVIDER_NAME, registered_by: module_path!(), make: local }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail() -> Result<Box<dyn Provider>, ProviderError> {
        Err(ProviderError::NotFound { id: "x".into() })
    }

    #[test]
    fn names_resolve_once_and_clashes_or_unknowns_say_what_there_is() {
        let a = ProviderFactory {
            name: "a",
            registered_by: "crate_one",
            make: fail,
        };
        let b = ProviderFactory {
            name: "b",
            registered_by: "crate_two",
            make: fail,
        };
        let b2 = ProviderFactory {
            name: "b",
            registered_by: "crate_three",
            make: fail,
        };
        assert_eq!(find("a", &[&a, &b]).unwrap().registered_by, "crate_one");
        match find("c", &[&a, &b]) {
            Err(e @ ProviderError::UnknownProvider { .. }) => {
                assert!(e.to_string().contains("a, b"), "{e}")
            }
            other => panic!("{:?}", other.map(|f| f.name)),
        }
        match find("b", &[&a, &b, &b2]) {
            Err(e @ ProviderError::DuplicateProvider { .. }) => {
                let e = e.to_string();
                assert!(e.contains("crate_two") && e.contains("crate_three"), "{e}")
            }
            other => panic!("{:?}", other.map(|f| f.name)),
        }
    }
}
