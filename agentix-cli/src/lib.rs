//! Building bundles: everything a sandbox needs besides its base image, in
//! one directory that runs in any base image of its architecture, an empty
//! one included.
//!
//! A bundle holds the bundle binary and the system tools its plugins
//! declare (`bin/`), the closure of shared libraries they need with the
//! dynamic loader (`lib/`), and a manifest (`bundle.json`). Each program's
//! interpreter and library path are rewritten to point at
//! [`MOUNT`]`/lib`, where a provider mounts the bundle, so nothing is looked
//! up in the base image.
//!
//! Layout: [`cargo_package`] builds the binary and reads the tools plugin
//! crates declare; [`library_closure`] finds what each program loads;
//! [`elf_patch`] rewrites programs and reads back what they need;
//! [`assemble`] puts it together, describes it in its manifest (the format
//! is `agentix_bundle_format`'s) and verifies it; [`bundle_image`] loads it
//! into an engine.

pub mod assemble;
pub mod build_error;
pub mod bundle_image;
pub mod cargo_package;
pub mod elf_patch;
pub mod library_closure;

pub use agentix_bundle_format::{Manifest, MOUNT};
pub use assemble::{assemble, Bundle, BundleSpec};
pub use build_error::BuildError;
