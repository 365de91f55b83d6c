//! Rewriting where a program finds its loader and libraries, and reading
//! back what an ELF file needs, with the `elb` crate: it rewrites the
//! `INTERP` segment and the dynamic table as `patchelf` does (moving what
//! no longer fits to a new segment), so a build needs no tool installed
//! besides cargo and `ldd`. Editing ELF dynamic sections by hand is how
//! binaries get corrupted.

use std::ffi::{CStr, CString};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use elb::{DynamicTag, Elf, ElfPatcher, SegmentKind};

use crate::build_error::BuildError;

/// Points `program` at `loader` and makes it look for libraries in
/// `library_dir` only. `DT_RPATH` (not `RUNPATH`, which is removed): it
/// applies to the whole dependency tree and comes before
/// `LD_LIBRARY_PATH`, so no library is taken from the base image.
pub fn point_at(program: &Path, loader: &str, library_dir: &str) -> Result<(), BuildError> {
    let failed = |why: String| BuildError::Elf {
        what: "rewrite",
        path: program.to_owned(),
        why,
    };
    let c_string = |s: &str| CString::new(s).map_err(|e| failed(e.to_string()));
    let (loader, library_dir) = (c_string(loader)?, c_string(library_dir)?);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(program)
        .map_err(|e| BuildError::io("cannot open", program, e))?;
    let elf = read(program, &mut file)?;
    let mut patcher = ElfPatcher::new(elf, file);
    let elf_error = |e: elb::Error| failed(e.to_string());
    patcher.set_interpreter(&loader).map_err(elf_error)?;
    patcher
        .remove_dynamic_tag(DynamicTag::Runpath)
        .map_err(elf_error)?;
    patcher
        .set_dynamic_tag(DynamicTag::Rpath, library_dir.as_c_str())
        .map_err(elf_error)?;
    let mut file = patcher.finish().map_err(elf_error)?;
    keep_program_headers_where_loaders_look(program, &mut file)
}

/// Moves the program header table, when a rewrite gave it a new segment,
/// to the file offset that equals its address relative to the first
/// `LOAD`. Linux finds it through `PT_PHDR`, but gVisor (and kernels
/// before 5.18) take `AT_PHDR` to be the first `LOAD`'s address plus
/// `e_phoff`: where the two differ, the loader reads garbage and the
/// program dies before `main`. The table goes past the end of the file
/// (the old copy stays as unused bytes), so nothing else moves.
fn keep_program_headers_where_loaders_look(
    program: &Path,
    file: &mut File,
) -> Result<(), BuildError> {
    let failed = |why: String| BuildError::Elf {
        what: "rewrite",
        path: program.to_owned(),
        why,
    };
    let mut elf = read(program, file)?;
    let page = elf.page_size();
    let Some(first_load) = elf
        .segments
        .iter()
        .find(|s| s.kind == SegmentKind::Loadable)
    else {
        return Ok(());
    };
    let base = first_load.virtual_address.wrapping_sub(first_load.offset);
    let Some(table) = elf
        .segments
        .iter()
        .position(|s| s.kind == SegmentKind::ProgramHeader)
    else {
        return Ok(());
    };
    let (offset, address) = (
        elf.segments[table].offset,
        elf.segments[table].virtual_address,
    );
    if address.wrapping_sub(offset) == base {
        return Ok(());
    }
    let cover = elf
        .segments
        .iter()
        .position(|s| {
            s.kind == SegmentKind::Loadable && s.offset == offset && s.virtual_address == address
        })
        .ok_or_else(|| failed("the program headers share a segment with other data".into()))?;
    let length = file
        .metadata()
        .map_err(|e| BuildError::io("cannot stat", program, e))?
        .len();
    let new_offset = address
        .wrapping_sub(base)
        .max(length.next_multiple_of(page));
    // Zeros up to the table, written rather than left a hole: a sparse
    // file is what some archivers (the engine's image import among them)
    // refuse. The gap is the program's uninitialised data, kilobytes.
    let gap = new_offset - length;
    file.seek(SeekFrom::End(0))
        .and_then(|_| std::io::copy(&mut std::io::repeat(0).take(gap), file))
        .map_err(|e| BuildError::io("cannot write", program, e))?;
    let new_address = new_offset.wrapping_add(base);
    for i in [table, cover] {
        let segment = &mut elf.segments[i];
        segment.offset = new_offset;
        segment.virtual_address = new_address;
        segment.physical_address = new_address;
    }
    elf.header.program_header_offset = new_offset;
    elf.write(file).map_err(|e| failed(e.to_string()))
}

/// The sonames `elf` names as `DT_NEEDED`.
pub fn needed(elf: &Path) -> Result<Vec<String>, BuildError> {
    let failed = |e: elb::Error| BuildError::Elf {
        what: "read",
        path: elf.to_owned(),
        why: e.to_string(),
    };
    let mut file = File::open(elf).map_err(|e| BuildError::io("cannot open", elf, e))?;
    let parsed = read(elf, &mut file)?;
    let Some(table) = parsed.read_dynamic_table(&mut file).map_err(failed)? else {
        return Ok(Vec::new());
    };
    let Some(strings) = parsed
        .read_dynamic_string_table(&mut file)
        .map_err(failed)?
    else {
        return Ok(Vec::new());
    };
    Ok(table
        .into_inner()
        .into_iter()
        .filter(|(tag, _)| *tag == DynamicTag::Needed)
        .filter_map(|(_, offset)| strings.get_string(usize::try_from(offset).ok()?))
        .map(|name| name.to_string_lossy().into_owned())
        .collect())
}

/// The interpreter of `program`, or `None` for a library or static program.
pub fn interpreter(program: &Path) -> Option<String> {
    let mut file = File::open(program).ok()?;
    let elf = read(program, &mut file).ok()?;
    let interpreter = elf.read_interpreter(&mut file).ok()??;
    Some(CStr::to_string_lossy(&interpreter).into_owned())
}

/// `file` (at `path`) read as ELF, with its architecture's page size.
fn read(path: &Path, file: &mut File) -> Result<Elf, BuildError> {
    let page_size = page_size(path)?;
    Elf::read(file, page_size).map_err(|e| BuildError::Elf {
        what: "read",
        path: path.to_owned(),
        why: e.to_string(),
    })
}

/// The largest page size of the machine `path` is built for: where a new
/// segment must be aligned so that the loader can map it.
fn page_size(path: &Path) -> Result<u64, BuildError> {
    const EM_AARCH64: u16 = 183;
    let mut header = [0u8; 20];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .map_err(|e| BuildError::io("cannot read", path, e))?;
    // e_machine, after the 16-byte e_ident and e_type; little-endian on
    // every target a bundle is built for.
    let machine = u16::from_le_bytes([header[18], header[19]]);
    Ok(if machine == EM_AARCH64 { 65536 } else { 4096 })
}
