//! [`assemble`]: a bundle directory from a built binary and its tools, then
//! checked: every program's loader and every library any file needs must be
//! inside it.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::build_error::BuildError;
use agentix_bundle_format::{file_digest, Manifest, ABI, MANIFEST_FILE, MOUNT};

use crate::{cargo_package, elf_patch, library_closure};

/// What goes into a bundle.
#[derive(Debug, Clone)]
pub struct BundleSpec {
    /// The bundle binary, built.
    pub binary: PathBuf,
    /// Its name in the bundle (`bin/<name>`) and the manifest.
    pub name: String,
    /// The version recorded in the manifest.
    pub version: String,
    /// The target triple recorded in the manifest.
    pub target: String,
    /// System tools to carry, by name, each with the file it is taken from.
    pub tools: BTreeMap<String, PathBuf>,
    /// The directory to make (replaced if it holds an earlier bundle).
    pub out: PathBuf,
}

impl Bundle {
    /// The bundle an earlier build left in `dir`.
    pub fn open(dir: &Path) -> Result<Bundle, BuildError> {
        let manifest = Manifest::read(dir).map_err(|why| {
            BuildError::Incomplete(format!("{} is not a bundle: {why}", dir.display()))
        })?;
        let size = read_dir(&dir.join("bin"))?
            .iter()
            .chain(read_dir(&dir.join("lib"))?.iter())
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum();
        Ok(Bundle {
            dir: dir.to_owned(),
            manifest,
            size,
        })
    }
}

impl BundleSpec {
    /// A bundle of the built program `binary`, carrying `tools` from this
    /// machine's `PATH`, for this machine's target, to be made in `out`.
    pub fn for_binary(
        binary: impl Into<PathBuf>,
        name: &str,
        version: &str,
        tools: &[&str],
        out: impl Into<PathBuf>,
    ) -> Result<BundleSpec, BuildError> {
        let tools = tools
            .iter()
            .map(|&tool| {
                let path =
                    cargo_package::find_on_path(tool).ok_or_else(|| BuildError::ToolMissing {
                        tool: tool.to_owned(),
                        declared_by: "the caller".to_owned(),
                    })?;
                Ok((tool.to_owned(), path))
            })
            .collect::<Result<_, BuildError>>()?;
        Ok(BundleSpec {
            binary: binary.into(),
            name: name.to_owned(),
            version: version.to_owned(),
            target: cargo_package::host_target()?,
            tools,
            out: out.into(),
        })
    }
}

/// An assembled, verified bundle.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// Its directory.
    pub dir: PathBuf,
    /// Its manifest, as written to `bundle.json`.
    pub manifest: Manifest,
    /// Bytes of all its files.
    pub size: u64,
}

