//! [`closure`]: the shared libraries a program loads, found the way the
//! dynamic loader finds them.
//!
//! `ldd` asks this machine's loader to resolve the program's whole
//! dependency tree (its `ld.so.cache`, `RUNPATH`s and default paths
//! included) and print it, which is exactly the resolution the program gets
//! at run time; reimplementing that search would only be a way to differ
//! from it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::build_error::BuildError;

/// What a program loads: its dynamic loader and its libraries, by soname.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Closure {
    /// The loader (`/lib64/ld-linux-x86-64.so.2`); `None` for a static program.
    pub loader: Option<PathBuf>,
    /// Each library's soname and the file it resolves to.
    pub libraries: Vec<(String, PathBuf)>,
}

/// The closure of `program`; a library that does not resolve is an error
/// naming it.
pub fn closure(program: &Path) -> Result<Closure, BuildError> {
    let output = Command::new("ldd")
        .arg(program)
        .output()
        .map_err(|e| BuildError::Command {
            command: format!("ldd {}", program.display()),
            why: e.to_string(),
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let why = format!("{}{}", text, String::from_utf8_lossy(&output.stderr));
        if why.contains("not a dynamic executable") || why.contains("statically linked") {
            return Ok(Closure::default());
        }
        return Err(BuildError::Command {
            command: format!("ldd {}", program.display()),
            why: why.trim().to_owned(),
        });
    }
    parse(program, &text)
}

/// Reads `ldd`'s report on `program`.
fn parse(program: &Path, report: &str) -> Result<Closure, BuildError> {
    let mut closure = Closure::default();
    for line in report.lines().map(str::trim) {
        if line.contains("statically linked") {
            continue;
        }
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)"
        if let Some((name, rest)) = line.split_once(" => ") {
            let target = rest.split(" (").next().unwrap_or("").trim();
            if target == "not found" || target.is_empty() {
                return Err(BuildError::Unresolved {
                    program: program.to_owned(),
                    library: name.trim().to_owned(),
                });
            }
            closure
                .libraries
                .push((name.trim().to_owned(), PathBuf::from(target)));
        } else if line.starts_with('/') {
            // "/lib64/ld-linux-x86-64.so.2 (0x...)": the loader itself.
            let path = line.split(" (").next().unwrap_or(line);
            closure.loader = Some(PathBuf::from(path));
        }
        // "linux-vdso.so.1 (0x...)" is the kernel's, never a file.
    }
    Ok(closure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_gives_the_loader_and_the_libraries_and_names_what_is_missing() {
        let report = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                      \tlibtinfo.so.6 => /lib/x86_64-linux-gnu/libtinfo.so.6 (0x00007f1)\n\
                      \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)\n\
                      \t/lib64/ld-linux-x86-64.so.2 (0x00007f3)\n";
        let c = parse(Path::new("/bin/bash"), report).unwrap();
        assert_eq!(c.loader, Some(PathBuf::from("/lib64/ld-linux-x86-64.so.2")));
        assert_eq!(
            c.libraries,
            vec![
                (
                    "libtinfo.so.6".into(),
                    "/lib/x86_64-linux-gnu/libtinfo.so.6".into()
                ),
                ("libc.so.6".into(), "/lib/x86_64-linux-gnu/libc.so.6".into()),
            ]
        );
        let missing = "\tlibgone.so.1 => not found\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n";
        match parse(Path::new("/x"), missing) {
            Err(BuildError::Unresolved { library, .. }) => assert_eq!(library, "libgone.so.1"),
            other => panic!("{other:?}"),
        }
    }
}
