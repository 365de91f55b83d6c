//! Links the bench (a bundle: every sandbox it starts runs this binary
//! three times, as launcher, server and worker) as a position-dependent
//! executable, as `docs/src/bundles.md` recommends for bundles started by
//! the thousand: a position-independent one makes the loader rewrite every
//! pointer in its tables at each start, a private copy of ~1 MiB per
//! process.
fn main() {
    println!("cargo:rustc-link-arg-bins=-no-pie");
}
