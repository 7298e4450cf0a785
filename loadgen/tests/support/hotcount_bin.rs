//! The `hotcount` binary the chaos tests run as consumer processes.

use std::path::PathBuf;

/// The `hotcount` binary of this build, built now: `cargo build` of an
/// up-to-date binary is a no-op, and a stale one would test old code.
pub fn hotcount_bin() -> PathBuf {
    let loadgen = PathBuf::from(env!("CARGO_BIN_EXE_hotcount-loadgen"));
    let bin = loadgen.with_file_name(format!("hotcount{}", std::env::consts::EXE_SUFFIX));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    // The feature set `cargo test --workspace` builds with: the whole
    // workspace with its test targets (dev-dependencies unify features), so
    // the binary and dependencies it built are reused; without `--tests`
    // the features differ and half the dependency tree is built again
    // (minutes on 2 cores).
    cmd.args(["build", "--workspace", "--tests", "--bin", "hotcount"]);
    if loadgen.parent().and_then(|d| d.file_name()) == Some("release".as_ref()) {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .expect("running cargo build for the hotcount binary");
    assert!(status.success(), "cargo build -p hotcount failed");
    bin
}
