//! [`deny_kernel_attack_surface`]: the seccomp filter an isolated sandbox
//! runs under. Namespaces keep sandbox code away from the host's files,
//! processes and network; this keeps it away from the kernel interfaces
//! most kernel exploits start from, which an unprivileged user namespace
//! would otherwise hand it: keyrings, BPF, io_uring, perf events,
//! userfaultfd, new namespaces, mounts and kernel modules. The list follows
//! what Docker's default profile refuses a container without capabilities;
//! no agent tool needs any of them.
//!
//! Built with `seccompiler` (the filter compiler of Firecracker) rather
//! than hand-assembled BPF: the per-architecture syscall numbers and the
//! argument checks are where hand-written filters go wrong.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Calls refused outright with `EPERM`.
const REFUSED: &[i64] = &[
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_acct,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
];

/// `clone` flags that make new namespaces: refused as `unshare` is.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWCGROUP,
];

/// Installs the filter on the calling thread, inherited by everything it
/// runs. Call last before `exec`: it cannot be undone.
pub fn deny_kernel_attack_surface() -> Result<(), String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no seccomp filter for {}: {e}", std::env::consts::ARCH))?;
    for program in [refused_calls(arch)?, clone3_unsupported(arch)?] {
        seccompiler::apply_filter(&program).map_err(|e| format!("cannot apply it: {e}"))?;
    }
    Ok(())
}

/// `EPERM` for [`REFUSED`] and for `clone` with a namespace flag.
fn refused_calls(arch: TargetArch) -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        REFUSED.iter().map(|&call| (call, Vec::new())).collect();
    let with_flag = |flag: libc::c_int| {
        let flag = flag as u64;
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )
        .and_then(|condition| SeccompRule::new(vec![condition]))
    };
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| with_flag(flag))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    rules.insert(libc::SYS_clone, clone_rules);
    compile(rules, SeccompAction::Errno(libc::EPERM as u32), arch)
}

/// `ENOSYS` for `clone3`, whose flags sit in memory a filter cannot read:
/// the C library then falls back to `clone`, which the other filter checks.
fn clone3_unsupported(arch: TargetArch) -> Result<BpfProgram, String> {
    let rules = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    compile(rules, SeccompAction::Errno(libc::ENOSYS as u32), arch)
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    on_match: SeccompAction,
    arch: TargetArch,
) -> Result<BpfProgram, String> {
    SeccompFilter::new(rules, SeccompAction::Allow, on_match, arch)
        .and_then(BpfProgram::try_from)
        .map_err(|e| e.to_string())
}