/// Makes the bundle `spec` describes; `progress` hears each step.
pub fn assemble(spec: &BundleSpec, progress: &mut dyn FnMut(&str)) -> Result<Bundle, BuildError> {
    let out = &spec.out;
    fresh_dir(out)?;
    let (bin, lib) = (out.join("bin"), out.join("lib"));
    for dir in [&bin, &lib] {
        std::fs::create_dir_all(dir).map_err(|e| BuildError::io("cannot create", dir, e))?;
    }
    let mut programs = vec![(spec.name.clone(), spec.binary.clone())];
    programs.extend(spec.tools.iter().map(|(n, p)| (n.clone(), p.clone())));

    let mut loader_name = None;
    let mut copied = BTreeSet::new();
    for (name, source) in &programs {
        progress(&format!("adding {name} and the libraries it loads"));
        let closure = library_closure::closure(source)?;
        copy(source, &bin.join(name), 0o755)?;
        if let Some(loader) = &closure.loader {
            let file = file_name(loader)?;
            if copied.insert(file.clone()) {
                copy(loader, &lib.join(&file), 0o755)?;
            }
            loader_name = Some(file);
        }
        for (soname, path) in &closure.libraries {
            if copied.insert(soname.clone()) {
                copy(path, &lib.join(soname), 0o644)?;
            }
        }
    }
    if let Some(loader) = &loader_name {
        progress("pointing the programs at the bundle's loader and libraries");
        let interpreter = format!("{MOUNT}/lib/{loader}");
        for (name, _) in &programs {
            elf_patch::point_at(&bin.join(name), &interpreter, &format!("{MOUNT}/lib"))?;
        }
    }
    progress("verifying that everything resolves inside the bundle");
    verify(out, loader_name.as_deref())?;

    let mut files = BTreeMap::new();
    let mut size = 0;
    for dir in ["bin", "lib"] {
        for entry in read_dir(&out.join(dir))? {
            let meta = entry
                .metadata()
                .map_err(|e| BuildError::io("cannot stat", entry.path(), e))?;
            size += meta.len();
            let relative = format!("{dir}/{}", entry.file_name().to_string_lossy());
            let digest = file_digest(&entry.path())
                .map_err(|e| BuildError::io("cannot read", entry.path(), e))?;
            files.insert(relative, digest);
        }
    }
    let manifest = Manifest {
        abi: ABI,
        name: spec.name.clone(),
        version: spec.version.clone(),
        target: spec.target.clone(),
        entry: format!("bin/{}", spec.name),
        tools: spec.tools.keys().cloned().collect(),
        files,
    };
    let path = out.join(MANIFEST_FILE);
    std::fs::write(&path, manifest.to_json())
        .map_err(|e| BuildError::io("cannot write", &path, e))?;
    Ok(Bundle {
        dir: out.clone(),
        manifest,
        size,
    })
}

/// Checks that every file's needed libraries are in `lib/`, and that every
/// program uses the bundle's loader.
pub fn verify(dir: &Path, loader: Option<&str>) -> Result<(), BuildError> {
    let libs: BTreeSet<String> = read_dir(&dir.join("lib"))?
        .iter()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut problems = Vec::new();
    for sub in ["bin", "lib"] {
        for entry in read_dir(&dir.join(sub))? {
            let path = entry.path();
            let shown = format!("{sub}/{}", entry.file_name().to_string_lossy());
            for needed in elf_patch::needed(&path)? {
                if !libs.contains(&needed) {
                    problems.push(format!("{shown} needs {needed}, which is not in lib/"));
                }
            }
            if sub == "bin" {
                let want = loader.map(|l| format!("{MOUNT}/lib/{l}"));
                let got = elf_patch::interpreter(&path);
                if got.is_some() && got != want {
                    problems.push(format!(
                        "{shown} loads with {}, not the bundle's loader",
                        got.unwrap_or_default()
                    ));
                }
            }
        }
    }
    match problems.is_empty() {
        true => Ok(()),
        false => Err(BuildError::Incomplete(problems.join("; "))),
    }
}

/// Makes `dir` empty: a new directory, or an earlier bundle removed.
fn fresh_dir(dir: &Path) -> Result<(), BuildError> {
    if dir.exists() {
        let earlier = dir.join(MANIFEST_FILE).is_file();
        let empty = read_dir(dir)?.is_empty();
        if !earlier && !empty {
            return Err(BuildError::io(
                "refusing to replace a directory that holds no bundle:",
                dir,
                std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            ));
        }
        std::fs::remove_dir_all(dir).map_err(|e| BuildError::io("cannot remove", dir, e))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| BuildError::io("cannot create", dir, e))
}

fn copy(from: &Path, to: &Path, mode: u32) -> Result<(), BuildError> {
    std::fs::copy(from, to).map_err(|e| BuildError::io("cannot copy", from, e))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))
        .map_err(|e| BuildError::io("cannot set the mode of", to, e))
}

fn read_dir(dir: &Path) -> Result<Vec<std::fs::DirEntry>, BuildError> {
    let entries = std::fs::read_dir(dir).map_err(|e| BuildError::io("cannot list", dir, e))?;
    let mut list: Vec<_> = entries.filter_map(Result::ok).collect();
    list.sort_by_key(|e| e.file_name());
    Ok(list)
}

fn file_name(path: &Path) -> Result<String, BuildError> {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| BuildError::Incomplete(format!("{} names no file", path.display())))
}
