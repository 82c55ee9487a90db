//! Embeds the committed playground bundle (`frontend/bundle/*.gz`, made by
//! `scripts/bundle-playground.sh`) into the binary as a table of gzip'd files.

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let dir = manifest.join("../../frontend/bundle");
    // A directory: cargo rebuilds when any file in it changes.
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let name = path.file_name()?.to_str()?.strip_suffix(".gz")?.to_string();
            Some((name, path.canonicalize().ok()?))
        })
        .collect();
    files.sort();
    let mut code = String::from("/// The bundle's files: name, gzip'd bytes.\npub static FILES: &[(&str, &[u8])] = &[\n");
    for (name, path) in &files {
        code.push_str(&format!("    ({name:?}, include_bytes!({:?})),\n", path.display().to_string()));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("playground_bundle.rs");
    std::fs::write(out, code).expect("write the bundle table");
}
