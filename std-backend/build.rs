//! With feature `pmix`: finds the system's PMIx (pkg-config `pmix`), links
//! it, and checks the layouts `src/bootstrap/pmix/ffi.rs` declares by hand
//! against its headers.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    #[cfg(feature = "pmix")]
    pmix();
}

#[cfg(feature = "pmix")]
fn pmix() {
    let source = "src/bootstrap/pmix/layout.c";
    println!("cargo::rerun-if-changed={source}");
    let lib = pkg_config::Config::new()
        .atleast_version("4.0")
        .probe("pmix")
        .unwrap_or_else(|e| {
            panic!(
                "feature `pmix` needs the PMIx client library and headers, 4.0 or later \
                 (Debian: `apt install libpmix-dev`): {e}"
            )
        });
    cc::Build::new()
        .file(source)
        .includes(&lib.include_paths)
        .warnings(true)
        .compile("btl_pmix_layout");
}
