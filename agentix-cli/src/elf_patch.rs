//! Rewriting where a program finds its loader and libraries, and reading
//! back what an ELF file needs, with `patchelf` (the tool Nix and Guix use
//! for exactly this; editing ELF dynamic sections by hand is how binaries
//! get corrupted).

use std::path::Path;
use std::process::Command;

use crate::build_error::BuildError;

/// Points `program` at `loader` and makes it look for libraries in
/// `library_dir` only. `DT_RPATH` (not `RUNPATH`): it applies to the whole
/// dependency tree and comes before `LD_LIBRARY_PATH`, so no library is
/// taken from the base image.
pub fn point_at(program: &Path, loader: &str, library_dir: &str) -> Result<(), BuildError> {
    run(&[
        "--set-interpreter",
        loader,
        "--force-rpath",
        "--set-rpath",
        library_dir,
        &program.to_string_lossy(),
    ])
    .map(drop)
}

/// The sonames `elf` names as `DT_NEEDED`.
pub fn needed(elf: &Path) -> Result<Vec<String>, BuildError> {
    let out = run(&["--print-needed", &elf.to_string_lossy()])?;
    Ok(out
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect())
}

/// The interpreter of `program`, or `None` for a library or static program.
pub fn interpreter(program: &Path) -> Option<String> {
    run(&["--print-interpreter", &program.to_string_lossy()])
        .ok()
        .map(|s| s.trim().to_owned())
}

fn run(args: &[&str]) -> Result<String, BuildError> {
    let command = || format!("patchelf {}", args.join(" "));
    let output = Command::new("patchelf")
        .args(args)
        .output()
        .map_err(|e| BuildError::Command {
            command: command(),
            why: format!("{e} (install patchelf: `apt-get install patchelf`)"),
        })?;
    if !output.status.success() {
        return Err(BuildError::Command {
            command: command(),
            why: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
