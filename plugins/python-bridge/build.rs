//! Records which Python the bridge links (version, library path) and adds
//! its library folder to the run path: a bridge loaded by `bub` finds its
//! libpython without `LD_LIBRARY_PATH`.

fn main() {
    let config = pyo3_build_config::get();
    let version = format!("{}.{}", config.version().major, config.version().minor);
    println!("cargo:rustc-env=BUB_BRIDGE_PYTHON_VERSION={version}");
    println!("cargo:rustc-env=BUB_BRIDGE_PYTHON={}", config.executable().unwrap_or("python3"));
    let lib = match (config.lib_dir(), config.lib_name()) {
        (Some(dir), Some(name)) => {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
            format!("{dir}/lib{name}.so")
        }
        _ => String::new(),
    };
    println!("cargo:rustc-env=BUB_BRIDGE_LIBPYTHON={lib}");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
}
